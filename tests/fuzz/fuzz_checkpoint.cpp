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
#include "small_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace optim = tessera::optim;
    tessera_fuzz::small_model model(0.5f, -1.0f, 1.0f);
    optim::sgd sgd({.learning_rate = 0.1, .momentum = 0.9});
    const tessera_fuzz::small_model before = model;
    try {
        optim::load_checkpoint_bytes(std::vector<unsigned char>(data, data + size), "fuzz.ckpt", model, sgd);
    } catch (const optim::checkpoint_error&) {
        if (model.w != before.w || model.b != before.b || model.running != before.running) std::abort();
    }
    return 0;
}
