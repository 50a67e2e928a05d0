// Loader throughput: sync vs async vs worker counts, float vs 8-bit I/O (bytes and samples per
// second), and how much loading time async hides behind a simulated device consuming batches at a
// fixed rate (reported as a ratio measured in the same run).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "tessera/data.hpp"

namespace data = tessera::data;
using clock_type = std::chrono::steady_clock;

namespace {

// CIFAR-10-sized synthetic images: the per-sample work is real (generation, crop, flip, normalisation).
const data::synthetic_images& cifar_like() {
    static const data::synthetic_images ds(4096, {3, 32, 32}, 10, 42);
    return ds;
}

data::loader_options options_for(data::loader_mode mode, std::size_t workers) {
    return {.shuffle = true,
            .seed = 1,
            .num_workers = workers,
            .mode = mode,
            .prefetch_depth = 4,
            .normalize = {.mean = {0.49f, 0.48f, 0.45f}, .stddev = {0.25f, 0.24f, 0.26f}},
            .augment = data::random_crop{4} | data::horizontal_flip{}};
}

template <class Io>
void run_epochs(benchmark::State& state, data::loader_mode mode) {
    const auto workers = static_cast<std::size_t>(state.range(0));
    data::data_loader<data::synthetic_images, Io> loader(cifar_like(), 64, options_for(mode, workers));
    std::size_t samples = 0;
    for (auto _ : state)
        for (auto& batch : loader) {
            benchmark::DoNotOptimize(batch.images().data());
            samples += batch.valid();
        }
    const double bytes_per_sample = static_cast<double>(cifar_like().shape().size() * sizeof(Io));
    state.SetItemsProcessed(static_cast<std::int64_t>(samples));
    state.SetBytesProcessed(static_cast<std::int64_t>(static_cast<double>(samples) * bytes_per_sample));
    state.counters["bytes_per_sample"] = bytes_per_sample;
}

void BM_sync_float(benchmark::State& s) { run_epochs<float>(s, data::loader_mode::sync); }
void BM_async_float(benchmark::State& s) { run_epochs<float>(s, data::loader_mode::async); }
void BM_sync_uint8(benchmark::State& s) { run_epochs<std::uint8_t>(s, data::loader_mode::sync); }
void BM_async_uint8(benchmark::State& s) { run_epochs<std::uint8_t>(s, data::loader_mode::async); }

/// 8-bit I/O end to end: bytes over the (host) loader, then the device-side normalisation into half.
void BM_async_uint8_then_device_normalize(benchmark::State& state) {
    const auto workers = static_cast<std::size_t>(state.range(0));
    const auto opts = options_for(data::loader_mode::async, workers);
    data::data_loader<data::synthetic_images, std::uint8_t> loader(cifar_like(), 64, opts);
    std::vector<tessera::half> device(64 * cifar_like().shape().size());
    std::size_t samples = 0;
    for (auto _ : state)
        for (auto& batch : loader) {
            data::normalize<std::uint8_t, tessera::half>(batch.images(), batch.shape(), opts.normalize, device);
            benchmark::DoNotOptimize(device.data());
            samples += batch.valid();
        }
    state.SetItemsProcessed(static_cast<std::int64_t>(samples));
    state.SetBytesProcessed(static_cast<std::int64_t>(samples * cifar_like().shape().size()));
    state.counters["bytes_per_sample"] = static_cast<double>(cifar_like().shape().size());
}

BENCHMARK(BM_sync_float)->Arg(0)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_async_float)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sync_uint8)->Arg(0)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_async_uint8)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_async_uint8_then_device_normalize)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

/// One epoch of `loader` feeding a simulated device that consumes one batch per `step` at a fixed
/// rate (it sleeps, so it does not compete for the CPU the loader uses; deadlines, so sleep overshoot
/// does not accumulate). Returns the epoch's wall time and the time the caller waited for batches.
struct epoch_timing {
    double total = 0;    // seconds, the whole epoch
    double waiting = 0;  // seconds the caller spent waiting for the loader: loading not hidden
};

/// The device of a step: `ipus` threads computing (spinning) for `step`, as the emulator's IPU
/// threads do on this machine's cores, while the caller blocks as a session call does; 0 IPUs: the
/// device sleeps (it takes no core from the loader).
inline void device_step(clock_type::time_point until, std::size_t ipus) {
    if (ipus == 0) {
        std::this_thread::sleep_until(until);
        return;
    }
    const auto spin = [until] {
        float x = 1.0f;
        while (clock_type::now() < until)
            for (int k = 0; k < 256; ++k) x = x * 0.999f + 0.001f;
        benchmark::DoNotOptimize(x);
    };
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < ipus; ++i) threads.emplace_back(spin);
}

template <class Loader>
epoch_timing epoch_with_device(Loader& loader, clock_type::duration step, std::size_t ipus = 0) {
    epoch_timing t;
    const auto start = clock_type::now();
    auto device_free = start;
    auto range = loader.next_epoch();
    for (;;) {
        const auto asked = clock_type::now();
        auto batch = range.next();
        const auto got = clock_type::now();
        t.waiting += std::chrono::duration<double>(got - asked).count();
        if (!batch) break;
        benchmark::DoNotOptimize(batch->images().data());
        device_free = std::max(device_free, got) + step;  // the device works on this batch until then
        device_step(device_free, ipus);
    }
    t.total = std::chrono::duration<double>(clock_type::now() - start).count();
    return t;
}

/// The hiding measurement, per iteration and in the same run:
///   load    = the caller's waiting time in a sync epoch with nothing else to do (the loading time)
///   step    = (load / batches) / ratio: loading a batch takes `ratio` of the device's time per batch
///   sync    = epoch with the sync loader and the device: the caller waits for every batch
///   async   = epoch with the async loader (`workers` workers, depth 4) and the device
///   hidden  = 1 - async waiting / sync waiting: the share of the loading time taken off the critical
///             path (the first batch of an epoch cannot be hidden: at most 1 - 1/batches)
///   ipus    = the device's threads: 0 sleeps; 2 compute on this machine's 2 cores, as the emulator's
///             IPU threads do, so the async workers load on cores the device also wants
void BM_async_hides_loading(benchmark::State& state) {
    const double ratio = static_cast<double>(state.range(0)) / 100.0;
    const auto workers = static_cast<std::size_t>(state.range(1));
    const auto ipus = static_cast<std::size_t>(state.range(2));
    const data::synthetic_images ds(64 * 64, {3, 32, 32}, 10, 7);  // 64 batches of 64
    auto opts = options_for(data::loader_mode::sync, 0);
    data::data_loader<data::synthetic_images, float> sync_loader(ds, 64, opts);
    opts.mode = data::loader_mode::async;
    opts.num_workers = workers;
    data::data_loader<data::synthetic_images, float> async_loader(ds, 64, opts);
    const double batches = static_cast<double>(sync_loader.batches_per_epoch());

    epoch_timing load, sync, async, sync_sum, async_sum;
    double device = 0, device_sum = 0;
    for (auto _ : state) {
        load = epoch_with_device(sync_loader, clock_type::duration::zero());
        const auto step = std::chrono::duration_cast<clock_type::duration>(
            std::chrono::duration<double>(load.waiting / batches / ratio));
        device = std::chrono::duration<double>(step).count() * batches;
        sync = epoch_with_device(sync_loader, step, ipus);
        async = epoch_with_device(async_loader, step, ipus);
        state.SetIterationTime(async.total);
        sync_sum.total += sync.total, sync_sum.waiting += sync.waiting;
        async_sum.total += async.total, async_sum.waiting += async.waiting;
        device_sum += device;
    }
    // Sums over the iterations (one noisy epoch on a shared machine weighs less).
    state.counters["load_ms"] = load.waiting * 1e3;
    state.counters["device_ms"] = device_sum / static_cast<double>(state.iterations()) * 1e3;
    state.counters["sync_ms"] = sync_sum.total / static_cast<double>(state.iterations()) * 1e3;
    state.counters["async_ms"] = async_sum.total / static_cast<double>(state.iterations()) * 1e3;
    state.counters["sync_wait_ms"] = sync_sum.waiting / static_cast<double>(state.iterations()) * 1e3;
    state.counters["async_wait_ms"] = async_sum.waiting / static_cast<double>(state.iterations()) * 1e3;
    state.counters["hidden"] = 1.0 - async_sum.waiting / sync_sum.waiting;  // >= 0.95 expected while loading < device
    state.counters["async_over_device"] = async_sum.total / device_sum;     // 1.0: the device never waits
    // Loading time over device time as it was in the sync runs (on a shared machine it may differ from `ratio`).
    state.counters["load_over_device"] = sync_sum.waiting / device_sum;
}
// Loading at 25 %, 50 % and 80 % of the device's time per batch, with 1 and 2 workers, beside a
// sleeping device and beside two busy IPU threads.
BENCHMARK(BM_async_hides_loading)
    ->ArgsProduct({{25, 50, 80}, {1, 2}, {0, 2}})
    ->ArgNames({"load_pct", "workers", "ipus"})
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
