// tessera-plan's search at precision fp32 (one file per precision: they compile in parallel).
#include "plan_search.hpp"
#include "plan_transformer.hpp"

namespace tessera::programs {
void plan_fp32(const plan_request& q, const dataset_shape& shape, plan_outcome& out, const std::function<void()>& tick) {
    search_precision<tessera::config::fp32>(q, shape, out, tick);
}
void plan_text_fp32(const plan_request& q, plan_outcome& out, const std::function<void()>& tick) {
    search_transformer<tessera::config::fp32>(q, out, tick);
}
void trace_plan_fp32(const train_request& r, const dataset_shape& shape) {
    if (text_model(r))
        trace_transformer_plan<tessera::config::fp32>(r);
    else
        trace_plan<tessera::config::fp32>(r, shape);
}
}  // namespace tessera::programs
