// The heavy kernels of every precision, compiled once for all the test suites (each suite's files
// declare them extern: TESSERA_EXTERN_KERNELS, tests/CMakeLists.txt).
#define TESSERA_INSTANTIATE_KERNELS
#include "tessera/kernels/instances.hpp"
