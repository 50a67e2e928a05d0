#pragma once
// A configuration type's facts as values: what run-time code (batching, graph compilation, dry runs,
// sessions) needs of a config<...>, so that code is compiled once rather than once per configuration.
#include <cstddef>
#include <type_traits>

#include "tessera/config/config.hpp"
#include "tessera/config/counts.hpp"
#include "tessera/config/loss_scaling.hpp"
#include "tessera/config/output_mode.hpp"
#include "tessera/config/strategy.hpp"

namespace tessera::config {

/// What a config<...> fixes, as values: its counts (`dynamic` where config::options gives them at
/// run time), strategy and schedule, training or inference, default output mode, precision width,
/// loss scaling and I/O. The compile-time rules were checked when the config type was formed; the
/// run-time ones are checked by make_batching.
/// @code
///   constexpr auto d = config::description::of<cfg>();   // d.strategy == strategy_kind::pipelined, ...
///   auto b = config::make_batching(d, {.micro_batch = 32});
/// @endcode
struct description {
    std::size_t micro_batch = dynamic;
    std::size_t gradient_accumulation = 1;
    std::size_t device_iterations = 1;
    std::size_t replicas = 1;
    std::size_t instances = 1;
    std::size_t input_group = 1;
    std::size_t stages = 1;
    std::size_t available_ipus = dynamic;
    strategy_kind strategy = strategy_kind::single;
    bool schedule_is_gpipe = false;  ///< pipelined: GPipe (all forwards, then all backwards; looped BFS with chunks), else 1F1B
    std::size_t virtual_stages = 1;  ///< pipelined: model chunks per IPU (interleaved 1F1B when > 1)
    zero_bubble_kind zero_bubble = zero_bubble_kind::none;  ///< pipelined: ZB-H1 or ZB-H2 (split backward passes)
    /// The IPU of stage s when options give no map (the strategy's map, or its default for a dynamic count).
    std::size_t (*ipu_of_stage)(std::size_t) noexcept = &single::ipu_of_stage;
    bool training = true;
    reduction accumulation_reduction = reduction::mean;
    output_kind outputs = output_kind::final;  ///< the default output mode (session_options may replace it)
    std::size_t output_period = 0;             ///< every_n's N
    int storage_bits = 32;                     ///< the precision's data width
    loss_scale_rule loss_scaling{};            ///< the precision's loss scaling
    std::size_t io_bytes_per_value = 4;        ///< what the host sends per input value
    bool eight_bit_io = false;                 ///< 8-bit I/O: the first IPU normalises

    /// The description of configuration type C.
    template <Config C>
    [[nodiscard]] static constexpr description of() noexcept {
        using S = typename C::strategy;
        description d;
        d.micro_batch = C::micro_batch, d.gradient_accumulation = C::gradient_accumulation;
        d.device_iterations = C::device_iterations, d.replicas = C::replicas, d.instances = C::instances;
        d.input_group = C::input_group, d.stages = C::stages, d.available_ipus = C::available_ipus;
        d.strategy = S::kind;
        if constexpr (S::kind == strategy_kind::pipelined) d.schedule_is_gpipe = detail::breadth_first<typename S::schedule>;
        d.virtual_stages = detail::virtual_stages_of<S>();
        d.zero_bubble = detail::zero_bubble_of<S>();
        d.ipu_of_stage = &S::ipu_of_stage;
        d.training = C::is_training;
        d.accumulation_reduction = C::accumulation_reduction;
        d.outputs = C::output_mode::kind, d.output_period = C::output_mode::period;
        d.storage_bits = C::precision::storage_bits;
        d.loss_scaling = loss_scale_rule::of<typename C::precision::loss_scaling>();
        d.io_bytes_per_value = C::io_policy::bytes_per_value, d.eight_bit_io = C::io_policy::is_eight_bit;
        return d;
    }
};

}  // namespace tessera::config
