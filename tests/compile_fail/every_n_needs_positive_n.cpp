// Rule: every_n<N> needs N > 0.
// expect: every_n<N>: N must be at least 1
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::every_n<0>>;
#else
using checked = cfg::config<cfg::every_n<1>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
