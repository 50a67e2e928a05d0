#pragma once
// Output modes: which micro-batches' outputs a session call returns to the host.
#include <concepts>
#include <cstddef>
#include <string_view>

#include "tessera/config/policy.hpp"

namespace tessera::config {

enum class output_kind { final, all, sum, every_n };

/// Only the last micro-batch of the call (the default for training).
struct final {
    using policy_category = category::output_mode;
    static constexpr output_kind kind = output_kind::final;
    static constexpr std::size_t period = 0;
    static constexpr std::string_view name = "final";
};
/// Every micro-batch (the default for inference).
struct all {
    using policy_category = category::output_mode;
    static constexpr output_kind kind = output_kind::all;
    static constexpr std::size_t period = 1;
    static constexpr std::string_view name = "all";
};
/// The sum over the micro-batches of the call; divide by D × G for a mean.
struct sum {
    using policy_category = category::output_mode;
    static constexpr output_kind kind = output_kind::sum;
    static constexpr std::size_t period = 0;
    static constexpr std::string_view name = "sum";
};
/// Every N-th micro-batch.
template <std::size_t N>
struct every_n {
    static_assert(N > 0, "tessera::config::every_n<N>: N must be at least 1 (every_n<1> returns every "
                         "micro-batch, like config::all)");
    using policy_category = category::output_mode;
    static constexpr output_kind kind = output_kind::every_n;
    static constexpr std::size_t period = N;
    static constexpr std::string_view name = "every_n";
};

/// An output mode.
template <class O>
concept OutputMode = PolicyOf<O, category::output_mode> && requires {
    { O::kind } -> std::convertible_to<output_kind>;
    { O::period } -> std::convertible_to<std::size_t>;
};

static_assert(OutputMode<final> && OutputMode<all> && OutputMode<sum> && OutputMode<every_n<4>>);

}  // namespace tessera::config
