"""Conan 2 recipe for numaplace, in ConanCenter's header-only form; -o numaplace/*:compiled=True builds
libnumaplace (the separately compiled mode, -DNUMAPLACE_COMPILED=ON) instead.

    conan create . --version 0.1.0 --build=missing    # hwloc and onetbb from a remote (ConanCenter)
    packaging/test-conan.sh                           # offline: the system's hwloc/oneTBB, a local archive

The package holds the headers, the license and, with compiled=True, libnumaplace: no CMake config files
(CMakeDeps generates numaplace-config.cmake with the targets numaplace::core, numaplace::parallel,
numaplace::numaplace, numaplace::omp and numaplace::compiled) and no .pc files (PkgConfigDeps generates
them). See packaging/README.md.
"""
import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, get, rmdir
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class NumaplaceConan(ConanFile):
    name = "numaplace"
    description = "NUMA page placement as a type: allocators, partitions and per-node parallel_for"
    license = "MIT"
    url = "https://github.com/conan-io/conan-center-index"
    homepage = "https://github.com/numaplace/numaplace"
    topics = ("numa", "allocator", "hwloc", "tbb", "hpc", "header-only")
    package_type = "header-library"  # "library" with compiled=True (configure())
    settings = "os", "arch", "compiler", "build_type"
    # compiled: libnumaplace (numaplace::compiled); shared: libnumaplace.so rather than .a (compiled only;
    # it is always position-independent, so there is no fPIC option).
    options = {"compiled": [True, False], "shared": [True, False]}
    default_options = {"compiled": False, "shared": False}
    no_copy_source = True

    def configure(self):
        if self.options.compiled:
            self.package_type = "library"
        else:
            self.options.rm_safe("shared")

    def layout(self):
        if self.options.compiled:
            cmake_layout(self, src_folder="src")
        else:
            basic_layout(self, src_folder="src")

    def requirements(self):
        # onetbb first: Conan expands requirements in order, so onetbb's own (pinned) hwloc joins the graph
        # first and hwloc's range below accepts it. Listed the other way round, the range resolves to the
        # newest hwloc and then conflicts with the one onetbb pins (ConanCenter's onetbb pins an older one).
        # Both are ranges so that a profile's [platform_requires] (the system's versions) satisfies them.
        # Public headers include <oneapi/tbb/...> and <hwloc.h>: consumers need their headers.
        self.requires("onetbb/[>=2021.3 <2023]", transitive_headers=True)
        self.requires("hwloc/[>=2.0 <3]", transitive_headers=True)

    def package_id(self):
        if not self.info.options.compiled:
            self.info.clear()

    def validate(self):
        # mbind, move_pages, sched_getcpu, /proc and /sys: Linux only.
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration(f"{self.ref} supports Linux only (it uses mbind/move_pages)")
        if self.settings.get_safe("compiler.cppstd"):
            check_min_cppstd(self, 17)

    def source(self):
        get(self, **self.conan_data["sources"][self.version], strip_root=True)

    @property
    def _cmake_variables(self):
        return {
            "NUMAPLACE_COMPILED": True,
            "NUMAPLACE_PARALLEL": "ON",  # onetbb is a requirement: the arenas go into libnumaplace
            "NUMAPLACE_BUILD_TESTS": False,
            "NUMAPLACE_BUILD_EXAMPLES": False,
            "NUMAPLACE_BUILD_BENCHMARKS": False,
            "NUMAPLACE_INSTALL": True,
        }

    def generate(self):
        if not self.options.compiled:
            return  # header-only: nothing to configure
        tc = CMakeToolchain(self)
        tc.cache_variables.update(self._cmake_variables)
        tc.generate()
        CMakeDeps(self).generate()

    def build(self):
        if self.options.compiled:
            cmake = CMake(self)
            cmake.configure()
            cmake.build()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        if self.options.compiled:
            CMake(self).install()
            # share/: CMake config and .pc files, which CMakeDeps and PkgConfigDeps make instead.
            rmdir(self, os.path.join(self.package_folder, "share"))
        else:
            copy(self, "*.hpp", os.path.join(self.source_folder, "include"),
                 os.path.join(self.package_folder, "include"))
        # Only for hwloc/onetbb as [platform_requires], for which CMakeDeps generates nothing (see the file).
        copy(self, "numaplace-platform-deps.cmake", os.path.join(self.source_folder, "packaging", "conan"),
             os.path.join(self.package_folder, self._module_dir))
        copy(self, "Findhwloc.cmake", os.path.join(self.source_folder, "cmake"),
             os.path.join(self.package_folder, self._module_dir, "hwloc"))

    @property
    def _module_dir(self):
        return os.path.join("lib", "cmake", "numaplace-conan")

    def _requires(self, dependency, component):
        # A dependency given as [platform_requires] (the system's) is no Conan package: there is nothing to
        # require, and the build module below finds it instead.
        try:
            dep = self.dependencies[dependency]
        except KeyError:
            return []
        return [f"{dependency}::{component}"] if dep.package_folder else []

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "numaplace")
        # CMakeDeps and PkgConfigDeps make a target of the package that links every component, OpenMP's
        # flags included: named apart, so numaplace::numaplace is the component below (no OpenMP).
        self.cpp_info.set_property("cmake_target_name", "numaplace::all")
        self.cpp_info.set_property("pkg_config_name", "numaplace-all")

        # numaplace::core: every header but parallel_for.hpp and replicated.hpp; hwloc, no oneTBB.
        core = self.cpp_info.components["core"]
        core.bindirs = []
        core.libdirs = []
        core.set_property("cmake_target_name", "numaplace::core")
        core.set_property("pkg_config_name", "numaplace-core")
        core.requires = self._requires("hwloc", "hwloc")
        core.system_libs = ["pthread"]
        # numaplace::parallel: core + arenas.hpp, parallel_for.hpp, replicated.hpp, numaplace.hpp on oneTBB.
        parallel = self.cpp_info.components["parallel"]
        parallel.bindirs = []
        parallel.libdirs = []
        parallel.set_property("cmake_target_name", "numaplace::parallel")
        parallel.set_property("pkg_config_name", "numaplace-parallel")
        parallel.requires = ["core"] + self._requires("onetbb", "libtbb")
        # numaplace::numaplace, the umbrella: core + parallel, and compiled with compiled=True.
        everything = self.cpp_info.components["numaplace"]
        everything.bindirs = []
        everything.libdirs = []
        everything.set_property("cmake_target_name", "numaplace::numaplace")
        everything.set_property("pkg_config_name", "numaplace")
        everything.requires = ["core", "parallel"]
        if self.options.compiled:
            # numaplace::compiled: libnumaplace, with the oneTBB part (so it requires parallel: oneTBB after
            # the library on the link line); its users' TUs declare the heavy functions, not compile them.
            compiled = self.cpp_info.components["compiled"]
            compiled.set_property("cmake_target_name", "numaplace::compiled")
            compiled.set_property("pkg_config_name", "numaplace-compiled")
            compiled.bindirs = []
            compiled.libs = ["numaplace"]
            compiled.defines = ["NUMAPLACE_SEPARATE_COMPILATION"]
            compiled.requires = ["core", "parallel"]
            everything.requires.append("compiled")
        # numaplace::omp: omp.hpp, core and the compiler's OpenMP (GCC's and Clang's -fopenmp; Conan has no
        # OpenMP package: the runtime is the compiler's, libgomp or libomp).
        omp = self.cpp_info.components["omp"]
        omp.bindirs = []
        omp.libdirs = []
        omp.set_property("cmake_target_name", "numaplace::omp")
        omp.set_property("pkg_config_name", "numaplace-omp")
        omp.requires = ["core"]
        omp.cxxflags = ["-fopenmp"]
        omp.sharedlinkflags = ["-fopenmp"]
        omp.exelinkflags = ["-fopenmp"]
        # CMakeDeps includes this at the end of numaplace-config.cmake: with hwloc/onetbb from the system
        # ([platform_requires]) it finds and links them; with Conan packages it does nothing.
        self.cpp_info.set_property("cmake_build_modules",
                                   [os.path.join(self._module_dir, "numaplace-platform-deps.cmake")])
