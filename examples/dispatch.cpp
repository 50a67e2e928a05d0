// Dispatch from your own command line: run-time choices (precision, strategy, schedule, I/O) become
// a configuration type, and every count comes from config::options, checked by the same rules as a
// static config. Here each choice is dry-run on the modelled IPUs.
// Usage: dispatch [32.32|16.32|16.16] [single|sharded|pipelined|phased] [gpipe|1f1b] [8bit|float]
#include <tessera/tessera.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    namespace cfg = tessera::config;
    namespace nn = tessera::nn;
    const cfg::choice choice{.precision = argc > 1 ? argv[1] : "16.16", .strategy = argc > 2 ? argv[2] : "pipelined",
                             .schedule = argc > 3 ? argv[3] : "1f1b",
                             .eight_bit_io = argc > 4 ? std::string(argv[4]) == "8bit" : true};
    try {
        return cfg::dispatch(choice, [&]<class C>() {
            using P = typename C::precision;  // a session runs a network built at its configuration's precision
            const nn::resnet20<P> net(/*in_channels=*/3, /*classes=*/10);
            const std::size_t stages = choice.strategy == "single" ? 1 : 2;
            const cfg::options counts{.micro_batch = 32, .gradient_accumulation = 8, .device_iterations = 4,
                                      .replicas = 1, .instances = 1, .input_group = 1, .stages = stages};
            const auto e = tessera::exec::dry_run<C>(net, tessera::optim::sgd({.momentum = 0.9}), {1, 32, 32, 3}, counts,
                                                     /*images=*/50'000);
            std::printf("%s %s%s%s, %zu stage(s): %.2f s per CIFAR-10 epoch, %.0f images/s modelled\n",
                        std::string(P::name).c_str(), std::string(C::strategy::name).c_str(),
                        choice.strategy == "pipelined" ? " " : "", choice.strategy == "pipelined" ? choice.schedule.c_str() : "",
                        stages, e.seconds, e.samples_per_second());
            return 0;
        });
    } catch (const cfg::config_error& e) {  // a value dispatch does not know, or a rule the counts break
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
}
// $ dispatch 16.16 pipelined gpipe 8bit
// 16.16 pipelined gpipe, 2 stage(s): 13.99 s per CIFAR-10 epoch, 3514 images/s modelled
// $ dispatch 8.8
// tessera::config::dispatch: precision '8.8' is not one of 32.32, 16.32, 16.16
