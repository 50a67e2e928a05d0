// nn::sequential as a unit network: each layer is a unit, so sessions cut any sequential model into
// pipeline stages (by block marks or balanced by FLOPs), checked bit for bit against the model run
// whole without stages or threads; and sessions with the optimiser state sharded across replicas,
// checked bit for bit against the same sessions without.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <tuple>
#include <type_traits>
#include <span>
#include <string_view>
#include <vector>

#include "../emulator/deadline.hpp"
#include "network_helpers.hpp"
#include "sequential_net.hpp"
#include "tessera/config.hpp"
#include "tessera/exec/network_session.hpp"
#include "tessera/exec/session_checkpoint.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/batch_norm.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/loss.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/optim/sgd.hpp"

namespace test_sequential_stages {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
using P = cfg::fp32;
using H = cfg::half;  // 16.16: half weights, activations and inputs, float gradients
using namespace tessera::test::sequential_stages;


TEST_CASE("a sequential model's layers are units: shapes, costs, names and ranges", "[exec][nn]") {
    const net_t net = make_net();
    static_assert(exec::UnitNetwork<net_t>);
    const tessera::tensor::shape in{batch, side, side, channels};
    CHECK(net.units() == 6);
    CHECK(net.unit_name(2) == "conv2");
    CHECK(net.unit_index("fc") == 5);
    CHECK(net.unit_input_shape(3, in) == tessera::tensor::shape{batch, 4, 4, 8});
    CHECK(net.unit_output_shape(5, net.unit_input_shape(5, in)) == net.output_shape(in));
    nn::cost total;
    for (std::size_t u = 0; u < net.units(); ++u) total += net.unit_cost(u, net.unit_input_shape(u, in));
    CHECK(total.flops() == net.cost(in).flops());
    CHECK(total.parameters == net.cost(in).parameters);
    CHECK_THROWS_AS(net.unit_index("conv3"), cfg::config_error);
    CHECK_THROWS_AS(net.unit_name(6), cfg::config_error);
    net_t copy = net;
    net_t::state st;
    const nn::context ctx{};
    auto x = images(0, 0, 0).first;
    CHECK_THROWS_AS(copy.forward_units(3, 3, x, st, ctx), cfg::config_error);
    CHECK_THROWS_AS(copy.forward_units(0, 7, x, st, ctx), cfg::config_error);
    // Units [0, 3) then [3, 6) give what the whole network gives.
    net_t whole = net;
    net_t::state wst;
    const auto expected = whole.forward(x, wst, ctx);
    const auto& mid = copy.forward_units(0, 3, x, st, ctx);
    const auto out = copy.forward_units(3, 6, mid, st, ctx);
    CHECK(std::equal(out.begin(), out.end(), expected.begin(), expected.end()));
}

TEMPLATE_TEST_CASE("a sequential model trains through pipelined sessions bit for bit as run whole",
                   "[exec][nn][session][threads]", (cfg::pipelined<cfg::one_f_one_b, 2>), (cfg::pipelined<cfg::gpipe, 3>),
                   (cfg::pipelined<cfg::interleaved<2>, 4>)) {
    constexpr std::size_t G = 2 * TestType::stages;  // pipelined training needs G >= 2 S - 1 (interleaved: less)
    using c = cfg::config<TestType, cfg::gradient_accumulation<G>, cfg::device_iterations<2>, cfg::replication<2>, cfg::all>;
    const net_t net = make_net();
    // Block marks by layer name for two stages (PopTorch's BeginBlock); balanced by FLOPs otherwise.
    exec::session_options settings;
    if (TestType::stages == 2) settings.first_units = {0, net.unit_index("conv2")};
    auto run = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch}, settings);
    REQUIRE(run.model().stages() == TestType::stages);
    if (TestType::stages == 2) CHECK(run.model().first_unit(1) == 2);
    const auto result = tessera::test::within_deadline(300, "sequential session", [&] { return run(images); });
    CHECK(result.losses[0].size() == 2 * G);
    net_t trained = run.model().network();
    const auto got = parameters_and_buffers(trained);
    CHECK(got == reference(net, 2, G, 2));
    net_t untouched = net;
    CHECK(got != parameters_and_buffers(untouched));  // it did train
}


TEST_CASE("16.16 with stochastic rounding of weights: a pipeline trains bit for bit as the whole network",
          "[exec][nn][session][threads][rounding]") {
    namespace optim = tessera::optim;
    constexpr std::size_t G = 4, D = 3, R = 2;
    using c = cfg::config<H, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<G>,
                          cfg::device_iterations<D>, cfg::replication<R>, cfg::all>;
    const half_net_t net = make_net<H>();
    const optim::sgd stochastic({.learning_rate = 0.05, .momentum = 0.9, .rounding = {.stochastic = true, .seed = 9}});
    auto run = exec::training_model<c>(net, stochastic, {1, side, side, channels}, {.micro_batch = batch});
    (void)tessera::test::within_deadline(300, "16.16 session", [&] { return run(half_images); });
    half_net_t trained = run.model().network();
    const auto got = parameters_and_buffers(trained);
    auto expected = trained_replicas(net, R, G, D, half_images, stochastic);
    CHECK(got == parameters_and_buffers(expected[0]));
    // The replicas rounded alike: their weights stay equal (their batch-norm statistics saw other data).
    CHECK(parameters_only(expected[0]) == parameters_only(expected[1]));
    // Rounding to nearest gives other weights: the stochastic rounding did round.
    const optim::sgd nearest({.learning_rate = 0.05, .momentum = 0.9});
    CHECK(parameters_only(trained) != parameters_only(trained_replicas(net, R, G, D, half_images, nearest)[0]));
}

TEST_CASE("16.16 with stochastic rounding of activations and gradients: pipelines, recomputation and replicas "
          "train bit for bit as the whole network", "[exec][nn][session][threads][rounding]") {
    namespace optim = tessera::optim;
    constexpr std::size_t G = 4, D = 3, R = 2;
    constexpr std::uint64_t seed = 11;
    using c = cfg::config<H, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<G>,
                          cfg::device_iterations<D>, cfg::replication<R>, cfg::all>;
    const half_net_t net = make_net<H>();
    const optim::sgd stochastic({.learning_rate = 0.05, .momentum = 0.9, .rounding = {.stochastic = true, .seed = 9}});
    auto expected = trained_replicas(net, R, G, D, half_images, stochastic, seed);
    for (const bool recompute : {false, true}) {
        INFO("stage 0 recomputes its forward: " << recompute);
        exec::session_options settings{.stochastic_rounding = seed};
        if (recompute) settings.recompute = {true, false};
        auto run = exec::training_model<c>(net, stochastic, {1, side, side, channels}, {.micro_batch = batch}, settings);
        (void)tessera::test::within_deadline(300, "16.16 session", [&] { return run(half_images); });
        for (std::size_t r = 0; r < R; ++r) {
            half_net_t trained = run.replica(r).network();
            CHECK(parameters_and_buffers(trained) == parameters_and_buffers(expected[r]));
        }
    }
    // Rounding activations to nearest gives other weights: the activations did round stochastically.
    CHECK(parameters_only(expected[0]) !=
          parameters_only(trained_replicas(net, R, G, D, half_images, stochastic)[0]));
    // Another seed draws other bits.
    CHECK(parameters_only(expected[0]) !=
          parameters_only(trained_replicas(net, R, G, D, half_images, stochastic, seed + 1)[0]));
}

TEST_CASE("8-bit pixels normalised on the IPU round to half stochastically when asked, element by element",
          "[exec][rounding]") {
    constexpr std::size_t rows = 3, n = rows * channels * side * side;
    std::vector<std::uint8_t> px(n);
    for (std::size_t i = 0; i < n; ++i) px[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
    const auto norm = std::make_shared<const tessera::data::normalization>(
        tessera::data::normalization{.mean = {0.3f, 0.4f, 0.5f}, .stddev = {0.7f, 0.3f, 0.9f}});
    const tessera::data::sample_shape shape{channels, side, side};
    const auto exact = exec::host_input<P>::pixels(px, shape, rows, norm).prepare();  // fp32: nothing rounds
    const tessera::tensor::rounding r = exec::input_rounding(exec::micro_batch_rounding(4, 1, 2, 3));
    const auto rounded = exec::host_input<H>::pixels(px, shape, rows, norm).prepare(r);
    const auto nearest = exec::host_input<H>::pixels(px, shape, rows, norm).prepare();
    std::size_t wrong = 0, other_than_nearest = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const auto want = tessera::tensor::round_element(exact.data()[k], r, k);
        wrong += rounded.data()[k].bits() != want.bits();
        other_than_nearest += rounded.data()[k].bits() != nearest.data()[k].bits();
        CHECK(nearest.data()[k].bits() == tessera::half(exact.data()[k]).bits());
    }
    CHECK(wrong == 0);
    CHECK(other_than_nearest > n / 10);
}

TEST_CASE("stochastic rounding of activations is refused where nothing rounds to 16 bits", "[exec][session][rounding]") {
    using c = cfg::config<cfg::gradient_accumulation<1>, cfg::device_iterations<1>, cfg::all>;
    const net_t net = make_net();  // fp32 activations
    CHECK_THROWS_WITH(exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch},
                                              {.stochastic_rounding = 1}),
                      Catch::Matchers::Contains("32-bit floats, not halves"));
    // 16-bit activations, but an optimiser that counts no steps: nothing to key the bits by.
    using c16 = cfg::config<H, cfg::gradient_accumulation<1>, cfg::device_iterations<1>, cfg::all>;
    const half_net_t half_net = make_net<H>();
    CHECK_THROWS_WITH(exec::training_model<c16>(half_net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch},
                                              {.stochastic_rounding = 1}),
                      Catch::Matchers::Contains("counts no steps"));
}

// Sharded optimiser state: a session whose replicas each keep and step a shard of the state trains bit
// for bit as the same session without sharding, and its gathered state is the unsharded state.
namespace {

template <class Session>
std::vector<float> optimiser_state(const Session& run) {
    auto model = run.unsharded_model();
    std::vector<float> all;
    model.optimizers().visit_state([&](const std::string&, std::span<float> v) { all.insert(all.end(), v.begin(), v.end()); });
    return all;
}

template <class Net, class Session>
void check_same_training(Session& sharded, Session& plain, std::size_t R) {
    REQUIRE(sharded.program().optimizer_sharded());
    for (std::size_t r = 0; r < R; ++r) {
        CAPTURE(r);
        Net a = sharded.replica(r).network(), b = plain.replica(r).network();
        CHECK(parameters_and_buffers(a) == parameters_and_buffers(b));
        CHECK(sharded.replica(r).optimizer_shards() == R);
        CHECK(sharded.replica(r).optimizer_shard_index() == r);
    }
    Net trained = plain.model().network(), untouched = make_net<typename Net::precision>();
    CHECK(parameters_and_buffers(trained) != parameters_and_buffers(untouched));  // it did train
    CHECK(optimiser_state(sharded) == optimiser_state(plain));
    CHECK(!optimiser_state(plain).empty());
}

}  // namespace

TEST_CASE("sharded optimiser state: R = 2 and 4 replicas train bit for bit as without sharding",
          "[exec][nn][session][threads][shard]") {
    // At 16.16, the network and optimiser types of the stochastic-rounding test above (one set of
    // instantiations); fp32 sharding is checked over MPI processes (tests/dist) and per optimiser
    // (tests/optim).
    namespace optim = tessera::optim;
    constexpr std::size_t G = 4;
    const half_net_t net = make_net<H>();
    const auto train = [&]<std::size_t R>(std::integral_constant<std::size_t, R>, const optim::sgd& optimizer) {
        CAPTURE(R);
        using c = cfg::config<H, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<G>,
                              cfg::device_iterations<2>, cfg::replication<R>, cfg::all>;
        auto sharded = exec::training_model<c>(net, optimizer, {1, side, side, channels}, {.micro_batch = batch},
                                               {.optimizer_sharding = true});
        auto plain = exec::training_model<c>(net, optimizer, {1, side, side, channels}, {.micro_batch = batch});
        const auto a = tessera::test::within_deadline(300, "sharded", [&] { return sharded(half_images); });
        const auto b = tessera::test::within_deadline(300, "plain", [&] { return plain(half_images); });
        CHECK(a.losses == b.losses);
        check_same_training<half_net_t>(sharded, plain, R);
        // Each replica's IPUs hold 1/R of the state (the sizes are in the plan; the model holds them too).
        for (std::size_t ipu = 0; ipu < 2; ++ipu) CHECK(sharded.plan().ipus[ipu].on_chip() < plain.plan().ipus[ipu].on_chip());
        std::size_t held = 0;
        for (std::size_t r = 0; r < R; ++r) {
            auto m = sharded.replica(r);
            m.optimizers().visit_state([&](const std::string&, std::span<float> v) { held += v.size(); });
        }
        CHECK(held == optimiser_state(plain).size());
    };
    train(std::integral_constant<std::size_t, 2>{}, optim::sgd({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.01}));
    // (AdamW's two moments are sharded as SGD's momentum is: tests/optim/test_weight_rounding.cpp.)
    train(std::integral_constant<std::size_t, 4>{},
          optim::sgd({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}));
}

TEST_CASE("sharded optimiser state at 16.16 with stochastic rounding and dynamic loss scaling: bit for bit",
          "[exec][nn][session][threads][shard][rounding]") {
    namespace optim = tessera::optim;
    constexpr std::size_t R = 2;
    // Loss scales of 2^19 and 2^18 overflow the half gradients: the first two steps are skipped on
    // every replica (the vote spans the replicas, since each sees only its shard of the sums) and the
    // third runs at 2^17. (Run-time loss scaling: the precision type of the test above.)
    using c = cfg::config<H, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>,
                          cfg::device_iterations<3>, cfg::replication<R>, cfg::all>;
    const half_net_t net = make_net<H>();
    const optim::sgd stochastic({.learning_rate = 0.05, .momentum = 0.9, .rounding = {.stochastic = true, .seed = 9}});
    const auto session = [&](bool shard) {
        exec::session_options settings;
        settings.loss_scale = 0x1p19;
        settings.dynamic_loss_scaling = true;
        settings.optimizer_sharding = shard;
        return exec::training_model<c>(net, stochastic, {1, side, side, channels}, {.micro_batch = batch}, settings);
    };
    auto sharded = session(true), plain = session(false);
    (void)tessera::test::within_deadline(300, "sharded 16.16", [&] { return sharded(half_images); });
    (void)tessera::test::within_deadline(300, "plain 16.16", [&] { return plain(half_images); });
    CHECK(plain.model().skipped_steps() == 2);
    for (std::size_t r = 0; r < R; ++r) CHECK(sharded.replica(r).skipped_steps() == plain.model().skipped_steps());
    CHECK(sharded.model().loss_scale() == plain.model().loss_scale());
    check_same_training<half_net_t>(sharded, plain, R);
}

TEST_CASE("sharded optimiser state: checkpoints hold the whole state, and resume with or without sharding",
          "[exec][nn][session][threads][shard]") {
    namespace optim = tessera::optim;
    using c = cfg::config<H, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>,
                          cfg::device_iterations<2>, cfg::replication<2>, cfg::all>;
    const half_net_t net = make_net<H>();
    const optim::sgd opt({.learning_rate = 0.05, .momentum = 0.9});
    const auto session = [&](bool shard) {
        return exec::training_model<c>(net, opt, {1, side, side, channels}, {.micro_batch = batch},
                                       {.optimizer_sharding = shard});
    };
    auto sharded = session(true), plain = session(false);
    const auto later = [](std::size_t r, std::size_t d, std::size_t m) { return half_images(r, d + 2, m); };
    (void)tessera::test::within_deadline(300, "first calls", [&] { return sharded(half_images), plain(half_images); });
    const auto dir = std::filesystem::temp_directory_path();
    const auto from_sharded = dir / "tessera_sharded.ckpt", from_plain = dir / "tessera_plain.ckpt";
    exec::save_session(from_sharded, sharded, {.steps = 2}, "sharding test");
    exec::save_session(from_plain, plain, {.steps = 2}, "sharding test");
    const auto bytes = [](const std::filesystem::path& p) {
        std::ifstream in(p, std::ios::binary);
        return std::vector<char>(std::istreambuf_iterator<char>(in), {});
    };
    CHECK(bytes(from_sharded) == bytes(from_plain));  // the same file, bit for bit
    // Resume the sharded checkpoint without sharding and the plain one with: both continue as the plain run.
    auto resumed_plain = session(false), resumed_sharded = session(true);
    (void)exec::load_session(from_sharded, resumed_plain, "sharding test");
    (void)exec::load_session(from_plain, resumed_sharded, "sharding test");
    (void)tessera::test::within_deadline(300, "second calls", [&] {
        return plain(later), resumed_plain(later), resumed_sharded(later);
    });
    // A checkpoint holds replica 0's batch-norm statistics, which a resumed run gives every replica:
    // replica 0 continues as the plain run, and the two resumed runs agree on every replica.
    check_same_training<half_net_t>(resumed_sharded, resumed_plain, 2);
    half_net_t a = resumed_plain.model().network(), b = plain.model().network();
    CHECK(parameters_and_buffers(a) == parameters_and_buffers(b));
    CHECK(optimiser_state(resumed_sharded) == optimiser_state(plain));
    std::filesystem::remove(from_sharded);
    std::filesystem::remove(from_plain);
}

TEST_CASE("sharded optimiser state needs an optimiser that steps shards", "[exec][nn][session][shard]") {
    using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>, cfg::replication<2>>;
    CHECK_THROWS_WITH(exec::training_model<c>(make_net(), plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch},
                                              {.optimizer_sharding = true}),
                      Catch::Contains("cannot step a shard"));
}

}  // namespace test_sequential_stages
