// Zero-bubble pipelines (ZB-H1, ZB-H2: each backward pass split into its input gradient B and its
// weight gradient W, W run later) and looped BFS (GPipe over model chunks). Checked bit for bit
// against the network run whole: the split layer by layer with two micro-batches interleaved, and
// every schedule through sessions at fp32 and at 16.16 with dynamic loss scaling and stochastic
// rounding, with 1 and 2 replicas.
#include <catch2/catch.hpp>

#include <cstdint>
#include <tuple>
#include <vector>

#include "../emulator/deadline.hpp"
#include "network_helpers.hpp"
#include "sequential_net.hpp"
#include "tessera/config.hpp"
#include "tessera/exec/network_session.hpp"
#include "tessera/optim/sgd.hpp"

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
using namespace tessera::test::sequential_stages;

TEST_CASE("a split backward accumulates the gradients of the whole backward, bit for bit, whatever runs between",
          "[exec][nn][zero-bubble]") {
    static_assert(nn::SplitBackwardLayer<nn::conv2d<P>> && nn::SplitBackwardLayer<nn::linear<P>>);
    static_assert(!nn::SplitBackwardLayer<nn::batch_norm<P>>);  // its parameter gradients come with its input gradient
    static_assert(exec::SplitBackwardNetwork<net_t>);
    for (const auto algorithm : {tessera::kernels::conv_algorithm::automatic, tessera::kernels::conv_algorithm::winograd}) {
        CAPTURE(int(algorithm));
        const net_t initial = make_net();
        nn::context ctx{};
        ctx.convolution = algorithm;
        const auto [x0, y0] = images(0, 0, 0);
        const auto [x1, y1] = images(0, 0, 1);
        // Whole: micro-batch 0 forward and backward, then micro-batch 1.
        net_t whole = initial;
        std::vector<nn::activation<P>> whole_dx;
        for (const auto* xy : {&x0, &x1}) {
            net_t::state st;
            nn::softmax_cross_entropy<P> loss;
            (void)loss(whole.forward(*xy, st, ctx), xy == &x0 ? y0 : y1, 1.0);
            whole_dx.push_back(whole.backward(loss.gradient(), st, ctx, true));
        }
        // Split: both forwards, both input gradients, then both weight gradients, as ZB-H1 may order them.
        net_t split = initial;
        net_t::state s0, s1;
        nn::softmax_cross_entropy<P> l0, l1;
        (void)l0(split.forward(x0, s0, ctx), y0, 1.0);
        (void)l1(split.forward(x1, s1, ctx), y1, 1.0);
        const auto dx0 = split.backward_input(l0.gradient(), s0, ctx, true);
        const auto dx1 = split.backward_input(l1.gradient(), s1, ctx, true);
        split.backward_weights(s0, ctx);
        split.backward_weights(s1, ctx);
        CHECK(std::equal(dx0.begin(), dx0.end(), whole_dx[0].begin(), whole_dx[0].end()));
        CHECK(std::equal(dx1.begin(), dx1.end(), whole_dx[1].begin(), whole_dx[1].end()));
        const auto grads = [](net_t& n) {
            std::vector<float> all;
            n.visit_parameters([&](std::string_view, auto, auto g) { all.insert(all.end(), g.begin(), g.end()); });
            return all;
        };
        const auto want = grads(whole);
        CHECK(grads(split) == want);
        // The weight gradients are the second half: before it, the convolutions' and the head's are zero.
        net_t half_done = initial;
        net_t::state st;
        nn::softmax_cross_entropy<P> loss;
        (void)loss(half_done.forward(x0, st, ctx), y0, 1.0);
        (void)half_done.backward_input(loss.gradient(), st, ctx, true);
        std::size_t moved = 0;
        half_done.visit_parameters([&](std::string_view name, auto, auto g) {
            if (name.find("conv") != std::string_view::npos || name.find("fc") != std::string_view::npos)
                for (float v : g) moved += v != 0.0f;
        });
        CHECK(moved == 0);
        half_done.backward_weights(st, ctx);
        CHECK_THROWS_AS(half_done.backward_weights(st, ctx), std::logic_error);  // twice: no gradient kept for it
    }
}

TEST_CASE("zero-bubble pipelines train fp32 bit for bit as the whole network, 1 and 2 replicas",
          "[exec][nn][session][threads][zero-bubble]") {
    constexpr std::size_t D = 2;
    const net_t net = make_net();
    // Either schedule, chosen at run time (static policies: tests/exec/test_executor.cpp), over 2 and 3 stages.
    using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<cfg::dynamic>,
                          cfg::device_iterations<D>, cfg::replication<cfg::dynamic>, cfg::all>;
    for (const auto kind : {cfg::zero_bubble_kind::h1, cfg::zero_bubble_kind::h2})
        for (const std::size_t S : {2u, 3u})
            for (const std::size_t R : {1u, 2u}) {
                CAPTURE(int(kind), S, R);
                const std::size_t G = 2 * S + 1;
                auto run = exec::training_model<c>(net, plain_sgd{}, {1, side, side, channels},
                                                   {.micro_batch = batch, .gradient_accumulation = G, .replicas = R,
                                                    .stages = S, .zero_bubble = kind});
                CHECK(run.program().backward_split());
                const auto result = tessera::test::within_deadline(300, "ZB session", [&] { return run(images); });
                CHECK(result.losses[0].size() == D * G);
                auto expected = trained_replicas(net, R, G, D, images);
                for (std::size_t r = 0; r < R; ++r) {  // each replica's batch-norm statistics saw its own data
                    net_t trained = run.replica(r).network();
                    CHECK(parameters_and_buffers(trained) == parameters_and_buffers(expected[r]));
                }
            }
}

TEST_CASE("16.16 with dynamic loss scaling and stochastic rounding: every schedule, 1 and 2 replicas, trains bit for "
          "bit as one IPU a replica", "[exec][nn][session][threads][rounding][zero-bubble][looped-bfs]") {
    namespace optim = tessera::optim;
    constexpr std::size_t G = 6, D = 3;  // 1F1B over 3 stages needs G >= 5; 2 IPUs of model chunks, a multiple of 2
    const half_net_t net = make_net<H>();
    const optim::sgd stochastic({.learning_rate = 0.05, .momentum = 0.9, .rounding = {.stochastic = true, .seed = 9}});
    // The schedule, the stage count and the replicas at run time: three session types for every
    // schedule (the static policies run in tests/exec/test_executor.cpp).
    const auto train = [&]<class Strategy>(Strategy, std::size_t R, cfg::options options) {
        using c = cfg::config<H, Strategy, cfg::gradient_accumulation<G>, cfg::device_iterations<D>,
                              cfg::replication<cfg::dynamic>, cfg::all>;
        // A loss scale of 2^19 overflows the half gradients: the first step is skipped, and so on.
        exec::session_options settings{.stochastic_rounding = 5};
        settings.loss_scale = 0x1p19;
        settings.dynamic_loss_scaling = true;
        options.micro_batch = batch, options.replicas = R;
        auto run = exec::training_model<c>(net, stochastic, {1, side, side, channels}, options, settings);
        const auto result = tessera::test::within_deadline(300, "16.16 session", [&] { return run(half_images); });
        std::vector<std::vector<float>> replicas;
        for (std::size_t r = 0; r < R; ++r) {
            half_net_t trained = run.replica(r).network();
            replicas.push_back(parameters_and_buffers(trained));
        }
        return std::tuple{replicas, result.losses, run.model().skipped_steps(), run.program().description()};
    };
    using gpipe = cfg::pipelined<cfg::gpipe, cfg::dynamic>;
    using one_f_one_b = cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>;
    for (const std::size_t R : {1u, 2u}) {
        const auto [want, want_losses, want_skipped, single] = train(cfg::single{}, R, {});
        CHECK(want_skipped >= 1);  // the overflow vote did skip steps
        CHECK(single.rfind("single", 0) == 0);
        const auto check = [&](const auto& got) {
            const auto& [weights, losses, skipped, description] = got;
            INFO(description);
            CHECK(skipped == want_skipped);
            CHECK(losses == want_losses);
            CHECK(weights == want);
            return description.substr(0, description.find(','));
        };
        CAPTURE(R);
        CHECK(check(train(gpipe{}, R, {.stages = 2})) == "pipelined<gpipe>");
        CHECK(check(train(one_f_one_b{}, R, {.stages = 3})) == "pipelined<1f1b>");
        CHECK(check(train(one_f_one_b{}, R, {.stages = 4, .virtual_stages = 2})) == "pipelined<interleaved<2>>");
        CHECK(check(train(gpipe{}, R, {.stages = 4, .virtual_stages = 2})) == "pipelined<looped_bfs<2>>");
        CHECK(check(train(one_f_one_b{}, R, {.stages = 3, .zero_bubble = cfg::zero_bubble_kind::h1})) ==
              "pipelined<zero_bubble_h1>");
        CHECK(check(train(one_f_one_b{}, R, {.stages = 3, .zero_bubble = cfg::zero_bubble_kind::h2})) ==
              "pipelined<zero_bubble_h2>");
    }
}

TEST_CASE("a zero-bubble schedule is asked of a 1F1B pipeline with a run-time stage count", "[exec][config][zero-bubble]") {
    using fixed = cfg::config<cfg::pipelined<cfg::gpipe, cfg::dynamic>, cfg::gradient_accumulation<8>>;
    CHECK_THROWS_WITH(cfg::make_batching<fixed>({.micro_batch = 1, .stages = 2, .zero_bubble = cfg::zero_bubble_kind::h1}),
                      Catch::Contains("pipelined<one_f_one_b, dynamic>"));
    using chunks = cfg::config<cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::gradient_accumulation<8>>;
    CHECK_THROWS_WITH(cfg::make_batching<chunks>({.micro_batch = 1, .stages = 4, .virtual_stages = 2,
                                                  .zero_bubble = cfg::zero_bubble_kind::h2}),
                      Catch::Contains("one model chunk per IPU, not 2"));
    const auto b = cfg::make_batching<chunks>({.micro_batch = 1, .stages = 4, .zero_bubble = cfg::zero_bubble_kind::h2});
    CHECK(b.zero_bubble == cfg::zero_bubble_kind::h2);
    static_assert(cfg::description::of<cfg::config<cfg::pipelined<cfg::zero_bubble_h2, 3>, cfg::gradient_accumulation<5>>>()
                      .zero_bubble == cfg::zero_bubble_kind::h2);
}
