// Rule: every IPU of the replica hosts a stage.
// expect: the ipu_map leaves an IPU without a stage
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::sharded<2, cfg::ipu_map<0, 2>>>;
#else
using checked = cfg::config<cfg::sharded<2, cfg::ipu_map<1, 0>>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
