// Rule: the host sends float, half or 8-bit.
// expect: io<T>: the host sends float, tessera::half or std::uint8_t
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::io<double>>;
#else
using checked = cfg::config<cfg::io<std::uint8_t>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
