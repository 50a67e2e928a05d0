// The correctness anchor on a small ResNet: every strategy, 2 and 4 stages, R = 1, 2, 4 replicas,
// against the plain sequential reference written directly on the network (no stages, no threads).
#include <catch2/catch.hpp>

#include <cmath>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "../emulator/deadline.hpp"
#include "network_helpers.hpp"
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

namespace test_resnet_anchor {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
using P = cfg::fp32;
using net_t = nn::resnet<nn::basic_block<P, nn::padding_shortcut>, nn::cifar_stem<P>, 1, 1>;  // stem, 2 blocks, head

namespace {

constexpr std::size_t batch = 2, side = 8, channels = 3, classes = 10;
const tessera::tensor::shape input_shape{batch, side, side, channels};

using tessera::test::parameters_and_buffers;
using tessera::test::plain_sgd;

using model_t = exec::staged_network<net_t, plain_sgd>;

// Random images and labels of the model's shape, the same for the same (replica, iteration, micro-batch).
struct feed_t : tessera::test::random_images {
    feed_t()
        : random_images{test_resnet_anchor::batch, test_resnet_anchor::side, test_resnet_anchor::channels,
                        test_resnet_anchor::classes, 11} {}
};

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
    // Scores count real samples only; the best class of each row found by a plain loop.
    std::vector<std::size_t> best(2, 0);
    for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t c = 1; c < classes; ++c)
            if (logits.data()[i * classes + c] > logits.data()[i * classes + best[i]]) best[i] = c;
    const std::size_t hits0 = best[0] == 3, hits1 = best[1] == 5;
    CHECK(staged.score(logits, exec::class_labels(labels)) == exec::top1_score{hits0 + hits1, 2});
    CHECK(staged.score(logits, exec::class_labels(labels, 1)) == exec::top1_score{hits0, 1});
    CHECK(staged.score(logits, exec::class_labels(labels, 0)) == exec::top1_score{0, 0});
    const std::vector<std::int32_t> right{static_cast<std::int32_t>(best[0]), static_cast<std::int32_t>(best[1])};
    CHECK(staged.score(logits, exec::class_labels(right)) == exec::top1_score{2, 2});
    CHECK(staged.score(logits, exec::class_labels(right, 1)) == exec::top1_score{1, 1});
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
    auto [sent, y] = first(0, 0, 1);  // samples 2 and 3 (no shuffling)
    const auto x = std::move(sent).prepare();
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
    auto padded = tail(0, 0, 1);  // padding only: an empty micro-batch
    CHECK(padded.second.valid == 0);
    CHECK(padded.second.classes.empty());
    CHECK(tessera::tensor::shape_of(std::move(padded.first).prepare()) == tessera::tensor::shape{0, side, side, channels});
}

namespace {

std::vector<float> buffers_of(net_t& net) {
    std::vector<float> all;
    net.visit_buffers([&](std::string_view, auto value) { all.insert(all.end(), value.begin(), value.end()); });
    return all;
}

bool all_zero(std::span<const float> v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

constexpr std::size_t per_sample = channels * side * side;

// Samples of varied values in [-0.5, 0.5) (CHW) and labels, for the padded-tail tests.
struct tail_data {
    std::vector<float> values;
    std::vector<tessera::data::label_t> labels;
    explicit tail_data(std::size_t samples) {
        for (std::size_t i = 0; i < samples; ++i) {
            for (std::size_t k = 0; k < per_sample; ++k)
                values.push_back(static_cast<float>((i * 37 + k * 11) % 23) / 23.0f - 0.5f);
            labels.push_back(static_cast<tessera::data::label_t>((i * 7) % classes));
        }
    }
    [[nodiscard]] tessera::data::in_memory_dataset<float> dataset() const {
        return {{channels, side, side}, classes, values, labels, "tail"};
    }
    /// Samples `which` as one NHWC micro-batch, and their labels (an independent reference of batch_feed).
    [[nodiscard]] std::pair<nn::activation<P>, std::vector<std::int32_t>> rows(const std::vector<std::size_t>& which) const {
        auto x = tessera::tensor::make_nhwc<float>({which.size(), side, side, channels});
        std::vector<std::int32_t> y;
        for (std::size_t n = 0; n < which.size(); ++n) {
            for (std::size_t k = 0; k < per_sample; ++k)
                x.data()[(n * side * side + k % (side * side)) * channels + k / (side * side)] =
                    values[which[n] * per_sample + k];
            y.push_back(labels[which[n]]);
        }
        return {std::move(x), std::move(y)};
    }
};

}  // namespace

TEST_CASE("a padded tail trains exactly as its real samples alone: batch norm never sees the padding",
          "[exec][resnet][data][threads]") {
    namespace data = tessera::data;
    // mb = 3, G = 3, R = 2: combined batches of 18; 22 samples leave a tail of 4 real samples: replica 0
    // gets a full micro-batch, one with 1 real sample and one of padding, replica 1 three of padding.
    constexpr std::size_t mb = 3, G = 3, R = 2, samples = 22, per = per_sample;
    const tail_data td(samples);
    const auto& values = td.values;
    const auto& labels = td.labels;
    const auto ds = td.dataset();
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<G>, cfg::replication<R>, cfg::all>;
    const net_t net(channels, classes);
    auto run = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = mb});
    data::data_loader loader(ds, run.batching(), {.drop_last = false});
    auto epoch = loader.epoch(0);
    std::vector<data::batch_lease<float>> batches;
    while (auto b = epoch.next()) batches.push_back(std::move(*b));
    REQUIRE(batches.size() == 2);
    REQUIRE(batches[1].valid() == 4);

    // The feed of the tail: only the real rows, their labels, and empty micro-batches for padding.
    const exec::batch_feed<P, float> tail(batches[1], run.batching());
    auto [sent1, y1] = tail(0, 0, 1);
    const auto x1 = std::move(sent1).prepare();
    CHECK(tessera::tensor::shape_of(x1) == tessera::tensor::shape{1, side, side, channels});
    CHECK(y1.classes == std::vector<std::int32_t>{labels[21]});
    CHECK(y1.valid == 1);
    for (std::size_t k = 0; k < per && x1.size() == per; ++k) {  // NHWC from the dataset's CHW
        const std::size_t ch = k / (side * side), hw = k % (side * side);
        REQUIRE(x1.data()[hw * channels + ch] == values[21 * per + k]);
    }
    auto [sent2, y2] = tail(1, 0, 0);
    const auto x2 = std::move(sent2).prepare();
    CHECK(tessera::tensor::shape_of(x2).n == 0);
    CHECK(x2.size() == 0);
    CHECK(y2.classes.empty());
    CHECK(y2.valid == 0);

    std::vector<exec::run_result<typename decltype(run)::tensor>> results;
    std::vector<float> replica1_buffers;
    for (const auto& b : batches) {
        results.push_back(tessera::test::within_deadline(300, "padded tail session", [&] {
            return run(exec::batch_feed<P, float>(b, run.batching()));
        }));
        net_t r1 = run.replica(1).network();
        if (replica1_buffers.empty()) replica1_buffers = buffers_of(r1);
    }

    // The reference: the plain network on exactly the real samples of each micro-batch (loss = their
    // mean), fully padded micro-batches skipped, gradients summed over replicas, update scale 1/(G × R).
    std::vector<net_t> nets(R, net);
    std::vector<plain_sgd> opts(R);
    std::vector<std::vector<float>> ref_losses(R);
    const nn::context ctx{};
    for (std::size_t b = 0; b < batches.size(); ++b) {
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t m = 0; m < G; ++m) {
                std::vector<std::size_t> real;
                for (std::size_t j = 0; j < mb; ++j)
                    if (const std::size_t i = b * mb * G * R + (r * G + m) * mb + j; i < samples) real.push_back(i);
                if (real.empty()) {
                    ref_losses[r].push_back(0.0f);
                    continue;
                }
                const auto [x, y] = td.rows(real);
                net_t::state st;
                nn::softmax_cross_entropy<P> loss;
                ref_losses[r].push_back(static_cast<float>(loss(nets[r].forward(x, st, ctx), y).loss));
                (void)nets[r].backward(loss.gradient(), st, ctx, false);
            }
        std::vector<std::vector<std::span<float>>> grads(R);
        for (std::size_t r = 0; r < R; ++r)
            nets[r].visit_parameters([&](std::string_view, auto, auto g) { grads[r].push_back(g); });
        for (std::size_t p = 0; p < grads[0].size(); ++p)
            for (std::size_t k = 0; k < grads[0][p].size(); ++k) {
                const float sum = grads[0][p][k] + grads[1][p][k];
                grads[0][p][k] = grads[1][p][k] = sum;
            }
        for (std::size_t r = 0; r < R; ++r) {
            opts[r].step(nets[r], static_cast<double>(1.0f / static_cast<float>(G * R)));
            nets[r].visit_parameters([](std::string_view, auto, auto g) { std::fill(g.begin(), g.end(), 0.0f); });
        }
    }
    for (std::size_t r = 0; r < R; ++r) {
        INFO("replica " << r);
        net_t got = run.replica(r).network();
        CHECK(parameters_and_buffers(got) == parameters_and_buffers(nets[r]));  // bit-identical
        std::vector<float> losses;
        for (const auto& res : results) losses.insert(losses.end(), res.losses[r].begin(), res.losses[r].end());
        CHECK(losses == ref_losses[r]);
    }
    // Replica 1 saw only padding in the tail: its running statistics did not move.
    net_t r1 = run.replica(1).network();
    CHECK(buffers_of(r1) == replica1_buffers);
    CHECK(results[1].losses[1] == std::vector<float>{0.0f, 0.0f, 0.0f});
    CHECK(results[1].losses[0][2] == 0.0f);
}

TEST_CASE("inference on a padded tail returns the real samples' outputs only", "[exec][resnet][data][threads]") {
    namespace data = tessera::data;
    // mb = 3, D = 2, R = 2: combined batches of 12; 19 samples leave 7 in the tail: iteration 1 gives
    // replica 0 one real sample and replica 1 none.
    constexpr std::size_t mb = 3, samples = 19;
    const tail_data td(samples);
    const auto ds = td.dataset();
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<3>, cfg::device_iterations<2>,
                          cfg::replication<2>>;
    net_t net(channels, classes);
    auto eval = exec::inference_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = mb});
    data::data_loader loader(ds, eval.batching(), {.drop_last = false});
    auto epoch = loader.epoch(0);
    (void)epoch.next();
    auto tail = epoch.next();
    REQUIRE(tail);
    REQUIRE(tail->valid() == 7);
    const auto result = tessera::test::within_deadline(300, "padded inference", [&] {
        return eval(exec::batch_feed<P, float>(*tail, eval.batching()));
    });
    REQUIRE(result.outputs[0].size() == 2);
    REQUIRE(result.outputs[1].size() == 2);
    CHECK(tessera::tensor::shape_of(result.outputs[0][1]) == tessera::tensor::shape{1, 1, 1, classes});
    CHECK(tessera::tensor::shape_of(result.outputs[1][1]) == tessera::tensor::shape{0, 1, 1, classes});
    // Order [iteration][replica][micro-batch]: iteration 0 holds samples 12-17, iteration 1 sample 18.
    const std::vector<std::vector<std::size_t>> real{{12, 13, 14}, {18}, {15, 16, 17}, {}};
    for (std::size_t r = 0; r < 2; ++r)
        for (std::size_t d = 0; d < 2; ++d) {
            const auto& which = real[r * 2 + d];
            if (which.empty()) continue;
            net_t::state st;
            const auto& logits = net.forward(td.rows(which).first, st, nn::context{.mode = nn::mode::eval});
            CHECK(std::equal(logits.begin(), logits.end(), result.outputs[r][d].begin(), result.outputs[r][d].end()));
        }
}

TEST_CASE("staged_network runs micro-batches below the compiled size; an empty one touches nothing",
          "[exec][resnet]") {
    const net_t net(channels, classes);
    model_t staged(net, {0, 2}, input_shape, plain_sgd{});  // compiled for micro-batches of 2
    net_t plain = net;
    const auto before = parameters_and_buffers(plain);

    // Zero rows: no network call (running statistics untouched), loss 0, empty gradients, no weight gradient.
    auto [h0, st0] = staged.forward(0, tessera::tensor::make_nhwc<float>({0, side, side, channels}));
    auto [logits0, st1] = staged.forward(1, std::move(h0));
    CHECK(tessera::tensor::shape_of(logits0) == tessera::tensor::shape{0, 1, 1, classes});
    const auto [loss0, g0] = staged.loss(logits0, exec::class_labels{});
    CHECK(loss0 == 0.0f);
    CHECK(g0.size() == 0);
    auto dh = staged.backward(1, g0, std::move(st1));
    CHECK(tessera::tensor::shape_of(dh).n == 0);
    CHECK(staged.backward(0, std::move(dh), std::move(st0)).size() == 0);
    CHECK(all_zero(staged.gradients(0)));
    CHECK(all_zero(staged.gradients(1)));
    net_t after = staged.network();
    CHECK(parameters_and_buffers(after) == before);

    // One row of a model compiled for two: the same numbers as the plain network on that row.
    auto x = feed_t{}(0, 0, 0).first;
    auto one = tessera::tensor::make_nhwc<float>({1, side, side, channels});
    std::copy_n(x.data(), one.size(), one.data());
    const std::vector<std::int32_t> label{4};
    auto [h1, s0] = staged.forward(0, one);
    auto [logits1, s1] = staged.forward(1, std::move(h1));
    const auto [loss1, g1] = staged.loss(logits1, exec::class_labels(label));
    (void)staged.backward(0, staged.backward(1, g1, std::move(s1)), std::move(s0));
    net_t::state st;
    nn::softmax_cross_entropy<P> loss;
    const auto& logits = plain.forward(one, st, nn::context{});
    CHECK(std::equal(logits.begin(), logits.end(), logits1.begin(), logits1.end()));
    CHECK(loss1 == static_cast<float>(loss(logits, label).loss));
    (void)plain.backward(loss.gradient(), st, nn::context{}, false);
    std::vector<float> expected;
    plain.visit_parameters([&](std::string_view, auto, auto g) { expected.insert(expected.end(), g.begin(), g.end()); });
    std::vector<float> got(staged.gradients(0).begin(), staged.gradients(0).end());
    got.insert(got.end(), staged.gradients(1).begin(), staged.gradients(1).end());
    CHECK(got == expected);
    after = staged.network();
    CHECK(buffers_of(after) == buffers_of(plain));

    // More rows than compiled: a typed error naming both sizes.
    REQUIRE_THROWS_AS(staged.forward(0, tessera::tensor::make_nhwc<float>({3, side, side, channels})), cfg::config_error);
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

TEST_CASE("dynamic loss scaling: an overflowing step is skipped on every stage, the scale backs off and grows",
          "[exec][resnet][session][threads]") {
    // Powers of two keep fp32 training bit-identical to unscaled training on the steps that ran.
    // 2^200 overflows the fp32 loss gradient at once; / 2^174 gives 2^26; after 2 clean steps it
    // grows, capped at 2^32, which does not overflow.
    using dynamic = cfg::dynamic_loss_scaling<0x1p200, 2, 0x1p174>;
    using scaled = cfg::config<cfg::fp32::with<dynamic>, cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<3>,
                               cfg::device_iterations<4>>;
    using plain = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<3>, cfg::device_iterations<1>>;
    const net_t net(channels, classes);
    auto a = exec::training_model<scaled>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    CHECK(a.program().request.check_overflow);
    CHECK(a.model().loss_scale() == 0x1p200);
    const auto ra = tessera::test::within_deadline(300, "dynamic", [&] { return a(feed_t{}); });
    CHECK(a.model().skipped_steps() == 1);
    CHECK(a.model().loss_scale() == 0x1p32);

    // The reference: unscaled training on the data of steps 1, 2 and 3 (step 0 was skipped).
    auto b = exec::training_model<plain>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    for (std::size_t step = 1; step < 4; ++step)
        tessera::test::within_deadline(300, "reference step", [&] {
            return b([step](std::size_t r, std::size_t, std::size_t m) { return feed_t{}(r, step, m); });
        });
    const auto parameters = [](net_t n) {
        std::vector<float> all;
        n.visit_parameters([&](std::string_view, auto value, auto) { all.insert(all.end(), value.begin(), value.end()); });
        return all;
    };
    CHECK(parameters(a.model().network()) == parameters(b.model().network()));
    CHECK(parameters(a.model().network()) != parameters(net));
    CHECK(ra.losses[0].size() == 1);  // output mode final: the last step's loss, unscaled
    CHECK(std::isfinite(ra.losses[0][0]));
}

TEST_CASE("recomputation in a ResNet session: the same parameters and running statistics, less stash memory",
          "[exec][resnet][session][threads]") {
    using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>, cfg::device_iterations<2>>;
    const net_t net(channels, classes);
    auto stashing = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    auto recomputing = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch},
                                               {.recompute = {true, true}});
    CHECK(recomputing.costs().stages[0].recompute);
    // Recomputing stages stash their inputs only.
    for (std::size_t i = 0; i < 2; ++i) CHECK(recomputing.plan().ipus[i].on_chip() < stashing.plan().ipus[i].on_chip());
    const auto a = tessera::test::within_deadline(300, "stashing", [&] { return stashing(feed_t{}); });
    const auto b = tessera::test::within_deadline(300, "recomputing", [&] { return recomputing(feed_t{}); });
    CHECK(a.losses == b.losses);
    // Batch-norm running statistics moved once per micro-batch, not twice: buffers equal too.
    net_t wa = stashing.model().network(), wb = recomputing.model().network(), untrained = net;
    CHECK(parameters_and_buffers(wa) == parameters_and_buffers(wb));
    CHECK(parameters_and_buffers(wa) != parameters_and_buffers(untrained));
    CHECK(b.clocks[0].total(tessera::emulator::activity::recompute) > 0);
    CHECK(a.clocks[0].total(tessera::emulator::activity::recompute) == 0);
    // One flag per stage.
    REQUIRE_THROWS_AS(exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch},
                                              {.recompute = {true}}),
                      cfg::config_error);
}

TEMPLATE_TEST_CASE("recomputation checkpoints inside stages: the same parameters and statistics, one segment's activations",
                   "[exec][resnet][session][threads]", cfg::one_f_one_b, cfg::zero_bubble_h1) {
    using c = cfg::config<cfg::pipelined<TestType, 2>, cfg::gradient_accumulation<4>, cfg::device_iterations<2>>;
    const net_t net(channels, classes);  // units: stem, layer1[0] | layer2[0], head
    const exec::session_options cut{.first_units = {0, 2}};
    exec::session_options whole = cut, checkpointed = cut;
    whole.recompute = {true, true};
    checkpointed.recompute_checkpoints = {1, 3, 2};  // 2 is stage 1's first unit: changes nothing
    auto stashing = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch}, cut);
    auto recomputing = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch}, whole);
    auto segments = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch}, checkpointed);
    const auto& costs = segments.costs().stages;
    for (std::size_t s = 0; s < 2; ++s) {
        INFO("stage " << s);
        CHECK(costs[s].recompute);
        CHECK(costs[s].model_recomputes);
        // Stage 0 checkpoints layer1[0]'s input (the stem's output), stage 1 the head's input.
        const auto& net_of = segments.model().network();
        const auto checkpoint = net_of.unit_input_shape(s == 0 ? 1 : 3, input_shape);
        CHECK(costs[s].checkpoint_bytes == checkpoint.n * checkpoint.per_sample() * sizeof(float));
        CHECK(costs[s].segment_bytes < costs[s].stash_bytes);
        CHECK(costs[s].working_bytes() < recomputing.costs().stages[s].working_bytes());
        CHECK(costs[s].stashed_bytes() == costs[s].input_bytes + costs[s].checkpoint_bytes);
    }
    const auto a = tessera::test::within_deadline(300, "stashing", [&] { return stashing(feed_t{}); });
    const auto b = tessera::test::within_deadline(300, "checkpointed", [&] { return segments(feed_t{}); });
    CHECK(a.losses == b.losses);
    net_t wa = stashing.model().network(), wb = segments.model().network(), untrained = net;
    CHECK(parameters_and_buffers(wa) == parameters_and_buffers(wb));
    CHECK(parameters_and_buffers(wa) != parameters_and_buffers(untrained));
    CHECK(b.clocks[0].total(tessera::emulator::activity::recompute) > 0);
    // A unit the network does not have.
    exec::session_options wrong = cut;
    wrong.recompute_checkpoints = {4};
    REQUIRE_THROWS_WITH(exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch}, wrong),
                        Catch::Contains("unit 4 does not exist"));
}

TEST_CASE("training calls return a score beside each loss, over the real samples", "[exec][resnet][session][threads]") {
    using c = cfg::config<cfg::sharded<2>, cfg::gradient_accumulation<3>, cfg::device_iterations<1>, cfg::all>;
    using s = cfg::config<cfg::sharded<2>, cfg::gradient_accumulation<3>, cfg::device_iterations<1>, cfg::sum>;
    const net_t net(channels, classes);
    auto run = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    auto total = exec::training_model<s>(net, plain_sgd{}, {1, side, side, channels}, {.micro_batch = batch});
    const auto r = tessera::test::within_deadline(300, "scores", [&] { return run(feed_t{}); });
    const auto t = tessera::test::within_deadline(300, "summed scores", [&] { return total(feed_t{}); });
    REQUIRE(r.scores.size() == 1);
    REQUIRE(r.scores[0].size() == 3);
    // The step's forwards all use the initial weights: the reference scores the plain network.
    exec::top1_score all;
    for (std::size_t m = 0; m < 3; ++m) {
        auto [x, y] = feed_t{}(0, 0, m);
        net_t plain = net;
        net_t::state st;
        const auto& logits = plain.forward(x, st, nn::context{});
        exec::top1_score expected{0, batch};
        for (std::size_t i = 0; i < batch; ++i) {
            std::size_t best = 0;
            for (std::size_t k = 1; k < classes; ++k)
                if (logits.data()[i * classes + k] > logits.data()[i * classes + best]) best = k;
            expected.correct += best == static_cast<std::size_t>(y[i]);
        }
        CHECK(r.scores[0][m] == expected);
        all += expected;
    }
    REQUIRE(t.scores[0].size() == 1);
    CHECK(t.scores[0][0] == all);
}

TEST_CASE("kernel threads per IPU: the same parameters and running statistics as one thread per IPU",
          "[exec][resnet][session][threads]") {
    // Micro-batches big enough for the kernels to split: 11 images of 28×28 are 8624 batch-norm rows
    // (two blocks of 4096 and a short one) and 8 convolution chunks. Two replicas run at once, each
    // with a pool per IPU of its own.
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<3>, cfg::device_iterations<1>,
                          cfg::replication<2>>;
    constexpr std::size_t images = 11, big = 28;
    const tessera::tensor::shape sample{1, big, big, channels};
    auto feed = [&](std::size_t r, std::size_t d, std::size_t m) {
        std::mt19937 rng(static_cast<std::uint32_t>(7 + 1009 * r + 101 * d + m));
        std::normal_distribution<float> pixel(0.0f, 1.0f);
        auto x = tessera::tensor::make_nhwc<float>(sample.with_batch(images));
        for (auto& v : x) v = pixel(rng);
        std::vector<std::int32_t> y(images);
        for (auto& v : y) v = static_cast<std::int32_t>(rng() % classes);
        return std::pair{std::move(x), std::move(y)};
    };
    const net_t net(channels, classes);
    auto one = exec::training_model<c>(net, plain_sgd{}, sample, {.micro_batch = images});
    auto two = exec::training_model<c>(net, plain_sgd{}, sample, {.micro_batch = images}, {.kernel_threads_per_ipu = 2});
    CHECK(one.model().kernel_threads() == 1);
    CHECK(two.model().kernel_threads() == 2);
    const auto a = tessera::test::within_deadline(300, "one kernel thread", [&] { return one(feed); });
    const auto b = tessera::test::within_deadline(300, "two kernel threads", [&] { return two(feed); });
    CHECK(a.losses == b.losses);
    net_t wa = one.model().network(), wb = two.model().network(), untrained = net;
    CHECK(parameters_and_buffers(wa) == parameters_and_buffers(wb));
    CHECK(parameters_and_buffers(wa) != parameters_and_buffers(untrained));

    // Weights move between host and device without the session's options: a host model with one
    // kernel thread leaves the replicas theirs, and an inference session leaves the host in training mode.
    auto host = one.model();
    two.copy_weights_to(host);
    CHECK(host.kernel_threads() == 1);
    two.load_weights(host);
    CHECK(two.model().kernel_threads() == 2);
    CHECK(two.replica(1).kernel_threads() == 2);
    net_t loaded = two.replica(1).network();
    CHECK(parameters_and_buffers(loaded) == parameters_and_buffers(wa));
    auto eval = exec::inference_model<cfg::config<cfg::sharded<2>, cfg::device_iterations<1>>>(net, plain_sgd{}, sample,
                                                                                               {.micro_batch = images});
    CHECK(eval.model().mode() == nn::mode::eval);
    eval.copy_weights_to(host);
    CHECK(host.mode() == nn::mode::train);
    CHECK(host.kernel_threads() == 1);
    // Models cut into other stages do not take each other's state.
    model_t first_cut(net, {0, 1}, sample, plain_sgd{}), second_cut(net, {0, 2}, sample, plain_sgd{});
    REQUIRE_THROWS_WITH(first_cut.assign_state(second_cut), Catch::Contains("stages at different units"));

    REQUIRE_THROWS_WITH(exec::training_model<c>(net, plain_sgd{}, sample, {.micro_batch = images},
                                                {.kernel_threads_per_ipu = 0}),
                        Catch::Contains("kernel threads per IPU must be at least 1, got 0"));
}

}  // namespace test_resnet_anchor
