#pragma once
// Loss scaling at run time: the config policy (none, static, dynamic) applied to one update.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "tessera/config/loss_scaling.hpp"
#include "tessera/optim/parameters.hpp"

namespace tessera::optim {

/// Multiply the loss by scale() before backward; then call step(params, optimizer): it unscales the
/// gradients inside the optimiser update, or skips the update when a gradient overflowed (inf/NaN).
/// Dynamic scaling divides the scale by the policy's factor on overflow and multiplies it after
/// growth_interval clean updates. Zero the gradients after step() in both cases.
/// @code
///   optim::loss_scaler<config::dynamic_loss_scaling<>> scaler;
///   loss(model.forward(x, st, ctx), labels, scaler.scale());  model.backward(...);
///   scaler.step(model, opt);  optim::zero_grad(model);
/// @endcode
template <config::LossScaling L = config::no_loss_scaling>
class loss_scaler {
public:
    using policy = L;

    [[nodiscard]] double scale() const noexcept { return m_scale; }
    [[nodiscard]] std::uint64_t skipped() const noexcept { return m_skipped; }

    /// Returns true when the optimiser stepped, false when the update was skipped for overflow.
    template <ParameterSet S, class Optimizer>
    bool step(S& params, Optimizer& optimizer) {
        if (!gradients_finite(params)) {
            ++m_skipped;
            m_good = 0;
            if constexpr (L::is_dynamic) m_scale = std::max(1.0, m_scale / L::factor);
            return false;
        }
        optimizer.step(params, 1.0 / m_scale);
        if constexpr (L::is_dynamic) {
            if (++m_good >= L::growth_interval) {
                m_scale = std::min(m_scale * L::factor, 65536.0 * 65536.0);
                m_good = 0;
            }
        }
        return true;
    }

    /// State for checkpoints.
    void save_state(std::map<std::string, double>& out) const {
        out["loss_scaler.scale"] = m_scale;
        out["loss_scaler.good_steps"] = static_cast<double>(m_good);
        out["loss_scaler.skipped"] = static_cast<double>(m_skipped);
    }
    void load_state(const std::map<std::string, double>& in) {
        if (auto it = in.find("loss_scaler.scale"); it != in.end()) m_scale = it->second;
        if (auto it = in.find("loss_scaler.good_steps"); it != in.end()) m_good = static_cast<std::size_t>(it->second);
        if (auto it = in.find("loss_scaler.skipped"); it != in.end()) m_skipped = static_cast<std::uint64_t>(it->second);
    }

private:
    double m_scale = L::initial_scale;
    std::size_t m_good = 0;
    std::uint64_t m_skipped = 0;
};

}  // namespace tessera::optim
