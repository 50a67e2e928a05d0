// A model of your own through a pipeline: an nn::sequential whose layers are its units, cut into two
// stages where you name them (PopTorch's BeginBlock), trained with GPipe on two emulated IPUs on
// synthetic images. Each stage is a worker thread with its own memory budget and modelled clock.
#include <tessera/tessera.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>

int main() {
    namespace cfg = tessera::config;
    namespace data = tessera::data;
    namespace exec = tessera::exec;
    namespace nn = tessera::nn;
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<8>, cfg::device_iterations<2>,
                          cfg::eight_bit_io>;

    auto net = nn::sequential(nn::conv2d<cfg::fp32>(3, 16, {3, 3, 1, 1}), nn::batch_norm_relu<cfg::fp32>(16),
                              nn::conv2d<cfg::fp32>(16, 16, {3, 3, 2, 1}), nn::batch_norm_relu<cfg::fp32>(16),
                              nn::linear<cfg::fp32>(8 * 8 * 16, 10))
                   .named({"conv1", "bn1", "conv2", "bn2", "fc"});
    // Stage 0 runs conv1..bn1 on IPU 0, stage 1 conv2..fc on IPU 1 (without first_units: balanced by FLOPs).
    auto session = exec::training_model<c>(net, tessera::optim::sgd({.learning_rate = 0.05, .momentum = 0.9}),
                                           {1, 16, 16, 3}, {.micro_batch = 8},
                                           {.progress = &std::cout, .first_units = {0, net.unit_index("conv2")}});

    const data::synthetic_images images(2048, {3, 16, 16}, /*classes=*/10, /*seed=*/1);
    const data::normalization norm{.mean = {0.5f, 0.5f, 0.5f}, .stddev = {0.25f, 0.25f, 0.25f}};  // of x / 255, on IPU 0
    auto loader = data::make_data_loader<c>(images, {.micro_batch = 8}, {.shuffle = true, .seed = 2});
    for (int epoch = 1; epoch <= 3; ++epoch) {
        double loss = 0;
        std::size_t calls = 0;
        for (auto& batch : loader) {  // 8 × 8 × 2 = 128 images a call, 16 calls an epoch
            const auto result = session(exec::batch_feed<cfg::fp32, std::uint8_t>(batch, session.batching(), norm));
            loss += result.losses[0].back();  // output mode final: each call's last micro-batch
            ++calls;
        }
        std::printf("epoch %d: loss %.3f\n", epoch, loss / double(calls));
    }
    for (const auto& ipu : session.plan().ipus)
        std::printf("IPU %zu: %.2f MiB\n", ipu.ipu, double(ipu.on_chip()) / (1 << 20));
    std::printf("modelled: %.3f s on 2 IPUs and their host\n", session.host().now());
}
// Graph compilation: 100%|████████████████████| 5/5 [...]
// epoch 1: loss 0.104
// epoch 2: loss 0.000
// epoch 3: loss 0.000
// IPU 0: 3.73 MiB
// IPU 1: 2.95 MiB
// modelled: 1.030 s on 2 IPUs and their host
