// libFuzzer target: the checkpoint loader, into a small model and a momentum SGD. Any input loads
// completely or throws checkpoint_error, and a refused input leaves the model as it was.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/optim/checkpoint.hpp"
#include "tessera/optim/sgd.hpp"

namespace {
struct small_model {
    std::vector<float> w = std::vector<float>(6, 0.5f), b = std::vector<float>(2, -1.0f), gw = std::vector<float>(6, 0.0f),
                       gb = std::vector<float>(2, 0.0f), running = std::vector<float>(2, 1.0f);
    template <class F>
    void visit_parameters(F&& f) {
        f("layer.weight", std::span<float>(w), std::span<float>(gw));
        f("layer.bias", std::span<float>(b), std::span<float>(gb));
    }
    template <class F>
    void visit_buffers(F&& f) {
        f("layer.running", std::span<float>(running));
    }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace optim = tessera::optim;
    small_model model;
    optim::sgd sgd({.learning_rate = 0.1, .momentum = 0.9});
    const small_model before;
    try {
        optim::load_checkpoint_bytes(std::vector<unsigned char>(data, data + size), "fuzz.ckpt", model, sgd);
    } catch (const optim::checkpoint_error&) {
        if (model.w != before.w || model.b != before.b || model.running != before.running) std::abort();
    }
    return 0;
}
