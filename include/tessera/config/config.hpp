#pragma once
// config<Policies...>: the policies in any order, defaults filled, every rule checked at compile time.
#include <cstddef>
#include <type_traits>

#include "tessera/config/counts.hpp"
#include "tessera/config/io.hpp"
#include "tessera/config/output_mode.hpp"
#include "tessera/config/policy.hpp"
#include "tessera/config/precision.hpp"
#include "tessera/config/rules.hpp"
#include "tessera/config/strategy.hpp"

namespace tessera::config {

namespace detail {

template <class P>
concept known_policy = PolicyOf<P, category::precision> || PolicyOf<P, category::strategy> ||
    PolicyOf<P, category::output_mode> || PolicyOf<P, category::replication> ||
    PolicyOf<P, category::instances> || PolicyOf<P, category::gradient_accumulation> ||
    PolicyOf<P, category::device_iterations> || PolicyOf<P, category::micro_batch> ||
    PolicyOf<P, category::io> || PolicyOf<P, category::mode> || PolicyOf<P, category::available_ipus>;

/// Fails, naming the argument in the instantiation, when it is not a tessera policy.
template <class Argument>
constexpr bool argument_is_a_tessera_policy() {
    static_assert(known_policy<Argument>,
                  "tessera::config::config<...>: an argument is not a tessera policy; pass only precision "
                  "(fp32, mixed, half), strategy (single, sharded, pipelined, phased), output mode (final, "
                  "all, sum, every_n), replication, instances, gradient_accumulation, device_iterations, "
                  "micro_batch, available_ipus, io or training/inference policies");
    return true;
}

template <class Category, class... Ps>
inline constexpr std::size_t count_of = (std::size_t{PolicyOf<Ps, Category>} + ... + 0);

/// Fails, naming the category in the instantiation, when two arguments decide the same thing.
template <class Category, class... Ps>
constexpr bool one_policy_per_category() {
    static_assert(count_of<Category, Ps...> <= 1,
                  "tessera::config::config<...>: two policies of the same kind (for example two precisions "
                  "or two strategies); keep one of them");
    return true;
}

template <class Category, class Default, class... Ps>
struct select {
    using type = Default;
};
template <class Category, class Default, class P, class... Ps>
struct select<Category, Default, P, Ps...> {
    using type = std::conditional_t<PolicyOf<P, Category>, P, typename select<Category, Default, Ps...>::type>;
};
template <class Category, class Default, class... Ps>
using select_t = typename select<Category, Default, Ps...>::type;

template <class New, class Kept, class... Rest>
struct replace;
template <class New, template <class...> class C, class... Kept>
struct replace<New, C<Kept...>> {
    using type = C<Kept..., New>;
};
template <class New, template <class...> class C, class... Kept, class P, class... Rest>
struct replace<New, C<Kept...>, P, Rest...> {
    using kept = std::conditional_t<PolicyOf<P, typename New::policy_category>,
                                    C<Kept...>, C<Kept..., P>>;
    using type = typename replace<New, kept, Rest...>::type;
};

/// `Config` with `New` in place of its policy of that kind, without instantiating anything.
template <class New, class Config>
struct rebind;
template <class New, template <class...> class C, class... Ps>
struct rebind<New, C<Ps...>> {
    using type = typename replace<New, C<>, Ps...>::type;
};

[[nodiscard]] constexpr std::size_t times(std::size_t a, std::size_t b) noexcept {
    return a == dynamic || b == dynamic ? dynamic : a * b;
}
[[nodiscard]] constexpr std::size_t over(std::size_t a, std::size_t b) noexcept {
    return a == dynamic || b == dynamic ? dynamic : a / b;
}

}  // namespace detail

/// A complete, checked configuration: what PopTorch spreads over `poptorch.Options`, as one type.
/// @code
///   namespace cfg = tessera::config;
///   using c = cfg::config<cfg::mixed, cfg::pipelined<cfg::one_f_one_b, 2>,
///                         cfg::gradient_accumulation<8>, cfg::device_iterations<4>, cfg::replication<2>>;
///   static_assert(c::ipus_needed == 4 && c::micro_batches_per_call == 64);
///   using eval = c::for_inference;   // G = 1, outputs of every micro-batch
/// @endcode
template <class... Policies>
struct config {
private:
    static constexpr bool arguments_checked = (detail::argument_is_a_tessera_policy<Policies>() && ...);
    static constexpr bool categories_checked =
        detail::one_policy_per_category<category::precision, Policies...>() &&
        detail::one_policy_per_category<category::strategy, Policies...>() &&
        detail::one_policy_per_category<category::output_mode, Policies...>() &&
        detail::one_policy_per_category<category::replication, Policies...>() &&
        detail::one_policy_per_category<category::instances, Policies...>() &&
        detail::one_policy_per_category<category::gradient_accumulation, Policies...>() &&
        detail::one_policy_per_category<category::device_iterations, Policies...>() &&
        detail::one_policy_per_category<category::micro_batch, Policies...>() &&
        detail::one_policy_per_category<category::io, Policies...>() &&
        detail::one_policy_per_category<category::mode, Policies...>() &&
        detail::one_policy_per_category<category::available_ipus, Policies...>();

    template <class Category, class Default>
    using pick = detail::select_t<Category, Default, Policies...>;
    using mode_policy = pick<category::mode, training>;
    using replication_policy = pick<category::replication, tessera::config::replication<1>>;
    using accumulation_policy = pick<category::gradient_accumulation, tessera::config::gradient_accumulation<1>>;

public:
    using precision = pick<category::precision, fp32>;
    using strategy = pick<category::strategy, single>;
    static constexpr bool is_training = mode_policy::is_training;
    /// As in PopTorch: `final` for training, `all` for inference, unless given.
    using output_mode = pick<category::output_mode, std::conditional_t<is_training, final, all>>;
    using io_policy = pick<category::io, float_io>;
    using io_type = typename io_policy::type;

    static constexpr std::size_t replicas = replication_policy::value;
    static constexpr std::size_t input_group = replication_policy::input_group;
    static constexpr std::size_t instances = pick<category::instances, tessera::config::instances<1>>::value;
    static constexpr std::size_t gradient_accumulation = accumulation_policy::value;
    static constexpr reduction accumulation_reduction = accumulation_policy::reduce;
    static constexpr std::size_t device_iterations = pick<category::device_iterations, tessera::config::device_iterations<1>>::value;
    static constexpr std::size_t micro_batch = pick<category::micro_batch, tessera::config::micro_batch<dynamic>>::value;
    static constexpr std::size_t available_ipus = pick<category::available_ipus, tessera::config::available_ipus<dynamic>>::value;

    static constexpr std::size_t stages = strategy::stages;
    static constexpr std::size_t ipus_per_replica = strategy::ipus_per_replica;
    static constexpr std::size_t ipus_needed = detail::times(replicas, ipus_per_replica);

private:
    static constexpr bool is_pipelined = strategy::kind == strategy_kind::pipelined;
    static constexpr bool is_interleaved = detail::virtual_stages_of<strategy>() > 1;
    static constexpr bool rules_checked =
        rules::replicas_divide_among_instances<replicas, instances>() &&
        rules::input_groups_divide_local_replicas<detail::over(replicas, instances), input_group>() &&
        rules::ipus_needed_fit_the_system<replicas, ipus_per_replica, available_ipus>() &&
        rules::pipelined_training_needs_accumulation<is_training && is_pipelined && !is_interleaved, stages,
                                                     gradient_accumulation>() &&
        rules::pipelined_inference_needs_device_iterations<!is_training && is_pipelined && !is_interleaved, stages,
                                                           device_iterations>() &&
        rules::interleaved_pipeline_needs_whole_groups<is_interleaved, ipus_per_replica,
                                                       is_training ? gradient_accumulation : device_iterations,
                                                       is_training>() &&
        rules::inference_has_no_gradient_accumulation<!is_training, gradient_accumulation>();

public:
    static constexpr std::size_t local_replicas = detail::over(replicas, instances);
    /// Micro-batches one host call consumes on this instance: D × G × R_local / input group
    /// (inference drops G); `dynamic` while a count is.
    static constexpr std::size_t micro_batches_per_call = detail::times(
        detail::times(device_iterations, is_training ? gradient_accumulation : 1), detail::over(local_replicas, input_group));
    /// Samples one host call consumes on this instance: micro_batch × micro_batches_per_call.
    static constexpr std::size_t combined_batch = detail::times(micro_batch, micro_batches_per_call);
    /// Distinct samples whose gradients make one weight update: micro_batch × G × R / input group.
    static constexpr std::size_t samples_per_update =
        detail::times(detail::times(micro_batch, gradient_accumulation), detail::over(replicas, input_group));

    /// This configuration with `P` in place of the policy of its kind (or added).
    template <Policy P>
    using with = typename detail::replace<P, config<>, Policies...>::type;
    /// The inference configuration of the same model: G = 1, default outputs `all`.
    using for_inference =
        typename detail::rebind<tessera::config::gradient_accumulation<1>, with<inference>>::type;

    static_assert(arguments_checked && categories_checked && rules_checked);
};

template <class T>
inline constexpr bool is_config = false;
template <class... Ps>
inline constexpr bool is_config<config<Ps...>> = true;

/// A tessera::config::config<...>.
template <class C>
concept Config = is_config<C>;

}  // namespace tessera::config
