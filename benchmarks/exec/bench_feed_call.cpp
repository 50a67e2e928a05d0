// What the executor's type-erased feed costs: it calls every feed through a function_ref (one
// indirect call per micro-batch) so that its body is compiled once per model type. Measured here
// against calling the same feed directly, in the same run:
//  - BM_feed/direct and BM_feed/function_ref: the main job's feed (exec::batch_feed of 8-bit
//    Fashion-MNIST-sized images, micro-batch 16, G = 8, D = 4), every micro-batch of one call;
//  - BM_call/direct and BM_call/function_ref: a callable that does nothing but return its argument
//    (not inlined), so that what remains is the call itself.
// Counter: seconds_per_micro_batch (BM_call: the time per iteration is one call). The difference between the two forms of each is the
// indirect call's cost; a ResNet-20 micro-batch trains in milliseconds (bench_resnet_step).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/config/config.hpp"
#include "tessera/data/in_memory.hpp"
#include "tessera/data/make_loader.hpp"
#include "tessera/detail/function_ref.hpp"
#include "tessera/exec/batch_feed.hpp"

namespace cfg = tessera::config;
namespace data = tessera::data;
namespace exec = tessera::exec;

namespace {

using main_job = cfg::config<cfg::half, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<8>,
                             cfg::device_iterations<4>, cfg::micro_batch<16>, cfg::eight_bit_io>;
constexpr std::size_t micro_batches = 8 * 4;

data::in_memory_dataset<std::uint8_t> images(std::size_t n) {
    std::vector<std::uint8_t> pixels(n * 28 * 28);
    std::vector<data::label_t> labels(n);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 2654435761u >> 24);
    for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<data::label_t>(i % 10);
    return {{1, 28, 28}, 10, std::move(pixels), std::move(labels), "bench"};
}

void BM_feed(benchmark::State& state) {
    const bool erased = state.range(0) == 1;
    const auto set = images(4 * 16 * micro_batches);
    auto loader = data::make_data_loader<main_job>(set, {});
    const auto b = cfg::make_batching<main_job>();
    auto epoch = loader.epoch(0);
    const auto batch = epoch.next();
    const exec::batch_feed<cfg::half, std::uint8_t> feed(*batch, b, {.mean = {0.286f}, .stddev = {0.353f}});
    using result = decltype(feed(0, 0, 0));
    const tessera::detail::function_ref<result(std::size_t, std::size_t, std::size_t)> ref(feed);
    for (auto _ : state)
        for (std::size_t d = 0; d < 4; ++d)
            for (std::size_t m = 0; m < 8; ++m) {
                auto r = erased ? ref(0, d, m) : feed(0, d, m);
                benchmark::DoNotOptimize(r);
            }
    state.counters["seconds_per_micro_batch"] =
        benchmark::Counter(double(micro_batches), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.SetLabel(erased ? "function_ref" : "direct");
}

struct echo {
    [[gnu::noinline]] std::size_t operator()(std::size_t x) const { return x; }
};

void BM_call(benchmark::State& state) {
    const bool erased = state.range(0) == 1;
    const echo f;
    const tessera::detail::function_ref<std::size_t(std::size_t)> ref(f);
    std::size_t x = 0;
    for (auto _ : state) {
        x = erased ? ref(x + 1) : f(x + 1);
        benchmark::DoNotOptimize(x);
    }
    state.SetLabel(erased ? "function_ref" : "direct");
}

}  // namespace

BENCHMARK(BM_feed)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_call)->Arg(0)->Arg(1);
