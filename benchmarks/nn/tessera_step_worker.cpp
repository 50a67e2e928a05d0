// tessera's half of bench_vs_libtorch: one process training tessera's ResNet-20 (projection
// shortcuts, 1×28×28) or ResNet-18 (torchvision's, 3×32×32), batch 32, SGD with momentum 0.9 and
// weight decay 5e-4, or a GPT (GPT-2's pre-LN blocks: d = 256, 4 layers, 4 heads, sequence 256,
// vocabulary 256, the LM head tied to the token table, dropout 0), batch 16, AdamW (lr 1e-3,
// weight decay 0.01), fp32 (or 16.16: half weights, activations and gradients), on the model
// directly (forward, loss, backward, update: what a sequential session runs per micro-batch). It
// prints "<images/s or tokens/s> <peak RSS MiB> <hash>", the hash of the parameters' bits after
// every step (two builds that train bit for bit alike print the same); with --check (GPT only) the
// parameter count and the loss of each of the steps on the same batch instead. It does not link
// libtorch, so its resident memory is tessera's.
//   tessera_step_worker --threads N [--steps K] [--model resnet20|resnet18|gpt] [--precision fp32|16.16]
//   tessera_step_worker --model gpt --check 1 [--steps K]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <cstdint>
#include <utility>

#include "tessera/config.hpp"
#include "token_step.hpp"
#include "training_step.hpp"

namespace {

constexpr std::size_t batch = 32;

// The GPT of bench_vs_libtorch (its libtorch twin: gpt_shape there).
constexpr std::size_t gpt_batch = 16, gpt_length = 256;
tessera::nn::transformer_spec gpt_spec() {
    auto s = tessera::nn::gpt2_spec("tiny");
    s.width = 256, s.layers = 4, s.heads = 4, s.vocab = 256, s.positions = gpt_length, s.dropout = 0;
    return s;
}
constexpr tessera::optim::adamw_options gpt_adamw{.learning_rate = 1e-3, .weight_decay = 0.01};

// Seconds per step of `step` over `steps` steps (after 3 warm-up steps), and the parameters' hash after them.
template <class Step>
std::pair<double, std::uint64_t> seconds_per_step(Step& step, int steps) {
    for (int i = 0; i < 3; ++i) step();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    return {seconds, step.parameter_hash()};
}

// Samples per second of `model` on side × side × channels images, and the parameters' hash.
template <class Model>
std::pair<double, std::uint64_t> images_per_second(Model model, std::size_t side, std::size_t channels, int threads,
                                                   int steps) {
    bench::training_step<Model> step(std::move(model), {batch, side, side, channels}, static_cast<std::size_t>(threads));
    const auto [seconds, hash] = seconds_per_step(step, steps);
    return {static_cast<double>(batch) / seconds, hash};
}

// Images (ResNets) or tokens (GPT) per second of `model_name` in precision P, and the parameters' hash.
template <class P>
std::pair<double, std::uint64_t> per_second(std::string_view model_name, int threads, int steps) {
    namespace nn = tessera::nn;
    if (model_name == "gpt") {
        bench::token_step step(nn::make_gpt2<P>(gpt_spec()), gpt_batch, gpt_length, static_cast<std::size_t>(threads),
                               gpt_adamw);
        const auto [seconds, hash] = seconds_per_step(step, steps);
        return {static_cast<double>(gpt_batch * gpt_length) / seconds, hash};
    }
    return model_name == "resnet20"
               ? images_per_second(nn::resnet<nn::basic_block<P, nn::projection_shortcut>, nn::cifar_stem<P>, 3, 3, 3>(1, 10),
                                   28, 1, threads, steps)
               : images_per_second(nn::resnet18<P>(3, 10), 32, 3, threads, steps);
}

// --check: the GPT's parameter count and its loss over `steps` steps on the same batch.
int check_gpt(int threads, int steps) {
    bench::token_step step(tessera::nn::make_gpt2<tessera::config::fp32>(gpt_spec()), gpt_batch, gpt_length,
                           static_cast<std::size_t>(threads), gpt_adamw);
    std::printf("parameters %zu\nloss", step.parameters());
    for (int i = 0; i < steps; ++i) std::printf(" %.4f", step());
    std::printf("\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 1, steps = 20;
    bool check = false;
    std::string_view model = "resnet20", precision = "fp32";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view flag = argv[i];
        if (flag == "--threads") threads = std::atoi(argv[i + 1]);
        else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
        else if (flag == "--model") model = argv[i + 1];
        else if (flag == "--precision") precision = argv[i + 1];
        else if (flag == "--check") check = std::atoi(argv[i + 1]) != 0;
    }
    if (threads < 1 || steps < 1 || (model != "resnet20" && model != "resnet18" && model != "gpt") ||
        (precision != "fp32" && precision != "16.16") || (check && model != "gpt")) {
        std::fprintf(stderr,
                     "usage: tessera_step_worker --threads N [--steps K] [--model resnet20|resnet18|gpt] [--precision fp32|16.16]\n"
                     "       tessera_step_worker --model gpt --check 1 [--steps K]\n");
        return 2;
    }
    if (check) return check_gpt(threads, steps);
    const auto [rate, hash] = precision == "fp32" ? per_second<tessera::config::fp32>(model, threads, steps)
                                                  : per_second<tessera::config::half>(model, threads, steps);
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    std::printf("%.3f %.1f %016llx\n", rate, static_cast<double>(usage.ru_maxrss) / 1024.0,
                static_cast<unsigned long long>(hash));
    return 0;
}
