#pragma once
// The tutorials' experiments as dry runs: each row of the seeds' tables on tessera's modelled clock.
#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

#include <tessera/tessera.hpp>

#include "seed_tables.hpp"

namespace tessera::programs {

namespace cfg = tessera::config;

/// The tutorials' model: torchvision's ResNet-101 for CIFAR-10 at 16.16, cut before layer3[8].
using seed_network = tessera::nn::resnet101<cfg::half>;
inline constexpr tessera::tensor::shape seed_sample{1, 32, 32, 3};

/// A row's configuration type: 16.16, a 2-stage PopTorch-like (1F1B) pipeline, counts at run time,
/// the I/O, replicas and host processes of the row.
template <class Io, std::size_t Replicas, std::size_t Instances>
using seed_config = cfg::config<cfg::half, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<cfg::dynamic>,
                                cfg::device_iterations<cfg::dynamic>, cfg::micro_batch<cfg::dynamic>,
                                cfg::replication<Replicas>, cfg::instances<Instances>, Io>;

/// Calls f.template operator()<Config>() with the configuration type of `row`.
template <class F>
decltype(auto) with_seed_config(const seed_row& row, F&& f) {
    if (row.replicas == 1 && row.instances == 1)
        return row.eight_bit_io ? f.template operator()<seed_config<cfg::eight_bit_io, 1, 1>>()
                                : f.template operator()<seed_config<cfg::float_io, 1, 1>>();
    if (row.replicas == 4 && row.instances == 1 && row.eight_bit_io)
        return f.template operator()<seed_config<cfg::eight_bit_io, 4, 1>>();
    if (row.replicas == 4 && row.instances == 2 && row.eight_bit_io)
        return f.template operator()<seed_config<cfg::eight_bit_io, 4, 2>>();
    throw cfg::config_error("tessera-sweep: no configuration for " + std::to_string(row.replicas) + " replicas over " +
                            std::to_string(row.instances) + " processes");
}

/// A row's dry run on `device` and `host` (the tutorial's loader: one worker, PopTorch's ring of 3).
inline exec::epoch_estimate dry_run_row(const seed_network& net, const seed_row& row, const emulator::device_spec& device,
                                        const emulator::host_spec& host, bool record = false) {
    const optim::sgd sgd({.learning_rate = 0.001, .momentum = 0.9});
    exec::session_options settings{.device = device,
                                   .record_trace = record,
                                   .first_units = {0, net.unit_index("layer3[8]")},
                                   .host = host,
                                   .loading = {.async = row.async_loader, .workers = 1, .prefetch_depth = 3,
                                               .instances = row.instances}};
    return with_seed_config(row, [&]<class C>() {
        return exec::dry_run<C>(net, sgd, seed_sample,
                                {.micro_batch = row.batch_size, .gradient_accumulation = row.gradient_accumulation,
                                 .device_iterations = row.device_iterations},
                                cifar10_images, settings);
    });
}

/// Minimises f over n parameters from x0 (Nelder-Mead, the standard coefficients).
inline std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x0, double step, std::size_t iterations) {
    const std::size_t n = x0.size();
    std::vector<std::vector<double>> simplex(n + 1, x0);
    for (std::size_t i = 0; i < n; ++i) simplex[i + 1][i] += step;
    std::vector<double> value(n + 1);
    for (std::size_t i = 0; i <= n; ++i) value[i] = f(simplex[i]);
    const auto along = [&](const std::vector<double>& c, const std::vector<double>& w, double t) {
        std::vector<double> x(n);
        for (std::size_t j = 0; j < n; ++j) x[j] = c[j] + t * (w[j] - c[j]);
        return x;
    };
    for (std::size_t it = 0; it < iterations; ++it) {
        std::vector<std::size_t> order(n + 1);
        for (std::size_t i = 0; i <= n; ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return value[a] < value[b]; });
        const std::size_t best = order.front(), worst = order.back(), second = order[n - 1];
        std::vector<double> centre(n, 0.0);
        for (std::size_t i = 0; i <= n; ++i)
            if (i != worst)
                for (std::size_t j = 0; j < n; ++j) centre[j] += simplex[i][j] / double(n);
        const auto reflected = along(centre, simplex[worst], -1.0);
        const double fr = f(reflected);
        if (fr < value[best]) {
            const auto expanded = along(centre, simplex[worst], -2.0);
            const double fe = f(expanded);
            simplex[worst] = fe < fr ? expanded : reflected;
            value[worst] = std::min(fe, fr);
        } else if (fr < value[second]) {
            simplex[worst] = reflected, value[worst] = fr;
        } else {
            const auto contracted = along(centre, simplex[worst], 0.5);
            const double fc = f(contracted);
            if (fc < value[worst]) {
                simplex[worst] = contracted, value[worst] = fc;
            } else {  // shrink towards the best
                for (std::size_t i = 0; i <= n; ++i)
                    if (i != best) simplex[i] = along(simplex[best], simplex[i], 0.5), value[i] = f(simplex[i]);
            }
        }
    }
    std::size_t best = 0;
    for (std::size_t i = 1; i <= n; ++i)
        if (value[i] < value[best]) best = i;
    return simplex[best];
}

}  // namespace tessera::programs
