// The policy layer: defaults, any order, derived constants, rebinding, and the run-time rules.
#include <cstdint>
#include <type_traits>

#include <catch2/catch.hpp>

#include "tessera/config.hpp"

namespace test_config {

namespace cfg = tessera::config;

TEST_CASE("an empty config is PopTorch's default", "[config]") {
    using c = cfg::config<>;
    STATIC_REQUIRE(std::is_same_v<c::precision, cfg::fp32>);
    STATIC_REQUIRE(std::is_same_v<c::strategy, cfg::single>);
    STATIC_REQUIRE(std::is_same_v<c::output_mode, cfg::final>);  // training default
    STATIC_REQUIRE(std::is_same_v<c::io_type, float>);
    STATIC_REQUIRE(c::is_training);
    STATIC_REQUIRE(c::replicas == 1 && c::instances == 1 && c::gradient_accumulation == 1 &&
                   c::device_iterations == 1 && c::ipus_needed == 1);
    STATIC_REQUIRE(c::micro_batch == cfg::dynamic && c::combined_batch == cfg::dynamic);
    STATIC_REQUIRE(c::micro_batches_per_call == 1);
    STATIC_REQUIRE(c::accumulation_reduction == cfg::reduction::mean);
    STATIC_REQUIRE(cfg::Config<c> && !cfg::Config<int>);
}

TEST_CASE("policies are accepted in any order", "[config]") {
    using a = cfg::config<cfg::mixed, cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<8>,
                          cfg::device_iterations<4>, cfg::replication<4>, cfg::micro_batch<32>>;
    using b = cfg::config<cfg::micro_batch<32>, cfg::replication<4>, cfg::device_iterations<4>,
                          cfg::gradient_accumulation<8>, cfg::pipelined<cfg::gpipe, 2>, cfg::mixed>;
    STATIC_REQUIRE(std::is_same_v<a::precision, b::precision> && std::is_same_v<a::strategy, b::strategy>);
    STATIC_REQUIRE(a::combined_batch == b::combined_batch);
    STATIC_REQUIRE(a::ipus_needed == 8);                          // 4 replicas × 2 IPUs
    STATIC_REQUIRE(a::micro_batches_per_call == 4 * 8 * 4);       // D × G × R
    STATIC_REQUIRE(a::combined_batch == 32 * 4 * 8 * 4);          // seeds: b32 G8 D4 R4
    STATIC_REQUIRE(a::samples_per_update == 32 * 8 * 4);
}

TEST_CASE("derived counts reproduce the seeds' iterations per epoch", "[config]") {
    // 50,000 CIFAR-10 images, drop_last: iterations = floor(50,000 / combined batch).
    auto iterations = [](std::size_t combined) { return 50'000 / combined; };
    CHECK(iterations(cfg::config<cfg::micro_batch<32>, cfg::gradient_accumulation<3>>::combined_batch) == 520);
    CHECK(iterations(cfg::config<cfg::micro_batch<32>, cfg::gradient_accumulation<8>>::combined_batch) == 195);
    CHECK(iterations(cfg::config<cfg::micro_batch<32>, cfg::gradient_accumulation<8>,
                                 cfg::device_iterations<4>>::combined_batch) == 48);
    CHECK(iterations(cfg::config<cfg::micro_batch<32>, cfg::gradient_accumulation<8>, cfg::device_iterations<4>,
                                 cfg::replication<4>>::combined_batch) == 12);
    CHECK(iterations(cfg::config<cfg::micro_batch<64>, cfg::gradient_accumulation<3>>::combined_batch) == 260);
    CHECK(iterations(cfg::config<cfg::micro_batch<64>, cfg::gradient_accumulation<8>>::combined_batch) == 97);
    CHECK(iterations(cfg::config<cfg::micro_batch<64>, cfg::gradient_accumulation<8>,
                                 cfg::device_iterations<4>>::combined_batch) == 24);
}

TEST_CASE("instances own R / P replicas and input groups share a slice", "[config]") {
    using c = cfg::config<cfg::replication<8, 2>, cfg::instances<2>, cfg::micro_batch<16>, cfg::gradient_accumulation<2>>;
    STATIC_REQUIRE(c::local_replicas == 4);
    STATIC_REQUIRE(c::micro_batches_per_call == 2 * 4 / 2);  // G × R_local / input group
    STATIC_REQUIRE(c::combined_batch == 16 * 4);
    STATIC_REQUIRE(c::samples_per_update == 16 * 2 * 4);     // 8 replicas in groups of 2: 4 distinct slices
    STATIC_REQUIRE(c::ipus_needed == 8);
}

TEST_CASE("inference defaults to output mode all and drops G", "[config]") {
    using train = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>,
                              cfg::device_iterations<2>, cfg::micro_batch<8>>;
    using infer = train::for_inference;
    STATIC_REQUIRE(!infer::is_training);
    STATIC_REQUIRE(std::is_same_v<train::output_mode, cfg::final>);
    STATIC_REQUIRE(std::is_same_v<infer::output_mode, cfg::all>);
    STATIC_REQUIRE(infer::gradient_accumulation == 1);
    STATIC_REQUIRE(infer::combined_batch == 8 * 2);
    STATIC_REQUIRE(std::is_same_v<infer::strategy, train::strategy>);
    using explicit_sum = train::with<cfg::sum>::for_inference;  // an explicit output mode is kept
    STATIC_REQUIRE(std::is_same_v<explicit_sum::output_mode, cfg::sum>);
    using more = train::with<cfg::gradient_accumulation<16>>;
    STATIC_REQUIRE(more::gradient_accumulation == 16 && more::combined_batch == 8 * 2 * 16);
}

TEMPLATE_TEST_CASE("precisions carry their storage types and PopTorch names", "[config]", cfg::fp32, cfg::mixed,
                   cfg::half) {
    STATIC_REQUIRE(cfg::Precision<TestType>);
    STATIC_REQUIRE(std::is_same_v<typename TestType::accumulate_type, float>);
    STATIC_REQUIRE(TestType::accumulate_bits == 32);
    STATIC_REQUIRE(std::is_same_v<typename TestType::loss_scaling, cfg::no_loss_scaling>);
    using scaled = typename TestType::template with<cfg::dynamic_loss_scaling<1024.0, 100>>;
    STATIC_REQUIRE(scaled::loss_scaling::is_dynamic && scaled::loss_scaling::initial_scale == 1024.0);
    STATIC_REQUIRE(scaled::loss_scaling::growth_interval == 100);
    STATIC_REQUIRE(std::is_same_v<typename scaled::data_type, typename TestType::data_type>);
    STATIC_REQUIRE(cfg::config<TestType>::precision::name == TestType::name);
}

TEST_CASE("precision details", "[config]") {
    STATIC_REQUIRE(std::is_same_v<cfg::mixed::data_type, tessera::half> &&
                   std::is_same_v<cfg::mixed::weight_type, float>);
    STATIC_REQUIRE(std::is_same_v<cfg::half::weight_type, tessera::half>);
    STATIC_REQUIRE(cfg::half::with<cfg::static_loss_scaling<512.0>>::loss_scaling::initial_scale == 512.0);
    STATIC_REQUIRE(cfg::config<cfg::eight_bit_io>::io_policy::is_eight_bit);
    STATIC_REQUIRE(cfg::eight_bit_io::bytes_per_value * 4 == cfg::float_io::bytes_per_value);
}

TEST_CASE("strategies carry stages and the stage to IPU map", "[config]") {
    using p = cfg::pipelined<cfg::gpipe, 4>;
    STATIC_REQUIRE(p::stages == 4 && p::ipus_per_replica == 4 && p::ipu_of_stage(3) == 3);
    using s = cfg::sharded<4, cfg::ipu_map<0, 1, 1, 0>>;
    STATIC_REQUIRE(s::stages == 4 && s::ipus_per_replica == 2 && s::ipu_of_stage(2) == 1);
    using f = cfg::phased<3>;
    STATIC_REQUIRE(f::ipus_per_replica == 1 && f::ipu_of_stage(2) == 0);
    STATIC_REQUIRE(cfg::single::stages == 1);
    STATIC_REQUIRE(cfg::config<cfg::replication<2>, s>::ipus_needed == 4);
    STATIC_REQUIRE(std::is_same_v<cfg::pipelined<cfg::one_f_one_b, 2>::schedule, cfg::one_f_one_b>);
}

TEST_CASE("output modes", "[config]") {
    STATIC_REQUIRE(cfg::every_n<5>::period == 5 && cfg::every_n<5>::kind == cfg::output_kind::every_n);
    STATIC_REQUIRE(cfg::config<cfg::inference, cfg::every_n<3>>::output_mode::period == 3);
    STATIC_REQUIRE(cfg::OutputMode<cfg::sum> && !cfg::OutputMode<cfg::fp32>);
}

TEST_CASE("make_batching fills dynamic counts and keeps fixed ones", "[config]") {
    using c = cfg::config<cfg::gradient_accumulation<cfg::dynamic>, cfg::device_iterations<4>, cfg::replication<2>>;
    const auto b = cfg::make_batching<c>({.micro_batch = 32, .gradient_accumulation = 8});
    CHECK(b.micro_batch == 32);
    CHECK(b.gradient_accumulation == 8);
    CHECK(b.device_iterations == 4);
    CHECK(b.micro_batches_per_call() == 4 * 8 * 2);
    CHECK(b.combined_batch() == 32 * 4 * 8 * 2);
    CHECK(b.samples_per_update() == 32 * 8 * 2);
    CHECK_NOTHROW(cfg::make_batching<c>({.micro_batch = 32, .gradient_accumulation = 8, .device_iterations = 4}));
}

TEST_CASE("make_batching names the values of a broken rule", "[config]") {
    using dyn = cfg::config<cfg::gradient_accumulation<cfg::dynamic>, cfg::pipelined<cfg::gpipe, 3>>;
    CHECK_THROWS_MATCHES(cfg::make_batching<dyn>({.micro_batch = 4, .gradient_accumulation = 4}),
                         cfg::pipeline_depth_error,
                         Catch::Message("tessera::config: pipelined training with 3 stages needs gradient_accumulation "
                                        ">= 2*3 - 1 = 5, got 4 (the last forward and first backward stage are merged); "
                                        "raise it or use fewer stages"));
    CHECK_NOTHROW(cfg::make_batching<dyn>({.micro_batch = 4, .gradient_accumulation = 5}));

    using infer = cfg::config<cfg::inference, cfg::device_iterations<cfg::dynamic>, cfg::pipelined<cfg::gpipe, 4>>;
    CHECK_THROWS_WITH(cfg::make_batching<infer>({.micro_batch = 1, .device_iterations = 3}),
                      Catch::Contains("needs device_iterations >= 4, got 3"));
    using infer_g = cfg::config<cfg::inference, cfg::gradient_accumulation<cfg::dynamic>>;
    CHECK_THROWS_WITH(cfg::make_batching<infer_g>({.micro_batch = 1, .gradient_accumulation = 2}),
                      Catch::Contains("inference needs gradient_accumulation = 1, got 2"));

    using fixed = cfg::config<cfg::gradient_accumulation<8>>;
    CHECK_THROWS_WITH(cfg::make_batching<fixed>({.micro_batch = 1, .gradient_accumulation = 4}),
                      Catch::Contains("gradient_accumulation is fixed to 8 by the config, but options give 4"));
    CHECK_THROWS_WITH(cfg::make_batching<fixed>({}), Catch::Contains("micro_batch is config::dynamic, so options must give it"));
    CHECK_THROWS_AS(cfg::make_batching<fixed>({.micro_batch = 0}), cfg::config_error);

    using big = cfg::config<cfg::replication<4>, cfg::sharded<2>>;
    CHECK_THROWS_MATCHES(cfg::make_batching<big>({.micro_batch = 1, .available_ipus = 4}), cfg::replication_error,
                         Catch::Message("tessera::config: the configuration needs 8 IPUs (4 replicas × 2 IPUs per "
                                        "replica) but the system has 4"));
    CHECK_NOTHROW(cfg::make_batching<big>({.micro_batch = 1, .available_ipus = 8}));

    // Counts whose product a size_t cannot hold are refused before anything is sized by them.
    using counted = cfg::config<cfg::gradient_accumulation<cfg::dynamic>, cfg::device_iterations<cfg::dynamic>,
                                cfg::replication<cfg::dynamic>>;
    const std::size_t huge = std::size_t{1} << 62;
    CHECK_THROWS_MATCHES(cfg::make_batching<counted>({.micro_batch = 4, .gradient_accumulation = huge, .device_iterations = 8,
                                                      .replicas = 1}),
                         cfg::batch_error,
                         Catch::Message("tessera::config: micro_batch × device_iterations × gradient_accumulation × "
                                        "replicas = 4 × 8 × 4611686018427387904 × 1 samples per call is more than a "
                                        "size_t can count"));
    CHECK_NOTHROW(cfg::make_batching<counted>({.micro_batch = 1, .gradient_accumulation = huge, .device_iterations = 2,
                                               .replicas = 1}));  // 2^63 still counts
    using wide = cfg::config<cfg::replication<cfg::dynamic>, cfg::sharded<4>>;
    CHECK_THROWS_AS(cfg::make_batching<wide>({.micro_batch = 1, .replicas = huge}), cfg::replication_error);
}

TEST_CASE("a batch must be one combined batch and fit the dataset", "[config]") {
    using c = cfg::config<cfg::gradient_accumulation<3>, cfg::device_iterations<2>, cfg::replication<2>,
                          cfg::instances<2>>;
    const auto b = cfg::make_batching<c>({.micro_batch = 4});
    REQUIRE(b.combined_batch() == 4 * 3 * 2 * 1);
    CHECK_NOTHROW(b.check_batch(24));
    CHECK_THROWS_MATCHES(b.check_batch(25), cfg::batch_error,
                         Catch::Message("tessera::config: a batch of 25 samples is not a multiple of device_iterations "
                                        "× gradient_accumulation × local replicas = 2 × 3 × 1 = 6 micro-batches"));
    CHECK_THROWS_WITH(b.check_batch(30), Catch::Contains("holds micro-batches of 5, but the micro-batch is 4"));
    CHECK_NOTHROW(b.check_fits_dataset(48));

    using grouped = cfg::config<cfg::replication<4, 2>, cfg::inference>;
    CHECK_THROWS_WITH(cfg::make_batching<grouped>({.micro_batch = 4}).check_batch(7),
                      Catch::Contains("not a multiple of device_iterations × input groups of the local replicas = 1 × 2 = 2"));
    CHECK_THROWS_AS(b.check_fits_dataset(47), cfg::batch_error);
    CHECK_THROWS_WITH(b.check_fits_dataset(47),
                         Catch::Contains("a dataset of 47 samples is smaller than one combined batch (24 samples) "
                                         "for each of the 2 instances (48 in all)"));
}

}  // namespace test_config
