# Spack recipe for numaplace (header-only; +compiled builds libnumaplace, the separately compiled mode), for
# Spack 1.x (package API v2: spack_repo.builtin.build_systems).
# To use it from a checkout, in a repository of your own (`spack repo create DIR NAMESPACE` makes
# DIR/spack_repo/NAMESPACE/ with an empty packages/):
#   spack repo create ~/spack-numaplace numaplace
#   mkdir -p ~/spack-numaplace/spack_repo/numaplace/packages/numaplace
#   cp packaging/spack/package.py ~/spack-numaplace/spack_repo/numaplace/packages/numaplace/
#   spack repo add ~/spack-numaplace/spack_repo/numaplace
#   spack install numaplace@main           # or numaplace@main ~parallel: numaplace::core only, no oneTBB
#   spack install --test=root numaplace    # and build and run the unit tests before installing
# Release versions (version("X.Y.Z", sha256=...)) download GitHub's archive of the tag vX.Y.Z; packaging/
# release.txt names the commit of each and scripts/release writes and checks these lines (packaging/README.md,
# "Making a release").
# Tests follow Spack's convention: `spack install --test=root numaplace` builds the unit tests and runs them
# on the host after the build (check(), ctest -L unit); without --test they are neither built nor run. The
# multi-node QEMU guest tests are never built here (NUMAPLACE_GUEST_TESTS=OFF, passed with the tests only).
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

    # One line per release of packaging/release.txt, above main (Spack prefers a release to main): the
    # sha256 of `git archive --format=tar --prefix=numaplace-X.Y.Z/ COMMIT | gzip -n`, written by
    # `scripts/release stamp X.Y.Z COMMIT` and checked by `scripts/release check`.
    version("0.1.0", sha256="9309168160e217085a52d35aa119ce0b121b2cda5a74a50afb17c591672f830e")
    version("main", branch="main")

    variant("parallel", default=True, description="numaplace::numaplace: parallel_for.hpp on oneTBB")
    variant("tools", default=False, when="+parallel", description="Install the numaplace-info program")
    variant("compiled", default=False,
            description="Build libnumaplace: numaplace::compiled, the separately compiled mode")

    depends_on("cxx", type="build")
    depends_on("cmake@3.21:", type="build")
    depends_on("hwloc@2:")
    depends_on("tbb", when="+parallel")  # virtual: intel-tbb (oneTBB from source) or intel-oneapi-tbb
    # Only with `spack install --test=root|all` (self.run_tests), which builds and runs the unit tests.
    depends_on("googletest", type="test")

    requires("platform=linux", msg="numaplace uses Linux's mbind/move_pages")

    def cmake_args(self):
        if self.run_tests and self.spec.satisfies("~parallel"):
            # No conflicts() can see --test: say it here rather than run nothing and say nothing.
            raise InstallError(
                "numaplace's unit tests need oneTBB (+parallel): install numaplace~parallel without "
                "--test, or numaplace+parallel with --test=root to build and run them"
            )
        args = [
            # ON: configuring fails without oneTBB; OFF: numaplace::core only, and the installed
            # numaplaceConfig.cmake tells find_package(numaplace) without COMPONENTS core so.
            self.define_from_variant("NUMAPLACE_PARALLEL", "parallel"),
            self.define_from_variant("NUMAPLACE_INSTALL_TOOLS", "tools"),
            # ON: libnumaplace (static; with +parallel the arenas too) and numaplace-compiled.pc.
            self.define_from_variant("NUMAPLACE_COMPILED", "compiled"),
            # Spack's convention: --test=root (or all) builds the tests, check() below runs them.
            self.define("NUMAPLACE_BUILD_TESTS", self.run_tests),
            self.define("NUMAPLACE_BUILD_EXAMPLES", False),
            self.define("NUMAPLACE_BUILD_BENCHMARKS", False),
            self.define("NUMAPLACE_INSTALL", True),
        ]
        if self.run_tests:
            # The QEMU guests are never started from a Spack build; the option belongs to the tests.
            args.append(self.define("NUMAPLACE_GUEST_TESTS", False))
            # +compiled: the unit tests built against the libnumaplace being installed.
            args.append(self.define_from_variant("NUMAPLACE_TEST_COMPILED", "compiled"))
        return args

    def check(self):
        """Runs the unit tests (ctest label "unit") in the build directory after the build; Spack calls
        it only with --test=root|all (self.run_tests), which is also what builds them (cmake_args)."""
        ctest = Executable(self.spec["cmake"].prefix.bin.ctest)
        jobs = str(getattr(self.module, "make_jobs", 1) or 1)
        with working_dir(self.builder.build_directory):
            ctest("--output-on-failure", "--no-tests=error", "-L", "unit", "-j", jobs)
