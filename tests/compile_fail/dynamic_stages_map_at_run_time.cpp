// Rule: a stage count given at run time takes its IPU map at run time too (config::options::ipu_map).
// expect: takes its ipu_map at run time
#include <tessera/config.hpp>

namespace cfg = tessera::config;
#if TESSERA_FAIL
using checked = cfg::config<cfg::pipelined<cfg::gpipe, cfg::dynamic, cfg::ipu_map<0, 1>>>;
#else
using checked = cfg::config<cfg::pipelined<cfg::gpipe, cfg::dynamic>>;
#endif
static_assert(checked::stages == cfg::dynamic);  // instantiates the config, and so its checks
