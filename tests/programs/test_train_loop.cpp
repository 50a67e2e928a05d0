// tessera-train's epoch loop alone (programs/train_loop.hpp): an epoch's wall time runs from asking
// for its first batch to its last result, so a loader that takes time to prepare batches counts;
// loss and accuracy are over every replica, checked against the same calls made directly.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "train_loop.hpp"

namespace test_train_loop {

namespace programs = tessera::programs;
namespace cfg = tessera::config;
namespace data = tessera::data;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
namespace optim = tessera::optim;

namespace {

constexpr std::size_t side = 4, classes = 4, samples = 64;
constexpr auto read_delay = std::chrono::milliseconds(2);

/// An in-memory dataset whose every read takes at least `read_delay`: a slow host loader.
struct slow_dataset {
    using value_type = float;
    data::in_memory_dataset<float> inner;
    [[nodiscard]] std::size_t size() const { return inner.size(); }
    [[nodiscard]] data::sample_shape shape() const { return inner.shape(); }
    [[nodiscard]] std::size_t num_classes() const { return inner.num_classes(); }
    data::label_t read(std::size_t i, std::span<float> out) const {
        std::this_thread::sleep_for(read_delay);
        return inner.read(i, out);
    }
};
static_assert(data::Dataset<slow_dataset>);

slow_dataset make_dataset() {
    std::vector<float> values(samples * side * side);
    std::vector<data::label_t> labels(samples);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = float((i * 37) % 19) / 19.0f - 0.5f;
    for (std::size_t i = 0; i < samples; ++i) labels[i] = data::label_t((i * 5 + i / 4) % classes);
    return {data::in_memory_dataset<float>({1, side, side}, classes, std::move(values), std::move(labels), "ramp")};
}

auto make_net() {
    auto net = nn::sequential(nn::linear<cfg::fp32>(side * side, classes)).named({"fc"});
    std::mt19937_64 rng(3);
    net.initialize(rng);
    return net;
}

// Two replicas of the whole model; 2 × 2 × 2 × 2 = 16 samples a call, 4 calls an epoch.
using two_replicas = cfg::config<cfg::fp32, cfg::replication<2>, cfg::gradient_accumulation<2>, cfg::device_iterations<2>>;
const cfg::options counts{.micro_batch = 2};

}  // namespace

TEST_CASE("the epoch loop: wall time includes loading; loss and accuracy over every replica", "[programs]") {
    const auto dataset = make_dataset();
    programs::train_request r;
    r.epochs = 1, r.lr = 0.0;  // the weights stay, so the direct calls below see the same model
    r.gradient_accumulation = 2, r.device_iterations = 2, r.replicas = 2;
    const tessera::tensor::shape sample{1, side, side, 1};

    auto session = exec::training_model<two_replicas>(make_net(), optim::sgd({.learning_rate = 0.1}), sample, counts);
    auto loader = data::make_data_loader<two_replicas>(dataset, counts);
    const auto history = programs::train_epochs(r, session, loader, {}, "test");
    REQUIRE(history.epochs.size() == 1);
    const programs::epoch_metrics& m = history.epochs.front();

    // The loader read 64 samples on this thread, each taking at least 2 ms.
    CHECK(m.wall_seconds >= double(samples) * std::chrono::duration<double>(read_delay).count());
    CHECK(m.images_per_second == Approx(double(samples) / m.wall_seconds));

    // The same four calls made directly: mean loss over calls and replicas, accuracy over both.
    auto direct = exec::training_model<two_replicas>(make_net(), optim::sgd({.learning_rate = 0.1}), sample, counts);
    direct.set_learning_rate(0.0);
    auto reference_loader = data::make_data_loader<two_replicas>(dataset, counts);
    double loss = 0, first_replica_loss = 0, correct = 0, scored = 0, first_correct = 0, first_scored = 0, calls = 0;
    for (auto& batch : reference_loader) {
        const auto result = direct(exec::batch_feed<cfg::fp32, float>(batch, direct.batching(), {}));
        REQUIRE(result.losses.size() == 2);
        double replicas = 0;
        for (const auto& losses : result.losses) {
            double sum = 0;
            for (float l : losses) sum += l;
            replicas += sum / double(losses.size());
        }
        loss += replicas / 2.0;
        double first = 0;
        for (float l : result.losses.front()) first += l;
        first_replica_loss += first / double(result.losses.front().size());
        for (const auto& replica : result.scores)
            for (const auto& s : replica) correct += double(s.correct), scored += double(s.samples);
        for (const auto& s : result.scores.front()) first_correct += double(s.correct), first_scored += double(s.samples);
        ++calls;
    }
    REQUIRE(calls == 4);
    REQUIRE(scored == calls * 2 * 2);  // output mode final: each replica's last micro-batch of a call
    // The replicas see different samples, so replica 0 alone would give another loss.
    REQUIRE(first_replica_loss / calls != Approx(loss / calls).epsilon(1e-6));
    REQUIRE(first_correct / first_scored != Approx(correct / scored).epsilon(1e-6));
    CHECK(m.loss == Approx(loss / calls).epsilon(1e-12));
    CHECK(m.accuracy == Approx(correct / scored).epsilon(1e-12));
}

}  // namespace test_train_loop
