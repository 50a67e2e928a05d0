#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/config/config.hpp"
#include "tessera/config/strategy.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/timing.hpp"

namespace test_schedule {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace emu = tessera::emulator;
using exec::opcode;

namespace {

// An independent checker: runs the IPU lists as processes over FIFO channels of the schedule's
// capacity, round-robin, and fails on a missing input, a mismatched message or a deadlock.
// Returns the stash each stage needed.
std::vector<std::size_t> execute_abstractly(const exec::schedule& sched) {
    const auto& req = sched.request;
    const std::size_t S = sched.stages, M = req.micro_batches, I = sched.ipus;
    using key = std::tuple<std::size_t, std::size_t, bool>;
    std::map<key, std::deque<std::pair<std::uint32_t, std::uint32_t>>> channels;
    std::vector<std::set<std::pair<std::uint32_t, std::uint32_t>>> have_input(I), have_output(I), have_grad(I),
        have_stash(I), have_input_grad(I);
    std::vector<std::size_t> pc(I, 0), stash_now(S, 0), stash_max(S, 0), updates(S, 0), backwards(S, 0);
    std::vector<std::size_t> all_reduces(S, 0), all_gathers(S, 0), weight_passes(S, 0);
    const bool split = sched.backward_split();
    // A stage's gradients are complete after its backward passes (split: its weight-gradient passes).
    const auto complete = [&](std::size_t s) { return (split ? weight_passes[s] : backwards[s]) == M; };
    std::vector<bool> voted(I, false);
    std::size_t votes = 0;
    std::vector<std::size_t> synced(I, 0), sync_arrivals;  // lock-step: cycles each IPU has ended
    std::vector<bool> at_sync(I, false);
    std::set<std::uint32_t> loaded_labels;
    bool progress = true;
    while (progress) {
        progress = false;
        for (std::size_t i = 0; i < I; ++i) {
            while (pc[i] < sched.programs[i].size()) {
                const auto& in = sched.programs[i][pc[i]];
                const auto sm = std::make_pair(in.stage, in.micro_batch);
                bool blocked = false;
                switch (in.op) {
                    case opcode::load:
                        REQUIRE(in.stage == 0);
                        have_input[i].insert(sm);
                        break;
                    case opcode::load_label: loaded_labels.insert(in.micro_batch); break;
                    case opcode::recv_act:
                    case opcode::recv_grad: {
                        auto& q = channels[{in.peer, i, in.op == opcode::recv_grad}];
                        if (q.empty()) { blocked = true; break; }
                        const auto msg = q.front();
                        q.pop_front();
                        // Activations carry the producing stage s-1, gradients the producing stage s+1.
                        if (in.op == opcode::recv_act) {
                            REQUIRE(msg == std::make_pair(in.stage - 1, in.micro_batch));
                            have_input[i].insert(sm);
                        } else {
                            REQUIRE(msg == std::make_pair(in.stage + 1, in.micro_batch));
                            have_grad[i].insert(sm);
                        }
                        break;
                    }
                    case opcode::fwd: {
                        REQUIRE(req.ipu_of_stage[in.stage] == i);
                        const bool local = in.stage > 0 && have_output[i].count({in.stage - 1, in.micro_batch});
                        REQUIRE((have_input[i].count(sm) || local));
                        have_output[i].insert(sm);
                        if (req.training) {
                            have_stash[i].insert(sm);
                            stash_max[in.stage] = std::max(stash_max[in.stage], ++stash_now[in.stage]);
                            if (in.stage + 1 == S) {
                                REQUIRE(loaded_labels.count(in.micro_batch));
                                have_grad[i].insert(sm);  // the loss gradient
                            }
                        }
                        break;
                    }
                    case opcode::send_act:
                    case opcode::send_grad: {
                        auto& q = channels[{i, in.peer, in.op == opcode::send_grad}];
                        if (q.size() >= sched.channel_capacity) { blocked = true; break; }
                        if (in.op == opcode::send_act) REQUIRE(have_output[i].count(sm));
                        else REQUIRE(have_input_grad[i].count(sm));
                        q.emplace_back(in.stage, in.micro_batch);
                        break;
                    }
                    case opcode::outfeed: REQUIRE(have_output[i].count(sm)); break;
                    case opcode::bwd: {
                        REQUIRE(req.ipu_of_stage[in.stage] == i);
                        REQUIRE(have_stash[i].count(sm));
                        const bool local = in.stage + 1 < S && have_input_grad[i].count({in.stage + 1, in.micro_batch});
                        REQUIRE((have_grad[i].count(sm) || local));
                        if (!split) {  // split: the stash lives on until the weight-gradient pass
                            --stash_now[in.stage];
                            have_stash[i].erase(sm);
                        }
                        have_input_grad[i].insert(sm);
                        ++backwards[in.stage];
                        break;
                    }
                    case opcode::bwd_weights:
                        REQUIRE(split);
                        REQUIRE(req.ipu_of_stage[in.stage] == i);
                        REQUIRE(have_input_grad[i].count(sm));  // after its own input-gradient pass
                        REQUIRE(have_stash[i].count(sm));
                        // In micro-batch order: each weight gradient adds micro-batches as the sequential run does.
                        REQUIRE(weight_passes[in.stage] == in.micro_batch);
                        --stash_now[in.stage];
                        have_stash[i].erase(sm);
                        ++weight_passes[in.stage];
                        break;
                    case opcode::all_reduce:
                    case opcode::reduce_scatter:
                        REQUIRE(complete(in.stage));
                        REQUIRE((in.op == opcode::reduce_scatter) == sched.optimizer_sharded());
                        ++all_reduces[in.stage];
                        break;
                    case opcode::all_gather:  // the updated shards, once per update, after it
                        REQUIRE(sched.optimizer_sharded());
                        REQUIRE(updates[in.stage] == 1);
                        ++all_gathers[in.stage];
                        break;
                    case opcode::update:
                        REQUIRE(complete(in.stage));  // after all of the stage's backward passes
                        REQUIRE(all_reduces[in.stage] == (req.replicas > 1 ? 1u : 0u));
                        if (req.check_overflow) {  // after every stage's: the vote saw all gradients
                            REQUIRE(votes == I);
                            for (std::size_t t = 0; t < S; ++t) REQUIRE(complete(t));
                        }
                        ++updates[in.stage];
                        break;
                    case opcode::vote:  // a collective of every IPU: blocks until all have arrived
                        REQUIRE(req.check_overflow);
                        for (std::size_t t = 0; t < S; ++t)
                            if (req.ipu_of_stage[t] == i) REQUIRE(complete(t));  // after this IPU's backwards
                        if (!voted[i]) {
                            voted[i] = true;
                            ++votes;
                        }
                        blocked = votes < I;
                        break;
                    case opcode::sync: {  // lock-step: every IPU ends the k-th cycle together
                        REQUIRE(sched.lock_step_cycles());
                        const std::size_t k = synced[i];
                        if (sync_arrivals.size() <= k) sync_arrivals.resize(k + 1, 0);
                        if (!at_sync[i]) at_sync[i] = true, ++sync_arrivals[k];
                        blocked = sync_arrivals[k] < I;
                        if (!blocked) at_sync[i] = false, ++synced[i];
                        break;
                    }
                    case opcode::stream_in:
                    case opcode::stream_out: break;
                }
                if (blocked) break;
                ++pc[i];
                progress = true;
            }
        }
    }
    for (std::size_t i = 0; i < I; ++i) {
        INFO("IPU " << i << " stopped at instruction " << pc[i] << " of " << sched.programs[i].size());
        REQUIRE(pc[i] == sched.programs[i].size());  // otherwise: deadlock
    }
    for (const auto& [k, q] : channels) REQUIRE(q.empty());
    for (std::size_t s = 0; s < S; ++s) CHECK(updates[s] == (req.training ? 1u : 0u));
    for (std::size_t s = 0; s < S; ++s) CHECK(all_gathers[s] == (req.training && sched.optimizer_sharded() ? 1u : 0u));
    CHECK(votes == (req.training && req.check_overflow ? I : 0u));
    for (std::size_t i = 0; i < I; ++i) CHECK(synced[i] == synced[0]);  // every IPU ends every cycle
    if (!sched.lock_step_cycles()) CHECK(synced[0] == 0u);
    return stash_max;
}

// Each micro-batch's forward and backward on every stage exactly once.
void check_complete(const exec::schedule& sched) {
    std::map<std::tuple<opcode, std::uint32_t, std::uint32_t>, int> count;
    std::set<std::uint32_t> seqs;
    for (const auto& program : sched.programs)
        for (const auto& in : program) {
            ++count[{in.op, in.stage, in.micro_batch}];
            REQUIRE(seqs.insert(in.seq).second);  // a global order: every position once
        }
    for (std::uint32_t s = 0; s < sched.stages; ++s)
        for (std::uint32_t m = 0; m < sched.request.micro_batches; ++m) {
            CHECK(count[{opcode::fwd, s, m}] == 1);
            CHECK(count[{opcode::bwd, s, m}] == (sched.request.training ? 1 : 0));
            CHECK(count[{opcode::bwd_weights, s, m}] == (sched.backward_split() ? 1 : 0));
        }
    for (const auto& program : sched.programs)  // the lists keep the global order
        for (std::size_t k = 1; k < program.size(); ++k) REQUIRE(program[k - 1].seq < program[k].seq);
}

// IPU `ipu`'s passes as text: "F2.0 B2.0 W2.0 " (F forward, B backward or input gradient, W weight
// gradient; stage.micro-batch), or "F0 B0 W0 " (micro-batch only).
std::string passes_of(const exec::schedule& sched, std::size_t ipu, bool with_stage = true) {
    std::string text;
    for (const auto& in : sched.programs[ipu]) {
        if (in.op != opcode::fwd && in.op != opcode::bwd && in.op != opcode::bwd_weights) continue;
        text += in.op == opcode::fwd ? "F" : in.op == opcode::bwd ? "B" : "W";
        if (with_stage) text += std::to_string(in.stage) + ".";
        text += std::to_string(in.micro_batch) + " ";
    }
    return text;
}

// A pipeline of S stages, stage s on IPU s, in `order`, G micro-batches, training.
exec::schedule_request pipeline_request(exec::pipeline_order order, std::size_t S, std::size_t G) {
    exec::schedule_request r;
    r.strategy = cfg::strategy_kind::pipelined;
    r.order = order;
    r.ipu_of_stage.clear();
    for (std::size_t s = 0; s < S; ++s) r.ipu_of_stage.push_back(s);
    r.micro_batches = G;
    return r;
}

template <class Strategy>
exec::schedule checked(std::size_t G, std::size_t R = 1) {
    auto sched = exec::make_schedule<Strategy>(G, true, R);
    check_complete(sched);
    const auto stash = execute_abstractly(sched);
    CHECK(stash == sched.stash);
    return sched;
}

}  // namespace

TEST_CASE("sharded runs one micro-batch at a time: stash 1", "[exec][schedule]") {
    for (std::size_t G : {1u, 3u, 8u}) {
        const auto two = checked<cfg::sharded<2>>(G);
        CHECK(two.stash == std::vector<std::size_t>{1, 1});
        const auto four = checked<cfg::sharded<4>>(G, 2);
        CHECK(four.stash == std::vector<std::size_t>(4, 1));
        CHECK(four.ipus == 4);
    }
    const auto single = checked<cfg::single>(4);
    CHECK(single.programs.size() == 1);
}

TEST_CASE("GPipe stashes G activations per stage; 1F1B at most S - s", "[exec][schedule]") {
    for (std::size_t G : {3u, 4u, 8u, 16u}) {
        const auto g2 = checked<cfg::pipelined<cfg::gpipe, 2>>(G);
        CHECK(g2.stash == std::vector<std::size_t>{G, G});
        const auto o2 = checked<cfg::pipelined<cfg::one_f_one_b, 2>>(G, 4);
        CHECK(o2.stash == std::vector<std::size_t>{2, 1});
    }
    for (std::size_t G : {7u, 8u, 12u}) {
        const auto g4 = checked<cfg::pipelined<cfg::gpipe, 4>>(G, 2);
        CHECK(g4.stash == std::vector<std::size_t>(4, G));
        const auto o4 = checked<cfg::pipelined<cfg::one_f_one_b, 4>>(G);
        CHECK(o4.stash == std::vector<std::size_t>{4, 3, 2, 1});
    }
}

TEST_CASE("1F1B alternates after its warm-up", "[exec][schedule]") {
    const auto sched = exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 3>>(6);
    std::vector<std::string> passes;
    for (const auto& in : sched.programs[0])
        if (in.op == opcode::fwd || in.op == opcode::bwd) passes.push_back(exec::to_string(in));
    CHECK(passes == std::vector<std::string>{"fwd s0 mb0", "fwd s0 mb1", "fwd s0 mb2", "bwd s0 mb0", "fwd s0 mb3",
                                             "bwd s0 mb1", "fwd s0 mb4", "bwd s0 mb2", "fwd s0 mb5", "bwd s0 mb3",
                                             "bwd s0 mb4", "bwd s0 mb5"});
}

TEST_CASE("phased runs stages serially on one IPU, streaming weights", "[exec][schedule]") {
    const auto sched = checked<cfg::phased<3>>(4, 2);
    CHECK(sched.ipus == 1);
    CHECK(sched.weights_streamed);
    CHECK(sched.stash == std::vector<std::size_t>(3, 4));
    std::vector<std::string> streams;
    for (const auto& in : sched.programs[0])
        if (in.op == opcode::stream_in || in.op == opcode::stream_out) streams.push_back(exec::to_string(in));
    // Stage 2's weights stay on chip from its forward phase into its backward phase.
    CHECK(streams == std::vector<std::string>{"stream_in s0", "stream_out s0", "stream_in s1", "stream_out s1",
                                              "stream_in s2", "stream_out s2", "stream_in s1", "stream_out s1",
                                              "stream_in s0", "stream_out s0"});
    // Phased on two IPUs (stages alternate) still checks out.
    checked<cfg::phased<4, cfg::ipu_map<0, 1, 0, 1>>>(3);
}

TEST_CASE("sharded optimiser state: a reduce-scatter before each update and an all-gather after it",
          "[exec][schedule]") {
    const auto sharded = [](exec::schedule_request r, bool vote) {
        r.replicas = 4;
        r.optimizer_sharding = true;
        r.check_overflow = vote;
        auto sched = exec::make_schedule(r);
        CHECK(sched.optimizer_sharded());
        check_complete(sched);
        CHECK(execute_abstractly(sched) == sched.stash);
        std::vector<std::string> tail;
        for (const auto& in : sched.programs.back())
            if (in.op != opcode::stream_in && in.op != opcode::stream_out) tail.push_back(exec::to_string(in));
        return std::vector<std::string>(tail.end() - (vote ? 4 : 3), tail.end());
    };
    const auto one_f_one_b = exec::request_for<cfg::pipelined<cfg::one_f_one_b, 2>>(4);
    CHECK(sharded(one_f_one_b, false) == std::vector<std::string>{"reduce_scatter s1", "update s1", "all_gather s1"});
    CHECK(sharded(one_f_one_b, true) ==
          std::vector<std::string>{"reduce_scatter s1", "vote", "update s1", "all_gather s1"});
    sharded(exec::request_for<cfg::phased<3>>(4, true, 2), true);
    sharded(exec::request_for<cfg::single>(2), false);
    // One replica has nothing to shard: the schedule is the unsharded one.
    auto alone = one_f_one_b;
    alone.optimizer_sharding = true;
    CHECK(!exec::make_schedule(alone).optimizer_sharded());
    CHECK(exec::make_schedule(alone).programs == exec::make_schedule(one_f_one_b).programs);
    auto four = one_f_one_b;
    four.replicas = 4, four.optimizer_sharding = true;
    CHECK(exec::make_schedule(four).description().find("optimiser state sharded") != std::string::npos);
}

TEST_CASE("several stages on one IPU are scheduled without deadlock", "[exec][schedule]") {
    checked<cfg::pipelined<cfg::gpipe, 4, cfg::ipu_map<0, 0, 1, 1>>>(8);
    checked<cfg::pipelined<cfg::one_f_one_b, 4, cfg::ipu_map<0, 1, 1, 0>>>(7, 2);
    checked<cfg::sharded<3, cfg::ipu_map<0, 1, 0>>>(5);
}

TEST_CASE("dynamic loss scaling: one overflow vote per IPU, every update after every backward pass", "[exec][schedule]") {
    const auto voting = [](exec::schedule_request r) {
        r.check_overflow = true;
        auto sched = exec::make_schedule(r);
        check_complete(sched);
        const auto stash = execute_abstractly(sched);  // checks the votes and where the updates are
        CHECK(stash == sched.stash);
        for (const auto& program : sched.programs)
            CHECK(std::count_if(program.begin(), program.end(), [](const auto& in) { return in.op == opcode::vote; }) == 1);
        return sched;
    };
    const auto gpipe = voting(exec::request_for<cfg::pipelined<cfg::gpipe, 4>>(8));
    // The stash a schedule needs is unchanged: updates only moved after the backward passes.
    CHECK(gpipe.stash == exec::make_schedule<cfg::pipelined<cfg::gpipe, 4>>(8).stash);
    voting(exec::request_for<cfg::pipelined<cfg::one_f_one_b, 3>>(5, true, 2));
    voting(exec::request_for<cfg::sharded<3, cfg::ipu_map<0, 1, 0>>>(4));
    voting(exec::request_for<cfg::single>(2));
    // Phased brings each stage's weights back on chip for its deferred update.
    const auto phased = voting(exec::request_for<cfg::phased<3>>(4, true, 2));
    std::vector<std::string> tail;
    for (const auto& in : phased.programs[0])
        if (in.op == opcode::vote || in.op == opcode::update || in.op == opcode::stream_in) tail.push_back(exec::to_string(in));
    REQUIRE(tail.size() >= 7);
    CHECK(std::vector<std::string>(tail.end() - 7, tail.end()) ==
          std::vector<std::string>{"vote", "stream_in s2", "update s2", "stream_in s1", "update s1", "stream_in s0",
                                   "update s0"});
    // Inference has nothing to vote on.
    auto inference = exec::request_for<cfg::pipelined<cfg::gpipe, 2>>(4, false);
    inference.check_overflow = true;
    CHECK(execute_abstractly(exec::make_schedule(inference)) == std::vector<std::size_t>{0, 0});
}

TEST_CASE("inference schedules: forwards only, no updates", "[exec][schedule]") {
    for (auto sched : {exec::make_schedule<cfg::pipelined<cfg::gpipe, 4>>(4, false),
                       exec::make_schedule<cfg::sharded<2>>(3, false), exec::make_schedule<cfg::phased<2>>(5, false)}) {
        check_complete(sched);
        const auto stash = execute_abstractly(sched);
        CHECK(stash == std::vector<std::size_t>(sched.stages, 0));
    }
}

TEST_CASE("too few micro-batches for a pipeline is a pipeline_depth_error naming the values", "[exec][schedule]") {
    using gpipe2 = cfg::pipelined<cfg::gpipe, 2>;
    using gpipe4 = cfg::pipelined<cfg::gpipe, 4>;
    using one4 = cfg::pipelined<cfg::one_f_one_b, 4>;
    REQUIRE_THROWS_AS(exec::make_schedule<gpipe2>(2), cfg::pipeline_depth_error);
    REQUIRE_THROWS_WITH(exec::make_schedule<one4>(6), Catch::Contains("G >= 2*S - 1 = 7, got G = 6"));
    REQUIRE_THROWS_WITH(exec::make_schedule<gpipe4>(3, false), Catch::Contains("D >= 4, got D = 3"));
    REQUIRE_THROWS_AS(exec::make_schedule<cfg::sharded<2>>(0), cfg::config_error);
    CHECK_NOTHROW(exec::make_schedule<cfg::sharded<4>>(1));  // sharded has no depth rule
}

TEST_CASE("modelled utilisation of a balanced GPipe pipeline is G / (G + S - 1)", "[exec][schedule]") {
    // 1 FLOP/s so that FLOPs are seconds; no bytes, so only compute and bubbles count.
    const emu::device_spec spec{.fp16_flops = 1.0, .fp32_flops = 1.0, .host_sync_latency = 0};
    const exec::stage_cost each{.forward_flops = 1.0, .backward_flops = 2.0};
    const auto costs = [](std::size_t S, exec::stage_cost c) {
        auto m = exec::balanced_costs(S, c);
        m.output_bytes_to_host = 0;  // compute only
        return m;
    };
    for (std::size_t S : {std::size_t{2}, std::size_t{3}, std::size_t{4}})
        for (std::size_t G : {2 * S - 1, 2 * S, std::size_t{16}}) {
            const auto sched = exec::make_schedule(exec::schedule_request{
                cfg::strategy_kind::pipelined, exec::pipeline_order::gpipe, [&] {
                    std::vector<std::size_t> m(S);
                    for (std::size_t s = 0; s < S; ++s) m[s] = s;
                    return m;
                }(), G});
            const auto clocks = exec::simulate(sched, costs(S, each), spec);
            const auto u = exec::utilisation(clocks);
            INFO("S = " << S << ", G = " << G);
            CHECK(u.makespan == double(G + S - 1) * 3.0);
            CHECK(u.mean_utilisation == Approx(double(G) / double(G + S - 1)).epsilon(1e-12));
            for (double b : u.busy) CHECK(b == double(G) * 3.0);
        }
    // Sharded: one stage busy at a time, utilisation 1 / S.
    const auto sharded = exec::simulate(exec::make_schedule<cfg::sharded<4>>(8), costs(4, each), spec);
    CHECK(exec::utilisation(sharded).mean_utilisation == Approx(0.25));
    // 1F1B has the same bubble as GPipe for balanced stages.
    const auto one = exec::simulate(exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 4>>(8),
                                    costs(4, {.forward_flops = 1.0, .backward_flops = 1.0}), spec);
    CHECK(exec::utilisation(one).mean_utilisation == Approx(8.0 / 11.0));
}

TEST_CASE("instructions print as text", "[exec][schedule]") {
    CHECK(exec::to_string(exec::instruction{opcode::send_act, 0, 2, 1, 0}) == "send_act s0 mb2 -> IPU 1");
    CHECK(exec::to_string(exec::instruction{opcode::recv_grad, 1, 0, 2, 0}) == "recv_grad s1 mb0 <- IPU 2");
    CHECK(exec::to_string(exec::instruction{opcode::update, 3}) == "update s3");
    CHECK(exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(4, true, 2).description() ==
          "pipelined<gpipe>, 2 stages on 2 IPUs, 4 micro-batches, training, 2 replicas");
}

TEST_CASE("interleaved 1F1B: each IPU runs Megatron-LM's order over its model chunks", "[exec][schedule][interleaved]") {
    // 4 stages, 2 per IPU (stage s on IPU s mod 2), G = 4: worked out by hand from the rule (groups of
    // 2 micro-batches, chunk by chunk; IPU 0 warms up with 2 (2 - 0 - 1) + (2 - 1) 2 = 4 forwards,
    // IPU 1 with 2; backwards take the chunks in reverse).
    using c = cfg::pipelined<cfg::interleaved<2>, 4>;
    static_assert(c::ipus_per_replica == 2 && c::ipu_of_stage(3) == 1 && c::virtual_stages == 2);
    const auto sched = exec::make_schedule<c>(4);
    CHECK(sched.ipus == 2);
    const auto passes = [&](std::size_t ipu) { return passes_of(sched, ipu); };
    CHECK(passes(0) == "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 B0.2 B0.3 ");
    CHECK(passes(1) == "F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 B1.2 B1.3 ");
    CHECK(sched.description() == "pipelined<interleaved<2>>, 4 stages on 2 IPUs, 4 micro-batches, training");
    check_complete(sched);
    CHECK(execute_abstractly(sched) == sched.stash);
}

TEST_CASE("interleaved schedules run without deadlock, with votes, replicas and inference", "[exec][schedule][interleaved]") {
    const auto checked = [](exec::schedule_request r) {
        const auto sched = exec::make_schedule(r);
        check_complete(sched);
        CHECK(execute_abstractly(sched) == sched.stash);
        return sched;
    };
    for (const std::size_t G : {4u, 6u, 8u, 16u}) {
        CAPTURE(G);
        checked(exec::request_for<cfg::pipelined<cfg::interleaved<2>, 4>>(G));
        checked(exec::request_for<cfg::pipelined<cfg::interleaved<4>, 8>>(G));
        if (G % 3 == 0) checked(exec::request_for<cfg::pipelined<cfg::interleaved<2>, 6>>(G));
        auto voting = exec::request_for<cfg::pipelined<cfg::interleaved<3>, 6>>(G, true, 2);
        voting.check_overflow = true, voting.optimizer_sharding = true;
        checked(voting);
    }
    checked(exec::request_for<cfg::pipelined<cfg::interleaved<2>, 4>>(2, false));  // inference: D = I
    // ... which the configuration's compile-time rule accepts too (it asks 2I - 1 of training only).
    using inference = cfg::config<cfg::pipelined<cfg::interleaved<2>, 4>, cfg::inference, cfg::device_iterations<2>>;
    static_assert(inference::ipus_needed == 2);
    // Interleaving lowers the stash of 1F1B over the same stages: fewer forwards run ahead per chunk.
    const auto flat = exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 4, cfg::ipu_map<0, 1, 0, 1>>>(8);
    const auto inter = exec::make_schedule<cfg::pipelined<cfg::interleaved<2>, 4>>(8);
    CHECK(inter.stash[0] <= flat.stash[0]);
}

TEST_CASE("interleaved pipelines refuse what they cannot run, with the rule", "[exec][schedule][interleaved]") {
    using c = cfg::pipelined<cfg::interleaved<2>, 4>;
    CHECK_THROWS_WITH(exec::make_schedule<c>(5), Catch::Contains("groups of 2: it needs a multiple of 2 and at least 3, got 5"));
    CHECK_THROWS_AS(exec::make_schedule<c>(2), cfg::pipeline_depth_error);  // 2 < 2·2 - 1
    CHECK_THROWS_AS(exec::make_schedule<c>(3, false), cfg::pipeline_depth_error);
    auto r = exec::request_for<c>(4);
    r.ipu_of_stage = {0, 0, 1, 1};
    CHECK_THROWS_WITH(exec::make_schedule(r), Catch::Contains("puts stage 1 on IPU 1, not 0"));
    r = exec::request_for<c>(4);
    r.virtual_stages = 3;
    CHECK_THROWS_AS(exec::make_schedule(r), cfg::config_error);
}

TEST_CASE("modelled bubble of interleaved 1F1B is (I - 1) / (V G + I - 1) with equal chunks", "[exec][schedule][interleaved]") {
    // 1 FLOP/s so that FLOPs are seconds; no bytes, so only compute and bubbles count. Each of the
    // V chunks of an IPU does 1/V of the IPU's work: forward 1/V, backward 2/V seconds.
    const emu::device_spec spec{.fp16_flops = 1.0, .fp32_flops = 1.0, .host_sync_latency = 0};
    const auto bubble = [&](exec::schedule sched, std::size_t V) {
        auto m = exec::balanced_costs(sched.stages, {.forward_flops = 1.0 / double(V), .backward_flops = 2.0 / double(V)});
        m.output_bytes_to_host = 0;
        return 1.0 - exec::utilisation(exec::simulate(sched, m, spec)).mean_utilisation;
    };
    for (const std::size_t G : {4u, 8u, 16u}) {
        CAPTURE(G);
        const double I = 2;
        // 1F1B on 2 IPUs, as the papers count it: (I - 1) / (G + I - 1).
        CHECK(bubble(exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 2>>(G), 1) ==
              Approx((I - 1) / (double(G) + I - 1)).epsilon(0.02));
        for (const std::size_t V : {2u, 4u}) {
            CAPTURE(V);
            const auto sched = V == 2 ? exec::make_schedule<cfg::pipelined<cfg::interleaved<2>, 4>>(G)
                                      : exec::make_schedule<cfg::pipelined<cfg::interleaved<4>, 8>>(G);
            CHECK(bubble(sched, V) == Approx((I - 1) / (double(V * G) + I - 1)).epsilon(0.02));
        }
    }
}

namespace {

// Sharded optimiser state on the modelled clock and in the memory plan, against hand-computed figures:
// the all-reduce's 2 (R - 1) / R of the gradients becomes a reduce-scatter of (R - 1) / R of them and
// an all-gather of (R - 1) / R of the weights; each IPU holds 1/R of the state and steps 1/R of it.

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

exec::schedule scheduled_sharding(std::size_t replicas, bool sharded) {
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
        const auto plain = exec::simulate(scheduled_sharding(R, false), two_stages(), spec);
        const auto sharded = exec::simulate(scheduled_sharding(R, true), two_stages(), spec);
        for (std::size_t i = 0; i < 2; ++i) {
            // Each IPU holds one stage: 2 MB of gradients and 1 MB of weights.
            CHECK(plain[i].total(emu::activity::all_reduce) == Approx(2 * share * 2e6 / link));
            CHECK(sharded[i].total(emu::activity::all_reduce) == Approx(share * 2e6 / link + share * 1e6 / link));
        }
        // The step moves 1/R of the weights, gradients and state, and zeroes the other gradients: what
        // an unsharded step of that many bytes costs.
        auto moved = two_stages();
        for (auto& c : moved.stages) c.update_bytes = std::size_t(14e6 / double(R) + 2e6 * share);
        const auto equivalent = exec::simulate(scheduled_sharding(R, false), moved, spec);
        CHECK(sharded[0].total(emu::activity::update) == Approx(equivalent[0].total(emu::activity::update)));
        CHECK(sharded[0].total(emu::activity::update) < plain[0].total(emu::activity::update));
    }
    // Across hosts (processes > 1 with the network's bandwidth): the shards' sums come back from the
    // host, the whole weights go back to each IPU.
    auto costs = two_stages();
    costs.processes = 2;
    costs.host_network_bandwidth = 10e9;
    const double host = spec.host_link_bandwidth, net = costs.host_network_bandwidth;
    const auto clocks = exec::simulate(scheduled_sharding(4, true), costs, spec);
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
    const auto plain = state(exec::plan_memory(scheduled_sharding(4, false), two_stages()));
    CHECK(plain == std::pair<std::size_t, std::string>{4'000'000, "stage 0 optimiser state"});
    CHECK(state(exec::plan_memory(scheduled_sharding(4, true), two_stages())) ==
          std::pair<std::size_t, std::string>{1'000'000, "stage 0 optimiser state (1/4 shard)"});
    auto odd = two_stages();
    odd.stages[0].optimiser_bytes = 4'000'001;  // the largest shard counts
    CHECK(state(exec::plan_memory(scheduled_sharding(4, true), odd)).first == 1'000'001);
    // Everything else is as without sharding.
    const auto a = exec::plan_memory(scheduled_sharding(4, false), two_stages());
    const auto b = exec::plan_memory(scheduled_sharding(4, true), two_stages());
    CHECK(a.ipus[1].on_chip() - b.ipus[1].on_chip() == 3'000'000);
}

TEST_CASE("zero-bubble ZB-H1: 1F1B's F and B, each W a stage's distance from the first later", "[exec][schedule][zero-bubble]") {
    // 4 stages, G = 8, worked out by hand from the rule: stage s warms up with 3 - s forwards and runs
    // the W of a micro-batch s backward passes after its B (the last W's at the end).
    using zb1 = cfg::pipelined<cfg::zero_bubble_h1, 4>;
    const auto sched = exec::make_schedule<zb1>(8);
    CHECK(sched.backward_split());
    const auto passes = [&](std::size_t ipu) { return passes_of(sched, ipu, false); };
    CHECK(passes(0) == "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7 ");
    CHECK(passes(1) == "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7 ");
    CHECK(passes(3) == "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7 ");
    CHECK(sched.description() == "pipelined<zero_bubble_h1>, 4 stages on 4 IPUs, 8 micro-batches, training");
    check_complete(sched);
    CHECK(execute_abstractly(sched) == sched.stash);
    // Every stage holds at most S = 4 micro-batches from F to W: 1F1B's first stage's count.
    CHECK(sched.stash == std::vector<std::size_t>{4, 4, 4, 4});
    CHECK(exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 4>>(8).stash == std::vector<std::size_t>{4, 3, 2, 1});
    CHECK(sched.held_gradients == std::vector<std::size_t>{1, 2, 3, 4});
    // ZB-H2: twice the warm-up and the lag, up to 2S - 1 = 7 micro-batches on every stage.
    const auto h2 = exec::make_schedule<cfg::pipelined<cfg::zero_bubble_h2, 4>>(8);
    check_complete(h2);
    CHECK(execute_abstractly(h2) == h2.stash);
    CHECK(h2.stash == std::vector<std::size_t>{7, 7, 7, 7});
}

TEST_CASE("zero-bubble schedules run without deadlock, with votes, replicas, sharding and inference",
          "[exec][schedule][zero-bubble]") {
    for (const std::size_t S : {2u, 3u, 5u})
        for (const std::size_t G : {2 * S - 1, 2 * S + 3, 4 * S}) {
            CAPTURE(S, G);
            for (const auto order : {exec::pipeline_order::zero_bubble_h1, exec::pipeline_order::zero_bubble_h2}) {
                exec::schedule_request r = pipeline_request(order, S, G);
                for (const bool votes : {false, true}) {
                    r.check_overflow = votes, r.replicas = votes ? 2 : 1, r.optimizer_sharding = votes;
                    const auto sched = exec::make_schedule(r);
                    check_complete(sched);
                    CHECK(execute_abstractly(sched) == sched.stash);
                }
                r.training = false;  // inference has no backward to split: a 1F1B pipeline's forwards
                r.micro_batches = S;
                const auto inference = exec::make_schedule(r);
                CHECK_FALSE(inference.backward_split());
                check_complete(inference);
                execute_abstractly(inference);
                r.training = true;
            }
        }
    using zb4 = cfg::pipelined<cfg::zero_bubble_h1, 4>;
    CHECK_THROWS_WITH(exec::make_schedule<zb4>(6), Catch::Contains("G >= 2*S - 1 = 7, got G = 6"));
}

TEST_CASE("modelled bubble of ZB-H1 is (S - 1)(T_F + T_B - T_W), of ZB-H2 (S - 1) T_F, with equal stages",
          "[exec][schedule][zero-bubble]") {
    // Stages of three passes whose modelled seconds are T_F, T_B and T_W (W the weight gradient); no
    // bytes move, so only compute and bubbles count. Every stage does the same work, so each idles the
    // bubble: 1 - utilisation = bubble / (bubble + G (T_F + T_B + T_W)).
    const emu::device_spec spec{.host_sync_latency = 0};
    const auto stage = [](double f, double b, double w) {
        exec::stage_cost c;
        c.forward_passes = {tessera::nn::pass::contraction(tessera::nn::pass_phase::forward, 1024, 256, 256, f)};
        c.backward_passes = {tessera::nn::pass::contraction(tessera::nn::pass_phase::backward, 1024, 256, 256, b),
                             tessera::nn::pass::contraction(tessera::nn::pass_phase::backward, 1024, 256, 256, w).of_weights()};
        return c;
    };
    for (const auto& [f, b, w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{1.0, 2.0, 1.0}, std::tuple{2.0, 3.0, 1.0}}) {
        const exec::stage_cost c = stage(f, b, w);
        const double TF = emu::seconds_of(c.forward_passes, spec, 16);
        const double TB = emu::seconds_of(std::vector<tessera::nn::pass>{c.backward_passes[0]}, spec, 16);
        const double TW = emu::seconds_of(std::vector<tessera::nn::pass>{c.backward_passes[1]}, spec, 16);
        REQUIRE(TW <= TF);  // where the paper's ZB-H1 figure holds
        for (const std::size_t S : {2u, 4u})
            for (const std::size_t G : {2 * S, 4 * S}) {
                CAPTURE(f, b, w, S, G);
                auto m = exec::balanced_costs(S, c);
                m.bits = 16;
                m.output_bytes_to_host = 0;
                const auto idle = [&](exec::pipeline_order order) {
                    const auto sched = exec::make_schedule(pipeline_request(order, S, G));
                    return 1.0 - exec::utilisation(exec::simulate(sched, m, spec)).mean_utilisation;
                };
                const double work = double(G) * (TF + TB + TW), s1 = double(S - 1);
                const auto fraction = [&](double bubble) { return bubble / (bubble + work); };
                CHECK(idle(exec::pipeline_order::one_f_one_b) == Approx(fraction(s1 * (TF + TB + TW))).epsilon(0.02));
                CHECK(idle(exec::pipeline_order::zero_bubble_h1) == Approx(fraction(s1 * (TF + TB - TW))).epsilon(0.02));
                CHECK(idle(exec::pipeline_order::zero_bubble_h2) == Approx(fraction(s1 * TF)).epsilon(0.02));
            }
    }
}

TEST_CASE("looped BFS: each IPU runs GPipe over its model chunks, breadth first", "[exec][schedule][looped-bfs]") {
    // 4 stages, 2 per IPU (stage s on IPU s mod 2), G = 4, worked out by hand: every forward through
    // the IPU's first chunk, then its second; the backwards the other way round.
    using c = cfg::pipelined<cfg::looped_bfs<2>, 4>;
    static_assert(c::ipus_per_replica == 2 && c::ipu_of_stage(3) == 1 && c::virtual_stages == 2);
    const auto sched = exec::make_schedule<c>(4);
    const auto passes = [&](std::size_t ipu) { return passes_of(sched, ipu); };
    CHECK(passes(0) == "F0.0 F0.1 F0.2 F0.3 F2.0 F2.1 F2.2 F2.3 B2.0 B2.1 B2.2 B2.3 B0.0 B0.1 B0.2 B0.3 ");
    CHECK(passes(1) == "F1.0 F1.1 F1.2 F1.3 F3.0 F3.1 F3.2 F3.3 B3.0 B3.1 B3.2 B3.3 B1.0 B1.1 B1.2 B1.3 ");
    CHECK(sched.description() == "pipelined<looped_bfs<2>>, 4 stages on 2 IPUs, 4 micro-batches, training");
    check_complete(sched);
    CHECK(execute_abstractly(sched) == sched.stash);
    CHECK(sched.stash == std::vector<std::size_t>{4, 4, 4, 4});  // GPipe's: G per chunk
    for (const std::size_t G : {4u, 6u, 16u}) {
        auto r = exec::request_for<cfg::pipelined<cfg::looped_bfs<3>, 6>>(G, true, 2);
        r.check_overflow = true, r.optimizer_sharding = true;
        const auto voting = exec::make_schedule(r);
        check_complete(voting);
        CHECK(execute_abstractly(voting) == voting.stash);
    }
    // The rules of interleaved<V>: whole groups of I micro-batches, stage s on IPU s mod I.
    CHECK_THROWS_AS(exec::make_schedule<c>(5), cfg::pipeline_depth_error);
    // Looped BFS, and interleaving, with equal chunks: the bubble is (I - 1) / (V G + I - 1) of the step.
    const emu::device_spec spec{.fp16_flops = 1.0, .fp32_flops = 1.0, .host_sync_latency = 0};
    for (const std::size_t G : {4u, 8u, 16u}) {
        CAPTURE(G);
        auto m = exec::balanced_costs(4, {.forward_flops = 0.5, .backward_flops = 1.0});
        m.output_bytes_to_host = 0;
        const double idle = 1.0 - exec::utilisation(exec::simulate(exec::make_schedule<c>(G), m, spec)).mean_utilisation;
        CHECK(idle == Approx(1.0 / (2.0 * double(G) + 1.0)).epsilon(0.02));
    }
}

TEST_CASE("lock-step pipelines: each cycle's passes, one sync of every IPU, then the cycle's sends",
          "[exec][schedule][lock-step]") {
    using order = exec::pipeline_order;
    const auto request = [](order o, std::vector<std::size_t> ipus, std::size_t M, bool training = true) {
        exec::schedule_request r{cfg::strategy_kind::pipelined, o, std::move(ipus), M, training};
        r.lock_step = true;
        return r;
    };
    // Every order, with votes, replicas, sharding and inference: no deadlock, every IPU meets every sync.
    for (order o : {order::gpipe, order::one_f_one_b, order::zero_bubble_h1, order::zero_bubble_h2})
        for (bool training : {true, false}) {
            auto r = request(o, {0, 1, 2, 3}, 8, training);
            r.replicas = 2, r.check_overflow = training, r.optimizer_sharding = training;
            const auto sched = exec::make_schedule(r);
            INFO(sched.description());
            CHECK(sched.description().find("lock-step pipeline cycles") != std::string::npos);
            (void)execute_abstractly(sched);
        }
    auto interleaved = request(order::interleaved, {0, 1, 0, 1}, 4);
    interleaved.virtual_stages = 2;
    (void)execute_abstractly(exec::make_schedule(interleaved));

    // 1F1B on 2 IPUs, G = 3: Poplar's pipeline cycles (PopART's pipelining notes: every forward and
    // backward pipeline stage once a cycle, G + 2(S - 1) cycles): in cycle c, IPU i runs the forward
    // of micro-batch c - i, then the backward of micro-batch c - (2(S - 1) - i), each where it exists;
    // the sends of a cycle come right after its sync; the reductions and updates after the last one.
    auto r = request(order::one_f_one_b, {0, 1}, 3);
    r.replicas = 2;
    const auto sched = exec::make_schedule(r);
    (void)execute_abstractly(sched);
    const long S = 2, G = 3;
    for (std::size_t i = 0; i < 2; ++i) {
        const auto& prog = sched.programs[i];
        std::vector<std::pair<opcode, long>> cycle_passes;
        long cycle = 0;
        std::size_t last_sync = 0;
        for (std::size_t pc = 0; pc < prog.size(); ++pc) {
            const auto op = prog[pc].op;
            if (op == opcode::fwd || op == opcode::bwd) cycle_passes.emplace_back(op, long(prog[pc].micro_batch));
            if (op == opcode::sync) {
                std::vector<std::pair<opcode, long>> expected;
                const long f = cycle - long(i), b = cycle - (2 * (S - 1) - long(i));
                if (f >= 0 && f < G) expected.emplace_back(opcode::fwd, f);
                if (b >= 0 && b < G) expected.emplace_back(opcode::bwd, b);
                INFO("IPU " << i << ", cycle " << cycle);
                CHECK(cycle_passes == expected);
                cycle_passes.clear(), ++cycle, last_sync = pc;
            }
            if (op == opcode::send_act || op == opcode::send_grad)
                CHECK((prog[pc - 1].op == opcode::sync || prog[pc - 1].op == prog[pc].op));
        }
        CHECK(cycle == G + 2 * (S - 1));
        for (std::size_t pc = last_sync + 1; pc < prog.size(); ++pc)
            CHECK((prog[pc].op == opcode::all_reduce || prog[pc].op == opcode::update));
        CHECK(std::count_if(prog.begin(), prog.end(), [](const auto& in) { return in.op == opcode::all_reduce; }) == 1);
    }
    // PopART's stash: 2 (IPUs to the end) + 1 micro-batches, the last stage's one its working set.
    for (const std::size_t stages : {2u, 4u, 5u}) {
        std::vector<std::size_t> ipus(stages);
        std::iota(ipus.begin(), ipus.end(), std::size_t{0});
        const auto deep = exec::make_schedule(request(order::one_f_one_b, ipus, 2 * stages + 3));
        for (std::size_t s = 0; s < stages; ++s) CHECK(deep.stash[s] == 2 * (stages - 1 - s) + 1);
    }
    // Without lock-step: no sync.
    r.lock_step = false;
    const auto dataflow = exec::make_schedule(r);
    for (const auto& prog : dataflow.programs)
        CHECK(std::none_of(prog.begin(), prog.end(), [](const auto& in) { return in.op == opcode::sync; }));
}

TEST_CASE("lock-step pipelines: a cycle lasts as long as its slowest IPU, then the IPUs synchronise",
          "[exec][schedule][lock-step]") {
    // 1 FLOP/s, FLOPs as seconds; no bytes: each cycle is the slowest IPU's passes, then a sync.
    const emu::device_spec spec{.fp16_flops = 1.0, .fp32_flops = 1.0, .host_sync_latency = 0};
    exec::cost_model costs;
    costs.stages = {{.forward_flops = 1.0, .backward_flops = 2.0}, {.forward_flops = 3.0, .backward_flops = 5.0},
                    {.forward_flops = 2.0, .backward_flops = 1.0}};
    costs.output_bytes_to_host = 0;
    for (exec::pipeline_order o : {exec::pipeline_order::gpipe, exec::pipeline_order::one_f_one_b})
        for (std::size_t M : {std::size_t{5}, std::size_t{8}}) {
            exec::schedule_request r{cfg::strategy_kind::pipelined, o, {0, 1, 2}, M};
            const auto dataflow = exec::simulate(exec::make_schedule(r), costs, spec);
            r.lock_step = true;
            const auto sched = exec::make_schedule(r);
            const auto clocks = exec::simulate(sched, costs, spec);
            // The reference: walk the programs cycle by cycle, each cycle the longest of the IPUs' passes.
            double expected = 0;
            std::vector<std::size_t> pc(3, 0);
            std::size_t cycles = 0;
            while (pc[0] < sched.programs[0].size()) {
                double longest = 0;
                bool synced = false;
                for (std::size_t i = 0; i < 3; ++i) {
                    double t = 0;
                    for (; pc[i] < sched.programs[i].size(); ++pc[i]) {
                        const auto& in = sched.programs[i][pc[i]];
                        if (in.op == opcode::sync) {
                            ++pc[i], synced = true;
                            break;
                        }
                        const auto& c = costs.stages[in.stage];
                        if (in.op == opcode::fwd) t += c.forward_flops;
                        if (in.op == opcode::bwd) t += c.backward_flops;
                    }
                    longest = std::max(longest, t);
                }
                expected += longest;
                if (synced) ++cycles, expected += spec.global_sync_seconds(3);
            }
            INFO("order " << int(o) << ", M = " << M);
            CHECK(cycles > 0);
            double end = 0, dataflow_end = 0;
            for (const auto& c : clocks) end = std::max(end, c.now());
            for (const auto& c : dataflow) dataflow_end = std::max(dataflow_end, c.now());
            CHECK(end == Approx(expected).epsilon(1e-12));
            CHECK(end > dataflow_end);  // unbalanced stages: lock-step waits for the slowest every cycle
        }
    // 15 ns a hop each way, 1 + IPUs / 4 hops [poplibs]: 30 ns for 2 IPUs, 150 ns for 16.
    CHECK(spec.global_sync_seconds(2) == Approx(30e-9));
    CHECK(spec.global_sync_seconds(16) == Approx(150e-9));
}

}  // namespace test_schedule
