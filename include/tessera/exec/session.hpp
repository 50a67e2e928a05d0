#pragma once
// Training and inference sessions: a config, a staged model and its compiled executor.
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/config/batching.hpp"
#include "tessera/config/config.hpp"
#include "tessera/config/error.hpp"
#include "tessera/config/description.hpp"
#include "tessera/exec/basic_session.hpp"
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/session_options.hpp"

namespace tessera::exec {

/// A compiled model: R replicas of a staged model on R × IPUs-per-replica emulated IPUs, under
/// configuration C. Graph compilation (schedule, memory plan, threads) happens in the constructor:
/// configuration and memory errors are raised there, before anything runs. What it does once
/// compiled is basic_session<M>'s.
/// @code
///   using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>,
///                         cfg::device_iterations<2>, cfg::replication<2>>;
///   auto run = exec::training_model<c>(model, {.micro_batch = 8});
///   auto result = run(feed);              // D = 2 weight updates; losses by the output mode
///   run.copy_weights_to(model);           // back to the host
/// @endcode
template <config::Config C, StagedModel M>
class session : public basic_session<M> {
    // A model with a precision runs at the config's: the design choice is to refuse a mismatch here,
    // at compile time, rather than train silently at another precision or convert weights behind
    // the user's back (nn::resnet20<typename Config::precision> builds the model at the config's).
    static constexpr bool precision_matches = [] {
        if constexpr (requires { typename M::precision::data_type; typename M::precision::weight_type; })
            return std::is_same_v<typename M::precision::data_type, typename C::precision::data_type> &&
                   std::is_same_v<typename M::precision::weight_type, typename C::precision::weight_type>;
        else
            return true;
    }();
    static_assert(precision_matches,
                  "tessera::exec::session: the model's precision must be the config's (its data and weight types): "
                  "build the model at Config::precision, e.g. nn::resnet20<typename Config::precision>");

public:
    using config_type = C;

    session(const M& model, config::options options = {}, session_options settings = {})
        : basic_session<M>(config::description::of<C>(), model, options, settings) {}
};

/// A training session of `model` under config `C` (PopTorch's poptorch.trainingModel).
template <config::Config C, StagedModel M>
[[nodiscard]] session<C, M> training_model(const M& model, config::options options = {}, session_options settings = {}) {
    static_assert(C::is_training, "tessera::exec::training_model: the config is for inference (use inference_model)");
    return session<C, M>(model, options, settings);
}

/// An inference session: the config's inference form (G = 1, default outputs `all`).
template <config::Config C, StagedModel M>
[[nodiscard]] session<typename C::for_inference, M> inference_model(const M& model, config::options options = {},
                                                                     session_options settings = {}) {
    options.gradient_accumulation.reset();
    return session<typename C::for_inference, M>(model, options, settings);
}

}  // namespace tessera::exec
