// Rule: an interleaved pipeline of S stages with V per IPU puts stage s on IPU s mod (S / V).
// expect: pipelined<interleaved<V>, Stages> puts stage s on IPU s mod (Stages / V)
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::pipelined<cfg::interleaved<2>, 4, cfg::ipu_map<0, 0, 1, 1>>, cfg::gradient_accumulation<4>>;
#else
using checked = cfg::config<cfg::pipelined<cfg::interleaved<2>, 4, cfg::ipu_map<0, 1, 0, 1>>, cfg::gradient_accumulation<4>>;
#endif
static_assert(checked::ipus_needed == 2);  // instantiates the config, and so its checks
