// A dry run: what ResNet-50 on ImageNet would do on 16 IPUs (4 replicas of a 4-stage 1F1B pipeline,
// 16.16) — the modelled epoch, each IPU's memory against its capacity, where the time goes — without
// training or reading an image. tessera-train --dry-run and tessera-plan answer the same way.
#include <tessera/tessera.hpp>

#include <cstdio>

int main() {
    namespace cfg = tessera::config;
    namespace exec = tessera::exec;
    using c = cfg::config<cfg::half::with<cfg::dynamic_loss_scaling<>>, cfg::pipelined<cfg::one_f_one_b, 4>,
                          cfg::gradient_accumulation<16>, cfg::device_iterations<4>, cfg::replication<4>, cfg::eight_bit_io>;
    const tessera::nn::resnet50<cfg::half> net(/*in_channels=*/3, /*classes=*/1000);
    const tessera::optim::sgd sgd({.learning_rate = 0.1, .momentum = 0.9});
    // Micro-batch 8, each stage recomputing its forward pass in its backward; the host is tessera's own
    // C++ loader; memory over the budget is reported (exec::over_budget::throws refuses it).
    exec::session_options settings{.host = tessera::emulator::native_host()};
    settings.recompute.assign(4, true);
    const auto e = exec::dry_run<c>(net, sgd, {1, 224, 224, 3}, {.micro_batch = 8}, /*images=*/1'281'167, settings,
                                    /*epochs=*/2, exec::over_budget::reported);
    std::printf("modelled epoch: %.1f s, %.0f images/s on 16 IPUs\n", e.seconds, e.samples_per_second());
    for (const auto& ipu : e.memory.ipus)
        std::printf("IPU %zu: %.0f MiB of %.0f MiB\n", ipu.ipu, double(ipu.on_chip()) / (1 << 20), double(ipu.budget) / (1 << 20));
    std::printf("%s; the IPUs wait %.1f s for the host; bubble %.0f%%; bottleneck: %s\n",
                e.fits ? "fits" : "does not fit", e.host_wait_seconds, 100 * e.device_breakdown.bubble_fraction,
                std::string(exec::bottleneck_of(e.device_breakdown, e.host_wait_seconds)).c_str());
}
// modelled epoch: 171.2 s, 7479 images/s on 16 IPUs
// IPU 0: 658 MiB of 897 MiB
// IPU 1: 327 MiB of 897 MiB
// IPU 2: 201 MiB of 897 MiB
// IPU 3: 322 MiB of 897 MiB
// fits; the IPUs wait 35.5 s for the host; bubble 46%; bottleneck: bubble
