// tessera's half of bench_vs_libtorch: one process training tessera's ResNet-20 (projection
// shortcuts, 1×28×28) or ResNet-18 (torchvision's, 3×32×32), batch 32, fp32 (or 16.16: half
// weights, activations and gradients), SGD with momentum 0.9 and weight decay 5e-4, on the model
// directly (forward, loss, backward, update: what a sequential session runs per micro-batch), which
// prints "<images/s> <peak RSS MiB> <hash>", the hash of the parameters' bits after every step (two
// builds that train bit for bit alike print the same). It does not link libtorch, so its resident
// memory is tessera's.
//   tessera_step_worker --threads N [--steps K] [--model resnet20|resnet18] [--precision fp32|16.16]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <cstdint>
#include <utility>

#include "tessera/config.hpp"
#include "training_step.hpp"

namespace {

constexpr std::size_t batch = 32;

// Seconds per step of `model` on side × side × channels images over `steps` steps (after 3 warm-up
// steps), and the parameters' hash after them.
template <class Model>
std::pair<double, std::uint64_t> seconds_per_step(Model model, std::size_t side, std::size_t channels, int threads,
                                                  int steps) {
    bench::training_step<Model> step(std::move(model), {batch, side, side, channels}, static_cast<std::size_t>(threads));
    for (int i = 0; i < 3; ++i) step();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    return {seconds, step.parameter_hash()};
}

// Images per second of `model_name` in precision P, and the parameters' hash.
template <class P>
std::pair<double, std::uint64_t> images_per_second(std::string_view model_name, int threads, int steps) {
    namespace nn = tessera::nn;
    const auto [seconds, hash] =
        model_name == "resnet20"
            ? seconds_per_step(nn::resnet<nn::basic_block<P, nn::projection_shortcut>, nn::cifar_stem<P>, 3, 3, 3>(1, 10),
                               28, 1, threads, steps)
            : seconds_per_step(nn::resnet18<P>(3, 10), 32, 3, threads, steps);
    return {static_cast<double>(batch) / seconds, hash};
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 1, steps = 20;
    std::string_view model = "resnet20", precision = "fp32";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view flag = argv[i];
        if (flag == "--threads") threads = std::atoi(argv[i + 1]);
        else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
        else if (flag == "--model") model = argv[i + 1];
        else if (flag == "--precision") precision = argv[i + 1];
    }
    if (threads < 1 || steps < 1 || (model != "resnet20" && model != "resnet18") ||
        (precision != "fp32" && precision != "16.16")) {
        std::fprintf(stderr,
                     "usage: tessera_step_worker --threads N [--steps K] [--model resnet20|resnet18] [--precision fp32|16.16]\n");
        return 2;
    }
    const auto [images, hash] = precision == "fp32" ? images_per_second<tessera::config::fp32>(model, threads, steps)
                                                     : images_per_second<tessera::config::half>(model, threads, steps);
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    std::printf("%.3f %.1f %016llx\n", images, static_cast<double>(usage.ru_maxrss) / 1024.0,
                static_cast<unsigned long long>(hash));
    return 0;
}
