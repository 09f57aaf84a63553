# Spack recipe for numaplace (header-only). Untested here: this project's machines have no Spack; it is
# kept minimal and follows Spack's CMakePackage conventions. To use it from a checkout:
#   spack repo create ~/spack-numaplace && mkdir -p ~/spack-numaplace/packages/numaplace
#   cp packaging/spack/package.py ~/spack-numaplace/packages/numaplace/ && spack repo add ~/spack-numaplace
#   spack install numaplace@main       (or ~parallel for numaplace::core only, without oneTBB)
# The unit tests are off by default (+tests builds them; `spack install --test=root` runs them on the host);
# the multi-node QEMU guest tests are never built here (NUMAPLACE_GUEST_TESTS=OFF).
from spack.package import *


class Numaplace(CMakePackage):
    """NUMA page placement as a type: STL allocators that place pages on NUMA nodes, a per-node
    parallel_for on oneTBB and where() page histograms. Header-only C++17, Linux."""

    homepage = "https://github.com/numaplace/numaplace"
    git = "https://github.com/numaplace/numaplace.git"

    license("MIT")

    version("main", branch="main")

    variant("parallel", default=True, description="numaplace::numaplace: parallel_for.hpp on oneTBB")
    variant("tests", default=False, description="Build the unit tests (host only, never the QEMU guests)")

    depends_on("cxx", type="build")
    depends_on("cmake@3.21:", type="build")
    depends_on("hwloc@2:")
    depends_on("tbb", when="+parallel")  # virtual: intel-tbb (oneTBB from source) or intel-oneapi-tbb
    depends_on("googletest", type="build", when="+tests")

    conflicts("platform=darwin", msg="numaplace uses Linux's mbind/move_pages")
    conflicts("platform=windows", msg="numaplace uses Linux's mbind/move_pages")

    def cmake_args(self):
        args = [
            self.define_from_variant("NUMAPLACE_BUILD_TESTS", "tests"),
            self.define("NUMAPLACE_BUILD_EXAMPLES", False),
            self.define("NUMAPLACE_BUILD_BENCHMARKS", False),
            self.define("NUMAPLACE_GUEST_TESTS", False),
            self.define("NUMAPLACE_INSTALL", True),
        ]
        if self.spec.satisfies("~parallel"):
            args.append(self.define("CMAKE_DISABLE_FIND_PACKAGE_TBB", True))
        return args
