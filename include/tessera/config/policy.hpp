#pragma once
// What makes a type a tessera policy: a category tag, one per kind of decision.
#include <concepts>
#include <cstddef>
#include <span>

namespace tessera::config {

/// A count that is not fixed at compile time: it comes from config::options when a session is built.
inline constexpr std::size_t dynamic = std::dynamic_extent;

/// The kinds of decision a config makes; each policy names exactly one in `policy_category`.
namespace category {
struct precision {};
struct strategy {};
struct output_mode {};
struct replication {};
struct instances {};
struct gradient_accumulation {};
struct device_iterations {};
struct micro_batch {};
struct io {};
struct mode {};
struct available_ipus {};
}  // namespace category

/// Any tessera policy.
template <class P>
concept Policy = requires { typename P::policy_category; };

/// A policy of the given category.
template <class P, class Category>
concept PolicyOf = Policy<P> && std::same_as<typename P::policy_category, Category>;

}  // namespace tessera::config
