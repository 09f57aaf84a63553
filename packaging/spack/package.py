# Spack recipe for numaplace (header-only), for Spack 1.x (package API v2: spack_repo.builtin.build_systems).
# To use it from a checkout, in a repository of your own (`spack repo create DIR NAMESPACE` makes
# DIR/spack_repo/NAMESPACE/ with an empty packages/):
#   spack repo create ~/spack-numaplace numaplace
#   mkdir -p ~/spack-numaplace/spack_repo/numaplace/packages/numaplace
#   cp packaging/spack/package.py ~/spack-numaplace/spack_repo/numaplace/packages/numaplace/
#   spack repo add ~/spack-numaplace/spack_repo/numaplace
#   spack install numaplace@main           # or numaplace@main ~parallel: numaplace::core only, no oneTBB
# Release versions (version("X.Y.Z", sha256=...)) download GitHub's archive of the tag vX.Y.Z; its sha256 can
# be computed before the tag is pushed (`git archive ... | gzip -n`): packaging/README.md, "Making a release".
# The unit tests are off by default (+tests builds them; `spack install --test=root` runs them on the host);
# the multi-node QEMU guest tests are never built here (NUMAPLACE_GUEST_TESTS=OFF).
from spack_repo.builtin.build_systems.cmake import CMakePackage

from spack.package import *


class Numaplace(CMakePackage):
    """NUMA page placement as a type: STL allocators that place pages on NUMA nodes, a per-node
    parallel_for on oneTBB and where() page histograms. Header-only C++17, Linux. omp.hpp
    (find_package(numaplace COMPONENTS core omp), numaplace-omp.pc) uses the compiler's OpenMP runtime
    (add llvm-openmp to a Clang environment); it needs no variant."""

    homepage = "https://github.com/numaplace/numaplace"
    url = "https://github.com/numaplace/numaplace/archive/refs/tags/v0.1.0.tar.gz"
    git = "https://github.com/numaplace/numaplace.git"

    license("MIT")

    # Each release adds its line here, above main (Spack prefers a release to main): the sha256 of
    # `git archive --format=tar --prefix=numaplace-X.Y.Z/ vX.Y.Z | gzip -n` (packaging/README.md).
    version("0.1.0", sha256="9309168160e217085a52d35aa119ce0b121b2cda5a74a50afb17c591672f830e")
    version("main", branch="main")

    variant("parallel", default=True, description="numaplace::numaplace: parallel_for.hpp on oneTBB")
    variant("tools", default=False, when="+parallel", description="Install the numaplace-info program")
    variant("tests", default=False, description="Build the unit tests (host only, never the QEMU guests)")

    depends_on("cxx", type="build")
    depends_on("cmake@3.21:", type="build")
    depends_on("hwloc@2:")
    depends_on("tbb", when="+parallel")  # virtual: intel-tbb (oneTBB from source) or intel-oneapi-tbb
    depends_on("googletest", type="build", when="+tests")

    requires("platform=linux", msg="numaplace uses Linux's mbind/move_pages")
    conflicts("~parallel", when="+tests", msg="the unit tests need oneTBB (+parallel)")

    def cmake_args(self):
        return [
            # ON: configuring fails without oneTBB; OFF: numaplace::core only, and the installed
            # numaplaceConfig.cmake tells find_package(numaplace) without COMPONENTS core so.
            self.define_from_variant("NUMAPLACE_PARALLEL", "parallel"),
            self.define_from_variant("NUMAPLACE_INSTALL_TOOLS", "tools"),
            self.define_from_variant("NUMAPLACE_BUILD_TESTS", "tests"),
            self.define("NUMAPLACE_BUILD_EXAMPLES", False),
            self.define("NUMAPLACE_BUILD_BENCHMARKS", False),
            self.define("NUMAPLACE_GUEST_TESTS", False),
            self.define("NUMAPLACE_INSTALL", True),
        ]
