#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../emulator/deadline.hpp"
#include "tessera/config.hpp"
#include "tessera/data.hpp"
#include "tessera/exec.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"
#include "trace_json.hpp"

namespace test_call_trace {

namespace cfg = tessera::config;
namespace data = tessera::data;
namespace emu = tessera::emulator;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
namespace optim = tessera::optim;
namespace report = tessera::report;
using tessera::test::read_trace;
using tessera::test::trace_file;

namespace {

using net_t = nn::resnet20<cfg::fp32>;
constexpr std::size_t side = 8, micro_batch = 4;
const tessera::tensor::shape sample{1, side, side, 1};
const optim::sgd sgd({.learning_rate = 0.05, .momentum = 0.9});

// The configurations traced are two test_dry_run.cpp trains, so this suite's unity batch compiles
// their sessions once: 1F1B over 2 IPUs with G 3, D 2, R 2; and ZB-H1, a run-time option of a 1F1B
// pipeline whose stage count is given at run time, with G 5 (D 1, R 1). Both send 8-bit images.
struct one_f_one_b {
    using config = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<3>,
                               cfg::device_iterations<2>, cfg::replication<2>, cfg::eight_bit_io, cfg::final>;
    static constexpr std::size_t G = 3, D = 2, R = 2;
    static cfg::options counts() { return {.micro_batch = micro_batch}; }
};
struct zero_bubble_h1 {
    using config = cfg::config<cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<5>, cfg::eight_bit_io>;
    static constexpr std::size_t G = 5, D = 1, R = 1;
    static cfg::options counts() {
        return {.micro_batch = micro_batch, .stages = 2, .zero_bubble = cfg::zero_bubble_kind::h1};
    }
};
template <class Case>
constexpr std::size_t per_call = micro_batch * Case::G * Case::D * Case::R;  // samples

const data::normalization norm{.mean = {0.5f}, .stddev = {0.25f}};

data::in_memory_dataset<std::uint8_t> dataset(std::size_t samples) {
    std::vector<std::uint8_t> values;
    std::vector<data::label_t> labels;
    for (std::size_t i = 0; i < samples; ++i) {
        for (std::size_t k = 0; k < side * side; ++k) values.push_back(std::uint8_t((i * 37 + k * 11) % 251));
        labels.push_back(data::label_t(i % 10));
    }
    return {{1, side, side}, 10, std::move(values), std::move(labels), "bytes"};
}

using track = std::pair<int, int>;

/// Slices by track, in time order.
std::map<track, std::vector<const tessera::test::trace_event*>> slices_by_track(const trace_file& t) {
    std::map<track, std::vector<const tessera::test::trace_event*>> out;
    for (const auto& e : t.events)
        if (e.ph == "X") out[{e.pid, e.tid}].push_back(&e);
    for (auto& [k, v] : out)
        std::stable_sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->ts < b->ts; });
    return out;
}

/// Every slice sits on one track without overlapping the next (to rounding of microsecond doubles),
/// and every track but the loaders' starts at time 0.
void check_no_overlaps(const trace_file& t) {
    for (const auto& [k, v] : slices_by_track(t)) {
        INFO("pid " << k.first << " tid " << k.second);
        if (k.first != exec::trace_ids::host || k.second == 0) CHECK(v.front()->ts == 0.0);
        for (std::size_t j = 0; j + 1 < v.size(); ++j) {
            INFO("pid " << k.first << " tid " << k.second << ": '" << v[j]->name << "' then '" << v[j + 1]->name << "'");
            CHECK(v[j]->dur >= 0);
            CHECK(v[j]->ts + v[j]->dur <= v[j + 1]->ts + 1e-9 * std::max(1.0, v[j + 1]->ts));
        }
    }
}

/// Every flow has one start and one end, the end no earlier than the start; returns the flows.
std::size_t check_flows(const trace_file& t) {
    std::map<double, std::vector<const tessera::test::trace_event*>> by_id;
    for (const auto& e : t.events)
        if (e.ph == "s" || e.ph == "f") by_id[e.id].push_back(&e);
    for (const auto& [id, pair] : by_id) {
        INFO("flow " << id);
        REQUIRE(pair.size() == 2);
        const auto* s = pair[0]->ph == "s" ? pair[0] : pair[1];
        const auto* f = pair[0]->ph == "f" ? pair[0] : pair[1];
        CHECK(s->ph == "s");
        CHECK(f->ph == "f");
        CHECK(f->ts >= s->ts);
        CHECK(f->pid == s->pid);
        CHECK(f->tid != s->tid);  // between two IPUs
    }
    return by_id.size();
}

/// Each IPU's memory counter of process `pid`: its largest value.
std::map<std::string, double> counter_peaks(const trace_file& t, int pid) {
    std::map<std::string, double> peak;
    for (const auto& e : t.events)
        if (e.ph == "C" && e.pid == pid) peak[e.name] = std::max(peak[e.name], e.value);
    return peak;
}

std::string dry_trace(const exec::epoch_estimate& e, std::size_t calls) {
    std::ostringstream out;
    {
        report::trace_writer w(out);
        CHECK(exec::write_trace(w, e, calls) == std::min(calls, e.calls));
        w.close([&](report::json_writer& j) { j.member("calls_in_epoch", e.calls); });
    }
    return out.str();
}

}  // namespace

TEMPLATE_TEST_CASE("a dry run's trace: tracks without overlaps, paired flows, the breakdown and the memory plan",
                   "[exec][trace]", one_f_one_b, zero_bubble_h1) {
    using C = typename TestType::config;
    constexpr bool split = std::is_same_v<TestType, zero_bubble_h1>;
    const net_t net(1, 10);
    // An async loader with 2 workers: the first call traced (the dry run's second epoch's) had its
    // batch prepared during the calls before it.
    const auto e = exec::dry_run<C>(net, sgd, sample, TestType::counts(), 6 * per_call<TestType>,
                                    {.record_trace = true, .loading = {.async = true, .workers = 2}}, 2);
    REQUIRE(e.calls == 6);
    REQUIRE(e.plan.program.backward_split() == split);
    const std::size_t traced = 2;  // of 6: each stands for 3 calls
    const trace_file t = read_trace(dry_trace(e, traced));
    check_no_overlaps(t);
    // The loader: batches prepared during the calls before the trace are not drawn, or drawn from time 0.
    for (const auto& ev : t.events)
        if (ev.ph == "X" && ev.pid == exec::trace_ids::host && ev.tid > 0 && ev.ts == 0.0)
            CHECK(ev.name.find("(started before the trace)") != std::string::npos);
    // Per call: G × D activations from IPU 0 to IPU 1 and as many gradients back.
    CHECK(check_flows(t) == traced * TestType::G * TestType::D * 2);

    // The critical IPU's slices by category, times the calls each traced call stands for, are the
    // epoch's breakdown: the layer passes and the cycles' syncs split by the pass model's parts.
    const auto& b = e.device_breakdown;
    std::map<std::string, double> seconds;
    double stands_for = 0;
    for (const auto& ev : t.events) {
        if (ev.ph == "X" && ev.pid == exec::trace_ids::replica(0) && ev.tid == exec::trace_ids::ipu(b.ipu))
            seconds[ev.cat] += ev.dur * 1e-6;
        if (ev.ph == "X" && ev.pid == exec::trace_ids::host && ev.cat == "call")
            stands_for = ev.args->at("calls_it_stands_for").n;
    }
    CHECK(stands_for == 3.0);
    const auto scaled = [&](std::initializer_list<const char*> cats) {
        double s = 0;
        for (const char* c : cats) s += seconds[c];
        return s * stands_for;
    };
    CHECK(scaled({"forward", "backward", "weight gradient", "recompute", "sync"}) ==
          Approx(b.compute + b.exchange + b.sync + b.pass_overhead).epsilon(1e-9));
    CHECK(scaled({"transfer"}) == Approx(b.ipu_links).epsilon(1e-9));
    CHECK(scaled({"all-reduce"}) == Approx(b.all_reduce).epsilon(1e-9));
    CHECK(scaled({"update"}) == Approx(b.update).epsilon(1e-9));
    CHECK(scaled({"host I/O"}) == Approx(b.host_io).epsilon(1e-9));
    CHECK(scaled({"idle"}) == Approx(b.idle).margin(1e-15).epsilon(1e-9));
    CHECK(scaled({"streaming"}) == 0.0);
    CHECK((b.all_reduce > 0) == (TestType::R > 1));
    CHECK(b.idle > 0);
    CHECK((seconds["weight gradient"] > 0) == split);

    // Each IPU's memory counter rises with each stashed micro-batch and peaks at its plan's on-chip bytes.
    const auto peaks = counter_peaks(t, exec::trace_ids::replica(0));
    REQUIRE(peaks.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
        INFO("IPU " << i);
        CHECK(peaks.at("memory IPU " + std::to_string(i)) == double(e.memory.ipus[i].on_chip()));
    }
    // ... and falls back to the fixed items between calls: the first and last values of a call are equal.
    std::vector<double> ipu0;
    for (const auto& ev : t.events)
        if (ev.ph == "C" && ev.name == "memory IPU 0") ipu0.push_back(ev.value);
    REQUIRE(ipu0.size() > 4);
    CHECK(ipu0.front() == ipu0.back());
    CHECK(*std::min_element(ipu0.begin(), ipu0.end()) == ipu0.front());
    CHECK(t.doc.at("otherData").at("calls_in_epoch").n == 6.0);
}

TEMPLATE_TEST_CASE("a training run's trace: its modelled tracks match the dry run's event for event; its threads' "
                   "wall clock", "[exec][trace][threads]", one_f_one_b, zero_bubble_h1) {
    using C = typename TestType::config;
    constexpr std::size_t R = TestType::R;
    const net_t net(1, 10);
    const auto samples = dataset(2 * per_call<TestType>);  // 2 calls
    for (const bool lock_step : {true, false}) {
        INFO((lock_step ? "lock-step" : "dataflow"));
        const exec::session_options settings{.record_trace = true, .lock_step = lock_step};
        const auto dry = exec::dry_run<C>(net, sgd, sample, TestType::counts(), samples.size(), settings, 1);
        const trace_file expected = read_trace(dry_trace(dry, 2));

        auto run = exec::training_model<C>(net, sgd, sample, TestType::counts(), settings);
        run.device().measure_wall_spans(true);
        auto loader = data::make_data_loader<C>(samples, TestType::counts(), {});
        std::ostringstream out;
        std::size_t calls = 0;
        {
            report::trace_writer w(out);
            exec::call_tracer tracer(w, run.program(), run.costs(), run.plan(), R, true);
            for (auto& batch : loader) {
                const auto r = tessera::test::within_deadline(120, "session call", [&] {
                    return run(exec::batch_feed<cfg::fp32, std::uint8_t>(batch, run.batching(), norm));
                });
                REQUIRE(r.wall_spans.size() == R * 2);
                tracer.modelled(calls, r.clocks, r.host);
                tracer.measured(calls, r.wall_spans, r.wall_start, r.wall_seconds);
                ++calls;
            }
            w.close();
        }
        REQUIRE(calls == 2);
        const trace_file t = read_trace(out.str());
        check_no_overlaps(t);
        CHECK(check_flows(t) == R * 2 * TestType::G * TestType::D * 2);  // per replica and call: both directions

        // Modelled: each replica as the dry run's one replica, slice for slice.
        const auto mine = slices_by_track(t), theirs = slices_by_track(expected);
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t i = 0; i < 2; ++i) {
                INFO("replica " << r << ", IPU " << i);
                const auto& a = mine.at({exec::trace_ids::replica(r), exec::trace_ids::ipu(i)});
                const auto& b = theirs.at({exec::trace_ids::replica(0), exec::trace_ids::ipu(i)});
                REQUIRE(a.size() == b.size());
                for (std::size_t k = 0; k < a.size(); ++k) {
                    INFO(k << ": '" << a[k]->name << "' / '" << b[k]->name << "'");
                    CHECK(a[k]->name == b[k]->name);
                    CHECK(a[k]->cat == b[k]->cat);
                    CHECK(a[k]->ts == Approx(b[k]->ts).epsilon(1e-12));
                    CHECK(a[k]->dur == Approx(b[k]->dur).epsilon(1e-9));
                }
            }
        const auto peaks = counter_peaks(t, exec::trace_ids::replica(R - 1));
        for (std::size_t i = 0; i < 2; ++i)
            CHECK(peaks.at("memory IPU " + std::to_string(i)) == double(run.plan().ipus[i].on_chip()));

        // Measured: every instruction of each IPU's program, D times per call, on its thread's track.
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t i = 0; i < 2; ++i) {
                std::vector<const tessera::test::trace_event*> a;
                for (const auto* e : mine.at({exec::trace_ids::measured_replica(r), exec::trace_ids::ipu(i)}))
                    if (e->cat != "idle") a.push_back(e);  // the thread's instructions, not its time between calls
                CHECK(a.size() == 2 * TestType::D * run.program().programs[i].size());
                CHECK(a.front()->name == exec::to_string(run.program().programs[i].front()));
            }
        CHECK(mine.at({exec::trace_ids::measured_host, 0}).size() == 2);
        // A synchronous loader prepares each batch after the call before it: from time 0 for the first.
        CHECK(mine.at({exec::trace_ids::host, 1}).front()->name == "prepare batch 0");
        CHECK(mine.at({exec::trace_ids::host, 1}).front()->ts == 0.0);
    }
}

TEST_CASE("a trace writer closes its document when an exception leaves it open, and escapes names", "[exec][trace]") {
    std::ostringstream out;
    try {
        report::trace_writer w(out);
        w.process_name(1, "replica \"0\"", 1);
        w.slice(1, 1, "fwd\ts0", "forward", 0.5, 0.75, {{"calls", 3}});
        throw std::runtime_error("stop");
    } catch (const std::runtime_error&) {
    }
    const trace_file t = read_trace(out.str());
    REQUIRE(t.events.size() == 3);
    CHECK(t.events[0].args->at("name").s == "replica \"0\"");
    CHECK(t.events[2].name == "fwd\ts0");
    CHECK(t.events[2].ts == 0.5e6);
    CHECK(t.events[2].dur == 0.25e6);
    CHECK(t.events[2].args->at("calls").n == 3.0);
}

}  // namespace test_call_trace
