// Sharded optimiser state on the modelled clock and in the memory plan, against hand-computed figures:
// the all-reduce's 2 (R - 1) / R of the gradients becomes a reduce-scatter of (R - 1) / R of them and
// an all-gather of (R - 1) / R of the weights; each IPU holds 1/R of the state and steps 1/R of it.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>

#include "tessera/config/strategy.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/timing.hpp"

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace emu = tessera::emulator;

namespace {

// Two equal stages of 1 MB of 16-bit weights: 2 MB of fp32 gradients, 4 MB of Adam moments.
exec::cost_model two_stages() {
    exec::stage_cost c;
    c.forward_flops = 1e9;
    c.backward_flops = 2e9;
    c.weight_bytes = 1'000'000;
    c.gradient_bytes = 2'000'000;
    c.optimiser_bytes = 4'000'000;
    c.update_bytes = 2 * (c.weight_bytes + c.gradient_bytes + c.optimiser_bytes);
    c.input_bytes = c.output_bytes = c.stash_bytes = 1000;
    return exec::balanced_costs(2, c, 16);
}

exec::schedule scheduled(std::size_t replicas, bool sharded) {
    auto r = exec::request_for<cfg::pipelined<cfg::one_f_one_b, 2>>(4);
    r.replicas = replicas;
    r.optimizer_sharding = sharded;
    return exec::make_schedule(r);
}

}  // namespace

TEST_CASE("the modelled clock charges a reduce-scatter of the gradients and an all-gather of the weights",
          "[exec][shard][timing]") {
    const emu::device_spec spec;
    const double link = spec.ipu_link_bandwidth;
    for (const std::size_t R : {2u, 4u}) {
        CAPTURE(R);
        const double share = (double(R) - 1) / double(R);
        const auto plain = exec::simulate(scheduled(R, false), two_stages(), spec);
        const auto sharded = exec::simulate(scheduled(R, true), two_stages(), spec);
        for (std::size_t i = 0; i < 2; ++i) {
            // Each IPU holds one stage: 2 MB of gradients and 1 MB of weights.
            CHECK(plain[i].total(emu::activity::all_reduce) == Approx(2 * share * 2e6 / link));
            CHECK(sharded[i].total(emu::activity::all_reduce) == Approx(share * 2e6 / link + share * 1e6 / link));
        }
        // The step moves 1/R of the weights, gradients and state, and zeroes the other gradients: what
        // an unsharded step of that many bytes costs.
        auto moved = two_stages();
        for (auto& c : moved.stages) c.update_bytes = std::size_t(14e6 / double(R) + 2e6 * share);
        const auto equivalent = exec::simulate(scheduled(R, false), moved, spec);
        CHECK(sharded[0].total(emu::activity::update) == Approx(equivalent[0].total(emu::activity::update)));
        CHECK(sharded[0].total(emu::activity::update) < plain[0].total(emu::activity::update));
    }
    // Across hosts (processes > 1 with the network's bandwidth): the shards' sums come back from the
    // host, the whole weights go back to each IPU.
    auto costs = two_stages();
    costs.processes = 2;
    costs.host_network_bandwidth = 10e9;
    const double host = spec.host_link_bandwidth, net = costs.host_network_bandwidth;
    const auto clocks = exec::simulate(scheduled(4, true), costs, spec);
    const double reduce_scatter = 0.75 * 2e6 / link + 2e6 / host + 0.5 * 2e6 / net + 1e6 / host;
    const double all_gather = 0.75 * 1e6 / link + 0.5e6 / host + 0.5 * 1e6 / net + 1e6 / host;
    CHECK(clocks[0].total(emu::activity::all_reduce) == Approx(reduce_scatter + all_gather));
}

TEST_CASE("the memory plan holds 1/R of the optimiser state on each IPU", "[exec][shard][memory]") {
    const auto state = [](const exec::memory_plan& plan) {
        std::size_t bytes = 0;
        std::string name;
        for (const auto& item : plan.ipus[0].items)
            if (item.kind == emu::memory_kind::optimiser_state) bytes += item.bytes, name = item.name;
        return std::pair{bytes, name};
    };
    const auto plain = state(exec::plan_memory(scheduled(4, false), two_stages()));
    CHECK(plain == std::pair<std::size_t, std::string>{4'000'000, "stage 0 optimiser state"});
    CHECK(state(exec::plan_memory(scheduled(4, true), two_stages())) ==
          std::pair<std::size_t, std::string>{1'000'000, "stage 0 optimiser state (1/4 shard)"});
    auto odd = two_stages();
    odd.stages[0].optimiser_bytes = 4'000'001;  // the largest shard counts
    CHECK(state(exec::plan_memory(scheduled(4, true), odd)).first == 1'000'001);
    // Everything else is as without sharding.
    const auto a = exec::plan_memory(scheduled(4, false), two_stages());
    const auto b = exec::plan_memory(scheduled(4, true), two_stages());
    CHECK(a.ipus[1].on_chip() - b.ipus[1].on_chip() == 3'000'000);
}
