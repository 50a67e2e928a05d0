// The four host figures of emulator::host_spec measured for tessera's own C++ loop on this machine:
// the source of emulator::native_host() ("--host native"), and the way to describe your own host
// (write the printed figures into a JSON file for tessera-train --host FILE.json).
//   cmake --build build/bench --target bench_host_figures && build/bench/benchmarks/exec/bench_host_figures
// Each figure is a counter of its benchmark, in seconds:
//   float_seconds_per_value      the loader (one worker, in the loop) reads, flips and normalises a value to float
//   eight_bit_seconds_per_value  the same, kept 8-bit (8-bit I/O: the device normalises)
//   feed_seconds_per_byte        the session's feed hands a byte of a combined batch to the device
//   dispatch_seconds             one host call of a one-layer model (D = 1, G = 1): the loop's fixed cost
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "tessera/tessera.hpp"

namespace ts = tessera;
namespace cfg = tessera::config;

namespace {

// CIFAR-10-sized images already in memory, as a loader reads decoded images from a cache.
const ts::data::in_memory_dataset<std::uint8_t>& images() {
    static const auto ds = [] {
        constexpr std::size_t n = 4096, values = 3 * 32 * 32;
        std::mt19937 rng(7);
        std::vector<std::uint8_t> pixels(n * values);
        for (auto& p : pixels) p = static_cast<std::uint8_t>(rng());
        std::vector<ts::data::label_t> labels(n);
        for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<ts::data::label_t>(i % 10);
        return ts::data::in_memory_dataset<std::uint8_t>({3, 32, 32}, 10, std::move(pixels), std::move(labels), "cifar-like");
    }();
    return ds;
}

template <class Io>
void loader_seconds_per_value(benchmark::State& state, const char* counter) {
    ts::data::loader_options o{.shuffle = true, .seed = 1, .num_workers = 0, .mode = ts::data::loader_mode::sync,
                               .augment = ts::data::horizontal_flip{}};
    if constexpr (std::is_same_v<Io, float>) o.normalize = {.mean = {0.49f, 0.48f, 0.45f}, .stddev = {0.25f, 0.24f, 0.26f}};
    ts::data::data_loader<ts::data::in_memory_dataset<std::uint8_t>, Io> loader(images(), 64, o);
    double values = 0;
    for (auto _ : state)
        for (auto& batch : loader) {
            benchmark::DoNotOptimize(batch.images().data());
            values += double(batch.valid() * images().shape().size());
        }
    state.counters[counter] = benchmark::Counter(values, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.counters["values_per_iteration"] = values / double(state.iterations());
}
void BM_float_seconds_per_value(benchmark::State& s) { loader_seconds_per_value<float>(s, "float_seconds_per_value"); }
void BM_eight_bit_seconds_per_value(benchmark::State& s) {
    loader_seconds_per_value<std::uint8_t>(s, "eight_bit_seconds_per_value");
}

using one_ipu = cfg::config<cfg::fp32, cfg::eight_bit_io, cfg::micro_batch<cfg::dynamic>>;

// A combined batch of 8-bit images through the feed a session calls, micro-batch by micro-batch. The
// loader assembles the batches before the timed loop: its work is float/eight_bit_seconds_per_value's,
// and emulator::native_host() adds the two figures.
void BM_feed_seconds_per_byte(benchmark::State& state) {
    ts::data::data_loader<ts::data::in_memory_dataset<std::uint8_t>, std::uint8_t> loader(images(), 64, {});
    std::vector<ts::data::batch_lease<std::uint8_t>> batches;
    for (auto& batch : loader) batches.push_back(std::move(batch));
    const auto b = cfg::make_batching<one_ipu>({.micro_batch = 64});
    double bytes = 0;
    for (auto _ : state)
        for (const auto& batch : batches) {
            const ts::exec::batch_feed<cfg::fp32, std::uint8_t> feed(batch, b);
            auto xy = feed(0, 0, 0);
            benchmark::DoNotOptimize(&xy);
            bytes += double(batch.size() * images().shape().size());
        }
    state.counters["feed_seconds_per_byte"] = benchmark::Counter(bytes, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// One host call of the smallest model: the session wakes its IPU and feeder threads, runs, collects.
void BM_dispatch_seconds(benchmark::State& state) {
    auto net = ts::nn::sequential(ts::nn::linear<cfg::fp32>(4, 2)).named({"fc"});
    auto run = ts::exec::training_model<one_ipu>(net, ts::optim::sgd({.learning_rate = 0.01}), {1, 1, 1, 4},
                                                 {.micro_batch = 1}, {.record_trace = false});
    ts::nn::activation<cfg::fp32> x({1, 1, 1, 4});
    auto feed = [&](std::size_t, std::size_t, std::size_t) {
        return std::pair{ts::exec::host_input<cfg::fp32>(x), ts::exec::class_labels(std::vector<std::int32_t>{0})};
    };
    for (auto _ : state) benchmark::DoNotOptimize(run(feed));
    state.counters["dispatch_seconds"] = benchmark::Counter(double(state.iterations()),
                                                            benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_float_seconds_per_value)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_eight_bit_seconds_per_value)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_feed_seconds_per_byte)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_dispatch_seconds)->Unit(benchmark::kMicrosecond)->UseRealTime();
