// Spare stage states: a dropped stash goes back to its stage's pool and the next forward of that
// stage takes it, with its activations' buffers; the pool itself from any thread, and never keeping
// an object an exception left behind.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "network_helpers.hpp"
#include "tessera/config.hpp"
#include "tessera/exec/spare_pool.hpp"
#include "tessera/exec/staged_network.hpp"
#include "tessera/nn/resnet.hpp"

namespace test_spare_pool {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace nn = tessera::nn;

namespace {

struct counted {
    std::vector<int> values;
};
using pool_t = exec::spare_pool<counted>;

}  // namespace

TEST_CASE("a spare pool hands out what was given back, as it was left, from any thread", "[exec][threads]") {
    auto pool = std::make_shared<pool_t>();
    counted* first = nullptr;
    {
        auto a = pool_t::take(pool);
        CHECK(a->values.empty());  // new: value-initialised
        a->values = {1, 2, 3};
        first = a.get();
        CHECK(pool->size() == 0);
    }
    CHECK(pool->size() == 1);
    auto b = pool_t::take(pool);
    CHECK(b.get() == first);
    CHECK(b->values == std::vector<int>{1, 2, 3});
    auto c = pool_t::take(pool);  // none spare: a new one
    CHECK(c.get() != first);
    CHECK(pool->size() == 0);
    std::thread([moved = std::move(b)]() mutable { moved.reset(); }).join();  // given back on another thread
    CHECK(pool->size() == 1);
    c.reset();
    CHECK(pool->size() == 2);
}

TEST_CASE("a spare pool frees what an exception's unwinding drops, and outlives its last owner", "[exec]") {
    auto pool = std::make_shared<pool_t>();
    CHECK_THROWS_AS(
        [&] {
            auto a = pool_t::take(pool);
            a->values = {7};
            throw std::runtime_error("a failing micro-batch");
        }(),
        std::runtime_error);
    CHECK(pool->size() == 0);  // perhaps half updated: not kept
    const std::weak_ptr<pool_t> watch = pool;
    {
        auto held = pool_t::take(pool);
        pool.reset();
        CHECK_FALSE(watch.expired());  // the handle keeps its pool
    }                                  // given back, then freed with the pool, its last handle gone
    CHECK(watch.expired());
    CHECK(pool_t::handle{} == nullptr);  // a handle without a pool deletes (here: nothing)
}

TEST_CASE("a stage's forward takes the state its last dropped stash held, and computes the same", "[exec][nn]") {
    using P = cfg::fp32;
    using net_t = nn::resnet<nn::basic_block<P, nn::padding_shortcut>, nn::cifar_stem<P>, 1, 1>;
    using model_t = exec::staged_network<net_t, tessera::test::plain_sgd>;
    const tessera::tensor::shape in{2, 8, 8, 3};
    const net_t net(3, 10);
    model_t model(net, {0, 2}, in, tessera::test::plain_sgd{});
    const tessera::test::random_images images{2, 8, 3, 10, 5};
    const auto [x, labels] = images(0, 0, 0);

    auto [y1, st1] = model.forward(0, x);
    const auto* state = st1.get();
    const std::vector<float> first(y1.begin(), y1.end());
    st1.reset();
    auto [y2, st2] = model.forward(0, x);
    CHECK(st2.get() == state);
    CHECK(std::vector<float>(y2.begin(), y2.end()) == first);
    auto [y3, st3] = model.forward(0, x);  // the other is in use: a new state, the same numbers
    CHECK(st3.get() != state);
    CHECK(std::vector<float>(y3.begin(), y3.end()) == first);

    // Through a backward: the stash it consumes is the next forward's state.
    auto [z, last] = model.forward(1, y2);
    const auto* last_state = last.get();
    auto [loss, dz] = model.loss(z, {labels, labels.size()});
    (void)loss;
    (void)model.backward(1, std::move(dz), std::move(last));
    auto [z2, again] = model.forward(1, y2);
    CHECK(again.get() == last_state);
    CHECK(std::vector<float>(z2.begin(), z2.end()) == std::vector<float>(z.begin(), z.end()));

    // A copy of the model has pools of its own.
    st2.reset();
    model_t copy = model;
    auto [yc, stc] = copy.forward(0, x);
    CHECK(stc.get() != state);
    CHECK(std::vector<float>(yc.begin(), yc.end()) == first);
}

}  // namespace test_spare_pool
