"""Conan 2 recipe for numaplace (header-only; ConanCenter header-library layout).

    conan create . --build=missing     # hwloc and onetbb from a Conan remote (ConanCenter)
    conan create . -pr:a packaging/conan/system.profile --build=missing --no-remote
                                       # offline: the system's hwloc and oneTBB ([platform_requires])
    packaging/test-conan.sh            # the offline check, end to end

The package is numaplace's own CMake install (headers, numaplaceConfig.cmake + Findhwloc.cmake) plus a
CMakeDeps build module; tests, examples and benchmarks are not built. See packaging/README.md.
"""
import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load, rmdir

# header-library package_type, transitive_headers and [platform_requires] need Conan >= 2.0.
required_conan_version = ">=2.0"


class NumaplaceConan(ConanFile):
    name = "numaplace"
    description = "NUMA page placement as a type: allocators, partitions and per-node parallel_for"
    license = "MIT"
    topics = ("numa", "allocator", "hwloc", "tbb", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    no_copy_source = True
    # What the CMake install reads (cmake/vcpkg, the vcpkg port, is not needed) plus the Conan build module.
    exports_sources = ("include/*", "cmake/*", "!cmake/vcpkg/*", "CMakeLists.txt", "LICENSE", "README.md",
                       "packaging/conan/numaplace-platform-deps.cmake")

    def set_version(self):
        # One source of truth: project(numaplace VERSION x.y.z) in CMakeLists.txt.
        if self.version:
            return
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        match = re.search(r"project\(\s*numaplace\s+VERSION\s+([0-9]+(?:\.[0-9]+)*)", text)
        if not match:
            raise ConanInvalidConfiguration("cannot read the version from CMakeLists.txt")
        self.version = match.group(1)

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        # numaplace's public headers include <hwloc.h> and <oneapi/tbb/...>: consumers need their headers.
        # Ranges: hwloc 2.x (numaplace needs >= 2.0, like find_package(hwloc 2.0)); oneTBB with
        # task_arena::constraints and info::numa_nodes (2021.x/2022.x, same API and ABI). Debian 12's
        # hwloc 2.9.0 and onetbb 2021.8.0 satisfy both.
        self.requires("hwloc/[>=2.0 <3]", transitive_headers=True)
        self.requires("onetbb/[>=2021.1 <2023]", transitive_headers=True)

    def package_id(self):
        self.info.clear()

    def validate(self):
        # mbind, move_pages, sched_getcpu, /proc and /sys: Linux only.
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration(f"{self.ref} supports Linux only (it uses mbind/move_pages)")
        if self.settings.get_safe("compiler.cppstd"):
            check_min_cppstd(self, 17)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["NUMAPLACE_BUILD_TESTS"] = False
        tc.cache_variables["NUMAPLACE_BUILD_EXAMPLES"] = False
        tc.cache_variables["NUMAPLACE_BUILD_BENCHMARKS"] = False
        tc.cache_variables["NUMAPLACE_INSTALL"] = True
        tc.generate()
        # hwloc-config.cmake / TBBConfig.cmake for Conan-built dependencies. For [platform_requires] it
        # writes nothing and our Findhwloc.cmake / the system's TBBConfig.cmake answer instead.
        CMakeDeps(self).generate()

    def build(self):
        pass  # header-only

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        cmake = CMake(self)
        cmake.configure()
        cmake.install()
        # numaplace.pc holds the absolute install prefix (this cache folder): not relocatable. Conan consumers
        # get a numaplace.pc from PkgConfigDeps instead (pkg_config_name below).
        rmdir(self, os.path.join(self.package_folder, "share", "pkgconfig"))
        copy(self, "numaplace-platform-deps.cmake", os.path.join(self.source_folder, "packaging", "conan"),
             os.path.join(self.package_folder, self._cmake_dir))

    @property
    def _cmake_dir(self):
        # Where CMakeLists.txt installs numaplaceConfig.cmake and Findhwloc.cmake (CMAKE_INSTALL_DATADIR).
        return os.path.join("share", "cmake", "numaplace")

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "numaplace")
        self.cpp_info.set_property("cmake_target_name", "numaplace::numaplace")
        self.cpp_info.set_property("pkg_config_name", "numaplace")
        self.cpp_info.requires = ["hwloc::hwloc", "onetbb::libtbb"]
        self.cpp_info.system_libs = ["pthread"]
        # CMakeDeps generates numaplace-config.cmake (not our installed numaplaceConfig.cmake) and includes
        # this module at its end. It finds hwloc (installed Findhwloc.cmake) and oneTBB (system TBBConfig) when
        # they are [platform_requires], for which CMakeDeps generates nothing; see the file's comment.
        self.cpp_info.set_property("cmake_build_modules",
                                   [os.path.join(self._cmake_dir, "numaplace-platform-deps.cmake")])
