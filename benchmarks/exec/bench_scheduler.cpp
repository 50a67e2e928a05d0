// Scheduler overhead: a pipeline of S empty stages run by tessera's static schedule on emulator
// threads, against oneTBB's parallel_pipeline with S serial in-order filters and the same number
// of tokens in flight. Reports nanoseconds per instruction and per stage-step (one micro-batch
// through one stage) for both, and their ratio measured in the same run.
#include <benchmark/benchmark.h>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>

#include <chrono>
#include <cstdlib>
#include <span>
#include <thread>
#include <vector>

#include "empty_model.hpp"
#include "tessera/exec/executor.hpp"

namespace exec = tessera::exec;
namespace cfg = tessera::config;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double tbb_pipeline(std::size_t stages, std::size_t items, std::size_t tokens) {
    std::size_t produced = 0;
    auto filters = tbb::make_filter<void, std::size_t>(tbb::filter_mode::serial_in_order,
                                                       [&](tbb::flow_control& fc) -> std::size_t {
                                                           if (produced == items) {
                                                               fc.stop();
                                                               return 0;
                                                           }
                                                           return produced++;
                                                       });
    auto pass = tbb::make_filter<std::size_t, std::size_t>(tbb::filter_mode::serial_in_order,
                                                           [](std::size_t v) { return v; });
    auto sink = tbb::make_filter<std::size_t, void>(tbb::filter_mode::serial_in_order,
                                                    [](std::size_t v) { benchmark::DoNotOptimize(v); });
    // stages filters in all: the input filter, stages - 2 pass filters, the sink.
    tbb::filter<void, std::size_t> chain = filters;
    for (std::size_t s = 2; s < stages; ++s) chain = chain & pass;
    const auto t0 = std::chrono::steady_clock::now();
    tbb::parallel_pipeline(tokens, chain & sink);
    return seconds_since(t0);
}

// Inference schedule (forward only, like a TBB pipeline): `items` micro-batches through S stages.
void BM_scheduler_vs_tbb(benchmark::State& state) {
    const auto stages = static_cast<std::size_t>(state.range(0));
    const auto items = static_cast<std::size_t>(state.range(1));
    tessera::bench::empty_stages model{stages};
    exec::schedule_request req;
    req.strategy = cfg::strategy_kind::pipelined;
    req.ipu_of_stage.clear();
    for (std::size_t s = 0; s < stages; ++s) req.ipu_of_stage.push_back(s);
    req.micro_batches = items;
    req.training = false;
    auto sched = exec::make_schedule(req);
    const std::size_t instructions = sched.instructions();
    exec::executor<tessera::bench::empty_stages> ex(std::move(sched), exec::costs_of(model), 1, {}, cfg::reduction::mean,
                                                 /*record_trace=*/false);
    // As many micro-batches in flight as our pipeline can hold: one in each stage, link_depth in each link.
    const std::size_t tokens = stages + (stages - 1) * ex.link_depth();
    std::vector<tessera::bench::empty_stages> models(1, model);
    tbb::global_control threads(tbb::global_control::max_allowed_parallelism, std::thread::hardware_concurrency());
    auto feed = [](std::size_t, std::size_t, std::size_t) {
        return std::pair<std::vector<float>, std::vector<float>>{};
    };
    double ours = 0, theirs = 0;
    std::size_t runs = 0;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = ex.run(std::span(models), feed, 1, exec::output_selection::of<cfg::final>());
        benchmark::DoNotOptimize(r);
        ours += seconds_since(t0);
        theirs += tbb_pipeline(stages, items, tokens);
        ++runs;
    }
    const double steps = double(stages * items * runs);
    state.counters["ours_ns_per_instruction"] = ours * 1e9 / double(instructions * runs);
    state.counters["ours_ns_per_stage_step"] = ours * 1e9 / steps;
    state.counters["tbb_ns_per_stage_step"] = theirs * 1e9 / steps;
    state.counters["ours_over_tbb"] = ours / theirs;
    state.counters["instructions_per_step"] = double(instructions) / double(stages * items);
    state.counters["tokens"] = double(tokens);
    double load[1] = {0};
    if (getloadavg(load, 1) == 1) state.counters["load_average_1min"] = load[0];
}

}  // namespace

BENCHMARK(BM_scheduler_vs_tbb)->Args({2, 4096})->Args({4, 4096})->Unit(benchmark::kMillisecond)->UseRealTime();
