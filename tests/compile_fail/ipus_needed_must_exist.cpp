// Rule: R x IPUs per replica must fit the IPUs the system has.
// expect: the configuration needs more IPUs than available_ipus<N> offers
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::replication<4>, cfg::sharded<2>, cfg::available_ipus<4>>;
#else
using checked = cfg::config<cfg::replication<2>, cfg::sharded<2>, cfg::available_ipus<4>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
