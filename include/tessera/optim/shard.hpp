#pragma once
// A contiguous range of a parameter set's elements: the part of the weights one replica updates when
// the optimiser state is sharded across replicas (PopTorch's replicated tensor sharding, ZeRO stage 1).
#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/detail/function_ref.hpp"
#include "tessera/optim/parameters.hpp"

namespace tessera::optim {

/// Elements [begin, end) of a parameter set, counted over its parameters in visiting order (the
/// first parameter's elements, then the second's...). The default range holds every element.
struct element_range {
    std::size_t begin = 0;
    std::size_t end = std::numeric_limits<std::size_t>::max();

    [[nodiscard]] constexpr std::size_t size() const noexcept { return end > begin ? end - begin : 0; }
    [[nodiscard]] constexpr bool whole() const noexcept {
        return begin == 0 && end == std::numeric_limits<std::size_t>::max();
    }
    friend constexpr bool operator==(const element_range&, const element_range&) = default;
};

/// Sums a buffer element by element over the replicas that share the optimiser state, in an order
/// fixed by the replicas (the executor's all-reduce): what a sharded step calls when its update
/// needs sums over whole tensors (optim::lamb's norms). Every replica calls it the same times.
using replica_sum = tessera::detail::function_ref<void(std::span<float>)>;

/// Shard `index` of `count` near-equal shards of `elements`: [index·n/count, (index+1)·n/count).
/// Consecutive shards tile [0, n) without gaps; their sizes differ by at most one element.
[[nodiscard]] inline element_range shard_of(std::size_t elements, std::size_t index, std::size_t count) {
    if (count == 0 || index >= count)
        throw std::invalid_argument("tessera::optim::shard_of: shard " + std::to_string(index) + " of " +
                                    std::to_string(count));
    const auto bound = [&](std::size_t i) {  // floor(i·n / count) without overflowing i·n
        return elements / count * i + elements % count * i / count;
    };
    return {bound(index), bound(index + 1)};
}

/// Calls f(name, value, grad, lo, hi) for every parameter of `params` in order, with [lo, hi) the
/// indices of its elements that fall in `range` (lo == hi when none do): what a sharded optimiser
/// step visits, with each element keeping its index in its parameter.
template <ParameterSet S, class F>
void visit_in_range(S& params, element_range range, F&& f) {
    std::size_t offset = 0;
    params.visit_parameters([&](std::string_view name, auto value, auto grad) {
        const std::size_t n = value.size();
        const std::size_t lo = std::clamp(range.begin, offset, offset + n) - offset;
        const std::size_t hi = std::clamp(range.end, offset, offset + n) - offset;
        offset += n;
        f(name, value, grad, lo, std::max(lo, hi));
    });
}

namespace detail {

/// Cuts per-parameter state (one vector per parameter of `params`, in visiting order, each empty
/// when the state is not made yet) down to the elements of `shard`.
template <ParameterSet S>
void keep_shard(std::vector<std::vector<float>>& buffers, S& params, element_range shard, const char* who) {
    std::size_t i = 0;
    visit_in_range(params, shard, [&](std::string_view name, auto value, auto, std::size_t lo, std::size_t hi) {
        if (i < buffers.size() && !buffers[i].empty()) {
            if (buffers[i].size() != value.size())
                throw std::invalid_argument(std::string(who) + "::keep_shard: the state of parameter '" + std::string(name) +
                                            "' has " + std::to_string(buffers[i].size()) + " values for its " +
                                            std::to_string(value.size()) + " (already a shard?)");
            buffers[i] = std::vector<float>(buffers[i].begin() + std::ptrdiff_t(lo), buffers[i].begin() + std::ptrdiff_t(hi));
        }
        ++i;
    });
}

/// The state of every element of `params` from the states of consecutive shards (parts[g]: shard
/// g's per-parameter vectors): each parameter's vector is its shards' pieces end to end.
template <ParameterSet S>
[[nodiscard]] std::vector<std::vector<float>> gather_shards(S& params, const std::vector<const std::vector<std::vector<float>>*>& parts,
                                                            const char* who) {
    std::vector<std::vector<float>> whole;
    std::size_t i = 0;
    params.visit_parameters([&](std::string_view name, auto value, auto) {
        std::vector<float> v;
        for (const auto* part : parts)
            if (i < part->size()) v.insert(v.end(), (*part)[i].begin(), (*part)[i].end());
        if (!v.empty() && v.size() != value.size())
            throw std::invalid_argument(std::string(who) + "::gather_shards: the shards hold " + std::to_string(v.size()) +
                                        " state values of parameter '" + std::string(name) + "', which has " +
                                        std::to_string(value.size()) + " (not every shard, or not in order?)");
        whole.push_back(std::move(v));
        ++i;
    });
    while (!whole.empty() && whole.back().empty()) whole.pop_back();
    return whole;
}

}  // namespace detail

}  // namespace tessera::optim
