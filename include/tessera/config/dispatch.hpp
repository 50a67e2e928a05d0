#pragma once
// From run-time choices to configuration types: how a command line picks compile-time policies.
//
// When to use it: a program whose users choose the precision, strategy or I/O at run time (a
// command line, a sweep). The counts (micro-batch, G, D, replicas, instances, input group) stay
// `dynamic` and come from config::options; only the policies that must be types are dispatched,
// over a finite set, each set instantiated once.
#include <cstddef>
#include <string>
#include <string_view>

#include "tessera/config/config.hpp"
#include "tessera/config/error.hpp"

namespace tessera::config {

/// The run-time choice of the policies that are types. The strings are PopTorch's and the
/// tutorials' spellings; dispatch() refuses any other value with a config_error naming the allowed ones.
/// Only what must be a type is here: the counts, the stage count and IPU map among them, are
/// config::options (every count of a dispatched config is `dynamic`), and loss scaling is a run-time
/// value (exec::session_options::loss_scale and ::dynamic_loss_scaling).
struct choice {
    std::string precision = "32.32";    ///< "32.32", "16.32" or "16.16"
    std::string strategy = "single";    ///< "single", "sharded", "pipelined" or "phased"
    std::string schedule = "1f1b";      ///< pipelined: "gpipe" or "1f1b"
    bool eight_bit_io = false;          ///< 8-bit I/O (normalised on the device) or float I/O
};

/// The configuration type a dispatch yields: the chosen policies and every count dynamic.
template <class Precision, class Strategy, class Io>
using dispatched_config = config<Precision, Strategy, Io, gradient_accumulation<dynamic>, device_iterations<dynamic>,
                                 micro_batch<dynamic>, replication<dynamic, dynamic>, instances<dynamic>>;

namespace detail {

[[noreturn]] inline void bad_choice(std::string_view what, std::string_view value, std::string_view allowed) {
    throw config_error("tessera::config::dispatch: " + std::string(what) + " '" + std::string(value) +
                       "' is not one of " + std::string(allowed));
}

template <class Precision, class Strategy, class F>
decltype(auto) dispatch_io(const choice& c, F&& f) {
    if (c.eight_bit_io) return f.template operator()<dispatched_config<Precision, Strategy, eight_bit_io>>();
    return f.template operator()<dispatched_config<Precision, Strategy, float_io>>();
}

template <class Precision, class F>
decltype(auto) dispatch_strategy(const choice& c, F&& f) {
    if (c.strategy == "single") return dispatch_io<Precision, single>(c, f);
    if (c.strategy == "sharded") return dispatch_io<Precision, sharded<dynamic>>(c, f);
    if (c.strategy == "phased") return dispatch_io<Precision, phased<dynamic>>(c, f);
    if (c.strategy != "pipelined") bad_choice("strategy", c.strategy, "single, sharded, pipelined, phased");
    if (c.schedule == "1f1b") return dispatch_io<Precision, pipelined<one_f_one_b, dynamic>>(c, f);
    if (c.schedule != "gpipe") bad_choice("schedule", c.schedule, "gpipe, 1f1b");
    return dispatch_io<Precision, pipelined<gpipe, dynamic>>(c, f);
}

}  // namespace detail

/// Calls f.template operator()<Config>() with the configuration type of `c`: precision × strategy
/// (and schedule) × I/O, every count dynamic, the staged strategies' stage count too (give it in
/// config::options::stages). Every branch is instantiated once: 3 × 5 × 2 configurations.
/// @code
///   config::choice c{.precision = "16.16", .strategy = "pipelined", .eight_bit_io = true};
///   config::dispatch(c, [&]<class Config>() { return train<Config>(config::options{.stages = 4, ...}); });
/// @endcode
template <class F>
decltype(auto) dispatch(const choice& c, F&& f) {
    if (c.precision == "32.32") return detail::dispatch_strategy<fp32>(c, f);
    if (c.precision == "16.32") return detail::dispatch_strategy<mixed>(c, f);
    if (c.precision != "16.16") detail::bad_choice("precision", c.precision, "32.32, 16.32, 16.16");
    return detail::dispatch_strategy<half>(c, f);
}

/// dispatch() for one precision policy P (a program may compile each precision in its own file).
template <class P, class F>
decltype(auto) dispatch_for(const choice& c, F&& f) {
    return detail::dispatch_strategy<P>(c, f);
}

}  // namespace tessera::config
