// The work bench_dist times: ResNet-20 training (fp32, one IPU per replica, 2 replicas in all) on
// CIFAR-sized synthetic images loaded the host-heavy way — float I/O, normalised and augmented
// (random crop, flip) on the host by a synchronous loader — as P processes × 2/P replicas:
//   mpirun -np P dist_worker CALLS
// Rank 0 prints "images_per_second X": all ranks' images over the wall time of CALLS calls after a
// first call (compilation and warm-up), measured between barriers.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessera/config.hpp"
#include "tessera/data.hpp"
#include "tessera/dist.hpp"
#include "tessera/exec.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

using namespace tessera;
namespace cfg = tessera::config;

int main(int argc, char** argv) {
    const std::size_t calls = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 8;
    dist::environment env(&argc, &argv);
    const auto world = env.world();
    const std::size_t processes = world.size();
    using c = cfg::dispatched_config<cfg::fp32, cfg::single, cfg::float_io>;
    const config::options counts{.micro_batch = 8, .gradient_accumulation = 2, .device_iterations = 1,
                                 .replicas = 2, .instances = processes, .input_group = 1};
    exec::session_options settings{.record_trace = false};
    if (processes > 1) settings.across = dist::gradient_reduction(world, 1);
    auto session = exec::training_model<c>(nn::resnet20<cfg::fp32>(3, 10), optim::sgd({.learning_rate = 0.05}),
                                           {1, 32, 32, 3}, counts, settings);
    const data::synthetic_images images(4096, {3, 32, 32}, 10, 42);
    auto loader = data::make_data_loader<c>(
        images, counts,
        {.shuffle = true, .seed = 1, .rank = world.rank(),
         .normalize = {.mean = {0.49f, 0.48f, 0.45f}, .stddev = {0.25f, 0.24f, 0.26f}},
         .augment = data::random_crop{4} | data::horizontal_flip{}});
    auto epoch = loader.begin();
    const auto step = [&] {
        auto& batch = *epoch;
        (void)session(exec::batch_feed<cfg::fp32, float>(batch, session.batching()));
        ++epoch;
    };
    step();  // compilation, first touches
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < calls; ++i) step();
    world.barrier();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (world.rank() == 0)
        std::printf("images_per_second %.3f\n", double(calls * session.batching().combined_batch() * processes) / seconds);
    return 0;
}
