// Rule: the input group must divide each instance's replicas.
// expect: must divide the replicas of each instance (R / P)
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::replication<4, 4>, cfg::instances<2>>;
#else
using checked = cfg::config<cfg::replication<4, 2>, cfg::instances<2>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
