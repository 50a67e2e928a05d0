// Run-time choices to configuration types (config::dispatch), and counts chosen at run time.
#include <string>
#include <type_traits>

#include <catch2/catch.hpp>

#include "tessera/config.hpp"

namespace test_dispatch {

namespace cfg = tessera::config;

namespace {
// What a dispatched configuration is, as text: the test reads the type the dispatch chose.
struct describe {
    template <class C>
    std::string operator()() const {
        std::string s(C::precision::name);
        s += " ";
        s += std::string(C::strategy::name);
        if constexpr (C::strategy::kind == cfg::strategy_kind::pipelined) s += "<" + std::string(C::strategy::schedule::name) + ">";
        s += C::strategy::stages == cfg::dynamic ? std::string(" xN") : " x" + std::to_string(C::strategy::stages);
        s += C::io_policy::is_eight_bit ? " 8-bit" : " float";
        static_assert(C::micro_batch == cfg::dynamic && C::gradient_accumulation == cfg::dynamic &&
                      C::device_iterations == cfg::dynamic && C::replicas == cfg::dynamic && C::instances == cfg::dynamic &&
                      C::input_group == cfg::dynamic);
        return s;
    }
};
}  // namespace

TEST_CASE("dispatch picks the configuration type of a run-time choice", "[config][dispatch]") {
    CHECK(cfg::dispatch({}, describe{}) == "32.32 single x1 float");
    CHECK(cfg::dispatch({.precision = "16.16", .strategy = "pipelined", .schedule = "1f1b", .eight_bit_io = true},
                        describe{}) == "16.16 pipelined<1f1b> xN 8-bit");
    CHECK(cfg::dispatch({.precision = "16.32", .strategy = "pipelined", .schedule = "gpipe"}, describe{}) ==
          "16.32 pipelined<gpipe> xN float");
    CHECK(cfg::dispatch({.strategy = "sharded"}, describe{}) == "32.32 sharded xN float");
    CHECK(cfg::dispatch({.strategy = "phased"}, describe{}) == "32.32 phased xN float");
    CHECK(cfg::dispatch_for<cfg::half>({.strategy = "sharded"}, describe{}) == "16.16 sharded xN float");
}

TEST_CASE("dispatch names the field and the allowed values of a bad choice", "[config][dispatch]") {
    REQUIRE_THROWS_WITH(cfg::dispatch({.precision = "8.8"}, describe{}),
                        Catch::Contains("precision '8.8' is not one of 32.32, 16.32, 16.16"));
    REQUIRE_THROWS_WITH(cfg::dispatch({.strategy = "tiled"}, describe{}),
                        Catch::Contains("strategy 'tiled' is not one of single, sharded, pipelined, phased"));
    REQUIRE_THROWS_WITH(cfg::dispatch({.strategy = "pipelined", .schedule = "zigzag"}, describe{}),
                        Catch::Contains("schedule 'zigzag' is not one of gpipe, 1f1b"));
}

TEST_CASE("a dynamic stage count is a count: given at run time, with the rules of a static one", "[config][dispatch]") {
    using pipe = cfg::dispatched_config<cfg::fp32, cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::float_io>;
    const cfg::options base{.micro_batch = 4, .gradient_accumulation = 15, .device_iterations = 1, .replicas = 2,
                            .instances = 1, .input_group = 1};
    for (std::size_t stages : {2u, 3u, 5u, 8u}) {
        auto o = base;
        o.stages = stages;
        const auto b = cfg::make_batching<pipe>(o);
        CHECK(b.stages == stages);
        CHECK(b.ipus_per_replica == stages);
        CHECK(b.ipu_of_stage.back() == stages - 1);
    }
    auto nine = base;
    nine.stages = 9;  // 2*9 - 1 = 17 > 15
    REQUIRE_THROWS_WITH(cfg::make_batching<pipe>(nine),
                        Catch::Contains("pipelined training with 9 stages needs gradient_accumulation >= 2*9 - 1 = 17, got 15"));
    REQUIRE_THROWS_WITH(cfg::make_batching<pipe>(base), Catch::Contains("stages is config::dynamic, so options must give it"));
    auto mapped = base;
    mapped.stages = 4, mapped.ipu_map = {0, 0, 1, 1}, mapped.available_ipus = 4;
    const auto m = cfg::make_batching<pipe>(mapped);
    CHECK(m.ipus_per_replica == 2);
    mapped.available_ipus = 3;  // 2 replicas x 2 IPUs
    REQUIRE_THROWS_WITH(cfg::make_batching<pipe>(mapped), Catch::Contains("needs 4 IPUs"));
    mapped.available_ipus.reset(), mapped.ipu_map = {0, 2, 2, 0};
    REQUIRE_THROWS_WITH(cfg::make_batching<pipe>(mapped), Catch::Contains("leaves IPU 1 without a stage"));
    mapped.ipu_map = {0, 1};
    REQUIRE_THROWS_WITH(cfg::make_batching<pipe>(mapped), Catch::Contains("names 2 IPUs for 4 stages"));
    // phased puts every stage on the replica's one IPU unless a map says otherwise
    using phase = cfg::dispatched_config<cfg::fp32, cfg::phased<cfg::dynamic>, cfg::float_io>;
    auto ph = base;
    ph.stages = 6;
    CHECK(cfg::make_batching<phase>(ph).ipus_per_replica == 1);
    // a static stage count keeps its own count and map
    using two = cfg::dispatched_config<cfg::fp32, cfg::pipelined<cfg::gpipe, 2>, cfg::float_io>;
    auto fixed = base;
    fixed.stages = 3;
    REQUIRE_THROWS_WITH(cfg::make_batching<two>(fixed), Catch::Contains("stages is fixed to 2 by the config"));
    fixed.stages = 2, fixed.ipu_map = {1, 0};
    REQUIRE_THROWS_WITH(cfg::make_batching<two>(fixed), Catch::Contains("the ipu_map is fixed by the config"));
    STATIC_REQUIRE(pipe::stages == cfg::dynamic && pipe::ipus_needed == cfg::dynamic);
}

TEST_CASE("replicas, instances and input groups may be chosen at run time, with the same rules", "[config]") {
    using c = cfg::dispatched_config<cfg::fp32, cfg::pipelined<cfg::gpipe, 2>, cfg::float_io>;
    const auto b = cfg::make_batching<c>({.micro_batch = 8, .gradient_accumulation = 4, .device_iterations = 2,
                                          .replicas = 8, .instances = 2, .input_group = 2});
    CHECK(b.local_replicas() == 4);
    CHECK(b.micro_batches_per_call() == 2 * 4 * 2);
    CHECK(b.combined_batch() == 8 * 2 * 4 * 2);
    REQUIRE_THROWS_WITH(cfg::make_batching<c>({.micro_batch = 8, .gradient_accumulation = 4, .device_iterations = 1,
                                               .replicas = 3, .instances = 2, .input_group = 1}),
                        Catch::Contains("3 replicas cannot be divided among 2 instances"));
    REQUIRE_THROWS_AS(cfg::make_batching<c>({.micro_batch = 8, .gradient_accumulation = 4, .device_iterations = 1,
                                             .replicas = 2, .instances = 1, .input_group = 4}),
                      cfg::replication_error);
    REQUIRE_THROWS_WITH(cfg::make_batching<c>({.micro_batch = 8, .gradient_accumulation = 4, .device_iterations = 1,
                                               .instances = 1, .input_group = 1}),
                        Catch::Contains("replicas is config::dynamic, so options must give it"));
    REQUIRE_THROWS_WITH(cfg::make_batching<c>({.micro_batch = 8, .gradient_accumulation = 4, .device_iterations = 1,
                                               .available_ipus = 4, .replicas = 4, .instances = 1, .input_group = 1}),
                        Catch::Contains("needs 8 IPUs"));
}

}  // namespace test_dispatch
