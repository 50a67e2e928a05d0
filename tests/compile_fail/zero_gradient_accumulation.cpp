// Rule: counts are at least 1; dynamic is spelled config::dynamic.
// expect: gradient_accumulation<G>: G must be at least 1
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::gradient_accumulation<0>>;
#else
using checked = cfg::config<cfg::gradient_accumulation<cfg::dynamic>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
