// tessera-plan's search at precision half (one file per precision: they compile in parallel).
#include "plan_search.hpp"
#include "plan_transformer.hpp"

namespace tessera::programs {
void plan_half(const plan_request& q, const dataset_shape& shape, plan_outcome& out, const std::function<void()>& tick) {
    search_precision<tessera::config::half>(q, shape, out, tick);
}
void plan_text_half(const plan_request& q, plan_outcome& out, const std::function<void()>& tick) {
    search_transformer<tessera::config::half>(q, out, tick);
}
void trace_plan_half(const train_request& r, const dataset_shape& shape) {
    if (text_model(r))
        trace_transformer_plan<tessera::config::half>(r);
    else
        trace_plan<tessera::config::half>(r, shape);
}
}  // namespace tessera::programs
