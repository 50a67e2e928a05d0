// Rule: R must be divisible by the instances P.
// expect: replication<R> must be divisible by instances<P>
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::replication<3>, cfg::instances<2>>;
#else
using checked = cfg::config<cfg::replication<4>, cfg::instances<2>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
