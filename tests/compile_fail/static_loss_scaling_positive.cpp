// Rule: a static loss scale is positive.
// expect: static_loss_scaling<Factor>: Factor must be a positive finite number
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::half::with<cfg::static_loss_scaling<-1.0>>>;
#else
using checked = cfg::config<cfg::half::with<cfg::static_loss_scaling<1024.0>>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
