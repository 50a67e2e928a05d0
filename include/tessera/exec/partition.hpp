#pragma once
// Automatic partition of a chain of layers into balanced stages.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tessera/config/error.hpp"

namespace tessera::exec {

/// A split of layers 0..n-1 into contiguous stages.
struct partition {
    std::vector<std::size_t> first_layer;  ///< first layer of each stage; stage s = [first[s], first[s+1])
    std::vector<double> stage_cost;        ///< the sum of its layers' costs
    [[nodiscard]] double bottleneck() const {
        return stage_cost.empty() ? 0.0 : *std::max_element(stage_cost.begin(), stage_cost.end());
    }
};

/// Splits layers with costs `layer_costs` into `stages` contiguous, non-empty stages minimising the
/// most expensive stage (the pipeline's bottleneck); ties go to the earliest split. Exact (dynamic
/// programming, O(stages × n²)). Throws config::config_error when there are fewer layers than stages
/// or a cost is negative.
/// @code
///   auto p = exec::balance_stages(std::vector<double>{4, 1, 1, 1, 1}, 2);   // {0, 1}: [4] [1 1 1 1]
/// @endcode
[[nodiscard]] inline partition balance_stages(std::span<const double> layer_costs, std::size_t stages) {
    const std::size_t n = layer_costs.size();
    if (stages == 0 || n < stages)
        throw config::config_error("tessera::exec::balance_stages: cannot split " + std::to_string(n) +
                                   " layers into " + std::to_string(stages) + " non-empty stages");
    for (std::size_t i = 0; i < n; ++i)
        if (!(layer_costs[i] >= 0))
            throw config::config_error("tessera::exec::balance_stages: layer " + std::to_string(i) +
                                       " has a negative or NaN cost " + std::to_string(layer_costs[i]));
    std::vector<double> prefix(n + 1, 0.0);
    for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_costs[i];
    constexpr double inf = std::numeric_limits<double>::infinity();
    // best[k][j]: the smallest bottleneck of the first j layers in k stages; cut[k][j]: where stage k starts.
    std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
    std::vector<std::vector<std::size_t>> cut(stages + 1, std::vector<std::size_t>(n + 1, 0));
    best[0][0] = 0.0;
    for (std::size_t k = 1; k <= stages; ++k)
        for (std::size_t j = k; j <= n; ++j)
            for (std::size_t i = k - 1; i < j; ++i) {
                const double v = std::max(best[k - 1][i], prefix[j] - prefix[i]);
                if (v < best[k][j]) {
                    best[k][j] = v;
                    cut[k][j] = i;
                }
            }
    partition p;
    p.first_layer.assign(stages, 0);
    p.stage_cost.assign(stages, 0.0);
    for (std::size_t k = stages, j = n; k > 0; --k) {
        const std::size_t i = cut[k][j];
        p.first_layer[k - 1] = i;
        p.stage_cost[k - 1] = prefix[j] - prefix[i];
        j = i;
    }
    return p;
}

}  // namespace tessera::exec
