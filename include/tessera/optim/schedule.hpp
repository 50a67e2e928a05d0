#pragma once
// Learning-rate schedules: step decay and cosine annealing (with optional linear warm-up).
#include <cmath>
#include <cstddef>
#include <numbers>
#include <stdexcept>
#include <string>

namespace tessera::optim {

/// lr(t) = base · gamma^⌊t / step_size⌋ (PyTorch's StepLR; t counts epochs or updates, as the caller chooses).
struct step_lr {
    double base = 0.1;
    std::size_t step_size = 30;
    double gamma = 0.1;

    [[nodiscard]] double operator()(std::size_t t) const {
        if (step_size == 0) throw std::invalid_argument("tessera::optim::step_lr: step_size must be positive");
        return base * std::pow(gamma, static_cast<double>(t / step_size));
    }
};

/// Linear warm-up from 0 over `warmup` steps, then lr(t) = min + (base − min)·(1 + cos(π·t'/T'))/2 over the
/// remaining T' = total − warmup steps (PyTorch's CosineAnnealingLR); min after `total`.
struct cosine_lr {
    double base = 0.1;
    std::size_t total = 100;
    double min = 0.0;
    std::size_t warmup = 0;

    [[nodiscard]] double operator()(std::size_t t) const {
        if (total == 0 || warmup >= total)
            throw std::invalid_argument("tessera::optim::cosine_lr: need 0 <= warmup < total (warmup=" +
                                        std::to_string(warmup) + ", total=" + std::to_string(total) + ")");
        if (t < warmup) return base * static_cast<double>(t + 1) / static_cast<double>(warmup);
        if (t >= total) return min;
        const double x = static_cast<double>(t - warmup) / static_cast<double>(total - warmup);
        return min + (base - min) * 0.5 * (1.0 + std::cos(std::numbers::pi * x));
    }
};

}  // namespace tessera::optim
