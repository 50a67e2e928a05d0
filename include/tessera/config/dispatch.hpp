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
struct choice {
    std::string precision = "32.32";    ///< "32.32", "16.32" or "16.16"
    bool dynamic_loss_scaling = false;  ///< the overflow vote and skipped steps (static scales are run-time values)
    std::string strategy = "single";    ///< "single", "sharded", "pipelined" or "phased"
    std::string schedule = "1f1b";      ///< pipelined: "gpipe" or "1f1b"
    std::size_t ipus_per_replica = 1;   ///< single: 1; the others: 2 or 4 (one stage per IPU)
    bool eight_bit_io = false;          ///< 8-bit I/O (normalised on the device) or float I/O
};

/// The configuration type a dispatch yields: the chosen policies and every count dynamic.
template <class Precision, class Strategy, class Io>
using dispatched_config = config<Precision, Strategy, Io, gradient_accumulation<dynamic>, device_iterations<dynamic>,
                                 micro_batch<dynamic>, replication<dynamic, dynamic>, instances<dynamic>>;

/// The stage counts (IPUs per replica) a dispatch instantiates for the staged strategies.
template <std::size_t... Counts>
struct stage_counts {
    static_assert(sizeof...(Counts) > 0 && ((Counts >= 2) && ...),
                  "tessera::config::stage_counts: give at least one stage count, each at least 2");
    [[nodiscard]] static std::string text() {
        std::string t;
        ((t += (t.empty() ? "" : ", ") + std::to_string(Counts)), ...);
        return t;
    }
};

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

template <class Precision, template <std::size_t> class Staged, class Counts, std::size_t First, std::size_t... Rest,
          class F>
decltype(auto) dispatch_stages(const choice& c, F&& f) {
    if constexpr (sizeof...(Rest) == 0) {
        if (c.ipus_per_replica != First)
            bad_choice("IPUs per replica for '" + c.strategy + "'", std::to_string(c.ipus_per_replica), Counts::text());
        return dispatch_io<Precision, Staged<First>>(c, f);
    } else {
        if (c.ipus_per_replica == First) return dispatch_io<Precision, Staged<First>>(c, f);
        return dispatch_stages<Precision, Staged, Counts, Rest...>(c, f);
    }
}
template <class Precision, template <std::size_t> class Staged, std::size_t... Ns, class F>
decltype(auto) dispatch_counts(const choice& c, F&& f, stage_counts<Ns...>) {
    return dispatch_stages<Precision, Staged, stage_counts<Ns...>, Ns...>(c, f);
}

template <class S>
struct pipelined_with {
    template <std::size_t N>
    using type = pipelined<S, N>;
};
template <std::size_t N>
using sharded_stages = sharded<N>;
template <std::size_t N>
using phased_stages = phased<N>;

template <class Precision, class Counts, class F>
decltype(auto) dispatch_strategy(const choice& c, F&& f) {
    if (c.strategy == "single") {
        if (c.ipus_per_replica != 1) bad_choice("IPUs per replica for 'single'", std::to_string(c.ipus_per_replica), "1");
        return dispatch_io<Precision, single>(c, f);
    }
    if (c.strategy == "sharded") return dispatch_counts<Precision, sharded_stages>(c, f, Counts{});
    if (c.strategy == "phased") return dispatch_counts<Precision, phased_stages>(c, f, Counts{});
    if (c.strategy != "pipelined") bad_choice("strategy", c.strategy, "single, sharded, pipelined, phased");
    if (c.schedule == "1f1b") return dispatch_counts<Precision, pipelined_with<one_f_one_b>::template type>(c, f, Counts{});
    if (c.schedule != "gpipe") bad_choice("schedule", c.schedule, "gpipe, 1f1b");
    return dispatch_counts<Precision, pipelined_with<gpipe>::template type>(c, f, Counts{});
}

template <class Precision, class Counts, class F>
decltype(auto) dispatch_scaling(const choice& c, F&& f) {
    if (c.dynamic_loss_scaling)
        return dispatch_strategy<typename Precision::template with<dynamic_loss_scaling<>>, Counts>(c, f);
    return dispatch_strategy<Precision, Counts>(c, f);
}

}  // namespace detail

/// Calls f.template operator()<Config>() with the configuration type of `c`, counts dynamic; the
/// staged strategies with 2 or 4 IPUs per replica (`Counts` chooses others). Every branch is
/// instantiated: a program that needs fewer can narrow `Counts` or use dispatch_for.
/// @code
///   config::choice c{.precision = "16.16", .strategy = "pipelined", .ipus_per_replica = 2, .eight_bit_io = true};
///   config::dispatch(c, [&]<class Config>() { return train<Config>(counts); });
/// @endcode
template <class Counts = stage_counts<2, 4>, class F>
decltype(auto) dispatch(const choice& c, F&& f) {
    if (c.precision == "32.32") return detail::dispatch_scaling<fp32, Counts>(c, f);
    if (c.precision == "16.32") return detail::dispatch_scaling<mixed, Counts>(c, f);
    if (c.precision != "16.16") detail::bad_choice("precision", c.precision, "32.32, 16.32, 16.16");
    return detail::dispatch_scaling<half, Counts>(c, f);
}

/// dispatch() for one precision policy P (a program may compile each precision in its own file).
template <class P, class Counts = stage_counts<2, 4>, class F>
decltype(auto) dispatch_for(const choice& c, F&& f) {
    return detail::dispatch_scaling<P, Counts>(c, f);
}

}  // namespace tessera::config
