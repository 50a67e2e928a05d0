// gradient_recycler on states of its own making: which buffer goes where, and which never moves.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "tessera/nn/gradient_buffers.hpp"

namespace test_gradient_buffers {

using namespace tessera;
using tessera::tensor::shape;
using grad = nn::activation<config::fp32>;

namespace {

/// A unit's state with two gradient buffers, written a then b (a composite state, as a block's).
struct unit {
    struct leaf {
        grad grad_input;
    };
    leaf a, b;
    template <class F>
    void for_each_gradient_buffer(F&& f) {
        nn::detail::for_each_gradient_buffer(a, f);
        nn::detail::for_each_gradient_buffer(b, f);
    }
};

/// No buffer yet: a state whose unit never ran.
constexpr shape none{0, 0, 0, 0};

unit make_unit(const shape& sa, const shape& sb) {
    unit u;
    if (sa.size() != 0) u.a.grad_input = tensor::make_nhwc<float>(sa);
    if (sb.size() != 0) u.b.grad_input = tensor::make_nhwc<float>(sb);
    return u;
}

}  // namespace

TEST_CASE("gradient_recycler hands a unit the most recently retired buffers of its shapes, never the live one",
          "[nn][gradient_buffers]") {
    const shape s{2, 4, 4, 3};
    unit u3 = make_unit(s, s), u2 = make_unit(s, s), u1 = make_unit(s, s);
    const float *a3 = u3.a.grad_input.data(), *b3 = u3.b.grad_input.data();
    const float *a2 = u2.a.grad_input.data(), *b2 = u2.b.grad_input.data();
    const float *a1 = u1.a.grad_input.data(), *b1 = u1.b.grad_input.data();
    nn::gradient_recycler<grad> r;
    r.refresh(u3);  // nothing retired yet
    CHECK(u3.a.grad_input.data() == a3);
    CHECK(u3.b.grad_input.data() == b3);
    r.retire(u3, &u3.b.grad_input);  // u3 returned b: a retired, b live
    r.refresh(u2);
    CHECK(u2.a.grad_input.data() == a3);  // u3's a
    CHECK(u3.a.grad_input.data() == a2);  // u2's old buffer, in the retired slot
    CHECK(u2.b.grad_input.data() == b2);  // nothing left to hand it: u3's b is live
    r.retire(u2, &u2.b.grad_input);       // u3's b (consumed by u2), then u2's a, retired
    r.refresh(u1);
    CHECK(u1.a.grad_input.data() == a3);  // u2's a, retired last (u3's buffer since the swap)
    CHECK(u1.b.grad_input.data() == b3);  // u3's b
    CHECK(u2.b.grad_input.data() == b2);  // live: never moved
    // Every buffer is still held by one slot: nothing lost, nothing shared.
    std::vector<const float*> held{u1.a.grad_input.data(), u1.b.grad_input.data(), u2.a.grad_input.data(),
                                   u2.b.grad_input.data(), u3.a.grad_input.data(), u3.b.grad_input.data()},
        made{a1, b1, a2, b2, a3, b3};
    std::ranges::sort(held);
    std::ranges::sort(made);
    CHECK(held == made);
}

TEST_CASE("gradient_recycler swaps only buffers of one shape, skips empty ones, and keeps a gradient handed on live",
          "[nn][gradient_buffers]") {
    const shape s{2, 4, 4, 3}, t{2, 2, 2, 6};
    SECTION("shapes") {
        unit u2 = make_unit(s, none), u1 = make_unit(t, none);
        const float* a1 = u1.a.grad_input.data();
        nn::gradient_recycler<grad> r;
        r.retire(u2, nullptr);
        r.refresh(u1);
        CHECK(u1.a.grad_input.data() == a1);
        CHECK(u1.b.grad_input.size() == 0);  // empty: neither handed nor taken
    }
    SECTION("a unit that hands on the gradient it was given") {
        unit u3 = make_unit(s, s), u2 = make_unit(none, none), u1 = make_unit(s, s);
        const float *a3 = u3.a.grad_input.data(), *b3 = u3.b.grad_input.data();
        nn::gradient_recycler<grad> r;
        r.retire(u3, &u3.b.grad_input);
        r.retire(u2, &u3.b.grad_input);  // u2 returned u3's b as it was: still live
        r.refresh(u1);
        CHECK(u1.a.grad_input.data() == a3);
        CHECK(u3.b.grad_input.data() == b3);
        CHECK(u1.b.grad_input.data() != b3);
    }
}

}  // namespace test_gradient_buffers
