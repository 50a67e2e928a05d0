// Rule: an interleaved pipeline on I IPUs trains G micro-batches in groups of I: G a multiple of I, G >= 2I - 1.
// expect: must be a multiple of the IPU count I, and at least 2*I - 1 when training
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::pipelined<cfg::interleaved<3>, 6>, cfg::gradient_accumulation<5>>;
#else
using checked = cfg::config<cfg::pipelined<cfg::interleaved<3>, 6>, cfg::gradient_accumulation<4>>;
#endif
static_assert(checked::ipus_needed == 2);  // instantiates the config, and so its checks
