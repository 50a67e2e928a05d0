# An overlay port that installs tessera from this source tree through its own CMake install:
#   vcpkg install tessera --overlay-ports=<tessera>/ports
# tests/CMakeLists.txt checks it ("package: vcpkg"): configured with these OPTIONS, the install target
# built, nothing compiled.
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../..")
set(VCPKG_BUILD_TYPE release)  # headers only: one configuration is enough

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_PROGRAMS=OFF -DTESSERA_BUILD_BENCHMARKS=OFF)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/tessera)

# BSD 3-Clause: share/tessera/copyright, where vcpkg looks for a port's licence.
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
