// Rule: the rule holds for 1F1B and 4 stages too: G = 6 < 7.
// expect: pipelined training needs gradient_accumulation<G> with G >= 2*Stages - 1
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::gradient_accumulation<6>, cfg::pipelined<cfg::one_f_one_b, 4>>;
#else
using checked = cfg::config<cfg::gradient_accumulation<7>, cfg::pipelined<cfg::one_f_one_b, 4>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
