#pragma once
// Loss scaling policies: none, a static factor, or a dynamic scale that backs off on overflow.
#include <concepts>
#include <cstddef>
#include <string_view>

namespace tessera::config {

/// The loss is not scaled.
struct no_loss_scaling {
    static constexpr std::string_view name = "none";
    static constexpr bool is_dynamic = false;
    static constexpr double initial_scale = 1.0;
};

/// The loss is multiplied by `Factor` before the backward pass and the gradients divided by it
/// (PopTorch's `loss_scaling` optimizer argument).
template <double Factor>
struct static_loss_scaling {
    static_assert(Factor > 0.0 && Factor < 1e300,
                  "tessera::config::static_loss_scaling<Factor>: Factor must be a positive finite number "
                  "(it multiplies the loss; 128.0 to 65536.0 are usual for half precision)");
    static constexpr std::string_view name = "static";
    static constexpr bool is_dynamic = false;
    static constexpr double initial_scale = Factor;
};

/// Starts at `Initial`; an update whose gradients overflow is skipped and the scale divided by
/// `Factor`; after `GrowthInterval` clean updates the scale is multiplied by `Factor`.
template <double Initial = 65536.0, std::size_t GrowthInterval = 2000, double Factor = 2.0>
struct dynamic_loss_scaling {
    static_assert(Initial > 0.0 && Initial < 1e300,
                  "tessera::config::dynamic_loss_scaling: the initial scale must be a positive finite number");
    static_assert(GrowthInterval >= 1,
                  "tessera::config::dynamic_loss_scaling: GrowthInterval must be at least 1 update");
    static_assert(Factor > 1.0,
                  "tessera::config::dynamic_loss_scaling: Factor must be greater than 1 (it grows and shrinks the scale)");
    static constexpr std::string_view name = "dynamic";
    static constexpr bool is_dynamic = true;
    static constexpr double initial_scale = Initial;
    static constexpr std::size_t growth_interval = GrowthInterval;
    static constexpr double factor = Factor;
};

/// no_loss_scaling, static_loss_scaling<F> or dynamic_loss_scaling<...>, or a user type of that shape.
template <class L>
concept LossScaling = requires {
    { L::name } -> std::convertible_to<std::string_view>;
    { L::is_dynamic } -> std::convertible_to<bool>;
    { L::initial_scale } -> std::convertible_to<double>;
};

static_assert(LossScaling<no_loss_scaling> && LossScaling<static_loss_scaling<1024.0>> &&
              LossScaling<dynamic_loss_scaling<>>);

/// A loss scaling policy as values, for code that chooses it at run time: a fixed factor, or
/// dynamic (PopTorch's automatic loss scaling): a step whose gradients overflow is skipped and the
/// scale divided by `factor`; after `growth_interval` clean steps it is multiplied by `factor` (up
/// to 2^32; growth never lowers a larger initial scale).
struct loss_scale_rule {
    double initial = 1.0;
    bool dynamic = false;
    double factor = 2.0;
    std::size_t growth_interval = 2000;

    /// The rule of a LossScaling policy.
    template <LossScaling L>
    [[nodiscard]] static constexpr loss_scale_rule of() noexcept {
        loss_scale_rule r{.initial = L::initial_scale, .dynamic = L::is_dynamic};
        if constexpr (L::is_dynamic) {
            r.factor = L::factor;
            r.growth_interval = L::growth_interval;
        }
        return r;
    }
};

}  // namespace tessera::config
