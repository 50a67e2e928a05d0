#pragma once
// How a staged network scales its loss: a fixed factor or PopTorch's automatic loss scaling.
#include <cstddef>

#include "tessera/config/loss_scaling.hpp"

namespace tessera::exec {

/// How a staged network scales its loss: a fixed factor, or dynamically (PopTorch's automatic loss
/// scaling): a step whose gradients overflow is skipped and the scale divided by `factor`; after
/// `growth_interval` clean steps it is multiplied by `factor` (up to 2^32; growth never lowers a
/// larger initial scale).
struct loss_scale_rule {
    double initial = 1.0;
    bool dynamic = false;
    double factor = 2.0;
    std::size_t growth_interval = 2000;

    /// The rule of a config::LossScaling policy.
    template <config::LossScaling L>
    [[nodiscard]] static constexpr loss_scale_rule of() noexcept {
        loss_scale_rule r{.initial = L::initial_scale, .dynamic = L::is_dynamic};
        if constexpr (L::is_dynamic) {
            r.factor = L::factor;
            r.growth_interval = L::growth_interval;
        }
        return r;
    }
};

}  // namespace tessera::exec
