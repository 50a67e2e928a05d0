// Rule: pipelined training with S forward stages needs G >= 2S - 1.
// expect: pipelined training needs gradient_accumulation<G> with G >= 2*Stages - 1
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<2>>;
#else
using checked = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<3>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
