// What a what-if costs: dry runs of one ImageNet epoch (1,281,167 images) of ResNet-50 at 224 × 224
// over 16 IPUs — 16 replicas of one IPU (as MLPerf ran it), or 4 replicas of a 4-stage pipeline —
// reported with the modelled images/s (IPUs alone, and with the host's loaders: 8 processes of 14
// workers sharing each batch, as Graphcore's POD16 benchmark command starts them; the host costs are
// the tutorials' Python loader's, so the host decides).
#include <benchmark/benchmark.h>

#include <tessera/tessera.hpp>

namespace {

namespace ts = tessera;
namespace cfg = tessera::config;

constexpr std::size_t imagenet = 1'281'167;

template <class C>
void dry_run_epoch(benchmark::State& state, std::size_t micro_batch, std::size_t G) {
    const ts::nn::resnet50<cfg::half> net(3, 1000);
    // Recomputation checkpoints at every unit, as MLPerf's run fits a GC200 (the memory plan checks it).
    const ts::exec::session_options settings{.record_trace = false,
                                             .recompute_checkpoints = ts::exec::checkpoint_every_unit(net),
                                             .loading = {.async = true, .rebatched = true, .workers = 14, .instances = 8}};
    for (auto _ : state) {
        const auto e = ts::exec::dry_run<C>(net, ts::optim::sgd({.momentum = 0.9}), {1, 224, 224, 3},
                                            {.micro_batch = micro_batch, .gradient_accumulation = G}, imagenet, settings, 1);
        benchmark::DoNotOptimize(e.seconds);
        state.counters["modelled_images_per_second"] = e.samples_per_second();
        state.counters["modelled_ipu_images_per_second"] =
            double(e.plan.program.request.micro_batches * micro_batch * C::replicas) / e.call_device_seconds;
        state.counters["modelled_epoch_seconds"] = e.seconds;
    }
}

void resnet50_16_replicas(benchmark::State& state) {
    using c = cfg::config<cfg::half, cfg::replication<16>, cfg::instances<8>, cfg::eight_bit_io,
                          cfg::gradient_accumulation<cfg::dynamic>, cfg::micro_batch<cfg::dynamic>>;
    dry_run_epoch<c>(state, 20, 10);  // MLPerf Training v1.1 on IPU-POD16: micro-batch 20, G = 10
}
void resnet50_4_replicas_of_4_stages(benchmark::State& state) {
    using c = cfg::config<cfg::half, cfg::pipelined<cfg::one_f_one_b, 4>, cfg::replication<4>, cfg::instances<4>,
                          cfg::eight_bit_io, cfg::gradient_accumulation<cfg::dynamic>, cfg::micro_batch<cfg::dynamic>>;
    dry_run_epoch<c>(state, 16, 256);  // Graphcore's 2020 POD16 configuration (TF1, 16.32): ~16,000 images/s
}

}  // namespace

BENCHMARK(resnet50_16_replicas)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK(resnet50_4_replicas_of_4_stages)->Unit(benchmark::kSecond)->Iterations(1);
