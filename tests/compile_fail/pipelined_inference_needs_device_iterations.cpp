// Rule: pipelined inference needs D >= S.
// expect: pipelined inference needs device_iterations<D> with D >= Stages
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::inference, cfg::pipelined<cfg::gpipe, 3>, cfg::device_iterations<2>>;
#else
using checked = cfg::config<cfg::inference, cfg::pipelined<cfg::gpipe, 3>, cfg::device_iterations<3>>;
#endif
static_assert(checked::ipus_needed >= 1);  // instantiates the config, and so its checks
