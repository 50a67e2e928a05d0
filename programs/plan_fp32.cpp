// tessera-plan's search at precision fp32 (one file per precision: they compile in parallel).
#include "plan_search.hpp"

namespace tessera::programs {
void plan_fp32(const plan_request& q, const dataset_shape& shape, plan_outcome& out, const std::function<void()>& tick) {
    search_precision<tessera::config::fp32>(q, shape, out, tick);
}
}  // namespace tessera::programs
