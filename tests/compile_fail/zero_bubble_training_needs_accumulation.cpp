// Rule: a zero-bubble pipeline is a 1F1B pipeline with its backward passes split: G >= 2S - 1 as well.
// expect: pipelined training needs gradient_accumulation<G> with G >= 2*Stages - 1
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::gradient_accumulation<4>, cfg::pipelined<cfg::zero_bubble_h2, 3>>;
#else
using checked = cfg::config<cfg::gradient_accumulation<5>, cfg::pipelined<cfg::zero_bubble_h2, 3>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
