"""Conan 2 recipe: tessera is header-only and installs through its own CMake install.

tests/CMakeLists.txt checks this file as Conan uses it ("package: conan"): only exports_sources are
copied, configured with package()'s variables, installed without compiling."""
import os

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy


class TesseraConan(ConanFile):
    name = "tessera"
    version = "0.1.0"
    description = "The IPU execution model as compile-time policies, on a threaded IPU emulator"
    license = "BSD-3-Clause"
    topics = ("ipu", "pipeline", "header-only", "deep-learning")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    exports_sources = "CMakeLists.txt", "LICENSE", "cmake/*", "include/*"
    no_copy_source = True

    def requirements(self):
        self.requires("xtensor/0.24.3")
        self.requires("xsimd/8.1.0")
        self.requires("xtl/0.7.5")
        self.requires("zlib/1.2.13")

    def layout(self):
        cmake_layout(self)

    def generate(self):
        CMakeToolchain(self).generate()
        CMakeDeps(self).generate()

    def package(self):
        cmake = CMake(self)
        cmake.configure(variables={"TESSERA_BUILD_TESTS": "OFF", "TESSERA_BUILD_EXAMPLES": "OFF", "TESSERA_BUILD_PROGRAMS": "OFF", "TESSERA_BUILD_BENCHMARKS": "OFF"})
        cmake.install()  # LICENSE into share/doc/tessera, as the CMake install puts it
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))  # where Conan looks

    def package_id(self):
        self.info.clear()

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "tessera")
        self.cpp_info.set_property("cmake_target_name", "tessera::tessera")
        self.cpp_info.requires = ["xtensor::xtensor", "xsimd::xsimd", "xtl::xtl", "zlib::zlib"]
        self.cpp_info.system_libs = ["pthread"]
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
