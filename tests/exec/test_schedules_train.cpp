// Zero-bubble pipelines (ZB-H1, ZB-H2): each backward pass split into its input gradient B and its
// weight gradient W, W run later. Checked bit for bit against the network run whole: the split layer
// by layer with two micro-batches interleaved, and through fp32 sessions with 1 and 2 replicas
// (every schedule at 16.16: test_every_schedule.cpp).
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

namespace test_schedules_train {

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

}  // namespace test_schedules_train
