// Rule: a session runs its model at the config's precision; a network built at another is refused.
// expect: the model's precision must be the config's
#include <tessera/exec.hpp>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>

namespace cfg = tessera::config;
using c = cfg::config<cfg::half::with<cfg::dynamic_loss_scaling<>>>;
#if TESSERA_FAIL
using net_t = tessera::nn::resnet20<cfg::fp32>;
#else
using net_t = tessera::nn::resnet20<cfg::half>;
#endif
using model_t = tessera::exec::staged_network<net_t, tessera::optim::sgd>;
static_assert(sizeof(tessera::exec::session<c, model_t>) > 0);  // instantiates the session, and so its checks
