// Rule: device_iterations<0> is an error.
// expect: device_iterations<D>: D must be at least 1
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::device_iterations<0>>;
#else
using checked = cfg::config<cfg::device_iterations<1>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
