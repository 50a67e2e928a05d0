// tessera-plan's search at precision half (one file per precision: they compile in parallel).
#include "plan_search.hpp"

namespace tessera::programs {
void plan_half(const plan_request& q, const dataset_shape& shape, plan_outcome& out, const std::function<void()>& tick) {
    search_precision<tessera::config::half>(q, shape, out, tick);
}
}  // namespace tessera::programs
