// tessera-plan's search at precision mixed (one file per precision: they compile in parallel).
#include "plan_search.hpp"
#include "plan_transformer.hpp"

namespace tessera::programs {
void plan_mixed(const plan_request& q, const dataset_shape& shape, plan_outcome& out, const std::function<void()>& tick) {
    search_precision<tessera::config::mixed>(q, shape, out, tick);
}
void plan_text_mixed(const plan_request& q, plan_outcome& out, const std::function<void()>& tick) {
    search_transformer<tessera::config::mixed>(q, out, tick);
}
void trace_plan_mixed(const train_request& r, const dataset_shape& shape) {
    if (text_model(r))
        trace_transformer_plan<tessera::config::mixed>(r);
    else
        trace_plan<tessera::config::mixed>(r, shape);
}
}  // namespace tessera::programs
