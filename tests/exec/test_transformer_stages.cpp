// A small GPT with dropout, its head tied to its embedding, LAMB and max_grad_norm through sessions:
// every strategy and pipeline schedule, 1 and 2 replicas, fp32 and 16.16 with dynamic loss scaling
// and stochastic rounding, bit for bit against `single`, the tied copies equal on every stage;
// the tied head on one stage, LAMB's state sharded across 2 replicas and not; a stage that throws.
// Release builds only (tests/exec/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../emulator/deadline.hpp"
#include "network_helpers.hpp"
#include "tessera/config.hpp"
#include "tessera/exec/dry_run.hpp"
#include "tessera/exec/network_session.hpp"
#include "tessera/nn/sequence_mask.hpp"
#include "tessera/nn/tokens.hpp"
#include "tessera/nn/transformer.hpp"
#include "tessera/optim/adamw.hpp"
#include "tessera/optim/lamb.hpp"

namespace test_transformer_stages {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
namespace optim = tessera::optim;

constexpr std::size_t batch = 2, length = 8, vocab = 23;

nn::transformer_spec small_gpt(bool tied) {
    auto s = nn::gpt2_spec("tiny");
    s.vocab = vocab, s.width = 16, s.layers = 4, s.heads = 2, s.positions = length, s.dropout = 0.1, s.tied = tied;
    return s;
}

// Micro-batch (r, d, m): random tokens, and as labels the next token of each position (the last
// position of every sequence ignored, as a window's last label is the next window's).
template <class P>
struct token_feed {
    std::uint32_t seed = 3;
    std::pair<nn::activation<P>, exec::token_labels> operator()(std::size_t r, std::size_t d, std::size_t m) const {
        std::mt19937 rng(static_cast<std::uint32_t>(seed + 1009 * r + 101 * d + m));
        std::vector<std::uint32_t> ids(batch * length);
        for (auto& id : ids) id = rng() % vocab;
        std::vector<std::int32_t> labels(ids.size());
        for (std::size_t i = 0; i < ids.size(); ++i)
            labels[i] = (i + 1) % length == 0 ? tessera::kernels::ignore_label : std::int32_t(ids[i + 1]);
        return {nn::token_activation<P>(std::span<const std::uint32_t>(ids), batch, length), std::move(labels)};
    }
};

template <class S>
std::vector<float> weights_of_span(S values) {
    std::vector<float> all;
    for (const auto v : values) all.push_back(static_cast<float>(v));
    return all;
}

template <class Net>
std::vector<float> weights_of(Net net) {
    std::vector<float> all;
    net.visit_parameters([&](std::string_view, auto value, auto) {
        for (const auto v : value) all.push_back(static_cast<float>(v));
    });
    return all;
}

// Whether the weights `all` (visiting order) of a network like `net` hold its tied table's two
// copies, "wte.weight" and "lm_head.weight", equal.
template <class Net>
bool tied_copies_equal(Net net, const std::vector<float>& all) {
    std::size_t k = 0;
    std::vector<std::vector<float>> tables;
    net.visit_parameters([&](std::string_view name, auto value, auto) {
        std::vector<float> v(all.begin() + std::ptrdiff_t(k), all.begin() + std::ptrdiff_t(k + value.size()));
        k += value.size();
        if (name == "wte.weight" || name == "lm_head.weight") tables.push_back(std::move(v));
    });
    return tables.size() == 2 && tables[0] == tables[1];
}

TEMPLATE_TEST_CASE("a small GPT with dropout, its head tied across the first and last stage, LAMB and max_grad_norm "
                   "trains bit for bit through every strategy and schedule, 1 and 2 replicas",
                   "[exec][nn][transformer][session][threads]", cfg::fp32, cfg::half) {
    using P = TestType;
    constexpr bool half = std::is_same_v<P, cfg::half>;
    constexpr std::size_t G = 6, D = 2;
    const auto net = nn::make_gpt2<P>(small_gpt(true));  // the head tied to the embedding, on the first and last stage
    const optim::lamb lamb({.learning_rate = 2e-3, .rounding = {.stochastic = half, .seed = 8}, .max_grad_norm = 0.01});
    const auto train = [&]<class Strategy>(Strategy, std::size_t R, cfg::options options, optim::lamb opt,
                                           bool sharding = false) {
        // 16.16: 2^24 overflows the half gradients and 2^24 / 256 does not, so exactly one step is skipped.
        using scaled = std::conditional_t<half, typename P::template with<cfg::dynamic_loss_scaling<0x1p24, 2000, 256.0>>, P>;
        using c = cfg::config<scaled, Strategy, cfg::gradient_accumulation<G>, cfg::device_iterations<D>,
                              cfg::replication<cfg::dynamic>, cfg::all>;
        exec::session_options settings{.dropout_seed = 11};
        settings.optimizer_sharding = sharding;
        if (half) settings.stochastic_rounding = 5;
        options.micro_batch = batch, options.replicas = R;
        auto run = exec::training_model<c>(net, opt, {1, 1, length, 1}, options, settings, exec::token_loss<P>{});
        const auto result = tessera::test::within_deadline(300, "GPT session", [&] { return run(token_feed<P>{}); });
        std::vector<std::vector<float>> replicas;
        for (std::size_t r = 0; r < R; ++r) replicas.push_back(weights_of(run.replica(r).network()));
        return std::tuple{replicas, result.losses, run.model().skipped_steps(), run.program().description()};
    };
    using dynamic_pipeline = cfg::pipelined<cfg::gpipe, cfg::dynamic>;
    using one_f_one_b = cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>;
    for (const std::size_t R : {1u, 2u}) {
        CAPTURE(R);
        const auto [want, want_losses, want_skipped, single] = train(cfg::single{}, R, {}, lamb);
        CHECK(single.rfind("single", 0) == 0);
        CHECK(single.find("the gradient norm)") != std::string::npos);
        auto unclipped = lamb;
        unclipped.options().max_grad_norm = std::numeric_limits<double>::infinity();
        CHECK(std::get<0>(train(cfg::single{}, R, {}, unclipped)) != want);  // max_grad_norm clipped
        if (half) CHECK(want_skipped == 1);  // the overflow vote skipped the first step, and the second trained
        if (R == 2) CHECK(want[0] == want[1]);
        CHECK(tied_copies_equal(net, want[0]));
        const auto check = [&](const auto& got) {
            const auto& [weights, losses, skipped, description] = got;
            INFO(description);
            CHECK(skipped == want_skipped);
            CHECK(losses == want_losses);
            CHECK(weights == want);
            return description.substr(0, description.find(','));
        };
        CHECK(check(train(cfg::sharded<cfg::dynamic>{}, R, {.stages = 3}, lamb)) == "sharded");
        CHECK(check(train(cfg::phased<cfg::dynamic>{}, R, {.stages = 2}, lamb)) == "phased");
        CHECK(check(train(dynamic_pipeline{}, R, {.stages = 2}, lamb)) == "pipelined<gpipe>");
        CHECK(check(train(one_f_one_b{}, R, {.stages = 3}, lamb)) == "pipelined<1f1b>");
        // The head a stage of its own on the embedding's IPU, as Graphcore's BERT and GPT-2 place it.
        CHECK(check(train(one_f_one_b{}, R, {.stages = 3, .ipu_map = {0, 1, 0}}, lamb)) == "pipelined<1f1b>");
        CHECK(check(train(one_f_one_b{}, R, {.stages = 4, .virtual_stages = 2}, lamb)) == "pipelined<interleaved<2>>");
        CHECK(check(train(dynamic_pipeline{}, R, {.stages = 4, .virtual_stages = 2}, lamb)) == "pipelined<looped_bfs<2>>");
        CHECK(check(train(one_f_one_b{}, R, {.stages = 3, .zero_bubble = cfg::zero_bubble_kind::h1}, lamb)) ==
              "pipelined<zero_bubble_h1>");
        CHECK(check(train(one_f_one_b{}, R, {.stages = 3, .zero_bubble = cfg::zero_bubble_kind::h2}, lamb)) ==
              "pipelined<zero_bubble_h2>");
        if (R == 2)  // LAMB's state sharded over the replicas, its norms added across them
            CHECK(check(train(one_f_one_b{}, R, {.stages = 3}, lamb, true)) == "pipelined<1f1b>");
    }
}

TEMPLATE_TEST_CASE("a tied GPT on one stage, LAMB and max_grad_norm: 2 replicas with the optimiser state sharded "
                   "train as without, the copies equal (16.16: its weights rounded stochastically)", "[exec][nn][transformer][session][threads][tied]",
                   cfg::fp32, cfg::half) {
    using P = TestType;
    using c = cfg::config<P, cfg::single, cfg::gradient_accumulation<3>, cfg::device_iterations<2>, cfg::replication<2>>;
    const auto net = nn::make_gpt2<P>(small_gpt(true));
    const optim::lamb lamb({.learning_rate = 2e-3, .rounding = {.stochastic = std::is_same_v<P, cfg::half>, .seed = 8},
                            .max_grad_norm = 0.01});
    const auto train = [&](bool sharding) {
        exec::session_options settings{.dropout_seed = 4};
        settings.optimizer_sharding = sharding;
        auto run = exec::training_model<c>(net, lamb, {1, 1, length, 1}, {.micro_batch = batch}, settings,
                                           exec::token_loss<P>{});
        (void)tessera::test::within_deadline(120, "tied GPT session", [&] { return run(token_feed<P>{}); });
        std::vector<std::vector<float>> replicas;
        for (std::size_t r = 0; r < 2; ++r) replicas.push_back(weights_of(run.replica(r).network()));
        return replicas;
    };
    const auto plain = train(false), sharded = train(true);
    CHECK(sharded == plain);
    CHECK(plain[0] == plain[1]);
    CHECK(plain[0] != weights_of(net));  // it trained
    // the two uses of the table, first and last among the parameters, are still one value each
    auto trained = net;
    std::size_t k = 0;
    trained.visit_parameters([&](std::string_view, auto value, auto) {
        for (auto& v : value) v = static_cast<typename decltype(value)::value_type>(plain[0][k++]);
    });
    std::vector<std::vector<float>> tables;
    trained.visit_parameters([&](std::string_view name, auto v, auto) {
        if (name == "wte.weight" || name == "lm_head.weight") tables.push_back(weights_of_span(v));
    });
    REQUIRE(tables.size() == 2);
    CHECK(tables[0] == tables[1]);
    // An update of a stage holding a copy that the vote did not give the two copies' sum is refused.
    exec::staged_network<std::remove_const_t<decltype(net)>, optim::lamb, exec::token_loss<P>> staged(
        net, {0, 2}, {batch, 1, length, 1}, lamb);
    CHECK(staged.tied_elements() == vocab * 16);
    CHECK_THROWS_WITH(staged.update(1, 1.0f), Catch::Contains("the vote gave it no sum of the two copies' gradients"));
}

TEST_CASE("a small GPT's dry run: the threaded run's modelled clock call by call and its memory plan, lock-step "
          "cycles or dataflow", "[exec][nn][transformer][session][threads][cost][memory]") {
    using P = cfg::fp32;
    using c = cfg::config<P, cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<8>,
                          cfg::device_iterations<2>, cfg::replication<cfg::dynamic>, cfg::final>;
    const auto net = nn::make_gpt2<P>(small_gpt(true));
    const optim::lamb lamb({.learning_rate = 2e-3, .max_grad_norm = 1.0});
    const std::size_t samples = 3 * 8 * 2 * 2 * batch;  // 3 calls of G 8 × D 2 × R 2 micro-batches
    for (const cfg::options& shape : {cfg::options{.stages = 2}, cfg::options{.stages = 3, .zero_bubble = cfg::zero_bubble_kind::h1},
                                     cfg::options{.stages = 4, .virtual_stages = 2},
                                     cfg::options{.stages = 3, .ipu_map = {0, 1, 0}}})
        for (const bool lock_step : {true, false}) {
            CAPTURE(shape.stages, shape.virtual_stages, lock_step);
            cfg::options options = shape;
            options.micro_batch = batch, options.replicas = 2;
            exec::session_options settings{.lock_step = lock_step, .dropout_seed = 2};
            const auto dry = exec::dry_run<c>(net, lamb, {1, 1, length, 1}, options, samples, settings, 1,
                                              exec::over_budget::throws, exec::token_loss<P>{});
            CHECK(dry.plan.program.lock_step_cycles() == lock_step);
            REQUIRE(dry.calls == 3);
            auto run = exec::training_model<c>(net, lamb, {1, 1, length, 1}, options, settings, exec::token_loss<P>{});
            for (std::size_t call = 0; call < dry.calls; ++call) {
                const auto r = tessera::test::within_deadline(120, "GPT session", [&] { return run(token_feed<P>{}); });
                CHECK(r.modelled_seconds == Approx(dry.call_device_seconds).epsilon(1e-12));
            }
            const auto& plan = run.plan();
            REQUIRE(plan.ipus.size() == dry.memory.ipus.size());
            for (std::size_t ipu = 0; ipu < plan.ipus.size(); ++ipu) {
                const auto& got = dry.memory.ipus[ipu].items;
                const auto& want = plan.ipus[ipu].items;
                REQUIRE(got.size() == want.size());
                for (std::size_t i = 0; i < got.size(); ++i) {
                    CHECK(got[i].name == want[i].name);
                    CHECK(got[i].bytes == want[i].bytes);
                    CHECK(got[i].where == want[i].where);
                }
                CHECK(dry.memory.ipus[ipu].on_chip() > 0);
            }
        }
}

TEST_CASE("a tied table on two IPUs exchanges its gradients at each update's vote, none beside the embedding",
          "[exec][nn][transformer][cost]") {
    using P = cfg::fp32;
    using c = cfg::config<P, cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<8>,
                          cfg::device_iterations<2>, cfg::final>;
    const auto net = nn::make_gpt2<P>(small_gpt(true));
    const optim::lamb lamb({.learning_rate = 2e-3});
    // Each of the two IPUs sends its copy's float gradients, vocab x width of them, over an IPU-Link.
    const tessera::emulator::device_spec spec;
    const double seconds = 4.0 * double(vocab * 16) / spec.ipu_link_bandwidth;
    const auto dry_run = [&](const auto& network, cfg::options options) {
        options.micro_batch = batch;
        return exec::dry_run<c>(network, lamb, {1, 1, length, 1}, options, 8 * 2 * batch, {.record_trace = true}, 1,
                                exec::over_budget::throws, exec::token_loss<P>{});
    };
    const auto exchanges = [&](cfg::options options) {
        const auto dry = dry_run(net, options);
        std::vector<std::size_t> counts;
        for (const auto& clock : dry.call_clocks) {
            std::size_t n = 0;
            for (const auto& e : clock.trace())
                if (e.label == "tied table gradients") {
                    CHECK(e.kind == tessera::emulator::activity::transfer);
                    CHECK(e.end - e.start == Approx(seconds).epsilon(1e-12));
                    ++n;
                }
            counts.push_back(n);
        }
        return counts;
    };
    CHECK(exchanges({.stages = 2}) == std::vector<std::size_t>{2, 2});           // D = 2 updates a call
    CHECK(exchanges({.stages = 3}) == std::vector<std::size_t>{2, 0, 2});        // the middle IPU holds none
    CHECK(exchanges({.stages = 3, .ipu_map = {0, 1, 0}}) == std::vector<std::size_t>{0, 0});  // one IPU holds both
    // A network of shapes alone (as BERT-Large's dry runs build it) is priced as the network itself.
    const auto shapes = nn::make_gpt2<P>(small_gpt(true), nn::shapes_only);
    CHECK(dry_run(shapes, {.stages = 2}).call_device_seconds == dry_run(net, {.stages = 2}).call_device_seconds);
}

TEST_CASE("a tied table's two copies on one IPU are held there once: the head beside the embedding",
          "[exec][nn][transformer][cost][memory]") {
    using P = cfg::fp32;
    using c = cfg::config<P, cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<8>,
                          cfg::device_iterations<1>, cfg::final>;
    const auto net = nn::make_gpt2<P>(small_gpt(true));
    const optim::lamb lamb({.learning_rate = 2e-3});
    // Stage 0 the embedding, 1 the blocks, 2 the head (ln_f: 2 x 16, lm_head: the vocab x 16 table).
    const exec::session_options settings{.first_units = {0, 1, 5}};
    const auto items_of = [&](std::vector<std::size_t> map, std::size_t ipu) {
        cfg::options options{.micro_batch = batch, .stages = 3, .ipu_map = std::move(map)};
        return exec::dry_run<c>(net, lamb, {1, 1, length, 1}, options, 8 * batch, settings, 1,
                                exec::over_budget::throws, exec::token_loss<P>{})
            .memory.ipus.at(ipu).items;
    };
    const auto bytes_of = [](const auto& items, const std::string& name) {
        for (const auto& item : items)
            if (item.name == name) return item.bytes;
        FAIL("no memory item named '" << name << "'");
        return std::size_t{0};
    };
    const std::size_t table = vocab * 16, norm = 2 * 16;
    const auto apart = items_of({0, 1, 2}, 2), beside = items_of({0, 1, 0}, 0);
    CHECK(bytes_of(apart, "stage 2 weights") == (norm + table) * sizeof(float));
    CHECK(bytes_of(apart, "stage 2 gradient accumulators") == (norm + table) * sizeof(float));
    CHECK(bytes_of(apart, "stage 2 optimiser state") == 2 * (norm + table) * sizeof(float));  // LAMB's two moments
    CHECK(bytes_of(beside, "stage 2 (its tied table counted once) weights") == norm * sizeof(float));
    CHECK(bytes_of(beside, "stage 2 (its tied table counted once) gradient accumulators") == norm * sizeof(float));
    CHECK(bytes_of(beside, "stage 2 (its tied table counted once) optimiser state") == 2 * norm * sizeof(float));
    CHECK(bytes_of(beside, "stage 0 weights") == bytes_of(items_of({0, 1, 2}, 0), "stage 0 weights"));
    // One stage holding both copies: the network's parameters, which count the table once.
    using one = cfg::config<P, cfg::single, cfg::gradient_accumulation<8>, cfg::final>;
    const auto single = exec::dry_run<one>(net, lamb, {1, 1, length, 1}, {.micro_batch = batch}, 8 * batch, {}, 1,
                                           exec::over_budget::throws, exec::token_loss<P>{});
    CHECK(bytes_of(single.memory.ipus.at(0).items, "stage 0 (its tied table counted once) weights") ==
          net.parameters() * sizeof(float));
}

TEST_CASE("a transformer stage that throws surfaces its exception with its type and message", "[exec][nn][transformer][threads]") {
    using P = cfg::fp32;
    using c = cfg::config<P, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>>;
    const auto net = nn::make_gpt2<P>(small_gpt(false));
    auto run = exec::training_model<c>(net, optim::adamw(), {1, 1, length, 1}, {.micro_batch = batch}, {},
                                       exec::token_loss<P>{});
    // a token beyond the vocabulary, in micro-batch 2: the embedding on the first IPU throws
    const auto bad = [](std::size_t r, std::size_t d, std::size_t m) {
        auto mb = token_feed<P>{}(r, d, m);
        if (m == 2) mb.first.data()[5] = nn::token_element<float>(vocab + 4);
        return mb;
    };
    bool thrown = false;
    try {
        (void)tessera::test::within_deadline(60, "faulty GPT session", [&] { return run(bad); });
    } catch (const std::out_of_range& e) {
        thrown = true;
        CHECK_THAT(e.what(), Catch::Contains("token 27 at position 5 of sample 0 is not below the vocabulary of 23"));
    }
    CHECK(thrown);
}

// Micro-batch (r, d, m) of a BERT: random tokens, a mask (sample 0 padded after 5 tokens, sample 1
// two packed sequences of 3 and 4 tokens and one position of padding; token types A then B) and
// masked-LM labels on a random third of the real positions.
template <class P>
struct bert_feed {
    bool with_mask = true;
    std::pair<exec::host_input<P>, exec::token_labels> operator()(std::size_t r, std::size_t d, std::size_t m) const {
        std::mt19937 rng(static_cast<std::uint32_t>(17 + 1009 * r + 101 * d + m));
        std::vector<std::uint32_t> ids(batch * length);
        for (auto& id : ids) id = rng() % vocab;
        auto mask = std::make_shared<nn::sequence_mask>(batch, length);
        mask->segments = {1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 0};
        mask->token_types = {0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0};
        std::vector<std::int32_t> labels(ids.size(), tessera::kernels::ignore_label);
        for (std::size_t i = 0; i < ids.size(); ++i)
            if (mask->segments[i] != 0 && rng() % 3 == 0) labels[i] = std::int32_t(rng() % vocab);
        auto x = nn::token_activation<P>(std::span<const std::uint32_t>(ids), batch, length);
        if (!with_mask) return {exec::host_input<P>(std::move(x)), std::move(labels)};
        return {exec::host_input<P>(std::move(x), std::move(mask)), std::move(labels)};
    }
};

nn::transformer_spec small_bert(double dropout) {
    auto s = nn::bert_spec("tiny");
    s.vocab = vocab, s.width = 16, s.layers = 3, s.heads = 2, s.positions = length;
    s.dropout = s.attention_dropout = dropout;
    return s;
}

TEST_CASE("a BERT's attention mask and token types travel with the activations to every stage: padded and packed "
          "sequences train bit for bit as on one IPU, whose losses are the network's own",
          "[exec][nn][transformer][session][threads][mask]") {
    using P = cfg::fp32;
    constexpr std::size_t G = 5, D = 2;
    // One IPU, no dropout: the first step's losses are those of the network run with the mask in its context.
    {
        const auto net = nn::make_bert<P>(small_bert(0.0));
        using c = cfg::config<P, cfg::single, cfg::gradient_accumulation<G>, cfg::device_iterations<D>, cfg::all>;
        const auto losses = [&](bool with_mask) {
            auto run = exec::training_model<c>(net, optim::adamw(), {1, 1, length, 1}, {.micro_batch = batch}, {},
                                               exec::token_loss<P>{});
            return run(bert_feed<P>{with_mask}).losses.at(0);
        };
        const auto masked = losses(true);
        REQUIRE(masked.size() == G * D);
        CHECK(masked != losses(false));  // the mask changes the losses: the test can fail
        for (std::size_t m = 0; m < G; ++m) {
            auto [input, labels] = bert_feed<P>{}(0, 0, m);
            const auto mask = input.mask();
            auto plain = net;
            nn::context ctx{nn::mode::train, 1};
            mask->use(ctx);
            typename decltype(plain)::state st;
            const auto x = std::move(input).prepare();
            nn::token_cross_entropy<P> loss;
            const auto r = loss(plain.forward(x, st, ctx), labels.tokens);
            CHECK(masked[m] == Approx(r.sum / double(r.labelled)).epsilon(1e-6));
        }
    }
    // Every strategy, dropout on: the bits of `single`.
    const auto net = nn::make_bert<P>(small_bert(0.1));
    const auto train = [&]<class Strategy>(Strategy, cfg::options options, std::vector<bool> recompute = {}) {
        using c = cfg::config<P, Strategy, cfg::gradient_accumulation<G>, cfg::device_iterations<D>, cfg::all>;
        options.micro_batch = batch;
        exec::session_options settings{.dropout_seed = 3};
        settings.recompute = std::move(recompute);  // the recomputed forward reads the mask from the stash
        auto run = exec::training_model<c>(net, optim::adamw({.learning_rate = 1e-2}), {1, 1, length, 1}, options,
                                           settings, exec::token_loss<P>{});
        const auto result = tessera::test::within_deadline(300, "BERT session", [&] { return run(bert_feed<P>{}); });
        return std::pair{weights_of(run.model().network()), result.losses};
    };
    using one_f_one_b = cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>;
    const auto want = train(cfg::single{}, {});
    CHECK(want.first != weights_of(net));
    CHECK(train(cfg::sharded<cfg::dynamic>{}, {.stages = 3}) == want);
    CHECK(train(cfg::phased<cfg::dynamic>{}, {.stages = 2}) == want);
    CHECK(train(cfg::pipelined<cfg::gpipe, cfg::dynamic>{}, {.stages = 2}) == want);
    CHECK(train(one_f_one_b{}, {.stages = 3}) == want);
    CHECK(train(one_f_one_b{}, {.stages = 3}, {true, true, false}) == want);
    CHECK(train(one_f_one_b{}, {.stages = 3, .zero_bubble = cfg::zero_bubble_kind::h1}) == want);
}

}  // namespace test_transformer_stages
