// Convolution forward + backward (data and weight gradients) GFLOP/s per ResNet-20 layer shape
// and ResNet-18 layer shape (batch 32, inputs of 1×28×28 and 3×32×32, NHWC), by im2col + GEMM, by
// the automatic choice (Winograd F(4×4, 3×3) or F(2×2, 3×3) for most 3×3 stride-1 layers) and, for
// the 3×3 stride-1 layers, by each Winograd tile forced, beside OpenBLAS sgemm on the forward's im2col
// GEMM in the same run.
// GFLOPs counts the direct convolution's multiply-adds (model FLOPs) whichever algorithm ran.
#include <benchmark/benchmark.h>

#include <vector>

#include "baseline.hpp"
#include "tessera/kernels/conv.hpp"

namespace k = tessera::kernels;
using tessera::tensor::shape;

namespace {

void conv(benchmark::State& state) {
    const shape in{32, static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(0)),
                   static_cast<std::size_t>(state.range(1))};
    const std::size_t cout = static_cast<std::size_t>(state.range(2)), stride = static_cast<std::size_t>(state.range(3));
    const std::size_t threads = static_cast<std::size_t>(state.range(4));
    constexpr k::conv_algorithm algorithms[] = {k::conv_algorithm::im2col, k::conv_algorithm::automatic,
                                                k::conv_algorithm::winograd, k::conv_algorithm::winograd_4x4};
    const auto algorithm = algorithms[state.range(5)];
    const k::window g{3, 3, stride, 1};
    const shape out = g.output(in, cout);
    std::vector<float> x(in.size(), 0.5f), w(9 * in.c * cout, 0.1f), y(out.size()), dy(out.size(), 0.01f),
        dx(in.size()), dw(w.size());
    k::workspace<float> ws;
    k::thread_pool pool(threads);  // as a network runs its layers: workers kept between calls
    const k::gemm_options opt{threads, nullptr, &pool};
    for (auto _ : state) {
        k::conv2d_forward(x.data(), in, w.data(), cout, g, y.data(), ws, opt, algorithm);
        // Both gradients in one call, as nn::conv2d's backward runs them.
        k::conv2d_backward(x.data(), in, dy.data(), w.data(), cout, g, dw.data(), dx.data(), ws, opt, algorithm);
        benchmark::DoNotOptimize(dx.data());
        benchmark::DoNotOptimize(dw.data());
    }
    const double m = static_cast<double>(out.pixels()), kk = 9.0 * static_cast<double>(in.c);
    const double flops = 3 * 2 * m * static_cast<double>(cout) * kk;
    state.counters["GFLOPs"] = benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9,
                                                  benchmark::Counter::kIsRate);
    state.counters["openblas_fwd_gemm_GFLOPs"] =
        bench::openblas_gflops(static_cast<int>(m), static_cast<int>(cout), static_cast<int>(kk));
}

}  // namespace

// {input size, in channels, out channels, stride, threads}
BENCHMARK(conv)
    // algorithm: 0 im2col + GEMM, 1 automatic, 2 Winograd F(2×2, 3×3), 3 Winograd F(4×4, 3×3)
    ->ArgNames({"hw", "cin", "cout", "stride", "threads", "algorithm"})
    ->ArgsProduct({{28}, {1}, {16}, {1}, {1}, {0, 1}})     // stem
    ->ArgsProduct({{28}, {16}, {16}, {1}, {1, 2}, {0, 1, 2, 3}})  // layer1
    ->ArgsProduct({{28}, {16}, {32}, {2}, {1}, {0}})        // layer2[0].conv1
    ->ArgsProduct({{14}, {32}, {32}, {1}, {1}, {0, 1, 2, 3}})     // layer2
    ->ArgsProduct({{14}, {32}, {64}, {2}, {1}, {0}})        // layer3[0].conv1
    ->ArgsProduct({{7}, {64}, {64}, {1}, {1, 2}, {0, 1, 2, 3}})   // layer3
    // torchvision's ResNet-18 on 3×32×32 (after its stride-2 stem and max pool): wide layers, small images
    ->ArgsProduct({{8}, {64}, {64}, {1}, {1, 2}, {0, 1, 2, 3}})   // layer1
    ->ArgsProduct({{8}, {64}, {128}, {2}, {1, 2}, {0}})       // layer2[0].conv1
    ->ArgsProduct({{4}, {128}, {128}, {1}, {1, 2}, {0, 1, 2, 3}}) // layer2
    ->ArgsProduct({{4}, {128}, {256}, {2}, {1, 2}, {0}})      // layer3[0].conv1
    ->ArgsProduct({{2}, {256}, {256}, {1}, {1, 2}, {0, 1, 2, 3}}) // layer3
    ->ArgsProduct({{2}, {256}, {512}, {2}, {1, 2}, {0}})      // layer4[0].conv1
    ->ArgsProduct({{1}, {512}, {512}, {1}, {1, 2}, {0, 1}})   // layer4
    // a ResNet on 224×224 images, its layer2 (28 × 28, 128 channels) and layer3 (14 × 14, 256): where
    // F(4×4, 3×3) pays past 64 channels
    ->ArgsProduct({{28}, {128}, {128}, {1}, {1}, {1, 2, 3}})
    ->ArgsProduct({{14}, {256}, {256}, {1}, {1}, {1, 2, 3}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
