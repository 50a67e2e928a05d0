// Rule: config<...> rejects two policies of one kind.
// expect: two policies of the same kind
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::fp32, cfg::sharded<2>, cfg::half>;
#else
using checked = cfg::config<cfg::fp32, cfg::sharded<2>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
