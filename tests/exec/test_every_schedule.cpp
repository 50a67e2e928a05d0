// Every pipeline schedule (GPipe, 1F1B, interleaved, looped BFS, ZB-H1, ZB-H2) at 16.16 with dynamic
// loss scaling and stochastic rounding, with 1 and 2 replicas, checked bit for bit against one IPU a
// replica. Release builds only (tests/exec/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <vector>

#include "../emulator/deadline.hpp"
#include "network_helpers.hpp"
#include "sequential_net.hpp"
#include "tessera/config.hpp"
#include "tessera/exec/network_session.hpp"
#include "tessera/optim/sgd.hpp"

namespace test_every_schedule {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
using namespace tessera::test::sequential_stages;

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

}  // namespace test_every_schedule
