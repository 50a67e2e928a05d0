#pragma once
// Checkpoints of a training session: weights, buffers, every stage's optimizer, loss scaling, position.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "tessera/optim/checkpoint.hpp"

namespace tessera::exec {

/// Where a training run stands: what a resumed run needs besides the weights.
struct run_position {
    std::size_t epoch = 0;   ///< the epoch in progress (0-based)
    std::size_t calls = 0;   ///< host calls done in it
    std::size_t steps = 0;   ///< weight updates done in all (learning-rate schedules count them)
    std::uint64_t seed = 0;  ///< the run's seed (shuffling, augmentation)
    std::size_t instances = 1;  ///< host processes that ran it: each reads its own part of an epoch's order
};

namespace detail {
inline std::uint64_t fingerprint_of(std::string_view configuration) noexcept {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (const char c : configuration) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    return h;
}
}  // namespace detail

/// Writes session `run`'s state (its device weights — every replica holds the same — their
/// batch-norm statistics, each stage's optimizer state and step count, the loss scaling state),
/// `position`, and a fingerprint of `configuration` (any text naming the model and configuration)
/// to `path`, atomically (optim::save_checkpoint: a temporary file renamed over the old one).
/// @code
///   exec::save_session("run.ckpt", session, {.epoch = 1, .calls = 20, .steps = 80}, "resnet20 16.16 G8 D4");
/// @endcode
template <class Session>
void save_session(const std::string& path, const Session& run, const run_position& position,
                  std::string_view configuration) {
    auto model = run.unsharded_model();  // a sharded optimiser state: all of it
    std::map<std::string, double> scalars;
    const auto fp = detail::fingerprint_of(configuration);
    scalars["session.fingerprint.high"] = double(fp >> 32);
    scalars["session.fingerprint.low"] = double(fp & 0xFFFFFFFFu);
    scalars["session.epoch"] = double(position.epoch);
    scalars["session.calls"] = double(position.calls);
    scalars["session.steps"] = double(position.steps);
    scalars["session.seed.high"] = double(position.seed >> 32);
    scalars["session.seed.low"] = double(position.seed & 0xFFFFFFFFu);
    scalars["session.instances"] = double(position.instances);
    const auto scaling = model.loss_scaling_state();
    for (std::size_t s = 0; s < scaling.scale.size(); ++s) {
        scalars["stage" + std::to_string(s) + ".loss_scale"] = scaling.scale[s];
        scalars["stage" + std::to_string(s) + ".good_steps"] = double(scaling.good_steps[s]);
        scalars["stage" + std::to_string(s) + ".skipped_steps"] = double(scaling.skipped[s]);
    }
    auto optimizers = model.optimizers();
    optim::save_checkpoint(path, model.network(), optimizers, scalars);
}

/// Reads a checkpoint written by save_session into session `run` and returns the position to
/// resume from. Throws optim::checkpoint_error for a missing, corrupt or truncated file, one made for
/// another model (its entries do not match) or another `configuration`; then `run` is unchanged.
template <class Session>
[[nodiscard]] run_position load_session(const std::string& path, Session& run, std::string_view configuration) {
    auto model = run.unsharded_model();  // the whole state is read; each replica then keeps its shard
    std::map<std::string, double> scalars;
    auto optimizers = model.optimizers();
    optim::load_checkpoint(path, model.network(), optimizers, &scalars);
    const auto get = [&](const std::string& name) -> double {
        const auto it = scalars.find(name);
        if (it == scalars.end())
            throw optim::checkpoint_error("tessera::exec::load_session: " + path + " has no '" + name +
                                          "' (not a session checkpoint)");
        return it->second;
    };
    const auto fp = detail::fingerprint_of(configuration);
    if (get("session.fingerprint.high") != double(fp >> 32) || get("session.fingerprint.low") != double(fp & 0xFFFFFFFFu))
        throw optim::checkpoint_error("tessera::exec::load_session: " + path +
                                      " was written for another configuration than '" + std::string(configuration) + "'");
    auto scaling = model.loss_scaling_state();
    for (std::size_t s = 0; s < scaling.scale.size(); ++s) {
        scaling.scale[s] = get("stage" + std::to_string(s) + ".loss_scale");
        scaling.good_steps[s] = static_cast<std::size_t>(get("stage" + std::to_string(s) + ".good_steps"));
        scaling.skipped[s] = static_cast<std::size_t>(get("stage" + std::to_string(s) + ".skipped_steps"));
    }
    run_position position;
    position.epoch = static_cast<std::size_t>(get("session.epoch"));
    position.calls = static_cast<std::size_t>(get("session.calls"));
    position.steps = static_cast<std::size_t>(get("session.steps"));
    position.seed = (static_cast<std::uint64_t>(get("session.seed.high")) << 32) |
                    static_cast<std::uint64_t>(get("session.seed.low"));
    const auto instances = scalars.find("session.instances");  // absent in checkpoints of one process before it
    position.instances = instances == scalars.end() ? 1 : static_cast<std::size_t>(instances->second);
    model.set_loss_scaling_state(scaling);
    run.load_weights(model);  // every replica: weights, buffers, optimizers, loss scaling
    return position;
}

}  // namespace tessera::exec
