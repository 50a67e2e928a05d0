// Rule: a dynamic loss scale grows by a factor above 1.
// expect: Factor must be greater than 1
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::half::with<cfg::dynamic_loss_scaling<1024.0, 100, 1.0>>>;
#else
using checked = cfg::config<cfg::half::with<cfg::dynamic_loss_scaling<1024.0, 100, 2.0>>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
