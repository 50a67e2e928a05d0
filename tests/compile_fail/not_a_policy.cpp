// Rule: config<...> rejects a type that is not a policy.
// expect: an argument is not a tessera policy
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::fp32, int>;
#else
using checked = cfg::config<cfg::fp32>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
