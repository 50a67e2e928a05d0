#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tessera/config/strategy.hpp"
#include "tessera/exec/memory_report.hpp"
#include "tessera/exec/partition.hpp"
#include "tessera/exec/schedule_report.hpp"
#include "tessera/exec/timeline.hpp"
#include "tessera/exec/timing.hpp"

namespace test_reports {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace emu = tessera::emulator;

namespace {
std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
}
}  // namespace

TEST_CASE("balance_stages minimises the bottleneck stage", "[exec][partition]") {
    const std::vector<double> skewed{4, 1, 1, 1, 1};
    auto p = exec::balance_stages(skewed, 2);
    CHECK(p.first_layer == std::vector<std::size_t>{0, 1});
    CHECK(p.stage_cost == std::vector<double>{4, 4});
    const std::vector<double> even{1, 1, 1, 1, 1, 1, 1, 1};
    p = exec::balance_stages(even, 4);
    CHECK(p.first_layer == std::vector<std::size_t>{0, 2, 4, 6});
    CHECK(p.bottleneck() == 2);
    // Brute force over all 3-way splits of a ragged chain.
    const std::vector<double> ragged{3, 7, 2, 9, 4, 4, 1, 8};
    double best = 1e9;
    for (std::size_t a = 1; a < ragged.size(); ++a)
        for (std::size_t b = a + 1; b < ragged.size(); ++b) {
            double s0 = 0, s1 = 0, s2 = 0;
            for (std::size_t i = 0; i < ragged.size(); ++i) (i < a ? s0 : i < b ? s1 : s2) += ragged[i];
            best = std::min(best, std::max({s0, s1, s2}));
        }
    CHECK(exec::balance_stages(ragged, 3).bottleneck() == best);
    REQUIRE_THROWS_AS(exec::balance_stages(even, 9), cfg::config_error);
    const std::vector<double> negative{1, -1};
    REQUIRE_THROWS_WITH(exec::balance_stages(negative, 1), Catch::Contains("layer 1"));
}

TEST_CASE("the schedule prints as a table with one column per IPU", "[exec][report]") {
    const auto sched = exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(3);
    const std::string text = exec::schedule_text(sched);
    CHECK(text.rfind("pipelined<gpipe>, 2 stages on 2 IPUs, 3 micro-batches, training\n"
                     "stash per stage: 3 3, channel capacity ",
                     0) == 0);
    CHECK(text.find("step  IPU 0") != std::string::npos);
    CHECK(count(text, "fwd s0 mb") == 3);
    CHECK(count(text, "bwd s1 mb") == 3);
    CHECK(count(text, "send_act s0 mb1 -> IPU 1") == 1);
    CHECK(count(text, "\n") == 2 + 2 + sched.instructions());  // two header lines, table header and rule, rows
}

TEST_CASE("the schedule as JSON lists every instruction", "[exec][report]") {
    const auto sched = exec::make_schedule<cfg::sharded<2>>(1, true, 2);
    const std::string json = exec::schedule_json(sched);
    CHECK(json.rfind("{\"description\":\"sharded, 2 stages on 2 IPUs, 1 micro-batches, training, 2 replicas\","
                     "\"stages\":2,\"ipus\":2,\"micro_batches\":1,\"training\":true,\"replicas\":2,"
                     "\"stash\":[1,1],\"channel_capacity\":1,\"programs\":[[{\"op\":\"load\",\"stage\":0,"
                     "\"micro_batch\":0,\"peer\":null,\"seq\":0},",
                     0) == 0);
    CHECK(count(json, "\"op\":") == sched.instructions());
    CHECK(count(json, "\"op\":\"all_reduce\"") == 2);
}

TEST_CASE("the timeline SVG has one row per IPU and one rectangle per interval", "[exec][report]") {
    const emu::device_spec spec{.fp32_flops = 1.0, .host_sync_latency = 0};
    const auto sched = exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(4);
    auto costs = exec::balanced_costs(2, {.forward_flops = 1, .backward_flops = 2});
    costs.output_bytes_to_host = 0;
    const auto clocks = exec::simulate(sched, costs, spec);
    std::size_t events = 0;
    for (const auto& c : clocks) events += c.trace().size();
    const std::string svg = exec::timeline_svg(clocks);
    CHECK(count(svg, ">IPU 0</text>") == 1);
    CHECK(count(svg, ">IPU 1</text>") == 1);
    // Rows' backgrounds, the intervals, and the legend's eleven swatches (one per activity).
    CHECK(count(svg, "<rect") == 2 + events + 11);
    CHECK(count(svg, "fill=\"#4c72b0\"><title>fwd s1 mb0 [1 s, 2 s]</title>") == 1);
    CHECK(count(svg, "<title>wait recv_act s1 mb0 &lt;- IPU 0 [0 s, 1 s]</title>") == 1);
    CHECK(svg.find(">15 s</text>") != std::string::npos);  // (G + S - 1) × 3 s
    const std::string json = exec::timeline_json(clocks);
    CHECK(json.rfind("{\"ipus\":[{\"ipu\":0,\"end\":15,\"busy\":12,\"events\":[{\"kind\":\"forward\",\"start\":0,"
                     "\"end\":1,\"label\":\"fwd s0 mb0\"}",
                     0) == 0);
    CHECK(count(json, "\"kind\":") == events);
}

TEST_CASE("a zero-bubble timeline shows forward, input-gradient and weight-gradient passes in their colours; the memory "
          "plan holds the weight gradients' inputs", "[exec][report][zero-bubble]") {
    const emu::device_spec spec{.host_sync_latency = 0};
    const auto sched = exec::make_schedule<cfg::pipelined<cfg::zero_bubble_h1, 2>>(4);
    exec::stage_cost c{.input_bytes = 1024, .output_bytes = 1024, .stash_bytes = 4096};
    namespace nn = tessera::nn;
    c.forward_passes = {nn::pass::contraction(nn::pass_phase::forward, 64, 32, 16)};
    // The weight gradient of 64 positions × 32 channels: W reads an output gradient of 2,048 values.
    c.backward_passes = {nn::pass::contraction(nn::pass_phase::backward, 64, 16, 32),
                         nn::pass::contraction(nn::pass_phase::backward, 16, 32, 64).of_weights()};
    auto costs = exec::balanced_costs(2, c, 16);
    costs.output_bytes_to_host = 0;
    const std::string svg = exec::timeline_svg(exec::simulate(sched, costs, spec));
    CHECK(count(svg, "fill=\"#4c72b0\"><title>fwd s") == 8);          // forward
    CHECK(count(svg, "fill=\"#dd8452\"><title>bwd s") == 8);          // input gradients
    CHECK(count(svg, "fill=\"#ccb974\"><title>bwd_weights s") == 8);  // weight gradients
    CHECK(svg.find(">weight gradient</text>") != std::string::npos);
    // Stage 1 runs each W one B late: it holds 2 output gradients at once, of 2,048 halves each.
    REQUIRE(sched.held_gradients == std::vector<std::size_t>{1, 2});
    const auto plan = exec::plan_memory(sched, costs);
    INFO(exec::memory_text(plan));
    std::size_t held = 0;
    for (const auto& item : plan.ipus[1].items)
        if (item.name == "stage 1 gradients held for weight-gradient passes (2 micro-batches)") held = item.bytes;
    CHECK(held == 2 * 2048 * 2);
}

TEST_CASE("the memory report shows each IPU's items against its budget", "[exec][report]") {
    const auto sched = exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 2>>(4);
    exec::stage_cost c{.weight_bytes = 1 << 20, .optimiser_bytes = 1 << 20, .input_bytes = 1024, .output_bytes = 1024,
                       .stash_bytes = 4096};
    const auto plan = exec::plan_memory(sched, exec::balanced_costs(2, c));
    REQUIRE(plan.ipus.size() == 2);
    // IPU 0: weights, gradient accumulators, optimiser state, a stash of 2 micro-batches, working space,
    // receive buffers (the host's inputs, the gradients coming back).
    CHECK(plan.ipus[0].on_chip() == 3 * (1u << 20) + 2 * 4096 + 4096 + 1024 * sched.channel_capacity);
    const std::string text = exec::memory_text(plan);
    CHECK(text.rfind("IPU 0: 3.01 MiB on chip of 897.00 MiB (0.3%), 0 B in Streaming Memory\n", 0) == 0);
    CHECK(text.find("stage 0 activation stash (2 micro-batches)  activations") != std::string::npos);
    CHECK(text.find("stage 1 activation stash (1 micro-batch)") != std::string::npos);
    const std::string json = exec::memory_json(plan);
    CHECK(json.rfind("{\"ipus\":[{\"ipu\":0,\"budget\":940572672,\"on_chip\":", 0) == 0);
    CHECK(count(json, "\"location\":\"on_chip\"") == plan.ipus[0].items.size() + plan.ipus[1].items.size());
}

TEST_CASE("phased plans keep weights in Streaming Memory and one stage on chip", "[exec][report]") {
    const auto sched = exec::make_schedule<cfg::phased<3>>(2);
    exec::stage_cost c{.weight_bytes = 1000, .input_bytes = 10, .output_bytes = 10, .stash_bytes = 100};
    const auto plan = exec::plan_memory(sched, exec::balanced_costs(3, c));
    REQUIRE(plan.ipus.size() == 1);
    CHECK(plan.ipus[0].off_chip() == 3 * (1000 + 1000) + 3 * 2 * 100);  // weights, accumulators, stashes
    CHECK(plan.ipus[0].on_chip() == 2000 + 3 * 100 + 10);  // one stage streamed in, working space, input buffer
    // Over the Streaming Memory capacity is also an error at compilation.
    REQUIRE_THROWS_AS(exec::plan_memory(sched, exec::balanced_costs(3, c), {.streaming_memory_capacity = 100}),
                      emu::out_of_device_memory);
}

TEST_CASE("tensor locations move each kind of tensor off chip in the plan and onto the clock", "[exec][report]") {
    const auto sched = exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(4);
    exec::stage_cost c{.update_flops = 0, .weight_bytes = 1000, .optimiser_bytes = 500, .input_bytes = 0,
                       .output_bytes = 0, .stash_bytes = 100};
    auto costs = exec::balanced_costs(2, c);
    costs.output_bytes_to_host = 0;
    const auto on = exec::plan_memory(sched, costs);
    CHECK(on.ipus[0].on_chip() == 1000 + 1000 + 500 + 4 * 100 + 100);  // weights, accumulators, state, stash, working
    CHECK(on.ipus[0].off_chip() == 0);
    costs.locations = {.weights = exec::location::streaming_memory,
                       .optimiser_state = exec::location::streaming_memory,
                       .gradient_accumulators = exec::location::streaming_memory,
                       .activations = exec::location::streaming_memory};
    const auto off = exec::plan_memory(sched, costs);
    CHECK(off.ipus[0].off_chip() == 1000 + 1000 + 500 + 4 * 100);
    CHECK(off.ipus[0].on_chip() == 100 + 1000);  // working activations and the weights in use
    // The clock: per micro-batch, weights in for forward and backward, accumulators read and written,
    // the stash written and read; per update, the optimiser state read and written. 1 byte/s.
    const emu::device_spec spec{.streaming_memory_bandwidth = 1.0};
    const auto clocks = exec::simulate(sched, costs, spec);
    CHECK(clocks[0].total(emu::activity::streaming) == 4 * (1000 + 1000 + 2000 + 100 + 100) + 2 * 500);
    const auto base = exec::simulate(sched, exec::balanced_costs(2, c), spec);
    CHECK(base[0].total(emu::activity::streaming) == 0);
}

}  // namespace test_reports
