import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class TestPackageConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "VirtualRunEnv"
    test_type = "explicit"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)  # builds in test_package/build/ (ignored by .gitignore's build*/)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.user_presets_path = False  # no CMakeUserPresets.json in the source tree
        tc.generate()
        # numaplace-config.cmake (targets numaplace::core, numaplace::parallel, numaplace::numaplace, ...). With
        # hwloc/onetbb from [platform_requires] it neither finds nor links them; numaplace's build module does.
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            programs = ["test_package", "test_package_core", "test_package_omp"]
            if self.dependencies[self.tested_reference_str].options.compiled:
                programs.append("test_package_compiled")
            for program in programs:
                self.run(os.path.join(self.cpp.build.bindir, program), env="conanrun")
