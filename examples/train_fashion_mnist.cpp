// The main job: trains ResNet-20 on Fashion-MNIST through the IPU emulator — a 2-stage 1F1B
// pipeline, G = 4, D = 4, 8-bit I/O from an async loader — with a bar per epoch, then evaluates
// on the test split. Usage: train_fashion_mnist [epochs = 1] [training images = 60000]
#include <tessera/tessera.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
    namespace cfg = tessera::config;
    namespace data = tessera::data;
    namespace exec = tessera::exec;
    using c = cfg::config<cfg::fp32, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>,
                          cfg::device_iterations<4>, cfg::eight_bit_io>;
    const int epochs = argc > 1 ? std::stoi(argv[1]) : 1;
    const std::size_t micro_batch = 16;

    const auto full = data::fashion_mnist(data::split::train);
    const auto train = full.subset(0, argc > 2 ? std::stoul(argv[2]) : full.size());
    const auto test = data::fashion_mnist(data::split::test);
    const data::normalization norm{.mean = {0.286f}, .stddev = {0.353f}};  // applied on the device
    const data::loader_options loading{.shuffle = true, .seed = 42, .num_workers = 1, .mode = data::loader_mode::async,
                                       .augment = data::horizontal_flip{}};
    auto loader = data::make_data_loader<c>(train, {.micro_batch = micro_batch}, loading);

    tessera::nn::resnet20<cfg::fp32> net(/*in_channels=*/1, /*classes=*/10);
    tessera::optim::sgd sgd({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
    auto session = exec::training_model<c>(net, sgd, {1, 28, 28, 1}, {.micro_batch = micro_batch},
                                           {.progress = &std::cout, .record_trace = false,
                                            .loading = exec::loading_of(loading)});  // the modelled host loads alike

    double wall = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
        char name[32];
        std::snprintf(name, sizeof name, "[Epoch %02d]", epoch);
        tessera::report::progress_bar bar(std::cout, name, loader.batches_per_epoch());
        double loss_sum = 0, accuracy_sum = 0;
        std::size_t calls = 0;
        for (auto& batch : loader) {
            const auto result = session(exec::batch_feed<cfg::fp32, std::uint8_t>(batch, session.batching(), norm));
            loss_sum += result.losses[0].back();  // output mode `final`: the last micro-batch's loss
            accuracy_sum += result.scores[0].back().accuracy();  // and its top-1 accuracy
            wall += result.wall_seconds;
            bar.set_postfix("Loss", loss_sum / static_cast<double>(++calls), 3);
            bar.set_postfix("Acc%", 100 * accuracy_sum / static_cast<double>(calls), 1);
            bar.update();
        }
        bar.close();
        std::printf("[Epoch %02d] loss = %.3f, training accuracy %.1f%%\n", epoch, loss_sum / static_cast<double>(calls),
                    100 * accuracy_sum / static_cast<double>(calls));
    }

    // Evaluation: the same pipeline for inference (G = 1, every micro-batch's output), trained weights.
    auto eval = exec::inference_model<c>(session.model().network(), sgd, {1, 28, 28, 1}, {.micro_batch = 100});
    auto test_loader = data::make_data_loader<c::for_inference>(test, {.micro_batch = 100}, {});
    std::size_t correct = 0, seen = 0;
    for (auto& batch : test_loader) {
        const auto result = eval(exec::batch_feed<cfg::fp32, std::uint8_t>(batch, eval.batching(), norm));
        for (std::size_t k = 0; k < result.outputs[0].size(); ++k) {
            const auto& logits = result.outputs[0][k];  // NHWC {100, 1, 1, 10}
            const std::size_t first = result.selected[0][k] * 100;
            for (std::size_t i = 0; i < 100; ++i, ++seen)
                correct += tessera::kernels::top1_class(logits.data() + i * 10, 10) ==
                           static_cast<std::size_t>(batch.labels()[first + i]);
        }
    }
    std::printf("test accuracy: %.2f%% of %zu images\n", 100.0 * static_cast<double>(correct) / static_cast<double>(seen), seen);
    // The modelled clock: the IPUs and the host feeding them (tutorial-like host, see emulator::host_spec).
    std::printf("training: %.1f s on this machine, %.2f s modelled on 2 IPUs and their host (IPUs busy %.2f s)\n",
                wall, session.host().now(), session.host().now() - session.host().host_wait());
}
// Graph compilation: 100%|██████████| 5/5 [00:00<00:00]
// [Epoch 01]: 100%|██████████| 234/234 [..., Loss=0.6.., Acc%=7..]
// [Epoch 01] loss = 0.6.., training accuracy 7..%
// test accuracy: 8.....% of 10000 images
