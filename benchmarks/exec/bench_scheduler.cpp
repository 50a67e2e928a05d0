// Scheduler overhead: a pipeline of S stages run by tessera's static schedule on emulator threads,
// against oneTBB's parallel_pipeline with S serial in-order filters, measured in the same run.
// oneTBB runs at its best setting: every iteration times it at each of several token counts and
// thread counts, and the ratio is taken against the fastest of those settings over the run (also
// reported: the ratio at our own token count). Stages are empty (pure scheduling cost) or do
// `work` multiply-adds per stage-step (BM_scheduler_vs_tbb/S/items/work).
#include <benchmark/benchmark.h>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>

#include <chrono>
#include <algorithm>
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

[[gnu::noinline]] void stage_work(std::size_t work) {
    float x = 1.0f;
    for (std::size_t k = 0; k < work; ++k) {
        x = x * 0.999f + 0.001f;
        benchmark::DoNotOptimize(x);  // each step, or the loop is folded away
    }
}

// S stages passing a token on, each doing `work` multiply-adds (0: nothing).
struct working_stages : tessera::bench::empty_stages {
    std::size_t work = 0;
    std::pair<tensor, stash> forward(std::size_t, tensor x) {
        stage_work(work);
        return {std::move(x), 0};
    }
};

double tbb_pipeline(std::size_t stages, std::size_t items, std::size_t tokens, std::size_t work) {
    std::size_t produced = 0;
    auto filters = tbb::make_filter<void, std::size_t>(tbb::filter_mode::serial_in_order,
                                                       [&](tbb::flow_control& fc) -> std::size_t {
                                                           if (produced == items) {
                                                               fc.stop();
                                                               return 0;
                                                           }
                                                           stage_work(work);
                                                           return produced++;
                                                       });
    auto pass = tbb::make_filter<std::size_t, std::size_t>(tbb::filter_mode::serial_in_order,
                                                           [work](std::size_t v) { stage_work(work); return v; });
    auto sink = tbb::make_filter<std::size_t, void>(tbb::filter_mode::serial_in_order,
                                                    [work](std::size_t v) { stage_work(work); benchmark::DoNotOptimize(v); });
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
    const auto work = static_cast<std::size_t>(state.range(2));
    working_stages model;
    model.count = stages;
    model.work = work;
    exec::schedule_request req;
    req.strategy = cfg::strategy_kind::pipelined;
    req.ipu_of_stage.clear();
    for (std::size_t s = 0; s < stages; ++s) req.ipu_of_stage.push_back(s);
    req.micro_batches = items;
    req.training = false;
    auto sched = exec::make_schedule(req);
    const std::size_t instructions = sched.instructions();
    exec::executor<working_stages> ex(std::move(sched), exec::costs_of(model), 1, {}, cfg::reduction::mean,
                                      /*record_trace=*/false);
    // As many micro-batches in flight as our pipeline can hold: one in each stage, link_depth in each link.
    const std::size_t ours_tokens = stages + (stages - 1) * ex.link_depth();
    // oneTBB's settings: tokens and threads; the fastest over the run is its best.
    struct setting {
        std::size_t tokens, threads;
        double seconds = 0;
    };
    std::vector<setting> tbb;
    for (std::size_t threads : {std::size_t{1}, std::size_t{std::thread::hardware_concurrency()}})
        for (std::size_t tokens : {std::size_t{1}, stages, 4 * stages, std::size_t{64}, ours_tokens})
            tbb.push_back({tokens, threads});
    std::vector<working_stages> models(1, model);
    auto feed = [](std::size_t, std::size_t, std::size_t) {
        return std::pair<std::vector<float>, std::vector<float>>{};
    };
    double ours = 0;
    std::size_t runs = 0;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = ex.run(std::span(models), feed, 1, exec::output_selection::of<cfg::final>());
        benchmark::DoNotOptimize(r);
        ours += seconds_since(t0);
        for (auto& t : tbb) {
            tbb::global_control threads(tbb::global_control::max_allowed_parallelism, t.threads);
            t.seconds += tbb_pipeline(stages, items, t.tokens, work);
        }
        ++runs;
    }
    const auto best = std::min_element(tbb.begin(), tbb.end(), [](const auto& a, const auto& b) { return a.seconds < b.seconds; });
    const auto same = std::find_if(tbb.begin(), tbb.end(), [&](const auto& t) {
        return t.tokens == ours_tokens && t.threads == std::thread::hardware_concurrency();
    });
    const double steps = double(stages * items * runs);
    state.counters["ours_ns_per_instruction"] = ours * 1e9 / double(instructions * runs);
    state.counters["ours_ns_per_stage_step"] = ours * 1e9 / steps;
    state.counters["tbb_best_ns_per_stage_step"] = best->seconds * 1e9 / steps;
    state.counters["tbb_best_tokens"] = double(best->tokens);
    state.counters["tbb_best_threads"] = double(best->threads);
    state.counters["ours_over_tbb_best"] = ours / best->seconds;
    state.counters["ours_over_tbb_same_tokens"] = ours / same->seconds;
    state.counters["instructions_per_step"] = double(instructions) / double(stages * items);
    double load[1] = {0};
    if (getloadavg(load, 1) == 1) state.counters["load_average_1min"] = load[0];
}

}  // namespace

// Empty stages (scheduling alone), then stages of 2,000 and 20,000 multiply-adds (about 2 and 20 µs).
BENCHMARK(BM_scheduler_vs_tbb)
    ->Args({2, 4096, 0})->Args({4, 4096, 0})->Args({2, 4096, 2000})->Args({2, 1024, 20000})->Args({4, 1024, 20000})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
