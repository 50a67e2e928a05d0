#pragma once
// Precision policies: fp32 ("32.32"), mixed ("16.32") and half ("16.16"), each with its loss scaling.
//
// When to use which: fp32 to establish a reference; mixed for speed with fp32 master weights
// (usually no loss scaling needed); half for the smallest memory footprint, with loss scaling.
#include <concepts>
#include <string_view>
#include <type_traits>

#include "tessera/config/loss_scaling.hpp"
#include "tessera/config/policy.hpp"
#include "tessera/tensor/half.hpp"

namespace tessera::config {

/// Data (inputs and activations) stored as `Data`, weights as `Weight`, arithmetic accumulated in float.
/// @code
///   using p = tessera::config::half::with<tessera::config::dynamic_loss_scaling<>>;
/// @endcode
template <class Data, class Weight, LossScaling Scaling = no_loss_scaling>
struct precision {
    static_assert(std::is_same_v<Data, float> || std::is_same_v<Data, tessera::half>,
                  "tessera::config::precision: data must be stored as float or tessera::half");
    static_assert(std::is_same_v<Weight, float> || std::is_same_v<Weight, tessera::half>,
                  "tessera::config::precision: weights must be stored as float or tessera::half");
    using policy_category = category::precision;
    using data_type = Data;
    using weight_type = Weight;
    using accumulate_type = float;
    using loss_scaling = Scaling;
    static constexpr int storage_bits = 8 * static_cast<int>(sizeof(Data));
    static constexpr int weight_bits = 8 * static_cast<int>(sizeof(Weight));
    static constexpr int accumulate_bits = 32;
    /// PopTorch's spelling: data bits "." weight bits.
    static constexpr std::string_view name = storage_bits == 32 ? (weight_bits == 32 ? "32.32" : "32.16")
                                                                : (weight_bits == 32 ? "16.32" : "16.16");

    /// The same precision with another loss scaling policy.
    template <LossScaling Other>
    using with = precision<Data, Weight, Other>;
};

using fp32 = precision<float, float>;               ///< "32.32"
using mixed = precision<tessera::half, float>;      ///< "16.32": fp16 data and activations, fp32 weights
using half = precision<tessera::half, tessera::half>;  ///< "16.16"

/// A precision policy: storage and accumulation types, and a loss scaling policy.
template <class P>
concept Precision = PolicyOf<P, category::precision> && requires {
    typename P::data_type;
    typename P::weight_type;
    typename P::accumulate_type;
    typename P::loss_scaling;
    { P::storage_bits } -> std::convertible_to<int>;
    { P::accumulate_bits } -> std::convertible_to<int>;
    { P::name } -> std::convertible_to<std::string_view>;
} && LossScaling<typename P::loss_scaling> && (P::accumulate_bits >= P::storage_bits);

static_assert(Precision<fp32> && Precision<mixed> && Precision<half>);
static_assert(fp32::name == "32.32" && mixed::name == "16.32" && half::name == "16.16");

}  // namespace tessera::config
