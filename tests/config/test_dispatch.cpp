// Run-time choices to configuration types (config::dispatch), and counts chosen at run time.
#include <string>
#include <type_traits>

#include <catch2/catch.hpp>

#include "tessera/config.hpp"

namespace cfg = tessera::config;

namespace {
// What a dispatched configuration is, as text: the test reads the type the dispatch chose.
struct describe {
    template <class C>
    std::string operator()() const {
        std::string s(C::precision::name);
        s += C::precision::loss_scaling::is_dynamic ? " dynamic " : " ";
        s += std::string(C::strategy::name);
        if constexpr (C::strategy::kind == cfg::strategy_kind::pipelined) s += "<" + std::string(C::strategy::schedule::name) + ">";
        s += " x" + std::to_string(C::strategy::stages);
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
    CHECK(cfg::dispatch({.precision = "16.16", .dynamic_loss_scaling = true, .strategy = "pipelined", .schedule = "1f1b",
                         .ipus_per_replica = 2, .eight_bit_io = true},
                        describe{}) == "16.16 dynamic pipelined<1f1b> x2 8-bit");
    CHECK(cfg::dispatch({.precision = "16.32", .strategy = "pipelined", .schedule = "gpipe", .ipus_per_replica = 4},
                        describe{}) == "16.32 pipelined<gpipe> x4 float");
    CHECK(cfg::dispatch({.strategy = "sharded", .ipus_per_replica = 2}, describe{}) == "32.32 sharded x2 float");
    CHECK(cfg::dispatch({.strategy = "phased", .ipus_per_replica = 4}, describe{}) == "32.32 phased x4 float");
    CHECK(cfg::dispatch_for<cfg::half, cfg::stage_counts<2>>({.strategy = "sharded", .ipus_per_replica = 2}, describe{}) ==
          "16.16 sharded x2 float");
}

TEST_CASE("dispatch names the field and the allowed values of a bad choice", "[config][dispatch]") {
    REQUIRE_THROWS_WITH(cfg::dispatch({.precision = "8.8"}, describe{}),
                        Catch::Contains("precision '8.8' is not one of 32.32, 16.32, 16.16"));
    REQUIRE_THROWS_WITH(cfg::dispatch({.strategy = "tiled"}, describe{}),
                        Catch::Contains("strategy 'tiled' is not one of single, sharded, pipelined, phased"));
    REQUIRE_THROWS_WITH(cfg::dispatch({.strategy = "pipelined", .schedule = "zigzag", .ipus_per_replica = 2}, describe{}),
                        Catch::Contains("schedule 'zigzag' is not one of gpipe, 1f1b"));
    REQUIRE_THROWS_WITH(cfg::dispatch({.strategy = "sharded", .ipus_per_replica = 3}, describe{}),
                        Catch::Contains("IPUs per replica for 'sharded' '3' is not one of 2, 4"));
    REQUIRE_THROWS_WITH(cfg::dispatch({.strategy = "single", .ipus_per_replica = 2}, describe{}),
                        Catch::Contains("IPUs per replica for 'single' '2' is not one of 1"));
    using only_two = cfg::stage_counts<2>;
    REQUIRE_THROWS_AS((cfg::dispatch_for<cfg::fp32, only_two>({.strategy = "sharded", .ipus_per_replica = 4}, describe{})),
                      cfg::config_error);
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
