// tessera::dist under mpirun -np 2: several processes train as one process with as many replicas.
// Every rank runs this program; its main (main.cpp) starts MPI and agrees on the outcome.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/config.hpp"
#include "tessera/data.hpp"
#include "tessera/dist.hpp"
#include "tessera/exec.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"
#include "world.hpp"

using namespace tessera;
namespace cfg = tessera::config;
using tessera::test::world;

namespace {

template <class P>
using net_of = nn::resnet<nn::basic_block<P, nn::padding_shortcut>, nn::cifar_stem<P>, 1, 1, 1>;
using net_t = net_of<cfg::fp32>;
constexpr std::size_t side = 8, classes = 4, micro = 4, G = 4, D = 2, calls = 3;

/// Samples whose pixels and labels follow from their index.
data::in_memory_dataset<std::uint8_t> indexed_samples(std::size_t n, const std::vector<std::size_t>& order) {
    std::vector<std::uint8_t> values;
    std::vector<data::label_t> labels;
    for (const std::size_t i : order) {
        std::mt19937 rng(static_cast<std::uint32_t>(i * 7919 + 1));
        for (std::size_t k = 0; k < side * side; ++k) values.push_back(static_cast<std::uint8_t>(rng() % 256));
        labels.push_back(static_cast<data::label_t>(i % classes));
    }
    (void)n;
    return {{1, side, side}, classes, std::move(values), std::move(labels), "indexed"};
}

template <class Net>
std::vector<float> parameters_of(Net& net) {
    std::vector<float> all;
    net.visit_parameters([&](std::string_view, auto value, auto) { all.insert(all.end(), value.begin(), value.end()); });
    return all;
}
template <class Net>
std::vector<float> buffers_of(Net& net) {
    std::vector<float> all;
    net.visit_buffers([&](std::string_view, auto value) { all.insert(all.end(), value.begin(), value.end()); });
    return all;
}

struct outcome {
    std::vector<float> parameters, buffers;
    std::vector<std::vector<float>> losses;  // per call, the losses this process's replicas returned
};

/// How a run trains: fp32, or 16.16 with every 16-bit result rounded stochastically (weights by the
/// optimiser; activations and gradients keyed by the replica counted over every process).
enum class numbers { fp32, half_stochastic };

/// Trains `calls` calls of `replicas` replicas over `instances` processes on `dataset`, with the
/// optimiser state sharded across the replicas or not.
template <class Strategy, numbers Numbers = numbers::fp32>
outcome train(const data::in_memory_dataset<std::uint8_t>& dataset, std::size_t replicas, std::size_t instances,
              bool sharded = false) {
    using P = std::conditional_t<Numbers == numbers::fp32, cfg::fp32, cfg::half>;
    using c = cfg::dispatched_config<P, Strategy, cfg::float_io>;
    const config::options counts{.micro_batch = micro, .gradient_accumulation = G, .device_iterations = D,
                                 .replicas = replicas, .instances = instances, .input_group = 1};
    exec::session_options settings{.record_trace = false, .optimizer_sharding = sharded};
    const bool stochastic = Numbers == numbers::half_stochastic;
    if (stochastic) settings.stochastic_rounding = 17;
    if (instances > 1) settings.across = dist::gradient_reduction(world(), Strategy::stages);
    const optim::sgd sgd({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-4,
                          .rounding = {.stochastic = stochastic, .seed = 17}});
    const net_of<P> net(1, classes);
    auto run = exec::training_model<c>(net, sgd, {1, side, side, 1}, counts, settings);
    CHECK(run.program().optimizer_sharded() == sharded);
    if (sharded) CHECK(run.model().optimizer_shard_index() == (instances > 1 ? world().rank() : 0));
    const data::normalization norm{.mean = {0.5f}, .stddev = {0.25f}};
    auto loader = data::make_data_loader<c>(dataset, counts,
                                            {.rank = instances > 1 ? world().rank() : 0, .normalize = norm});
    outcome o;
    for (auto& batch : loader) {
        const auto r = run(exec::batch_feed<P, float>(batch, run.batching()));
        std::vector<float> losses;
        for (const auto& per_replica : r.losses) losses.insert(losses.end(), per_replica.begin(), per_replica.end());
        o.losses.push_back(std::move(losses));
    }
    net_of<P> trained = run.model().network();
    o.parameters = parameters_of(trained);
    o.buffers = buffers_of(trained);
    return o;
}

/// 2 processes × 1 replica against 1 process × 2 replicas. The reference's call k gives replica r
/// micro-batches (d × 2 + r) × G + m of its combined batch; a process reads a contiguous shard
/// (PopTorch's rule), so the 2-process run reads a permutation of the data that puts in rank r's
/// shard exactly what replica r read.
/// With `sharded`, the 2 processes shard the optimiser state (each steps half of the weights and
/// keeps half of the momentum, then they all-gather): the reference stays unsharded.
template <class Strategy, numbers Numbers = numbers::fp32>
void same_as_replicas(bool sharded = false) {
    REQUIRE(world().size() == 2);
    const std::size_t rank = world().rank();
    const std::size_t per_call = micro * G * D * 2, n = per_call * calls, shard = n / 2;
    std::vector<std::size_t> identity(n), permuted(n);
    for (std::size_t i = 0; i < n; ++i) identity[i] = i;
    for (std::size_t k = 0; k < calls; ++k)
        for (std::size_t r = 0; r < 2; ++r)
            for (std::size_t d = 0; d < D; ++d)
                for (std::size_t m = 0; m < G; ++m)
                    for (std::size_t j = 0; j < micro; ++j)
                        permuted[r * shard + k * (per_call / 2) + (d * G + m) * micro + j] =
                            k * per_call + ((d * 2 + r) * G + m) * micro + j;

    const outcome reference = train<Strategy, Numbers>(indexed_samples(n, identity), 2, 1);
    const outcome processes = train<Strategy, Numbers>(indexed_samples(n, permuted), 2, 2, sharded);

    // Gradients meet as (replica 0 + replica 1) in both runs: the same bits.
    REQUIRE(processes.parameters.size() == reference.parameters.size());
    CHECK(std::memcmp(processes.parameters.data(), reference.parameters.data(),
                      reference.parameters.size() * sizeof(float)) == 0);
    // This rank's replica saw what replica `rank` saw: its losses, and (rank 0, whose network the
    // reference returns) its batch-norm running statistics.
    REQUIRE(processes.losses.size() == calls);
    for (std::size_t k = 0; k < calls; ++k) {
        const auto& ref = reference.losses[k];
        const std::size_t half = ref.size() / 2;
        REQUIRE(processes.losses[k].size() == half);
        for (std::size_t i = 0; i < half; ++i) CHECK(processes.losses[k][i] == ref[rank * half + i]);
    }
    if (rank == 0) CHECK(processes.buffers == reference.buffers);
    // And every rank holds the same weights.
    std::string bytes(reinterpret_cast<const char*>(processes.parameters.data()), processes.parameters.size() * sizeof(float));
    CHECK_NOTHROW(world().check_same("weights", bytes));
}

/// A small GPT (dropout, its head tied across the pipeline's first and last stage, LAMB with
/// max_grad_norm) over `instances` processes: the weights after two calls, and each call's losses of
/// this process's replicas. Micro-batch m of device iteration d of replica q (counted over every
/// process) holds tokens drawn from (call, q, d, m), and next-token labels.
outcome train_gpt(std::size_t instances, bool sharded) {
    using P = cfg::fp32;
    constexpr std::size_t batch = 2, length = 8, vocab = 23;
    using c = cfg::dispatched_config<P, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::float_io>;
    auto spec = nn::gpt2_spec("tiny");
    spec.vocab = vocab, spec.width = 16, spec.layers = 2, spec.heads = 2, spec.positions = length, spec.dropout = 0.1;
    const auto net = nn::make_gpt2<P>(spec);
    exec::session_options settings{.record_trace = false, .optimizer_sharding = sharded, .dropout_seed = 9};
    if (instances > 1) settings.across = dist::gradient_reduction(world(), 2);
    const std::size_t local = 2 / instances, first = instances > 1 ? world().rank() * local : 0;
    auto run = exec::training_model<c>(net, optim::lamb({.learning_rate = 2e-3, .max_grad_norm = 0.01}), {1, 1, length, 1},
                                       {.micro_batch = batch, .gradient_accumulation = 3, .device_iterations = 2,
                                        .replicas = 2, .instances = instances, .input_group = 1},
                                       settings,
                                       exec::token_loss<P>{});
    outcome o;
    for (std::uint32_t call = 0; call < 2; ++call) {
        const auto feed = [&](std::size_t r, std::size_t d, std::size_t m) {
            std::mt19937 rng(static_cast<std::uint32_t>(call * 7919 + (first + r) * 1009 + d * 101 + m));
            std::vector<std::uint32_t> ids(batch * length);
            for (auto& id : ids) id = rng() % vocab;
            std::vector<std::int32_t> labels(ids.size());
            for (std::size_t i = 0; i < ids.size(); ++i)
                labels[i] = (i + 1) % length == 0 ? kernels::ignore_label : std::int32_t(ids[i + 1]);
            return std::pair{nn::token_activation<P>(std::span<const std::uint32_t>(ids), batch, length), std::move(labels)};
        };
        const auto r = run(feed);
        std::vector<float> losses;
        for (const auto& per_replica : r.losses) losses.insert(losses.end(), per_replica.begin(), per_replica.end());
        o.losses.push_back(std::move(losses));
    }
    auto trained = run.model().network();
    o.parameters = parameters_of(trained);
    return o;
}

}  // namespace

TEST_CASE("2 processes x 1 replica train a GPT as 1 process x 2 replicas: dropout, a head tied across stages, LAMB "
          "with max_grad_norm, its state sharded or not", "[dist][weights][transformer]") {
    REQUIRE(world().size() == 2);
    const outcome reference = train_gpt(1, false);
    for (const bool sharded : {false, true}) {
        CAPTURE(sharded);
        const outcome processes = train_gpt(2, sharded);
        REQUIRE(processes.parameters.size() == reference.parameters.size());
        CHECK(std::memcmp(processes.parameters.data(), reference.parameters.data(),
                          reference.parameters.size() * sizeof(float)) == 0);
        REQUIRE(processes.losses.size() == reference.losses.size());
        for (std::size_t k = 0; k < reference.losses.size(); ++k) {
            const std::size_t half = reference.losses[k].size() / 2;
            REQUIRE(processes.losses[k].size() == half);
            for (std::size_t i = 0; i < half; ++i) CHECK(processes.losses[k][i] == reference.losses[k][world().rank() * half + i]);
        }
    }
}

TEST_CASE("2 processes x 1 replica end with 1 process x 2 replicas' weights, bit for bit: one IPU per replica",
          "[dist][weights]") {
    same_as_replicas<cfg::single>();
}

TEST_CASE("2 processes x 1 replica end with 1 process x 2 replicas' weights, bit for bit: a 2-stage 1F1B pipeline",
          "[dist][weights]") {
    same_as_replicas<cfg::pipelined<cfg::one_f_one_b, 2>>();
}

TEST_CASE("2 processes x 1 replica with the optimiser state sharded between them: the unsharded weights, bit for bit",
          "[dist][weights]") {
    same_as_replicas<cfg::pipelined<cfg::one_f_one_b, 2>>(true);
}

TEST_CASE("2 processes x 1 replica in 16.16 with stochastic rounding of weights, activations and gradients: the "
          "replicas' bits, the replica counted over the processes", "[dist][weights][rounding]") {
    same_as_replicas<cfg::pipelined<cfg::one_f_one_b, 2>, numbers::half_stochastic>();
}

TEST_CASE("the ranks' shards are disjoint and cover the data", "[dist][shards]") {
    const std::size_t n = 101, batch = 8;
    std::vector<std::uint8_t> values;
    std::vector<data::label_t> labels(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
        values.push_back(static_cast<std::uint8_t>(i / 256));
        values.push_back(static_cast<std::uint8_t>(i % 256));
    }
    const data::in_memory_dataset<std::uint8_t> dataset({1, 1, 2}, 1, std::move(values), std::move(labels), "ids");
    for (const bool drop_last : {false, true}) {
        data::data_loader<data::in_memory_dataset<std::uint8_t>, std::uint8_t> loader(
            dataset, batch, {.shuffle = true, .seed = 7, .drop_last = drop_last, .rank = world().rank(), .size = world().size()});
        std::vector<double> seen(n + 1, 0.0);  // the last entry: this rank's batches
        for (auto& b : loader) {
            seen[n] += 1;
            for (std::size_t row = 0; row < b.size(); ++row)
                if (b.mask()[row] != 0) seen[std::size_t(b.images()[2 * row]) * 256 + b.images()[2 * row + 1]] += 1;
        }
        const double own_batches = seen[n];
        world().sum_in_rank_order(std::span<double>(seen));
        CHECK(seen[n] == own_batches * double(world().size()));  // every rank has as many batches
        std::size_t covered = 0;
        for (std::size_t i = 0; i < n; ++i) {
            CHECK(seen[i] <= 1.0);  // disjoint
            covered += seen[i] == 1.0 ? 1 : 0;
        }
        // All of it, or with drop_last each rank's whole combined batches (PopTorch's rule).
        CHECK(covered == (drop_last ? batch * (n / (batch * world().size())) * world().size() : n));
    }
}

TEST_CASE("broadcast_parameters gives every rank rank 0's weights", "[dist][broadcast]") {
    net_t net(1, classes);
    std::mt19937_64 rng(1000 + world().rank());  // each rank its own initialisation
    net.visit_parameters([&](std::string_view, auto value, auto) {
        for (auto& v : value) v = static_cast<float>(rng() % 1000) / 1000.0f;
    });
    const auto own = parameters_of(net);
    dist::broadcast_parameters(world(), net);
    const auto after = parameters_of(net);
    std::string bytes(reinterpret_cast<const char*>(after.data()), after.size() * sizeof(float));
    CHECK_NOTHROW(world().check_same("weights", bytes));
    if (world().rank() == 0) CHECK(after == own);
    if (world().rank() != 0) CHECK(after != own);
}

TEST_CASE("ranks started with different configurations are told which and how", "[dist][errors]") {
    const std::string text = world().rank() == 0 ? "R=2 G=8" : "R=2 G=4";
    try {
        world().check_same("configuration", text);
        FAIL("no error");
    } catch (const dist::dist_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("rank 1 was started with a different configuration than rank 0") &&
                                 Catch::Contains("G=8") && Catch::Contains("G=4"));
    }
    CHECK_THROWS_WITH(dist::environment(), Catch::Contains("already initialised"));
}
