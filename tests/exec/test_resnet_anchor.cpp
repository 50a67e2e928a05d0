// The correctness anchor on a small ResNet: every strategy, 2 and 4 stages, R = 1, 2, 4 replicas,
// against the plain sequential reference written directly on the network (no stages, no threads).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "../emulator/deadline.hpp"
#include "tessera/config/strategy.hpp"
#include "tessera/config.hpp"
#include "tessera/data/in_memory.hpp"
#include "tessera/data/loader.hpp"
#include "tessera/exec/batch_feed.hpp"
#include "tessera/exec/executor.hpp"
#include "tessera/exec/network_session.hpp"
#include "tessera/exec/staged_network.hpp"
#include "tessera/nn/loss.hpp"
#include "tessera/nn/resnet.hpp"
#include "tessera/optim/sgd.hpp"

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
using P = cfg::fp32;
using net_t = nn::resnet<nn::basic_block<P, nn::padding_shortcut>, nn::cifar_stem<P>, 1, 1>;  // stem, 2 blocks, head

namespace {

constexpr std::size_t batch = 2, side = 8, channels = 3, classes = 10;
const tessera::tensor::shape input_shape{batch, side, side, channels};

// Plain SGD, the same arithmetic in the stages and in the reference.
struct plain_sgd {
    float learning_rate = 0.05f;
    template <class S>
    void step(S& params, double scale) {
        params.visit_parameters([&](std::string_view, auto value, auto grad) {
            for (std::size_t k = 0; k < value.size(); ++k) value[k] -= learning_rate * (static_cast<float>(scale) * grad[k]);
        });
    }
};

using model_t = exec::staged_network<net_t, plain_sgd>;

struct feed_t {
    std::pair<nn::activation<P>, std::vector<std::int32_t>> operator()(std::size_t r, std::size_t d, std::size_t m) const {
        std::mt19937 rng(static_cast<std::uint32_t>(11 + 1009 * r + 101 * d + m));
        std::normal_distribution<float> pixel(0.0f, 1.0f);
        std::uniform_int_distribution<std::int32_t> cls(0, classes - 1);
        auto x = tessera::tensor::make_nhwc<float>(input_shape);
        for (auto& v : x) v = pixel(rng);
        std::vector<std::int32_t> y(batch);
        for (auto& v : y) v = cls(rng);
        return {std::move(x), std::move(y)};
    }
};

std::vector<float> parameters_and_buffers(net_t& net) {
    std::vector<float> all;
    net.visit_parameters([&](std::string_view, auto value, auto) { all.insert(all.end(), value.begin(), value.end()); });
    net.visit_buffers([&](std::string_view, auto value) { all.insert(all.end(), value.begin(), value.end()); });
    return all;
}

// The sequential reference on whole networks: R replicas, G micro-batches each, gradients summed in
// replica order, then SGD with the mean scale on every replica. Returns each replica's parameters
// and batch-norm running statistics (the statistics differ between replicas: each sees its own data).
template <class Opt = plain_sgd>
std::vector<std::vector<float>> reference(const net_t& initial, std::size_t R, std::size_t G, std::size_t D,
                                          const Opt& optimizer = {}) {
    std::vector<net_t> nets(R, initial);
    std::vector<Opt> opts(R, optimizer);
    const feed_t feed;
    const nn::context ctx{};
    for (std::size_t d = 0; d < D; ++d) {
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t m = 0; m < G; ++m) {
                auto [x, y] = feed(r, d, m);
                net_t::state st;
                nn::softmax_cross_entropy<P> loss;
                const auto& logits = nets[r].forward(x, st, ctx);
                (void)loss(logits, y);
                (void)nets[r].backward(loss.gradient(), st, ctx, false);
            }
        if (R > 1) {
            std::vector<std::vector<std::span<float>>> grads(R);
            for (std::size_t r = 0; r < R; ++r)
                nets[r].visit_parameters([&](std::string_view, auto, auto g) { grads[r].push_back(g); });
            for (std::size_t p = 0; p < grads[0].size(); ++p)
                for (std::size_t k = 0; k < grads[0][p].size(); ++k) {
                    float sum = grads[0][p][k];
                    for (std::size_t r = 1; r < R; ++r) sum += grads[r][p][k];
                    for (std::size_t r = 0; r < R; ++r) grads[r][p][k] = sum;
                }
        }
        const float scale = 1.0f / static_cast<float>(G * R);
        for (std::size_t r = 0; r < R; ++r) {
            opts[r].step(nets[r], static_cast<double>(scale));
            nets[r].visit_parameters([](std::string_view, auto, auto g) { std::fill(g.begin(), g.end(), 0.0f); });
        }
    }
    std::vector<std::vector<float>> out;
    for (auto& n : nets) out.push_back(parameters_and_buffers(n));
    return out;
}

}  // namespace

TEMPLATE_TEST_CASE("correctness anchor on a small ResNet: bit-identical to the sequential reference",
                   "[exec][anchor][resnet][threads]", cfg::sharded<2>, cfg::sharded<4>,
                   (cfg::pipelined<cfg::gpipe, 2>), (cfg::pipelined<cfg::gpipe, 4>),
                   (cfg::pipelined<cfg::one_f_one_b, 2>), (cfg::pipelined<cfg::one_f_one_b, 4>), cfg::phased<2>,
                   cfg::phased<4>) {
    constexpr std::size_t S = TestType::stages, G = 2 * S, D = 2;
    const net_t initial(channels, classes);
    REQUIRE(initial.units() == 4);
    const auto first = exec::balanced_units(initial, input_shape, S);
    REQUIRE(first.size() == S);
    const model_t staged(initial, first, input_shape, plain_sgd{});
    for (std::size_t R : {1u, 2u, 4u}) {
        INFO("replicas: " << R << ", stages start at units " << first[0] << (S > 1 ? ", " : "") << (S > 1 ? first[1] : 0));
        std::vector<model_t> models(R, staged);
        exec::executor<model_t> ex(exec::make_schedule<TestType>(G, true, R), exec::costs_of(staged), R);
        tessera::test::within_deadline(300, "resnet anchor", [&] {
            return ex.run(std::span(models), feed_t{}, D, exec::output_selection::of<cfg::all>());
        });
        const auto expected = reference(initial, R, G, D);
        for (std::size_t r = 0; r < R; ++r) CHECK(parameters_and_buffers(models[r].network()) == expected[r]);
        net_t untouched = initial;
        CHECK(parameters_and_buffers(untouched) != expected[0]);  // it did train
    }
}

TEST_CASE("staged_network reports per-stage costs and balances units by FLOPs", "[exec][resnet]") {
    const net_t net(channels, classes);
    const auto two = exec::balanced_units(net, input_shape, 2);
    CHECK(two.front() == 0);
    const model_t staged(net, two, input_shape, plain_sgd{});
    double flops = 0;
    std::size_t weights = 0;
    for (std::size_t s = 0; s < staged.stages(); ++s) {
        const auto c = staged.cost(s);
        flops += c.forward_flops + c.backward_flops;
        weights += c.weight_bytes;
        CHECK(c.input_bytes > 0);
    }
    const auto whole = net.cost(input_shape);
    CHECK(flops == Approx(whole.flops()));
    CHECK(weights == whole.parameters * sizeof(float));
    CHECK(staged.cost(1).output_bytes == batch * classes * sizeof(float));
    REQUIRE_THROWS_AS(model_t(net, {1, 2}, input_shape, plain_sgd{}), cfg::config_error);
    REQUIRE_THROWS_AS(model_t(net, {0, 4}, input_shape, plain_sgd{}), cfg::config_error);
    // Shape inference runs at construction: a sample with the wrong channel count fails here.
    REQUIRE_THROWS(model_t(net, {0, 2}, {batch, side, side, channels + 1}, plain_sgd{}));
    REQUIRE_THROWS(exec::training_model<cfg::config<cfg::sharded<2>>>(net, plain_sgd{}, {1, side, side, 1},
                                                                       {.micro_batch = batch}));
}

TEST_CASE("training_model of a ResNet with optim::sgd (momentum) matches the reference", "[exec][resnet][session][threads]") {
    namespace optim = tessera::optim;
    using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>, cfg::device_iterations<2>,
                          cfg::replication<2>, cfg::all>;
    const net_t net(channels, classes);
    const optim::sgd sgd({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
    auto run = exec::training_model<c>(net, sgd, {1, side, side, channels}, {.micro_batch = batch});
    CHECK(run.model().stages() == 2);
    CHECK(run.model().first_unit(1) == exec::balanced_units(net, input_shape, 2)[1]);
    for (int call = 0; call < 2; ++call) {
        const auto result = tessera::test::within_deadline(300, "resnet session", [&] { return run(feed_t{}); });
        CHECK(result.losses[0].size() == 8);
    }
    // The reference: two calls of D = 2 updates (the feed repeats per call), replicas summed in order.
    net_t trained = run.model().network();
    const std::vector<float> got = parameters_and_buffers(trained);
    const auto ref = [&] {
        std::vector<net_t> n(2, net);
        std::vector<optim::sgd> o(2, sgd);
        const nn::context ctx{};
        for (int callno = 0; callno < 2; ++callno)
            for (std::size_t d = 0; d < 2; ++d) {
                for (std::size_t r = 0; r < 2; ++r)
                    for (std::size_t m = 0; m < 4; ++m) {
                        auto [x, y] = feed_t{}(r, d, m);
                        net_t::state st;
                        nn::softmax_cross_entropy<P> loss;
                        (void)loss(n[r].forward(x, st, ctx), y);
                        (void)n[r].backward(loss.gradient(), st, ctx, false);
                    }
                std::vector<std::vector<std::span<float>>> g(2);
                for (std::size_t r = 0; r < 2; ++r)
                    n[r].visit_parameters([&](std::string_view, auto, auto gr) { g[r].push_back(gr); });
                for (std::size_t p = 0; p < g[0].size(); ++p)
                    for (std::size_t k = 0; k < g[0][p].size(); ++k) {
                        const float sum = g[0][p][k] + g[1][p][k];
                        g[0][p][k] = g[1][p][k] = sum;
                    }
                for (std::size_t r = 0; r < 2; ++r) {
                    o[r].step(n[r], static_cast<double>(1.0f / 8.0f));
                    n[r].visit_parameters([](std::string_view, auto, auto gr) { std::fill(gr.begin(), gr.end(), 0.0f); });
                }
            }
        return parameters_and_buffers(n[0]);
    }();
    CHECK(got == ref);
}

TEST_CASE("padded samples count in neither the loss nor the gradient", "[exec][resnet]") {
    const net_t net(channels, classes);
    model_t staged(net, {0, 2}, input_shape, plain_sgd{});
    auto logits = tessera::tensor::make_nhwc<float>({2, 1, 1, classes});
    for (std::size_t k = 0; k < logits.size(); ++k) logits.data()[k] = 0.1f * float(k % 7) - 0.2f;
    const std::vector<std::int32_t> labels{3, 5};
    const auto [full, gfull] = staged.loss(logits, exec::class_labels(labels));
    const auto [half, ghalf] = staged.loss(logits, exec::class_labels(labels, 1));
    // The padded second sample: no gradient; the loss and the first row's gradient are those of a batch of one.
    auto one = tessera::tensor::make_nhwc<float>({1, 1, 1, classes});
    std::copy_n(logits.data(), classes, one.data());
    const net_t net1(channels, classes);
    model_t staged1(net1, {0, 2}, {1, side, side, channels}, plain_sgd{});
    const auto [single, gsingle] = staged1.loss(one, exec::class_labels({3}));
    CHECK(half == single);
    for (std::size_t k = 0; k < classes; ++k) {
        CHECK(ghalf.data()[k] == gsingle.data()[k]);
        CHECK(ghalf.data()[classes + k] == 0.0f);
    }
    CHECK(full != half);
    const auto [none, gnone] = staged.loss(logits, exec::class_labels(labels, 0));
    CHECK(none == 0.0f);
    CHECK(std::all_of(gnone.begin(), gnone.end(), [](float v) { return v == 0.0f; }));
    REQUIRE_THROWS_AS(staged.loss(logits, exec::class_labels(labels, 3)), cfg::config_error);
}

TEST_CASE("batch_feed: loader batches as NHWC micro-batches with masks; a padded tail trains", "[exec][resnet][data][threads]") {
    namespace data = tessera::data;
    constexpr std::size_t samples = 20;
    auto value = [](std::size_t i, std::size_t c, std::size_t h, std::size_t w) {
        return static_cast<float>(i) + 0.1f * static_cast<float>(c) + 0.01f * static_cast<float>(h * side + w);
    };
    std::vector<float> values;
    std::vector<data::label_t> labels;
    for (std::size_t i = 0; i < samples; ++i) {
        for (std::size_t c = 0; c < channels; ++c)
            for (std::size_t h = 0; h < side; ++h)
                for (std::size_t w = 0; w < side; ++w) values.push_back(value(i, c, h, w));
        labels.push_back(static_cast<data::label_t>((i * 3) % classes));
    }
    const data::in_memory_dataset<float> ds({channels, side, side}, classes, std::move(values), labels, "ramp");
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<3>, cfg::all>;
    const net_t net(channels, classes);
    auto run = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    data::data_loader loader(ds, run.batching(), {.drop_last = false});
    auto epoch = loader.epoch(0);
    std::vector<data::batch_lease<float>> batches;
    while (auto b = epoch.next()) batches.push_back(std::move(*b));
    REQUIRE(batches.size() == 4);  // 20 = 3 × 6 + 2: the last combined batch holds 2 real samples

    const exec::batch_feed<P, float> first(batches[0], run.batching(), {.scale = 1.0f});
    const auto [x, y] = first(0, 0, 1);  // samples 2 and 3 (no shuffling)
    REQUIRE(tessera::tensor::shape_of(x) == tessera::tensor::shape{batch, side, side, channels});
    for (std::size_t i = 0; i < batch; ++i)
        for (std::size_t h = 0; h < side; ++h)
            for (std::size_t w = 0; w < side; ++w)
                for (std::size_t ch = 0; ch < channels; ++ch)
                    REQUIRE(x.data()[((i * side + h) * side + w) * channels + ch] == value(2 + i, ch, h, w));
    CHECK(y.classes == std::vector<std::int32_t>{labels[2], labels[3]});
    CHECK(y.valid == 2);

    std::vector<float> last_losses;
    for (const auto& b : batches) {
        const auto result = tessera::test::within_deadline(300, "loader session", [&] {
            return run(exec::batch_feed<P, float>(b, run.batching(), {.scale = 1.0f / 20.0f}));
        });
        REQUIRE(result.losses[0].size() == 3);
        last_losses = result.losses[0];
    }
    CHECK(last_losses[0] > 0.0f);   // the 2 real samples
    CHECK(last_losses[1] == 0.0f);  // micro-batches of padding only: no loss ...
    CHECK(last_losses[2] == 0.0f);
    const exec::batch_feed<P, float> tail(batches[3], run.batching());
    const auto padded = tail(0, 0, 1);
    CHECK(padded.second.valid == 0);
    CHECK(std::all_of(padded.first.begin(), padded.first.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("static loss scaling by a power of two leaves fp32 training bit-identical", "[exec][resnet][session][threads]") {
    using plain = cfg::config<cfg::sharded<2>, cfg::gradient_accumulation<2>, cfg::device_iterations<2>>;
    using scaled = cfg::config<cfg::fp32::with<cfg::static_loss_scaling<1024.0>>, cfg::sharded<2>,
                               cfg::gradient_accumulation<2>, cfg::device_iterations<2>>;
    const net_t net(channels, classes);
    auto a = exec::training_model<plain>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    auto b = exec::training_model<scaled>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    CHECK(a.model().loss_scale() == 1.0);
    CHECK(b.model().loss_scale() == 1024.0);
    const auto ra = tessera::test::within_deadline(300, "unscaled", [&] { return a(feed_t{}); });
    const auto rb = tessera::test::within_deadline(300, "scaled", [&] { return b(feed_t{}); });
    CHECK(ra.losses == rb.losses);  // the reported loss is unscaled
    net_t wa = a.model().network(), wb = b.model().network();
    CHECK(parameters_and_buffers(wa) == parameters_and_buffers(wb));
}

TEST_CASE("inference_model of a ResNet uses running statistics and returns every output", "[exec][resnet][session][threads]") {
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<4>, cfg::device_iterations<3>>;
    net_t net(channels, classes);
    auto eval = exec::inference_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    CHECK(eval.model().mode() == nn::mode::eval);
    const auto result = tessera::test::within_deadline(300, "resnet inference", [&] { return eval(feed_t{}); });
    REQUIRE(result.outputs[0].size() == 3);
    for (std::size_t d = 0; d < 3; ++d) {
        net_t::state st;
        const auto x = feed_t{}(0, d, 0).first;
        const auto& logits = net.forward(x, st, nn::context{.mode = nn::mode::eval});
        CHECK(std::equal(logits.begin(), logits.end(), result.outputs[0][d].begin(), result.outputs[0][d].end()));
    }
}
