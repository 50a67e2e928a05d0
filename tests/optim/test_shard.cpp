// Sharded optimiser state: replicas that each step their shard of the weights, with the state of that
// shard alone, and then gather the others' updated shards compute what one unsharded step computes,
// bit for bit; the shards' states together are the unsharded state.
#include <catch2/catch.hpp>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/optim/adamw.hpp"
#include "tessera/optim/sgd.hpp"
#include "tessera/optim/shard.hpp"

using namespace tessera;

namespace {

/// Three named parameters of 7, 1 and 12 elements (sizes that shards cut inside and across).
template <class W>
struct params {
    std::vector<std::string> names{"a.weight", "b.bias", "c.weight"};
    std::vector<std::vector<W>> values;
    std::vector<std::vector<float>> grads;

    params() {
        for (const std::size_t n : {7u, 1u, 12u}) {
            values.emplace_back();
            grads.emplace_back(n, 0.0f);
            for (std::size_t k = 0; k < n; ++k) values.back().push_back(W(0.5f + 0.01f * float(k) - 0.2f * float(values.size())));
        }
    }
    void set_gradients(int step) {
        for (std::size_t p = 0; p < grads.size(); ++p)
            for (std::size_t k = 0; k < grads[p].size(); ++k)
                grads[p][k] = 0.001f * float((k * 31 + p * 17 + std::size_t(step) * 7) % 23) - 0.011f;
    }
    template <class F>
    void visit_parameters(F&& f) {
        for (std::size_t p = 0; p < names.size(); ++p) f(names[p], std::span<W>(values[p]), std::span<float>(grads[p]));
    }
    [[nodiscard]] std::vector<W> flat() const {
        std::vector<W> all;
        for (const auto& v : values) all.insert(all.end(), v.begin(), v.end());
        return all;
    }
    void set_flat(const std::vector<W>& all) {
        std::size_t k = 0;
        for (auto& v : values)
            for (auto& x : v) x = all.at(k++);
    }
};

template <class O>
std::vector<float> state_of(O& o) {
    std::vector<float> all;
    o.visit_state([&](std::string_view, std::span<float> v) { all.insert(all.end(), v.begin(), v.end()); });
    return all;
}

/// Trains `steps` steps unsharded, and as `count` replicas stepping their shards then gathering the
/// weights; checks the weights after every step and the gathered state at the end.
template <class W, class O>
void check_sharded_equals_unsharded(const O& prototype, std::size_t count, int steps) {
    CAPTURE(count);
    params<W> whole;
    O unsharded = prototype;
    std::vector<params<W>> replicas(count);
    std::vector<O> shards(count, prototype);
    const std::size_t n = whole.flat().size();
    for (int step = 0; step < steps; ++step) {
        whole.set_gradients(step);
        unsharded.step(whole, 0.5);
        std::vector<W> gathered = replicas[0].flat();
        for (std::size_t r = 0; r < count; ++r) {
            replicas[r].set_gradients(step);
            const optim::element_range shard = optim::shard_of(n, r, count);
            shards[r].step(replicas[r], 0.5, {}, shard);
            const auto mine = replicas[r].flat();
            for (std::size_t k = shard.begin; k < shard.end; ++k) gathered[k] = mine[k];
        }
        for (auto& r : replicas) r.set_flat(gathered);
        CHECK(gathered == whole.flat());
    }
    CHECK(whole.flat() != params<W>().flat());  // the steps moved the weights
    // Each replica holds the state of its shard only; together, the unsharded state.
    std::size_t held = 0;
    for (auto& s : shards) held += state_of(s).size();
    CHECK(held == state_of(unsharded).size());
    std::vector<const O*> parts;
    for (const auto& s : shards) parts.push_back(&s);
    O gathered = prototype;
    gathered.gather_shards(whole, std::span<const O* const>(parts));
    CHECK(state_of(gathered) == state_of(unsharded));
    CHECK(gathered.steps() == unsharded.steps());
    // Cut again: the shards of the unsharded state are the replicas' states.
    for (std::size_t r = 0; r < count; ++r) {
        O cut = unsharded;
        cut.keep_shard(whole, optim::shard_of(n, r, count));
        CHECK(state_of(cut) == state_of(shards[r]));
    }
}

}  // namespace

TEST_CASE("shard_of tiles the elements in near-equal consecutive shards", "[optim][shard]") {
    for (const std::size_t n : {0u, 1u, 5u, 20u, 1001u})
        for (const std::size_t count : {1u, 2u, 3u, 4u, 7u}) {
            std::size_t next = 0, smallest = n, largest = 0;
            for (std::size_t r = 0; r < count; ++r) {
                const auto s = optim::shard_of(n, r, count);
                CHECK(s.begin == next);
                next = s.end;
                smallest = std::min(smallest, s.size());
                largest = std::max(largest, s.size());
            }
            CHECK(next == n);
            CHECK(largest - smallest <= 1);
        }
    CHECK(optim::shard_of(10, 1, 4) == optim::element_range{2, 5});
    CHECK_THROWS_AS(optim::shard_of(10, 4, 4), std::invalid_argument);
    CHECK_THROWS_AS(optim::shard_of(10, 0, 0), std::invalid_argument);
}

TEST_CASE("visit_in_range gives each parameter the indices of its elements in the range", "[optim][shard]") {
    params<float> p;  // 7, 1 and 12 elements: [0, 7), [7, 8), [8, 20)
    std::vector<std::pair<std::size_t, std::size_t>> seen;
    optim::visit_in_range(p, {5, 9}, [&](std::string_view, auto, auto, std::size_t lo, std::size_t hi) { seen.emplace_back(lo, hi); });
    CHECK(seen == std::vector<std::pair<std::size_t, std::size_t>>{{5, 7}, {0, 1}, {0, 1}});
    seen.clear();
    optim::visit_in_range(p, {8, 8}, [&](std::string_view, auto, auto, std::size_t lo, std::size_t hi) { seen.emplace_back(lo, hi); });
    CHECK(seen == std::vector<std::pair<std::size_t, std::size_t>>{{7, 7}, {1, 1}, {0, 0}});
}

TEST_CASE("sgd and adamw stepping shards on replicas give the unsharded weights and state bit for bit",
          "[optim][shard][rounding]") {
    const optim::weight_rounding sr{.stochastic = true, .seed = 5};
    const optim::sgd momentum({.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    const optim::adamw adam({.learning_rate = 0.01, .weight_decay = 0.1});
    for (const std::size_t count : {2u, 3u, 4u}) {
        check_sharded_equals_unsharded<float>(momentum, count, 4);
        check_sharded_equals_unsharded<float>(adam, count, 4);
        check_sharded_equals_unsharded<half>(optim::sgd({.learning_rate = 0.1, .momentum = 0.9, .rounding = sr}), count, 4);
        check_sharded_equals_unsharded<half>(optim::adamw({.learning_rate = 0.01, .rounding = sr}), count, 4);
    }
}

TEST_CASE("a shard's state refuses another shard, and gathering needs every shard", "[optim][shard]") {
    params<float> p;
    p.set_gradients(0);
    optim::sgd opt({.learning_rate = 0.1, .momentum = 0.9});
    opt.step(p, 1.0, {}, optim::shard_of(20, 0, 2));
    CHECK_THROWS_AS(opt.step(p, 1.0, {}, optim::shard_of(20, 1, 4)), std::invalid_argument);  // other sizes
    CHECK_THROWS_AS(opt.step(p), std::invalid_argument);                                      // the whole
    CHECK_THROWS_AS(opt.keep_shard(p, optim::shard_of(20, 0, 2)), std::invalid_argument);      // already cut
    const optim::sgd* one[] = {&opt};
    optim::sgd gathered({.learning_rate = 0.1, .momentum = 0.9});
    CHECK_THROWS_AS(gathered.gather_shards(p, std::span<const optim::sgd* const>(one)), std::invalid_argument);
}
