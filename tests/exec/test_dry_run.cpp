#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <string_view>
#include <string>
#include <vector>

#include "../emulator/deadline.hpp"
#include "tessera/config.hpp"
#include "tessera/data.hpp"
#include "tessera/exec.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

namespace test_dry_run {

namespace cfg = tessera::config;
namespace data = tessera::data;
namespace emu = tessera::emulator;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
namespace optim = tessera::optim;

namespace {

using net_t = nn::resnet20<cfg::fp32>;
constexpr std::size_t side = 8, micro_batch = 4, values_per_sample = side * side;
const tessera::tensor::shape sample{1, side, side, 1};

template <class Io, class Output = cfg::final>
using small_config = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<3>,
                                 cfg::device_iterations<2>, cfg::replication<2>, Io, Output>;

const optim::sgd sgd({.learning_rate = 0.05, .momentum = 0.9});

template <class C>
struct config_tag {};

double total(const emu::modelled_clock& clock, const std::string& prefix) {
    double t = 0;
    for (const auto& e : clock.trace())
        if (e.label.rfind(prefix, 0) == 0) t += e.end - e.start;
    return t;
}
std::size_t count(const emu::modelled_clock& clock, const std::string& prefix) {
    std::size_t n = 0;
    for (const auto& e : clock.trace()) n += e.label.rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
}

data::in_memory_dataset<std::uint8_t> bytes_dataset(std::size_t samples) {
    std::vector<std::uint8_t> values;
    std::vector<data::label_t> labels;
    for (std::size_t i = 0; i < samples; ++i) {
        for (std::size_t k = 0; k < values_per_sample; ++k) values.push_back(std::uint8_t((i * 37 + k * 11) % 251));
        labels.push_back(data::label_t(i % 10));
    }
    return {{1, side, side}, 10, std::move(values), std::move(labels), "bytes"};
}

}  // namespace

TEST_CASE("8-bit I/O moves a quarter of float's host bytes, and the IPU normalises what it receives", "[exec][cost]") {
    const net_t net(1, 10);
    const emu::device_spec spec{};
    const auto eight = exec::dry_run<small_config<cfg::eight_bit_io>>(net, sgd, sample, {.micro_batch = micro_batch}, 96);
    const auto floats = exec::dry_run<small_config<cfg::float_io>>(net, sgd, sample, {.micro_batch = micro_batch}, 96);
    // Per micro-batch: 4 samples × 64 values, 1 byte each or 4.
    CHECK(eight.plan.costs.host_input_bytes() == micro_batch * values_per_sample);
    CHECK(floats.plan.costs.host_input_bytes() == 4 * micro_batch * values_per_sample);
    CHECK(eight.host_per_call.bytes * 4 == floats.host_per_call.bytes);
    // On the modelled clock each load moves those bytes over the host link (3.3 GB/s to one IPU) ...
    const double load = double(micro_batch * values_per_sample) / spec.host_link_bandwidth;
    CHECK(total(eight.call_clocks[0], "load s0 mb0") == Approx(2 * load));  // D = 2 iterations
    CHECK(total(floats.call_clocks[0], "load s0 mb0") == Approx(2 * 4 * load));
    // ... and with 8-bit I/O the first IPU normalises the 256 values: one element-wise pass reading
    // bytes and writing the compute type, by the pass model.
    REQUIRE(eight.plan.costs.infeed_passes.size() == 1);
    CHECK(eight.plan.costs.infeed_passes[0] == nn::pass::elementwise(nn::pass_phase::forward, 256, 2));
    CHECK(floats.plan.costs.infeed_passes.empty());
    const double normalise = emu::seconds_of(eight.plan.costs.infeed_passes, spec, 32);
    CHECK(total(eight.call_clocks[0], "normalise load s0") == Approx(2 * 3 * normalise));
    // The host prepares 8-bit values at its own (lower) cost per value.
    const emu::host_spec host{};
    CHECK(eight.host_per_call.prepare_seconds ==
          Approx(double(eight.host_per_call.samples * values_per_sample) * host.eight_bit_seconds_per_value));
    CHECK(floats.host_per_call.prepare_seconds ==
          Approx(double(floats.host_per_call.samples * values_per_sample) * host.float_seconds_per_value));
}

TEST_CASE("output modes charge only what they send: final one micro-batch per call, all every one", "[exec][cost]") {
    const net_t net(1, 10);
    const emu::device_spec spec{};
    const auto final_mode = exec::dry_run<small_config<cfg::eight_bit_io, cfg::final>>(net, sgd, sample,
                                                                                      {.micro_batch = micro_batch}, 96);
    const auto all_mode = exec::dry_run<small_config<cfg::eight_bit_io, cfg::all>>(net, sgd, sample,
                                                                                  {.micro_batch = micro_batch}, 96);
    const auto sum_mode = exec::dry_run<small_config<cfg::eight_bit_io, cfg::sum>>(net, sgd, sample,
                                                                                  {.micro_batch = micro_batch}, 96);
    // The last IPU computes the loss; each output sent is a loss and an accuracy (8 bytes).
    const auto& last = [](const exec::epoch_estimate& e) -> const emu::modelled_clock& { return e.call_clocks.back(); };
    CHECK(count(last(final_mode), "outfeed") == 1);
    CHECK(count(last(all_mode), "outfeed") == 2 * 3);  // D × G
    CHECK(count(last(sum_mode), "outfeed") == 1);      // the total, with the last micro-batch
    CHECK(total(last(all_mode), "outfeed") == Approx(6 * 8.0 / spec.host_link_bandwidth));
    CHECK(total(last(final_mode), "outfeed") == Approx(8.0 / spec.host_link_bandwidth));
}

TEST_CASE("a dry run's epoch equals a threaded session's on the same configuration", "[exec][threads]") {
    using c = small_config<cfg::eight_bit_io>;
    const net_t net(1, 10);
    const auto dataset = bytes_dataset(192);  // 4 calls of 4 × D 2 × G 3 × R 2 = 48 samples
    std::vector<std::vector<std::vector<float>>> losses;  // per setting, per call: replica 0's
    // Host transfers on the compute tiles or overlapped on I/O tiles; lock-step pipeline cycles or dataflow.
    for (const auto& [io_tiles, lock_step] : {std::pair<std::size_t, bool>{0, true}, {32, true}, {0, false}}) {
        INFO("I/O tiles: " << io_tiles << ", lock-step: " << lock_step);
        const exec::session_options settings{.record_trace = false, .io_tiles = io_tiles, .lock_step = lock_step,
                                             .loading = {.async = true, .prefetch_depth = 2}};
        CHECK(exec::dry_run<c>(net, sgd, sample, {.micro_batch = micro_batch}, dataset.size(), settings, 1)
                  .plan.program.lock_step_cycles() == lock_step);
        const auto dry = exec::dry_run<c>(net, sgd, sample, {.micro_batch = micro_batch}, dataset.size(), settings, 1);
        auto run = exec::training_model<c>(net, sgd, sample, {.micro_batch = micro_batch}, settings);
        auto loader = data::make_data_loader<c>(dataset, {.micro_batch = micro_batch}, {.mode = data::loader_mode::async});
        const data::normalization norm{.mean = {0.5f}, .stddev = {0.25f}};
        std::size_t calls = 0;
        for (auto& batch : loader) {
            const auto r = tessera::test::within_deadline(120, "session call", [&] {
                return run(exec::batch_feed<cfg::fp32, std::uint8_t>(batch, run.batching(), norm));
            });
            CHECK(r.modelled_seconds == Approx(dry.call_device_seconds).epsilon(1e-12));
            if (calls == 0) losses.emplace_back();
            losses.back().push_back(r.losses.at(0));
            ++calls;
        }
        CHECK(calls == dry.calls);
        CHECK(dry.calls == 4);
        CHECK(run.host().now() == Approx(dry.seconds).epsilon(1e-12));
        CHECK(run.host().host_wait() == Approx(dry.host_wait_seconds).epsilon(1e-12));
        CHECK(dry.seconds > dry.device_seconds);
    }
    // The cycles change the clock, never the arithmetic: the same losses, call by call.
    REQUIRE(losses.size() == 3);
    CHECK(losses[2] == losses[0]);
    CHECK(losses[1] == losses[0]);
}

TEST_CASE("a staged network compiled again for another micro-batch dry-runs as one built for it", "[exec][cost]") {
    using c = small_config<cfg::eight_bit_io>;
    const net_t net(1, 10);
    tessera::tensor::shape eight = sample, four = sample;
    eight.n = 8, four.n = micro_batch;
    const auto units = exec::balanced_units(net, four, 2);
    REQUIRE(exec::balanced_units(net, eight, 2) == units);  // FLOPs scale with the micro-batch: the same cut
    exec::staged_network<net_t, optim::sgd> built(net, units, four, sgd), retargeted(net, units, eight, sgd);
    REQUIRE(retargeted.input_shape().n == 8);
    const auto before = exec::dry_run<c>(retargeted, {.micro_batch = 8}, 192);
    retargeted.set_micro_batch(micro_batch);
    CHECK(retargeted.input_shape() == four);
    const auto want = exec::dry_run<c>(built, {.micro_batch = micro_batch}, 96);
    const auto got = exec::dry_run<c>(retargeted, {.micro_batch = micro_batch}, 96);
    CHECK(got.seconds == want.seconds);
    CHECK(got.call_device_seconds == want.call_device_seconds);
    CHECK(got.plan.costs.host_input_bytes() == want.plan.costs.host_input_bytes());
    for (std::size_t ipu = 0; ipu < 2; ++ipu) CHECK(got.memory.ipus.at(ipu).on_chip() == want.memory.ipus.at(ipu).on_chip());
    CHECK(before.call_device_seconds > got.call_device_seconds);  // twice the samples a micro-batch
    REQUIRE_THROWS_WITH(retargeted.set_micro_batch(0), Catch::Contains("got 0"));
}

TEST_CASE("a dry run refuses what a session refuses", "[exec]") {
    const net_t net(1, 10);
    using too_shallow = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<cfg::dynamic>>;
    REQUIRE_THROWS_AS(exec::dry_run<too_shallow>(net, sgd, sample, {.micro_batch = 4, .gradient_accumulation = 2}, 96),
                      cfg::pipeline_depth_error);
    REQUIRE_THROWS_AS(exec::dry_run<small_config<cfg::float_io>>(net, sgd, sample, {.micro_batch = 4}, 10),
                      cfg::batch_error);
    const emu::device_spec tiny{.tiles = 1, .memory_per_tile = 1024};
    REQUIRE_THROWS_AS(exec::dry_run<small_config<cfg::float_io>>(net, sgd, sample, {.micro_batch = 4}, 96, {.device = tiny}),
                      emu::out_of_device_memory);
}

TEST_CASE("instances reducing through their hosts pay the host links and the network in proportion", "[exec][cost]") {
    // 2 replicas in 2 processes: each all-reduce then goes to the host, over the network as a ring
    // (2 (P - 1) / P of the gradients), and back.
    using two_processes = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<3>,
                                      cfg::device_iterations<2>, cfg::replication<2>, cfg::instances<2>, cfg::float_io>;
    const net_t net(1, 10);
    const emu::device_spec spec{};
    const auto with = [&](bool through_hosts, double bandwidth) {
        return exec::dry_run<two_processes>(net, sgd, sample, {.micro_batch = micro_batch}, 96,
                                            {.host = {.network_bandwidth = bandwidth, .reduce_through_hosts = through_hosts}});
    };
    const auto links = with(false, 1e9), hosts = with(true, 1e9), slower = with(true, 0.5e9);
    for (std::size_t ipu = 0; ipu < 2; ++ipu) {
        const auto& h = hosts.call_clocks[ipu];
        CHECK(count(links.call_clocks[ipu], "across hosts") == 0);
        CHECK(count(h, "across hosts") == 2);  // one stage per IPU, D = 2 steps per call
        CHECK(count(h, "to host") == 2);
        CHECK(count(h, "from host") == 2);
        // to host: bytes / host link; across: 2 (2 - 1) / 2 × bytes / network.
        CHECK(total(h, "across hosts") / total(h, "to host") == Approx(spec.host_link_bandwidth / 1e9));
        CHECK(total(slower.call_clocks[ipu], "across hosts") == Approx(2 * total(h, "across hosts")));
    }
    CHECK(hosts.seconds > links.seconds);
    CHECK(slower.seconds > hosts.seconds);
}

TEST_CASE("a dry run reports a plan that does not fit, with the fullest IPU's overshoot", "[exec][memory]") {
    const net_t net(1, 10);
    using c = small_config<cfg::float_io>;
    const exec::session_options roomy{};
    const auto fits = exec::dry_run<c>(net, sgd, sample, {.micro_batch = 4}, 96, roomy, 1, exec::over_budget::reported);
    CHECK(fits.fits);
    CHECK(fits.overshoot_bytes == 0);
    const emu::device_spec tiny{.tiles = 1, .memory_per_tile = 1024};
    const auto over = exec::dry_run<c>(net, sgd, sample, {.micro_batch = 4}, 96, {.device = tiny}, 1, exec::over_budget::reported);
    CHECK_FALSE(over.fits);
    // The overshoot, worked out from the items: the fullest IPU's on-chip bytes less its 1024-byte budget.
    std::size_t fullest = 0;
    for (const auto& ipu : over.memory.ipus) {
        std::size_t on_chip = 0;
        for (const auto& item : ipu.items)
            if (item.where == exec::location::on_chip) on_chip += item.bytes;
        fullest = std::max(fullest, on_chip);
        CHECK(ipu.budget == 1024);
    }
    CHECK(over.overshoot_bytes == fullest - 1024);
    // The same items as the plan a session checks (which refuses them), and the same clock as a plan that fits.
    CHECK(over.memory.ipus.size() == fits.memory.ipus.size());
    CHECK(over.memory.ipus[0].items.size() == fits.memory.ipus[0].items.size());
    CHECK(over.calls == fits.calls);
}

TEST_CASE("a dry run's breakdown adds up to its epoch, and its layer passes are the critical IPU's", "[exec][cost]") {
    const net_t net(1, 10);
    using c = small_config<cfg::float_io>;
    const auto e = exec::dry_run<c>(net, sgd, sample, {.micro_batch = 4}, 96, {.record_trace = true}, 1);
    const auto& b = e.device_breakdown;
    CHECK(b.total() == Approx(e.device_seconds).epsilon(1e-12));
    CHECK(b.total() + (e.seconds - e.device_seconds) == Approx(e.seconds).epsilon(1e-12));
    // The critical IPU's forward, backward and recompute intervals, times the calls, are the layer passes' parts.
    // Lock-step cycles (the default) end in a global sync: "sync", not IPU-Links, which carry the sends alone.
    double passes = 0, idle = 0, cycle_syncs = 0, links = 0;
    for (const auto& ev : e.call_clocks[b.ipu].trace()) {
        if (ev.kind == emu::activity::forward || ev.kind == emu::activity::backward || ev.kind == emu::activity::recompute)
            passes += ev.end - ev.start;
        if (ev.kind == emu::activity::idle) idle += ev.end - ev.start;
        if (ev.kind == emu::activity::sync) cycle_syncs += ev.end - ev.start;
        if (ev.kind == emu::activity::transfer) {
            links += ev.end - ev.start;
            CHECK(ev.label.rfind("send", 0) == 0);
        }
    }
    CHECK(cycle_syncs > 0);
    CHECK(links > 0);
    CHECK(b.compute + b.exchange + b.sync + b.pass_overhead ==
          Approx((passes + cycle_syncs) * double(e.calls)).epsilon(1e-9));
    CHECK(b.ipu_links == Approx(links * double(e.calls)).epsilon(1e-9));
    CHECK(b.idle == Approx(idle * double(e.calls)).epsilon(1e-9));
    CHECK(b.compute > 0);
    CHECK(b.exchange > 0);
    CHECK(b.pass_overhead > 0);
    // A 2-stage pipeline with G = 3 has a bubble; one IPU alone waits for no one.
    CHECK(b.bubble_fraction > 0.05);
    CHECK(b.bubble_fraction < 1.0);
    using alone = cfg::config<cfg::gradient_accumulation<3>, cfg::device_iterations<2>, cfg::replication<2>>;
    const auto one = exec::dry_run<alone>(net, sgd, sample, {.micro_batch = 4}, 96, {.record_trace = true}, 1);
    CHECK(one.device_breakdown.idle == 0.0);
    CHECK(one.device_breakdown.bubble_fraction == 0.0);
    CHECK(one.device_breakdown.ipu_links == 0.0);
    CHECK(one.device_breakdown.all_reduce > 0.0);
    CHECK(exec::bottleneck_of(one.device_breakdown, 0.0) == "compute");
    CHECK(exec::bottleneck_of(one.device_breakdown, 1e9) == "host");
}

TEST_CASE("a stage count given at run time compiles, costs and trains as the same count given as a type", "[exec][threads]") {
    const net_t net(1, 10);
    using fixed = cfg::config<cfg::pipelined<cfg::one_f_one_b, 3>, cfg::gradient_accumulation<5>, cfg::eight_bit_io>;
    using counted = cfg::config<cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<5>, cfg::eight_bit_io>;
    const auto a = exec::dry_run<fixed>(net, sgd, sample, {.micro_batch = 4}, 80, {}, 1);
    const auto b = exec::dry_run<counted>(net, sgd, sample, {.micro_batch = 4, .stages = 3}, 80, {}, 1);
    CHECK(a.seconds == b.seconds);
    CHECK(a.plan.program.instructions() == b.plan.program.instructions());
    CHECK(b.plan.program.ipus == 3);
    // Trained through threads, both end with the same weights bit for bit.
    const auto dataset = bytes_dataset(40);
    const data::normalization norm{.mean = {0.5f}, .stddev = {0.25f}};
    const auto train = [&]<class C>(config_tag<C>, cfg::options counts) {
        auto run = exec::training_model<C>(net, sgd, sample, counts, {.record_trace = false});
        auto loader = data::make_data_loader<C>(dataset, counts, {});
        for (auto& batch : loader)
            tessera::test::within_deadline(120, "session call", [&] {
                return run(exec::batch_feed<cfg::fp32, std::uint8_t>(batch, run.batching(), norm));
            });
        auto trained = run.model().network();  // a copy: visit_parameters is not const
        std::vector<float> w;
        trained.visit_parameters([&](std::string_view, auto value, auto) { w.insert(w.end(), value.begin(), value.end()); });
        return w;
    };
    const auto wa = train(config_tag<fixed>{}, {.micro_batch = 4});
    const auto wb = train(config_tag<counted>{}, {.micro_batch = 4, .stages = 3});
    REQUIRE(wa.size() == wb.size());
    CHECK(wa == wb);
    CHECK(wa != std::vector<float>(wa.size(), 0.0f));
}

TEST_CASE("model chunks per IPU given at run time interleave as pipelined<interleaved<V>, S> does, or loop as "
          "pipelined<looped_bfs<V>, S> does", "[exec][interleaved][looped-bfs]") {
    const net_t net(1, 10);
    using fixed = cfg::config<cfg::pipelined<cfg::interleaved<2>, 4>, cfg::gradient_accumulation<4>, cfg::eight_bit_io>;
    using counted = cfg::config<cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<4>, cfg::eight_bit_io>;
    const auto a = exec::dry_run<fixed>(net, sgd, sample, {.micro_batch = 4}, 80, {}, 1);
    const auto b = exec::dry_run<counted>(net, sgd, sample, {.micro_batch = 4, .stages = 4, .virtual_stages = 2}, 80, {}, 1);
    CHECK(b.plan.program.request.order == exec::pipeline_order::interleaved);
    CHECK(b.plan.program.ipus == 2);
    CHECK(b.plan.program.programs == a.plan.program.programs);
    CHECK(a.seconds == b.seconds);
    // The rules of the run-time count: V divides the stages, G is a multiple of the IPUs, and a
    // strategy with a fixed count takes no chunks.
    CHECK_THROWS_WITH(exec::dry_run<counted>(net, sgd, sample, {.micro_batch = 4, .stages = 3, .virtual_stages = 2}, 80),
                      Catch::Contains("2 model chunks per IPU must divide the 3 stages"));
    using five = cfg::config<cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<5>>;
    CHECK_THROWS_AS(exec::dry_run<five>(net, sgd, sample, {.micro_batch = 4, .stages = 4, .virtual_stages = 2}, 80),
                    cfg::pipeline_depth_error);
    using gpipe4 = cfg::config<cfg::pipelined<cfg::gpipe, 4>, cfg::gradient_accumulation<8>>;
    CHECK_THROWS_WITH(exec::dry_run<gpipe4>(net, sgd, sample, {.micro_batch = 4, .virtual_stages = 2}, 80),
                      Catch::Contains("or loop a GPipe one, whose stage count is given at run time"));
    // Chunks given to a GPipe pipeline at run time loop it breadth first, as pipelined<looped_bfs<V>, S> does.
    using looped = cfg::config<cfg::pipelined<cfg::looped_bfs<2>, 4>, cfg::gradient_accumulation<4>, cfg::eight_bit_io>;
    using gpipe = cfg::config<cfg::pipelined<cfg::gpipe, cfg::dynamic>, cfg::gradient_accumulation<4>, cfg::eight_bit_io>;
    const auto c = exec::dry_run<looped>(net, sgd, sample, {.micro_batch = 4}, 80, {}, 1);
    const auto d = exec::dry_run<gpipe>(net, sgd, sample, {.micro_batch = 4, .stages = 4, .virtual_stages = 2}, 80, {}, 1);
    CHECK(d.plan.program.request.order == exec::pipeline_order::looped_bfs);
    CHECK(d.plan.program.programs == c.plan.program.programs);
    CHECK(c.seconds == d.seconds);
}

TEST_CASE("property: random configurations give the same modelled clock in a dry run and through threads",
          "[exec][threads][property]") {
    // Strategy, schedule, stages, G, D, R, output mode, I/O, loader and lock-step cycles or dataflow
    // drawn from a seeded generator; each configuration runs 2 host calls through the threaded
    // executor and as a dry run. In lock-step cycles a pipeline's clock replays the simulation the
    // dry run calls; as dataflow each IPU's clock is its thread's own.
    const net_t net(1, 10);
    const data::normalization norm{.mean = {0.5f}, .stddev = {0.25f}};
    std::mt19937 rng(2026);
    const auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
    const std::vector<std::string> strategies{"single", "sharded", "pipelined", "pipelined", "phased"};
    const std::vector<exec::output_selection> modes{{cfg::output_kind::final, 0}, {cfg::output_kind::all, 0},
                                                   {cfg::output_kind::sum, 0}, {cfg::output_kind::every_n, 2}};
    // Twelve trials in Release; four under the sanitizers, which run the same code paths more slowly.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    constexpr int trials = 4;
#else
    constexpr int trials = 12;
#endif
    for (int trial = 0; trial < trials; ++trial) {
        const std::string strategy = strategies[pick(strategies.size())];
        const cfg::choice choice{.precision = "32.32", .strategy = strategy, .schedule = pick(2) ? "1f1b" : "gpipe",
                                 .eight_bit_io = pick(2) == 1};
        const std::size_t stages = strategy == "single" ? 1 : 2 + pick(2);
        const std::size_t g = (strategy == "pipelined" ? 2 * stages - 1 : 1) + pick(3);
        const cfg::options counts{.micro_batch = 2 + pick(2), .gradient_accumulation = g, .device_iterations = 1 + pick(2),
                                  .replicas = 1 + pick(2), .instances = 1, .input_group = 1, .stages = stages};
        exec::session_options settings{.record_trace = false};
        settings.outputs = modes[pick(modes.size())];
        settings.loading = {.async = pick(2) == 1, .workers = 1 + pick(2), .prefetch_depth = 1 + pick(3)};
        settings.lock_step = pick(2) == 1;
        INFO("trial " << trial << ": " << strategy << " " << choice.schedule << " S=" << stages << " G=" << g
                      << " D=" << *counts.device_iterations << " R=" << *counts.replicas << " b=" << *counts.micro_batch
                      << (choice.eight_bit_io ? " 8-bit" : " float") << (settings.loading.async ? " async" : " sync")
                      << " workers=" << settings.loading.workers << (settings.lock_step ? " lock-step" : " dataflow"));
        cfg::dispatch_for<cfg::fp32>(choice, [&]<class C>() {
            const auto b = cfg::make_batching<C>(counts);
            const auto dataset = bytes_dataset(2 * b.combined_batch());
            const auto dry = exec::dry_run<C>(net, sgd, sample, counts, dataset.size(), settings, 1);
            auto run = exec::training_model<C>(net, sgd, sample, counts, settings);
            data::loader_options loading{};
            if constexpr (!std::is_same_v<typename C::io_type, std::uint8_t>) loading.normalize = norm;
            auto loader = data::make_data_loader<C>(dataset, counts, loading);
            std::size_t calls = 0;
            for (auto& batch : loader) {
                const auto r = tessera::test::within_deadline(120, "session call", [&] {
                    return run(exec::batch_feed<cfg::fp32, typename C::io_type>(
                        batch, run.batching(),
                        std::is_same_v<typename C::io_type, std::uint8_t> ? norm : data::normalization{}));
                });
                CHECK(r.modelled_seconds == Approx(dry.call_device_seconds).epsilon(1e-12));
                ++calls;
            }
            CHECK(calls == dry.calls);
            CHECK(run.host().now() == Approx(dry.seconds).epsilon(1e-12));
            CHECK(run.host().host_wait() == Approx(dry.host_wait_seconds).epsilon(1e-12));
            return 0;
        });
    }
}

TEST_CASE("an inference dry run: a micro-batch's latency, and working activations freed unit by unit", "[exec][cost][memory]") {
    const net_t net(1, 10);
    using train = cfg::config<cfg::single, cfg::device_iterations<cfg::dynamic>, cfg::eight_bit_io>;
    using infer = train::for_inference;
    const exec::session_options traced{.record_trace = true};
    const auto one = exec::dry_run<infer>(net, sgd, sample, {.micro_batch = 4, .device_iterations = 1}, 96, traced, 1);
    const auto four = exec::dry_run<infer>(net, sgd, sample, {.micro_batch = 4, .device_iterations = 4}, 96, traced, 1);
    const double sync = emu::device_spec{}.host_sync_latency;
    // One micro-batch per call: its output reaches the host when the call's work ends (before the final sync).
    CHECK(one.first_output_seconds == Approx(one.call_device_seconds - sync).epsilon(1e-12));
    // Four on one IPU, one after another: the first is out after a quarter of the work between the syncs.
    CHECK(four.first_output_seconds == Approx(sync + (four.call_device_seconds - 2 * sync) / 4).epsilon(1e-9));
    // Recorded or not, the same latency.
    CHECK(exec::dry_run<infer>(net, sgd, sample, {.micro_batch = 4, .device_iterations = 1}, 96,
                               {.record_trace = false}, 1).first_output_seconds == one.first_output_seconds);
    // Inference keeps nothing for a backward: its working activations are the largest unit's, not the stash.
    const auto& c = one.plan.costs.stages[0];
    CHECK(c.unit_peak_bytes > 0);
    CHECK(c.unit_peak_bytes < c.stash_bytes);
    const auto working = [](const exec::epoch_estimate& e) {
        for (const auto& item : e.memory.ipus[0].items)
            if (item.name.find("working activations") != std::string::npos) return item.bytes;
        return std::size_t{0};
    };
    CHECK(working(one) == c.inference_working_bytes());
    const auto trained = exec::dry_run<train>(net, sgd, sample, {.micro_batch = 4, .device_iterations = 1}, 96, traced, 1);
    CHECK(working(trained) == trained.plan.costs.stages[0].stash_bytes);
    CHECK(working(one) < working(trained));
}

TEST_CASE("I/O tiles: host transfers overlap compute on the other tiles", "[exec][cost][memory]") {
    const net_t net(1, 10);
    using infer = cfg::config<cfg::single, cfg::device_iterations<cfg::dynamic>, cfg::float_io>::for_inference;
    const emu::device_spec gc200{};
    const cfg::options counts{.micro_batch = 4, .device_iterations = 16};
    const auto plain = exec::dry_run<infer>(net, sgd, sample, counts, 960, {}, 1);
    const auto overlapped = exec::dry_run<infer>(net, sgd, sample, counts, 960, {.io_tiles = 64}, 1);
    const auto& costs = plain.plan.costs;
    const double in = gc200.transfer_seconds(double(costs.host_input_bytes()), emu::link::host_link);
    const double out = gc200.transfer_seconds(double(costs.stages[0].output_bytes), emu::link::host_link);
    const double compute_plain = plain.call_device_seconds - 2 * gc200.host_sync_latency - 16 * (in + out);
    // The passes run on 1,408 tiles, the transfers behind them: the call is the first input, then
    // each micro-batch's compute or its transfer, whichever is longer, then the last output.
    CHECK(overlapped.call_device_seconds < plain.call_device_seconds);
    CHECK(overlapped.call_device_seconds >= 2 * gc200.host_sync_latency + 16 * in);
    CHECK(overlapped.call_device_seconds >= 2 * gc200.host_sync_latency + in + compute_plain + out);
    // The compute tiles' memory is the budget.
    CHECK(overlapped.memory.ipus[0].budget == (gc200.tiles - 64) * gc200.memory_per_tile);
    CHECK(plain.memory.ipus[0].budget == gc200.memory_bytes());
    REQUIRE_THROWS_WITH(exec::dry_run<infer>(net, sgd, sample, counts, 960, {.io_tiles = gc200.tiles}, 1),
                        Catch::Contains("1472 I/O tiles leave none of the IPU's 1472 tiles to compute"));
    // Fewer tiles compute at their share of the rates; per-tile figures stay.
    const auto compute = gc200.compute_tiles(64);
    CHECK(compute.tiles == 1408);
    CHECK(compute.macs_per_tile_cycle(16) == Approx(gc200.macs_per_tile_cycle(16)));
    CHECK(compute.exchange_bytes_per_tile_cycle() == Approx(gc200.exchange_bytes_per_tile_cycle()));
}

TEST_CASE("the available memory proportion bounds each pass's temporaries on a tile: PopTorch's setAvailableMemoryProportion",
          "[exec][cost][memory]") {
    const nn::resnet20<cfg::half> half_net(1, 10);
    using single = cfg::config<cfg::half, cfg::single, cfg::gradient_accumulation<2>>;
    const cfg::options counts{.micro_batch = 8};
    const auto run = [&](double proportion) {
        return exec::dry_run<single>(half_net, sgd, sample, counts, 96, {.available_memory_proportion = proportion}, 1);
    };
    CHECK(exec::session_options{}.available_memory_proportion == 0.6);  // poplibs' default
    const auto fastest = run(1.0), standard = run(0.6), tight = run(0.0);
    CHECK(standard.plan.costs.available_memory_proportion == 0.6);
    CHECK(tight.plan.costs.available_memory_proportion == 0.0);
    // ResNet-20's passes fit 0.6 of a tile in their fastest plans; planned for the least temporaries
    // they take longer and hold less.
    CHECK(standard.call_device_seconds == fastest.call_device_seconds);
    CHECK(tight.call_device_seconds > standard.call_device_seconds);
    CHECK(tight.memory.ipus[0].on_chip() < standard.memory.ipus[0].on_chip());
    CHECK_THROWS_WITH(run(1.5), Catch::Contains("available memory proportion") && Catch::Contains("1.5"));
}

TEST_CASE("the partials type: half partials run 16-bit contractions faster and keep no float copy on the fullest tile", "[exec][cost][memory]") {
    const nn::resnet20<cfg::half> half_net(1, 10);
    using single = cfg::config<cfg::half, cfg::single, cfg::gradient_accumulation<2>>;
    using single32 = cfg::config<cfg::single, cfg::gradient_accumulation<2>>;
    const cfg::options counts{.micro_batch = 8};
    const auto as_float = exec::dry_run<single>(half_net, sgd, sample, counts, 96, {}, 1);
    const auto as_half = exec::dry_run<single>(half_net, sgd, sample, counts, 96,
                                               {.partials = emu::partials_type::float16}, 1);
    // PopTorch's default is float.
    CHECK(exec::session_options{}.partials == emu::partials_type::float32);
    CHECK(as_float.plan.costs.partials == emu::partials_type::float32);
    CHECK(as_half.plan.costs.partials == emu::partials_type::float16);
    CHECK(as_half.call_device_seconds < as_float.call_device_seconds);
    const auto temporaries = [](const exec::epoch_estimate& e) {
        std::size_t bytes = 0;
        for (const auto& item : e.memory.ipus[0].items)
            if (item.name.find("pass temporaries") != std::string::npos) bytes += item.bytes;
        return bytes;
    };
    // The fullest tile holds the largest pass's temporaries, counted on every tile: the most any pass's
    // busiest tile holds. Float partials of 16-bit data keep the results in float beside the output until
    // the cast; half partials sum into the results.
    const emu::device_spec gc200{};
    const auto most = [&](const exec::epoch_estimate& e, emu::partials_type type) {
        double bytes = 0;
        for (const auto* list : {&e.plan.costs.stages[0].forward_passes, &e.plan.costs.stages[0].backward_passes})
            for (const auto& p : *list) bytes = std::max(bytes, emu::cycles_of(p, gc200, e.plan.costs.bits, type).tile_bytes);
        return std::size_t(std::ceil(bytes)) * gc200.tiles;
    };
    CHECK(temporaries(as_float) == most(as_float, emu::partials_type::float32));
    CHECK(temporaries(as_half) == most(as_half, emu::partials_type::float16));
    CHECK(temporaries(as_half) < temporaries(as_float));
    CHECK(as_half.memory.ipus[0].on_chip() < as_float.memory.ipus[0].on_chip());
    // 32-bit data sums in float whatever the option: the same clock.
    const net_t fp32_net(1, 10);
    const auto fp32_half = exec::dry_run<single32>(fp32_net, sgd, sample, counts, 96, {.partials = emu::partials_type::float16}, 1);
    const auto fp32_float = exec::dry_run<single32>(fp32_net, sgd, sample, counts, 96, {}, 1);
    CHECK(fp32_half.call_device_seconds == fp32_float.call_device_seconds);
    CHECK(temporaries(fp32_half) == temporaries(fp32_float));
}

TEST_CASE("the memory plan counts code on every tile: once per distinct pass, so deeper networks of the same shapes add none",
          "[exec][memory]") {
    using single = cfg::config<cfg::single, cfg::gradient_accumulation<2>>;
    const cfg::options counts{.micro_batch = 8};
    const auto code_item = [](const exec::epoch_estimate& e) -> const exec::memory_item& {
        for (const auto& item : e.memory.ipus[0].items)
            if (item.kind == emu::memory_kind::code) return item;
        FAIL("no code item");
        throw std::logic_error("unreachable");
    };
    const net_t resnet20(1, 10);
    const nn::resnet32<cfg::fp32> resnet32(1, 10);
    const auto e20 = exec::dry_run<single>(resnet20, sgd, sample, counts, 96, {}, 1);
    const auto e32 = exec::dry_run<single>(resnet32, sgd, sample, counts, 96, {}, 1);
    // The item is the estimate of the stage's passes, forward and backward, each shape once, on every tile.
    const emu::device_spec gc200{};
    std::vector<nn::pass> passes = e20.plan.costs.stages[0].forward_passes;
    passes.insert(passes.end(), e20.plan.costs.stages[0].backward_passes.begin(),
                  e20.plan.costs.stages[0].backward_passes.end());
    const auto distinct = emu::distinct_passes(passes);
    CHECK(distinct.size() < passes.size());
    std::vector<emu::pass_cycles> cycles;
    for (const auto& p : distinct) cycles.push_back(emu::cycles_of(p, gc200, 32));
    const double per_tile = emu::code_of(distinct, cycles, gc200.code).total();
    CHECK(code_item(e20).bytes == std::size_t(std::ceil(per_tile)) * gc200.tiles);
    CHECK(code_item(e20).name.find(std::to_string(std::size_t(std::ceil(per_tile))) + " bytes per tile") != std::string::npos);
    // ResNet-32 repeats ResNet-20's blocks: more passes, no new shapes, the same code.
    CHECK(e32.plan.costs.stages[0].forward_passes.size() > e20.plan.costs.stages[0].forward_passes.size());
    CHECK(code_item(e32).bytes == code_item(e20).bytes);
    // A device whose compute sets take more control code holds more, and the dry run says so.
    emu::device_spec heavier;
    heavier.code.control_bytes_per_superstep *= 2;
    const auto e_heavier = exec::dry_run<single>(resnet20, sgd, sample, counts, 96, {.device = heavier}, 1);
    CHECK(code_item(e_heavier).bytes > code_item(e20).bytes);
    CHECK(e_heavier.memory.ipus[0].on_chip() - e20.memory.ipus[0].on_chip() ==
          code_item(e_heavier).bytes - code_item(e20).bytes);
}

}  // namespace test_dry_run
