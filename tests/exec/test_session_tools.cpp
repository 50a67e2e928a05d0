// What a training program needs around a session: evaluation, checkpoints, loss scaling (precisions:
// test_precisions.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "../emulator/deadline.hpp"
#include "session_images.hpp"
#include "tessera/config.hpp"
#include "tessera/data.hpp"
#include "tessera/exec.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

namespace test_session_tools {

namespace cfg = tessera::config;
namespace data = tessera::data;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
namespace optim = tessera::optim;

namespace {

using namespace tessera::test::session_images;

std::vector<float> weights_of(nn::resnet20<cfg::fp32> net) {
    std::vector<float> all;
    net.visit_parameters([&](std::string_view, auto v, auto) { all.insert(all.end(), v.begin(), v.end()); });
    net.visit_buffers([&](std::string_view, auto v) { all.insert(all.end(), v.begin(), v.end()); });
    return all;
}

}  // namespace

TEST_CASE("evaluate scores every real sample of a padded epoch, as the outputs say", "[exec][threads]") {
    const nn::resnet20<cfg::fp32> net(1, 10);
    const auto test = images(22);  // micro-batches of 4, D = 2: 3 calls of 8, the last with 6 real samples
    using c = train_cfg<cfg::fp32>;
    auto eval = exec::inference_model<c>(net, sample, {.micro_batch = 4, .device_iterations = 2});
    auto loader = data::make_data_loader<c::for_inference>(test, {.micro_batch = 4, .device_iterations = 2},
                                                           {.drop_last = false});
    const auto e = tessera::test::within_deadline(120, "evaluate", [&] { return exec::evaluate(eval, loader, norm); });
    CHECK(e.samples == 22);
    // The same scores by hand: the whole network on each sample, on the host.
    nn::resnet20<cfg::fp32> host = net;
    typename nn::resnet20<cfg::fp32>::state st;
    nn::context ctx;
    ctx.mode = nn::mode::eval;
    std::size_t correct = 0;
    double loss = 0;
    for (std::size_t i = 0; i < test.size(); ++i) {
        std::vector<std::uint8_t> px(side * side);
        const auto label = test.read(i, px);
        auto x = exec::host_input<cfg::fp32>::pixels(px, {1, side, side}, 1,
                                                     std::make_shared<const data::normalization>(norm));
        const auto input = std::move(x).prepare();
        const auto& y = host.forward(input, st, ctx);
        std::size_t best = 0;
        for (std::size_t k = 1; k < 10; ++k)
            if (y.data()[k] > y.data()[best]) best = k;
        correct += best == std::size_t(label);
        double m = y.data()[0], sum = 0;
        for (std::size_t k = 1; k < 10; ++k) m = std::max(m, double(y.data()[k]));
        for (std::size_t k = 0; k < 10; ++k) sum += std::exp(double(y.data()[k]) - m);
        loss += std::log(sum) + m - double(y.data()[label]);
    }
    CHECK(e.correct == correct);
    CHECK(e.loss == Approx(loss / 22).epsilon(1e-4));
    CHECK(e.accuracy() == Approx(double(correct) / 22));
}

TEST_CASE("a session stopped after k calls and resumed from its checkpoint ends with the same weights", "[exec][threads]") {
    using c = train_cfg<cfg::fp32>::with<cfg::fp32::with<cfg::dynamic_loss_scaling<1024.0, 2>>>;
    const nn::resnet20<cfg::fp32> net(1, 10);
    const optim::sgd sgd({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
    const auto train = images(96);
    auto loader = data::make_data_loader<c>(train, {.micro_batch = 4}, {.shuffle = true, .seed = 5});
    const std::string config_text = "resnet20 test";
    const auto path = std::filesystem::temp_directory_path() / "tessera_session_test.ckpt";
    const auto run_calls = [&](auto& session, std::size_t first, std::size_t last) {
        auto epoch = loader.epoch(0);
        std::size_t k = 0;
        while (auto batch = epoch.next()) {
            if (k >= first && k < last) {
                session.set_learning_rate(0.05 / double(k + 1));
                (void)session(exec::batch_feed<cfg::fp32, std::uint8_t>(*batch, session.batching(), norm));
            }
            ++k;
        }
    };
    auto whole = exec::training_model<c>(net, sgd, sample, {.micro_batch = 4});
    tessera::test::within_deadline(300, "uninterrupted", [&] { run_calls(whole, 0, 4); return 0; });

    auto first = exec::training_model<c>(net, sgd, sample, {.micro_batch = 4});
    tessera::test::within_deadline(300, "first part", [&] { run_calls(first, 0, 2); return 0; });
    exec::save_session(path, first, {.epoch = 0, .calls = 2, .steps = 4, .seed = 5}, config_text);
    auto second = exec::training_model<c>(net, sgd, sample, {.micro_batch = 4});
    const auto at = exec::load_session(path, second, config_text);
    CHECK(at.calls == 2);
    CHECK(at.steps == 4);
    CHECK(at.seed == 5);
    tessera::test::within_deadline(300, "second part", [&] { run_calls(second, 2, 4); return 0; });
    CHECK(weights_of(second.model().network()) == weights_of(whole.model().network()));
    CHECK(second.model().loss_scale() == whole.model().loss_scale());
    // Without the optimizer's momentum the continuation would differ: the test can tell.
    auto fresh = exec::training_model<c>(net, sgd, sample, {.micro_batch = 4});
    auto weights_only = fresh.model();
    weights_only.network() = first.model().network();
    fresh.load_weights(weights_only);
    tessera::test::within_deadline(300, "weights only", [&] { run_calls(fresh, 2, 4); return 0; });
    CHECK(weights_of(fresh.model().network()) != weights_of(whole.model().network()));

    // Refusals leave the session as it was.
    const auto before = weights_of(second.model().network());
    REQUIRE_THROWS_WITH(exec::load_session(path, second, "another configuration"), Catch::Contains("another configuration"));
    auto bytes = [&] {
        std::ifstream in(path, std::ios::binary);
        return std::vector<char>(std::istreambuf_iterator<char>(in), {});
    }();
    bytes[bytes.size() / 2] ^= 0x5a;
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    REQUIRE_THROWS_AS(exec::load_session(path, second, config_text), optim::checkpoint_error);
    using other = nn::resnet<nn::basic_block<cfg::fp32, nn::padding_shortcut>, nn::cifar_stem<cfg::fp32>, 1, 1, 1>;
    auto small = exec::training_model<c>(other(1, 10), sgd, sample, {.micro_batch = 4});
    exec::save_session(path, small, {}, config_text);
    REQUIRE_THROWS_AS(exec::load_session(path, second, config_text), optim::checkpoint_error);
    CHECK(weights_of(second.model().network()) == before);
    std::filesystem::remove(path);
}

TEST_CASE("a loss that is not finite stops training with an error that says where", "[exec][threads]") {
    // A learning rate that blows the weights up in the first update, to 1e36 and beyond: in the second
    // call's forward their products overflow fp32, and the loss is not finite. (Weights of 1e30 are not
    // enough: batch norm's statistics, summed block by block, stay finite and normalise them.)
    using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<3>, cfg::eight_bit_io>;
    const nn::resnet20<cfg::fp32> net(1, 10);
    const auto train = images(24);
    auto run = exec::training_model<c>(net, optim::sgd({.learning_rate = 1e38}), sample, {.micro_batch = 4});
    auto loader = data::make_data_loader<c>(train, {.micro_batch = 4}, {});
    auto epoch = loader.epoch(0);
    auto first = epoch.next();
    CHECK_NOTHROW(tessera::test::within_deadline(120, "first call", [&] {
        return run(exec::batch_feed<cfg::fp32, std::uint8_t>(*first, run.batching(), norm));
    }));
    auto second = epoch.next();
    const auto what = tessera::test::error_within_deadline<exec::non_finite_loss>(120, "diverged call", [&] {
        return run(exec::batch_feed<cfg::fp32, std::uint8_t>(*second, run.batching(), norm));
    });
    INFO(what);
    CHECK(what.find("host call 2 (weight updates 2 to 2)") != std::string::npos);
    CHECK(what.find("(not finite)") != std::string::npos);
}

TEST_CASE("the sequential example of docs/configurations.md learns as written: layers start initialised", "[exec][threads]") {
    // Two classes a linear probe separates: the bright half of the image is the left or the right one.
    std::vector<std::uint8_t> values;
    std::vector<data::label_t> labels;
    for (std::size_t i = 0; i < 256; ++i) {
        const bool right = i % 2 == 1;
        for (std::size_t h = 0; h < 28; ++h)
            for (std::size_t w = 0; w < 28; ++w)
                values.push_back(std::uint8_t(((w >= 14) == right ? 200 : 40) + (i * 7 + h * 3 + w) % 13));
        labels.push_back(right ? 1 : 0);
    }
    const data::in_memory_dataset<std::uint8_t> halves({1, 28, 28}, 2, std::move(values), std::move(labels), "halves");
    // As docs/configurations.md writes it (with two classes):
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<8>>;
    auto net = nn::sequential(nn::conv2d<cfg::fp32>(1, 8, {3, 3, 1, 1}), nn::batch_norm_relu<cfg::fp32>(8),
                              nn::linear<cfg::fp32>(28 * 28 * 8, 2)).named({"conv", "bn", "fc"});
    auto run = exec::training_model<c>(net, optim::sgd({.learning_rate = 0.1}), {1, 28, 28, 1}, {.micro_batch = 16},
                                       {.first_units = {0, net.unit_index("fc")}});
    auto loader = data::make_data_loader<c>(halves, {.micro_batch = 16}, {.shuffle = true, .seed = 1});
    std::vector<float> losses;
    for (int epoch = 0; epoch < 3; ++epoch)
        for (auto& batch : loader) {
            const auto r = tessera::test::within_deadline(120, "sequential", [&] {
                return run(exec::batch_feed<cfg::fp32, float>(batch, run.batching()));
            });
            losses.push_back(r.losses[0].back());
        }
    REQUIRE(losses.size() == 6);
    INFO("first loss " << losses.front() << ", last " << losses.back());
    CHECK(losses.back() < 0.5f * losses.front());
    CHECK(losses.back() < 0.35f);  // ln 2 = 0.693 is where zero-initialised layers sat
}

TEST_CASE("loss scaling chosen at run time: session options turn the overflow vote on or off", "[exec]") {
    using c = train_cfg<cfg::half>;  // no loss scaling in the type
    const nn::resnet20<cfg::half> net(1, 10);
    const optim::sgd sgd({.learning_rate = 0.01});
    auto plain = exec::training_model<c>(net, sgd, sample, {.micro_batch = 4});
    CHECK_FALSE(plain.program().request.check_overflow);
    CHECK_FALSE(plain.model().loss_scaling().dynamic);
    auto dynamic = exec::training_model<c>(net, sgd, sample, {.micro_batch = 4}, {.dynamic_loss_scaling = true});
    CHECK(dynamic.program().request.check_overflow);
    CHECK(dynamic.model().loss_scaling().dynamic);
    CHECK(dynamic.model().loss_scale() == cfg::dynamic_loss_scaling<>::initial_scale);
    auto scaled = exec::training_model<c>(net, sgd, sample, {.micro_batch = 4}, {.loss_scale = 128.0});
    CHECK(scaled.model().loss_scale() == 128.0);
    CHECK_FALSE(scaled.program().request.check_overflow);
}

}  // namespace test_session_tools
