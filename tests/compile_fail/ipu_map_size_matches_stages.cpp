// Rule: the ipu_map names one IPU per stage.
// expect: the ipu_map must name exactly one IPU per stage
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::sharded<3, cfg::ipu_map<0, 1>>>;
#else
using checked = cfg::config<cfg::sharded<3, cfg::ipu_map<0, 1, 1>>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
