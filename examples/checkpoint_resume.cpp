// Checkpoint and resume: a run stopped after 3 host calls and resumed from its checkpoint ends with
// the same weights, bit for bit, as a run that was never stopped. A checkpoint holds the weights,
// batch-norm statistics, optimizer state, loss scaling state and where the run stood.
#include <tessera/tessera.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

namespace cfg = tessera::config;
namespace data = tessera::data;
namespace exec = tessera::exec;
using run_config = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>, cfg::eight_bit_io>;

const data::synthetic_images training_images(256, {1, 12, 12}, /*classes=*/4, /*seed=*/7);
const data::normalization pixel_norm{.mean = {0.5f}, .stddev = {0.25f}};

auto make_session() {
    const tessera::nn::resnet_family<tessera::nn::basic_block<cfg::fp32, tessera::nn::padding_shortcut>,
                                     tessera::nn::cifar_stem<cfg::fp32>>
        net(1, 4, {1, 1, 1});  // a ResNet-8
    return exec::training_model<run_config>(net, tessera::optim::sgd({.learning_rate = 0.05, .momentum = 0.9}), {1, 12, 12, 1},
                                   {.micro_batch = 8});
}

// Trains calls [from, to) of one epoch; the loader's order depends on its seed and the epoch only.
template <class Session>
void train(Session& session, std::size_t from, std::size_t to) {
    auto loader = data::make_data_loader<run_config>(training_images, {.micro_batch = 8}, {.shuffle = true, .seed = 3});
    std::size_t call = 0;
    for (auto& batch : loader)
        if (call++ >= from && call <= to) (void)session(exec::batch_feed<cfg::fp32, std::uint8_t>(batch, session.batching(), pixel_norm));
}

std::vector<float> weights(const auto& session) {
    std::vector<float> all;
    auto model = session.model();
    model.network().visit_parameters([&](auto, auto values, auto) { all.insert(all.end(), values.begin(), values.end()); });
    return all;
}

int main() {
    const auto path = std::filesystem::temp_directory_path() / "checkpoint_resume.tsr";
    auto whole = make_session();
    train(whole, 0, 8);  // 256 images, 32 a call: 8 calls

    auto first = make_session();
    train(first, 0, 3);
    exec::save_session(path, first, {.epoch = 0, .calls = 3, .steps = 3}, "ResNet-8 1F1B G4");

    auto resumed = make_session();  // another process, say: fresh weights until the checkpoint is read
    const exec::run_position at = exec::load_session(path, resumed, "ResNet-8 1F1B G4");
    train(resumed, at.calls, 8);
    std::printf("resumed at call %zu: %s\n", at.calls, weights(resumed) == weights(whole) ? "the same weights, bit for bit" : "different weights");
    std::filesystem::remove(path);
}
// resumed at call 3: the same weights, bit for bit
