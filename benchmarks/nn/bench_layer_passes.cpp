// Where a ResNet-20 training step spends its time, layer by layer and pass by pass, against what each
// pass could reach on this core: its FLOPs at the FMA peak and its bytes at the speed of a streaming
// add over the same number of bytes, both measured in the same run. ResNet-20 with projection
// shortcuts on 1×28×28, batch 32, one thread, as tessera_step_worker and bench_vs_libtorch train it;
// fp32 and 16.16. Each layer of the network appears once per shape with the number of times the
// network runs it; the whole step is measured too, and the table's remainder is what no layer
// pass below accounts for (the loss, pooling and classifier, the optimiser, and what the layers lose
// to each other in cache). Each pass is timed twice: repeated on data in cache, and with its data
// evicted from L1 and L2 before each call (64 MiB written elsewhere), as the step finds most of it.
// The rows are the layers alone: a batch norm with its ReLU writes its output here, where the step
// hands the convolution after it its input and map instead; a block's output is the add of its
// branches and the ReLU in one pass forward, the ReLU's mask then the sum of the branches' gradients
// backward, where the step's first convolution adds the shortcut's gradient as it computes its own.
//
// FLOPs are those executed: a Winograd layer (kernels::uses_winograd) multiplies 16 values per 2 × 2
// output tile and channel pair in each pass instead of the direct convolution's 36; its transforms
// are additions and are not counted. Bytes are nn::cost's: activations read and written and
// parameters read, in their storage types.
//
//   bench_layer_passes            # prints the table after the benchmarks' own lines
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "baseline.hpp"
#include "training_step.hpp"
#include "tessera/config.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

namespace {

using namespace tessera;

constexpr std::size_t batch = 32, classes = 10;

/// GB/s of c = a + b over float arrays of `bytes` in all, one thread: the streaming speed a pass
/// over that much data can hope for (in cache when it fits).
double stream_gbs(double bytes) {
    const std::size_t n = std::max<std::size_t>(1024, static_cast<std::size_t>(bytes / 12.0));
    std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
    const double s = bench::seconds_per_call([&] {
        for (std::size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
        benchmark::DoNotOptimize(c.data());
    }, 0.05);
    return 12.0 * static_cast<double>(n) / s / 1e9;
}

/// Median seconds of f() over 15 calls, each after writing 64 MiB elsewhere: the call's data no longer
/// in L1 or L2 (but in a last-level cache larger than that, where there is one), as a pass of the
/// step mostly finds the activations other passes wrote long before.
template <class F>
double seconds_out_of_l2(F&& f) {
    static std::vector<unsigned char> elsewhere(std::size_t{64} << 20);
    std::vector<double> s;
    for (int i = 0; i < 15; ++i) {
        for (std::size_t j = 0; j < elsewhere.size(); j += 64) elsewhere[j] = static_cast<unsigned char>(elsewhere[j] + 1);
        benchmark::ClobberMemory();
        const auto t0 = std::chrono::steady_clock::now();
        f();
        s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
    return s[s.size() / 2];
}

struct row {
    std::string precision, layer;
    std::size_t count;
    double forward_s, backward_s, forward_bound_s, backward_bound_s;
    bool forward_compute_bound, backward_compute_bound;
    double forward_cold_s, backward_cold_s;  // out of L2 (seconds_out_of_l2)
};
std::vector<row>& table() {
    static std::vector<row> rows;
    return rows;
}
struct step_times {
    std::string precision;
    double step_s, forward_s, backward_s, update_s;  // update: the optimiser's step and zeroing the gradients
};
std::vector<step_times>& steps() {
    static std::vector<step_times> s;
    return s;
}

template <class L>
double executed_flops(const L&, const tensor::shape&, double model_flops) {
    return model_flops;
}
template <nn::Numeric P>
double executed_flops(const nn::conv2d<P>& layer, const tensor::shape& in, double model_flops) {
    return model_flops * bench::executed_share(in, layer.out_channels(), layer.geometry());
}

/// Times one layer's forward and backward passes on an input of shape `in`, with the bound each could reach.
template <class L>
void profile(benchmark::State& state, const std::string& precision, const std::string& name, L layer,
             tensor::shape in, std::size_t count, bool want_dx = true) {
    using P = typename L::precision;
    using T = typename P::data_type;
    auto x = tensor::make_nhwc<T>(in);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (auto& v : x) v = T(normal(rng));
    const tensor::shape out = layer.output_shape(in);
    auto dy = tensor::make_nhwc<T>(out);
    for (auto& v : dy) v = T(0.01f * normal(rng));
    kernels::thread_pool pool(1);
    const nn::context ctx{.mode = nn::mode::train, .threads = 1, .pool = &pool};
    typename L::state st;
    double forward = 0, backward = 0, forward_cold = 0, backward_cold = 0;
    for (auto _ : state) {
        forward = bench::seconds_per_call([&] { benchmark::DoNotOptimize(layer.forward(x, st, ctx).data()); }, 0.1);
        backward = bench::seconds_per_call([&] { benchmark::DoNotOptimize(layer.backward(dy, st, ctx, want_dx).data()); }, 0.1);
        forward_cold = seconds_out_of_l2([&] { benchmark::DoNotOptimize(layer.forward(x, st, ctx).data()); });
        backward_cold = seconds_out_of_l2([&] { benchmark::DoNotOptimize(layer.backward(dy, st, ctx, want_dx).data()); });
    }
    const nn::cost c = layer.cost(in);
    const double peak = bench::fp32_peak_gflops() * 1e9;
    const double f_flops = executed_flops(layer, in, c.forward_flops), b_flops = executed_flops(layer, in, c.backward_flops);
    const double f_mem = c.forward_bytes / (stream_gbs(c.forward_bytes) * 1e9),
                 b_mem = c.backward_bytes / (stream_gbs(c.backward_bytes) * 1e9);
    const double f_fma = f_flops / peak, b_fma = b_flops / peak;
    table().push_back({precision, name, count, forward, backward, std::max(f_fma, f_mem), std::max(b_fma, b_mem),
                       f_fma >= f_mem, b_fma >= b_mem, forward_cold, backward_cold});
    state.counters["forward_ms"] = forward * 1e3;
    state.counters["backward_ms"] = backward * 1e3;
    state.counters["forward_of_bound"] = std::max(f_fma, f_mem) / forward;
    state.counters["backward_of_bound"] = std::max(b_fma, b_mem) / backward;
    state.counters["forward_out_of_l2_ms"] = forward_cold * 1e3;
    state.counters["backward_out_of_l2_ms"] = backward_cold * 1e3;
}

/// A residual block's output stage as nn::residual runs it, as a layer of its own (the other branch's
/// output and input gradient are copies of the first call's x and dy, tensors of their own):
/// forward max(x + shortcut, 0) in one pass; backward the ReLU's mask into the gradient of the sum,
/// then the sum of the two branches' input gradients.
template <nn::Numeric P>
struct block_output {
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        nn::activation<P> output, grad_sum, grad_input;
    };
    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const { return s; }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {  // forward reads 2, writes 1; backward 3 and 3
        const double n = static_cast<double>(s.size());
        return {n, 2 * n, nn::detail::bytes_of(3 * s.size(), sizeof(T)), nn::detail::bytes_of(6 * s.size(), sizeof(T))};
    }
    const nn::activation<P>& forward(const nn::activation<P>& x, state& st, const nn::context& ctx) {
        if (m_shortcut.size() != x.size()) m_shortcut = x;
        nn::detail::ensure_shape(st.output, tensor::shape_of(x));
        nn::detail::add<C, true>(x.data(), m_shortcut.data(), st.output.data(), x.size(), ctx.parallel());
        return st.output;
    }
    const nn::activation<P>& backward(const nn::activation<P>& dy, state& st, const nn::context& ctx, bool) {
        if (m_shortcut_grad.size() != dy.size()) m_shortcut_grad = dy;
        nn::detail::ensure_shape(st.grad_sum, tensor::shape_of(dy));
        nn::detail::ensure_shape(st.grad_input, tensor::shape_of(dy));
        kernels::relu_backward(st.output.data(), dy.data(), dy.size(), st.grad_sum.data(), m_ws, ctx.parallel());
        nn::detail::add<C>(st.grad_sum.data(), m_shortcut_grad.data(), st.grad_input.data(), dy.size(), ctx.parallel());
        return st.grad_input;
    }

private:
    nn::activation<P> m_shortcut, m_shortcut_grad;
    kernels::workspace<C> m_ws;
};

template <nn::Numeric P>
void step(benchmark::State& state, const std::string& precision) {
    bench::training_step step(nn::resnet<nn::basic_block<P, nn::projection_shortcut>, nn::cifar_stem<P>, 3, 3, 3>(1, classes),
                              {batch, 28, 28, 1}, 1);
    double s = 0, forward = 0, backward = 0, update = 0;
    for (auto _ : state) {
        s = bench::seconds_per_call([&] { step(); }, 1.0);
        // The same step in its three parts, timed apart over as many steps.
        constexpr int parts_steps = 20;
        for (int i = 0; i < parts_steps; ++i) {
            const auto t = step.timed();
            forward += t.forward / parts_steps;
            backward += t.backward / parts_steps;
            update += t.update / parts_steps;
        }
    }
    steps().push_back({precision, s, forward, backward, update});
    state.counters["step_ms"] = s * 1e3;
    state.counters["img_per_s"] = static_cast<double>(batch) / s;
}

/// The layers of ResNet-20 (projection shortcuts, 1×28×28, batch 32) by shape, with how often a step runs each.
template <nn::Numeric P>
void register_network(const std::string& precision) {
    using conv = nn::conv2d<P>;
    const auto reg = [&](const std::string& name, auto make, tensor::shape in, std::size_t count, bool want_dx = true) {
        benchmark::RegisterBenchmark(("passes/" + precision + "/" + name).c_str(),
                                     [=](benchmark::State& st) { profile(st, precision, name, make(), in, count, want_dx); })
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
    };
    const kernels::window k3{3, 3, 1, 1}, k3s2{3, 3, 2, 1}, k1s2{1, 1, 2, 0};
    reg("stem conv 1>16 28x28", [=] { return conv(1, 16, k3); }, {batch, 28, 28, 1}, 1, false);
    reg("conv 16>16 28x28", [=] { return conv(16, 16, k3); }, {batch, 28, 28, 16}, 6);
    reg("conv 16>32 s2 28x28", [=] { return conv(16, 32, k3s2); }, {batch, 28, 28, 16}, 1);
    reg("conv 1x1 16>32 s2 (shortcut)", [=] { return conv(16, 32, k1s2); }, {batch, 28, 28, 16}, 1);
    reg("conv 32>32 14x14", [=] { return conv(32, 32, k3); }, {batch, 14, 14, 32}, 5);
    reg("conv 32>64 s2 14x14", [=] { return conv(32, 64, k3s2); }, {batch, 14, 14, 32}, 1);
    reg("conv 1x1 32>64 s2 (shortcut)", [=] { return conv(32, 64, k1s2); }, {batch, 14, 14, 32}, 1);
    reg("conv 64>64 7x7", [=] { return conv(64, 64, k3); }, {batch, 7, 7, 64}, 5);
    reg("bn+relu 16 28x28", [] { return nn::batch_norm_relu<P>(16); }, {batch, 28, 28, 16}, 4);
    reg("bn 16 28x28", [] { return nn::batch_norm<P>(16); }, {batch, 28, 28, 16}, 3);
    reg("bn+relu 32 14x14", [] { return nn::batch_norm_relu<P>(32); }, {batch, 14, 14, 32}, 3);
    reg("bn 32 14x14", [] { return nn::batch_norm<P>(32); }, {batch, 14, 14, 32}, 4);
    reg("bn+relu 64 7x7", [] { return nn::batch_norm_relu<P>(64); }, {batch, 7, 7, 64}, 3);
    reg("bn 64 7x7", [] { return nn::batch_norm<P>(64); }, {batch, 7, 7, 64}, 4);
    // Each block's output: the add of its branches and the ReLU after it.
    reg("add+relu 16 28x28 (block output)", [] { return block_output<P>(); }, {batch, 28, 28, 16}, 3);
    reg("add+relu 32 14x14 (block output)", [] { return block_output<P>(); }, {batch, 14, 14, 32}, 3);
    reg("add+relu 64 7x7 (block output)", [] { return block_output<P>(); }, {batch, 7, 7, 64}, 3);
    benchmark::RegisterBenchmark(("step/" + precision).c_str(), [=](benchmark::State& st) { step<P>(st, precision); })
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
}

void print_table() {
    std::printf("\nfp32 FMA peak of one core: %.1f GFLOP/s. 'of bound': the time the pass could take (its executed FLOPs at\n"
                "the peak, or its bytes at a streaming add's speed over as many bytes, whichever is longer) over its time.\n",
                bench::fp32_peak_gflops());
    for (const auto& [precision, step_s, forward_s, backward_s, update_s] : steps()) {
        double layers_forward = 0, layers_backward = 0, cold_forward = 0, cold_backward = 0;
        for (const auto& r : table())
            if (r.precision == precision) {
                layers_forward += static_cast<double>(r.count) * r.forward_s;
                layers_backward += static_cast<double>(r.count) * r.backward_s;
                cold_forward += static_cast<double>(r.count) * r.forward_cold_s;
                cold_backward += static_cast<double>(r.count) * r.backward_cold_s;
            }
        std::printf("\n%s: whole step %.2f ms (%.0f img/s): forward %.2f ms (its layers alone %.2f, out of L2 %.2f), "
                    "backward %.2f ms (its layers alone %.2f, out of L2 %.2f), update %.2f ms\n",
                    precision.c_str(), step_s * 1e3, batch / step_s, forward_s * 1e3, layers_forward * 1e3,
                    cold_forward * 1e3, backward_s * 1e3, layers_backward * 1e3, cold_backward * 1e3, update_s * 1e3);
        std::printf("%-32s %5s %10s %10s %7s %14s %14s %12s %12s\n", "layer", "count", "fwd ms", "bwd ms", "share",
                    "fwd of bound", "bwd of bound", "fwd out L2", "bwd out L2");
        double total = 0;
        for (const auto& r : table()) {
            if (r.precision != precision) continue;
            const double t = static_cast<double>(r.count) * (r.forward_s + r.backward_s);
            total += t;
            std::printf("%-32s %5zu %10.3f %10.3f %6.1f%% %8.2f (%s) %8.2f (%s) %12.3f %12.3f\n", r.layer.c_str(), r.count,
                        r.forward_s * 1e3, r.backward_s * 1e3, 100.0 * t / step_s, r.forward_bound_s / r.forward_s,
                        r.forward_compute_bound ? "FMA" : "mem", r.backward_bound_s / r.backward_s,
                        r.backward_compute_bound ? "FMA" : "mem", r.forward_cold_s * 1e3, r.backward_cold_s * 1e3);
        }
        std::printf("%-32s %5s %21s %6.1f%%\n", "the rest of the step", "", "", 100.0 * (step_s - total) / step_s);
    }
}

}  // namespace

int main(int argc, char** argv) {
    register_network<config::fp32>("fp32");
    register_network<config::half>("16.16");
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    print_table();
    return 0;
}
