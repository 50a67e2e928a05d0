// Rule: a strategy has at least one stage.
// expect: a strategy needs at least 1 stage
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::phased<0>>;
#else
using checked = cfg::config<cfg::phased<1>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
