#pragma once
// A non-owning reference to a callable: one indirect call, no allocation. Below every layer: the
// executor takes its feed through one, the networks their visitors.
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace tessera::detail {

template <class Signature>
class function_ref;

/// Refers to a callable that outlives it (a function argument): a function template that takes any
/// callable through one of these is compiled once instead of once per callable type.
template <class R, class... Args>
class function_ref<R(Args...)> {
public:
    template <class F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<R, F&, Args...>)
    function_ref(F&& f) noexcept  // NOLINT(google-explicit-constructor): a reference, like std::function_ref
        : m_object(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          m_call([](void* object, Args... args) -> R {
              return std::invoke(*static_cast<std::remove_reference_t<F>*>(object), std::forward<Args>(args)...);
          }) {}

    R operator()(Args... args) const { return m_call(m_object, std::forward<Args>(args)...); }

private:
    void* m_object;
    R (*m_call)(void*, Args...);
};

}  // namespace tessera::detail
