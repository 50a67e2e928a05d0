#pragma once
// Input-gradient buffers handed between the units of one backward call. Each layer's state keeps the
// buffer its backward writes its input gradient into; a step touches every such buffer once, and a
// ResNet-20 step at batch 32 touches more memory than a last-level cache holds, so a unit's backward
// found its buffer out of every cache and had each line fetched from memory before overwriting it.
// Within one call, the buffers of the units whose gradients the call has already consumed were
// written moments before: gradient_recycler swaps the most recently written of them into the unit
// about to run. Swaps only exchange buffers of one shape, so nothing is allocated or freed, and no
// value changes: every buffer a unit reads it wrote (or its neighbour handed it) in this call.
#include <cstddef>
#include <utility>
#include <vector>

#include "tessera/nn/layer.hpp"

namespace tessera::nn {

namespace detail {

/// Runs f(buffer) on each input-gradient buffer of a layer's state, in the order its backward writes
/// them: the state's own for_each_gradient_buffer where it has one (a composite layer's state, which
/// visits its parts'), else its grad_input, if it has one.
template <class S, class F>
void for_each_gradient_buffer(S& st, F&& f) {
    if constexpr (requires { st.for_each_gradient_buffer(f); })
        st.for_each_gradient_buffer(f);
    else if constexpr (requires { f(st.grad_input); })
        f(st.grad_input);
}

}  // namespace detail

/// The input-gradient buffers of units whose backward has run in this call and whose gradients the
/// call has consumed ("retired"), handed to the unit about to run ("refresh"), for a chain that runs
/// units one after another, each reading only the gradient the one before it returned. Not for a
/// backward split into input and weight halves: a layer's backward_input keeps its output gradient
/// for backward_weights, so that gradient outlives the next unit's backward.
template <class A>
class gradient_recycler {
public:
    /// Before the unit whose state is `st` runs: each of its buffers that has a shape (it ran before)
    /// swaps with the most recently retired buffer of that shape, if any.
    template <class S>
    void refresh(S& st) {
        detail::for_each_gradient_buffer(st, [this](A& b) {
            if (b.size() == 0) return;
            for (std::size_t i = m_retired.size(); i-- > 0;) {
                if (m_retired[i]->shape() == b.shape()) {
                    using std::swap;
                    swap(b, *m_retired[i]);
                    m_retired.erase(m_retired.begin() + static_cast<std::ptrdiff_t>(i));
                    return;
                }
            }
        });
    }

    /// After the unit whose state is `st` ran and returned `live` (the gradient the next unit reads):
    /// the gradient the unit before it returned (which this unit consumed) and the unit's buffers
    /// other than `live` are retired, in the order they were written.
    template <class S>
    void retire(S& st, const A* live) {
        A* const previous = std::exchange(m_live, nullptr);
        if (previous == live)
            m_live = previous;  // handed on unchanged: still live
        else if (previous != nullptr)
            add(previous);
        detail::for_each_gradient_buffer(st, [&](A& b) {
            if (&b == live)
                m_live = &b;
            else
                add(&b);
        });
    }

private:
    void add(A* b) {
        if (b->size() != 0) m_retired.push_back(b);
    }

    std::vector<A*> m_retired;  // the most recently written last
    A* m_live = nullptr;        // a retired unit's buffer that the next unit reads
};

}  // namespace tessera::nn
