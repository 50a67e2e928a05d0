// Rule: inference needs G == 1.
// expect: inference has no gradients to accumulate: use gradient_accumulation<1>
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::inference, cfg::gradient_accumulation<4>>;
#else
using checked = cfg::config<cfg::inference, cfg::gradient_accumulation<1>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
