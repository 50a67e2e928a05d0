#pragma once
// Execution strategies: how the stages of one replica share its IPUs and time.
//
// When to use which: `single` when the model fits one IPU; `sharded` when it does not and memory,
// not speed, is the issue; `pipelined` for throughput across stages (needs enough micro-batches in
// flight); `phased` to run a model larger than the IPUs' memory, streaming weights per phase.
#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tessera/config/policy.hpp"

namespace tessera::config {

/// Which IPU of the replica runs each stage: `ipu_map<0, 1, 1, 2>` puts stage 2 on IPU 1.
template <std::size_t... Ipus>
struct ipu_map {
    static constexpr std::size_t size = sizeof...(Ipus);
    static constexpr std::array<std::size_t, sizeof...(Ipus)> ipus{Ipus...};
};

namespace detail {

template <std::size_t Stages, std::size_t... I>
constexpr auto identity_map(std::index_sequence<I...>) -> ipu_map<I...>;
template <std::size_t Stages, std::size_t... I>
constexpr auto zero_map(std::index_sequence<I...>) -> ipu_map<(I * 0)...>;

/// Every IPU 0..max hosts at least one stage (an IPU with no stage is an error, not a silent waste).
template <class Map>
constexpr bool map_is_dense() {
    std::size_t max = 0;
    for (auto ipu : Map::ipus) max = std::max(max, ipu);
    for (std::size_t ipu = 0; ipu <= max; ++ipu)
        if (std::find(Map::ipus.begin(), Map::ipus.end(), ipu) == Map::ipus.end()) return false;
    return true;
}

template <class Map>
constexpr std::size_t ipus_of() {
    std::size_t max = 0;
    for (auto ipu : Map::ipus) max = std::max(max, ipu);
    return max + 1;
}

/// The IPU map of a stage count given at run time: config::options::ipu_map, or this default
/// (identity: stage s on IPU s; same: every stage on IPU 0).
enum class default_map { identity, same };
template <default_map Default>
struct runtime_ipu_map {
    static constexpr std::size_t size = dynamic;
    static constexpr default_map fallback = Default;
};

template <std::size_t Stages>
struct identity_map_of {
    using type = decltype(identity_map<Stages>(std::make_index_sequence<Stages>{}));
};
template <>
struct identity_map_of<dynamic> {
    using type = runtime_ipu_map<default_map::identity>;
};
template <std::size_t Stages>
struct same_map_of {
    using type = decltype(zero_map<Stages>(std::make_index_sequence<Stages>{}));
};
template <>
struct same_map_of<dynamic> {
    using type = runtime_ipu_map<default_map::same>;
};

template <class Map>
inline constexpr bool is_runtime_map = false;
template <default_map D>
inline constexpr bool is_runtime_map<runtime_ipu_map<D>> = true;

/// Shared body of the strategies: the stage count, the map and its checks.
template <std::size_t Stages, class Map>
struct staged {
    static_assert(Stages >= 1, "tessera::config: a strategy needs at least 1 stage");
    static_assert(Map::size == Stages,
                  "tessera::config: the ipu_map must name exactly one IPU per stage (ipu_map<...> has "
                  "a different number of entries than the strategy has stages)");
    static_assert(map_is_dense<Map>(),
                  "tessera::config: the ipu_map leaves an IPU without a stage; number the IPUs 0, 1, ... "
                  "without gaps");
    using policy_category = category::strategy;
    using map = Map;
    static constexpr std::size_t stages = Stages;
    static constexpr std::size_t ipus_per_replica = ipus_of<Map>();
    [[nodiscard]] static constexpr std::size_t ipu_of_stage(std::size_t stage) noexcept { return Map::ipus[stage]; }
};

/// A stage count given at run time (config::options::stages), its IPU map too (options::ipu_map, or
/// the strategy's default). The rules that need the count are checked by make_batching.
template <class Map>
struct staged<dynamic, Map> {
    static_assert(is_runtime_map<Map>,
                  "tessera::config: a strategy with a dynamic stage count takes its ipu_map at run time "
                  "(config::options::ipu_map), not as a type");
    using policy_category = category::strategy;
    using map = Map;
    static constexpr std::size_t stages = dynamic;
    static constexpr std::size_t ipus_per_replica = dynamic;
    /// The default map's IPU of `stage` (options::ipu_map replaces it at run time).
    [[nodiscard]] static constexpr std::size_t ipu_of_stage(std::size_t stage) noexcept {
        return Map::fallback == default_map::identity ? stage : 0;
    }
};

}  // namespace detail

template <std::size_t Stages>
using identity_ipu_map = typename detail::identity_map_of<Stages>::type;
template <std::size_t Stages>
using same_ipu_map = typename detail::same_map_of<Stages>::type;

enum class strategy_kind { single, sharded, pipelined, phased };

/// The whole model on one IPU (the default).
struct single : detail::staged<1, ipu_map<0>> {
    static constexpr strategy_kind kind = strategy_kind::single;
    static constexpr std::string_view name = "single";
};

/// Stages on separate IPUs, one micro-batch at a time: one IPU is busy, the others wait
/// (PopTorch's ShardedExecution).
template <std::size_t Stages, class Map = identity_ipu_map<Stages>>
struct sharded : detail::staged<Stages, Map> {
    static constexpr strategy_kind kind = strategy_kind::sharded;
    static constexpr std::string_view name = "sharded";
};

/// GPipe: all forward passes of the accumulated micro-batches, then all backward passes.
/// Stashes G activations per stage; simplest, and the bubble is (S - 1) / (G + S - 1).
struct gpipe {
    static constexpr std::string_view name = "gpipe";
};
/// 1F1B: after the ramp-up, each stage alternates one forward and one backward pass, so a stage
/// stashes at most (its distance from the last stage + 1) activations instead of G.
struct one_f_one_b {
    static constexpr std::string_view name = "1f1b";
};

/// Which zero-bubble schedule a pipeline runs; none: its backward passes are whole.
enum class zero_bubble_kind : std::uint8_t { none, h1, h2 };

/// Zero-bubble ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): 1F1B with each backward
/// pass split into the input gradient (B) and the weight gradient (W), the W passes run later where
/// 1F1B's stages wait. Every stage holds at most S micro-batches, as 1F1B's first stage does; with
/// T_W <= T_F the bubble is (S - 1)(T_F + T_B - T_W) of a step where 1F1B's is (S - 1)(T_F + T_B + T_W).
struct zero_bubble_h1 {
    static constexpr std::string_view name = "zero-bubble-h1";
    static constexpr zero_bubble_kind zero_bubble = zero_bubble_kind::h1;
};
/// Zero-bubble ZB-H2: twice ZB-H1's warm-up forwards, up to 2S - 1 micro-batches on every stage, and
/// only the start's (S - 1) T_F left of the bubble within a step.
struct zero_bubble_h2 {
    static constexpr std::string_view name = "zero-bubble-h2";
    static constexpr zero_bubble_kind zero_bubble = zero_bubble_kind::h2;
};

/// Interleaved 1F1B (Narayanan et al., SC'21, Megatron-LM's interleaved schedule): each IPU holds V
/// model chunks (virtual stages), stage s on IPU s mod (Stages / V), and runs them 1F1B in groups of
/// as many micro-batches as there are IPUs. The bubble falls from (I - 1) / (G + I - 1) of the step
/// to (I - 1) / (V·G + I - 1), for V times the activations sent between IPUs.
template <std::size_t V>
struct interleaved {
    static_assert(V >= 2, "tessera::config::interleaved<V>: V model chunks per IPU needs V >= 2 (one chunk per "
                          "IPU is one_f_one_b)");
    static constexpr std::string_view name = "interleaved";
    static constexpr std::size_t virtual_stages = V;
};

/// Looped BFS (Lamy-Poirier, "Breadth-First Pipeline Parallelism", MLSys 2023; PyTorch's
/// ScheduleLoopedBFS): V model chunks per IPU placed as interleaved<V> places them, run GPipe-like and
/// breadth first: each IPU runs every micro-batch's forward through its first chunk, then through its
/// second, ..., then the backwards chunk by chunk in reverse. The bubble is interleaving's,
/// (I - 1) / (V·G + I - 1) of the step, for GPipe's stash: G per chunk.
template <std::size_t V>
struct looped_bfs {
    static_assert(V >= 2, "tessera::config::looped_bfs<V>: V model chunks per IPU needs V >= 2 (one chunk per IPU "
                          "is gpipe)");
    static constexpr std::string_view name = "looped-bfs";
    static constexpr std::size_t virtual_stages = V;
};

namespace detail {
template <class S>
inline constexpr std::size_t chunks_of = 1;
template <std::size_t V>
inline constexpr std::size_t chunks_of<interleaved<V>> = V;
template <std::size_t V>
inline constexpr std::size_t chunks_of<looped_bfs<V>> = V;
/// Whether a schedule runs all forwards before the backwards (GPipe, and looped BFS over its chunks).
template <class S>
inline constexpr bool breadth_first = std::is_same_v<S, gpipe>;
template <std::size_t V>
inline constexpr bool breadth_first<looped_bfs<V>> = true;

template <std::size_t Ipus, std::size_t... I>
constexpr auto round_robin_map(std::index_sequence<I...>) -> ipu_map<(I % Ipus)...>;

/// A pipeline's default map: stage s on IPU s, or on IPU s mod (Stages / V) with V model chunks per
/// IPU (interleaved, looped BFS).
template <class Schedule, std::size_t Stages>
struct pipeline_map_of {
    using type = typename identity_map_of<Stages>::type;
};
template <class Schedule, std::size_t Stages>
    requires(chunks_of<Schedule> > 1 && Stages != dynamic && Stages % chunks_of<Schedule> == 0)
struct pipeline_map_of<Schedule, Stages> {
    using type = decltype(round_robin_map<Stages / chunks_of<Schedule>>(std::make_index_sequence<Stages>{}));
};

}  // namespace detail

/// The first stage an interleaved pipeline with V model chunks per IPU would find on the wrong IPU
/// (stage s belongs on IPU s mod (stages / V)); ipu_of_stage.size() when every stage is in place, 0
/// when V does not divide the stages.
[[nodiscard]] constexpr std::size_t first_stage_off_round_robin(std::span<const std::size_t> ipu_of_stage,
                                                                std::size_t virtual_stages) noexcept {
    const std::size_t stages = ipu_of_stage.size();
    if (virtual_stages == 0 || stages % virtual_stages != 0) return 0;
    for (std::size_t s = 0; s < stages; ++s)
        if (ipu_of_stage[s] != s % (stages / virtual_stages)) return s;
    return stages;
}

/// Whether an interleaved pipeline on `ipus` IPUs runs `count` micro-batches (G training, D inference):
/// a multiple of the IPUs (its groups), and at least 2·IPUs − 1 when training.
[[nodiscard]] constexpr bool interleaved_count_fits(std::size_t count, std::size_t ipus, bool training) noexcept {
    return ipus > 0 && count % ipus == 0 && count >= ipus && (!training || count >= 2 * ipus - 1);
}

namespace detail {

/// Whether Map puts stage s on IPU s mod (Stages / V), as interleaving needs.
template <class Map, std::size_t Stages, std::size_t V>
constexpr bool map_is_round_robin() {
    if constexpr (Stages == dynamic || V == 1)
        return true;
    else
        return first_stage_off_round_robin(Map::ipus, V) == Stages;
}

/// The zero-bubble schedule of strategy S: h1 or h2 for pipelined<zero_bubble_h1 or _h2, ...>, else none.
template <class S>
constexpr zero_bubble_kind zero_bubble_of() {
    if constexpr (requires { S::schedule::zero_bubble; })
        return S::schedule::zero_bubble;
    else
        return zero_bubble_kind::none;
}

/// Model chunks per IPU of strategy S: V for pipelined<interleaved<V>, ...>, else 1.
template <class S>
constexpr std::size_t virtual_stages_of() {
    if constexpr (requires { S::virtual_stages; })
        return S::virtual_stages;
    else
        return 1;
}
}  // namespace detail

template <class S>
concept PipelineSchedule = std::same_as<S, gpipe> || std::same_as<S, one_f_one_b> || std::same_as<S, zero_bubble_h1> ||
                           std::same_as<S, zero_bubble_h2> || (detail::chunks_of<S> > 1);

/// Micro-batches in flight across the stages (PopTorch's PipelinedExecution).
template <PipelineSchedule Schedule, std::size_t Stages, class Map = typename detail::pipeline_map_of<Schedule, Stages>::type>
struct pipelined : detail::staged<Stages, Map> {
    static_assert(detail::chunks_of<Schedule> == 1 || Stages != dynamic,
                  "tessera::config: an interleaved pipeline needs a static stage count (a multiple of its V)");
    static_assert(Stages == dynamic || Stages % detail::chunks_of<Schedule> == 0,
                  "tessera::config: pipelined<interleaved<V>, Stages> needs Stages to be a multiple of V "
                  "(each IPU holds V stages)");
    static_assert(detail::map_is_round_robin<Map, Stages, detail::chunks_of<Schedule>>(),
                  "tessera::config: pipelined<interleaved<V>, Stages> puts stage s on IPU s mod (Stages / V); "
                  "leave out the ipu_map or give that one");
    static constexpr strategy_kind kind = strategy_kind::pipelined;
    static constexpr std::string_view name = "pipelined";
    using schedule = Schedule;
    /// Model chunks per IPU: V for interleaved<V>, else 1.
    static constexpr std::size_t virtual_stages = detail::chunks_of<Schedule>;
};

/// Stages run one after another on the same IPUs, their weights streamed in from Streaming Memory
/// (PopTorch's SerialPhasedExecution).
template <std::size_t Stages, class Map = same_ipu_map<Stages>>
struct phased : detail::staged<Stages, Map> {
    static constexpr strategy_kind kind = strategy_kind::phased;
    static constexpr std::string_view name = "phased";
};

/// An execution strategy: stages, their IPUs, and how they share time.
template <class S>
concept Strategy = PolicyOf<S, category::strategy> && requires(std::size_t stage) {
    { S::stages } -> std::convertible_to<std::size_t>;
    { S::ipus_per_replica } -> std::convertible_to<std::size_t>;
    { S::kind } -> std::convertible_to<strategy_kind>;
    { S::ipu_of_stage(stage) } -> std::convertible_to<std::size_t>;
};

static_assert(Strategy<single> && Strategy<sharded<2>> && Strategy<pipelined<gpipe, 4>> && Strategy<phased<3>>);
static_assert(Strategy<pipelined<interleaved<2>, 4>> && pipelined<interleaved<2>, 4>::ipus_per_replica == 2);
static_assert(Strategy<sharded<dynamic>> && Strategy<pipelined<one_f_one_b, dynamic>> && Strategy<phased<dynamic>>);

}  // namespace tessera::config
