#pragma once
// Published IPU results for ResNet-50, each with its configuration, and tessera's dry run of it:
// `tessera-sweep --published` prints them (docs/validation.md). The device model fits no constant
// to any of them: every figure is a prediction.
#include <tessera/tessera.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace tessera::programs {

/// The IPU a figure was measured on.
enum class ipu_generation {
    gc200,  ///< Mk2 GC200 at 1.33 GHz (device_spec's defaults)
    bow,    ///< Bow IPU at 1.85 GHz (MLPerf Training v2.0's system descriptions)
    c600,   ///< the C600 card's ipu21 at 1.5 GHz (PopRT's tables)
};

/// The device_spec of `ipu` (emulator/device_presets.hpp); `gc200` stands for the GC200's figures.
[[nodiscard]] inline emulator::device_spec device_of(ipu_generation ipu, const emulator::device_spec& gc200 = {}) {
    switch (ipu) {
        case ipu_generation::gc200: return gc200;
        case ipu_generation::bow: return emulator::bow_ipu(gc200);
        case ipu_generation::c600: return emulator::c600_ipu(gc200);
    }
    return gc200;
}

/// How the figure's system ran the model.
enum class run_shape {
    replicas_of_one_ipu,    ///< data parallel, one IPU per replica, recomputation checkpoints at every unit
    pipeline_of_four,       ///< 4-stage 1F1B pipelines, recomputation checkpoints at every unit
    inference_on_one_ipu,   ///< inference, one IPU per replica
};

/// One published figure: images/s of ResNet-50 (224 × 224, 16.16, 8-bit I/O) at a configuration.
struct published_figure {
    const char* system;        ///< as its source names it
    const char* source;        ///< where the number is printed (or the log it is derived from)
    ipu_generation ipu;
    run_shape shape;
    std::size_t replicas, micro_batch, gradient_accumulation, device_iterations;
    double images_per_second;  ///< the published figure
    const char* kind;          ///< "exact", "approximate", or "derived from the MLPerf logs' epoch times"
    std::size_t io_tiles = 0;  ///< tiles the run set aside for overlapped host I/O
};

// The MLPerf logs: mlcommons/training_results_v1.0 and v1.1, Graphcore/results/ipu-pod*-TF1/resnet/
// result_*.txt; images/s = 1,281,167 / the median epoch_start -> epoch_stop interval, the median
// over the five runs. Bow: graphcore.cn/performance-results, "Bow platform - training" tables.
inline const std::vector<published_figure> published_figures = {
    {"IPU-POD16, MLPerf Training v1.1", "mlcommons/training_results_v1.1, ipu-pod16-TF1 logs (batch 20 x G 10; "
     "Graphcore's blog: 30k images/s)",
     ipu_generation::gc200, run_shape::replicas_of_one_ipu, 16, 20, 10, 1, 29'543, "derived from the MLPerf logs' epoch times"},
    {"IPU-POD16, MLPerf Training v1.0", "mlcommons/training_results_v1.0, ipu-pod16-TF1 logs (batch 20 x G 6)",
     ipu_generation::gc200, run_shape::replicas_of_one_ipu, 16, 20, 6, 1, 27'527, "derived from the MLPerf logs' epoch times"},
    {"IPU-POD64, MLPerf Training v1.0", "mlcommons/training_results_v1.0, ipu-pod64-TF1 logs (batch 20 x G 2)",
     ipu_generation::gc200, run_shape::replicas_of_one_ipu, 64, 20, 2, 1, 83'404, "derived from the MLPerf logs' epoch times"},
    {"IPU-POD64, MLPerf Training v1.1", "mlcommons/training_results_v1.1, ipu-pod64-TF1 logs (batch 20 x G 3)",
     ipu_generation::gc200, run_shape::replicas_of_one_ipu, 64, 20, 3, 1, 108'011, "derived from the MLPerf logs' epoch times"},
    {"IPU-POD128, MLPerf Training v1.1", "mlcommons/training_results_v1.1, ipu-pod128-TF1 logs (batch 20 x G 2)",
     ipu_generation::gc200, run_shape::replicas_of_one_ipu, 128, 20, 2, 1, 178'212, "derived from the MLPerf logs' epoch times"},
    {"IPU-POD256, MLPerf Training v1.1", "mlcommons/training_results_v1.1, ipu-pod256-TF1 logs (batch 20 x G 2)",
     ipu_generation::gc200, run_shape::replicas_of_one_ipu, 256, 20, 2, 1, 325'997, "derived from the MLPerf logs' epoch times"},
    {"IPU-POD16, 2020 (before MLPerf)", "Graphcore blog, Accelerating ResNet-50 Training on the IPU (around 16k images/s; "
     "configuration not published: Graphcore's examples' 4 replicas x 4 stages, batch 16, G 256, assumed)",
     ipu_generation::gc200, run_shape::pipeline_of_four, 4, 16, 256, 1, 16'000, "approximate"},
    {"Bow Pod16, TensorFlow 1, pre-SDK 2.5", "graphcore.cn performance results, Bow training (batch 1,920 = 20 x 6 x 16)",
     ipu_generation::bow, run_shape::replicas_of_one_ipu, 16, 20, 6, 1, 42'029, "exact"},
    {"Bow Pod64, TensorFlow 1, pre-SDK 2.5", "graphcore.cn performance results, Bow training (batch 2,560 = 20 x 2 x 64)",
     ipu_generation::bow, run_shape::replicas_of_one_ipu, 64, 20, 2, 1, 145'287, "exact"},
    {"Bow Pod256, TensorFlow 1, pre-SDK 2.5", "graphcore.cn performance results, Bow training (batch 10,240 = 20 x 2 x 256)",
     ipu_generation::bow, run_shape::replicas_of_one_ipu, 256, 20, 2, 1, 425'514, "exact"},
    {"Bow Pod16, TensorFlow 1, SDK 3.0", "graphcore.cn performance results, Bow training (batch 3,520 = 22 x 10 x 16)",
     ipu_generation::bow, run_shape::replicas_of_one_ipu, 16, 22, 10, 1, 44'059, "exact"},
    {"Bow Pod64, TensorFlow 1, SDK 3.0", "graphcore.cn performance results, Bow training (batch 5,120 = 20 x 4 x 64)",
     ipu_generation::bow, run_shape::replicas_of_one_ipu, 64, 20, 4, 1, 153'205, "exact"},
    {"Bow Pod256, TensorFlow 1, SDK 3.0", "graphcore.cn performance results, Bow training (batch 10,240 = 20 x 2 x 256)",
     ipu_generation::bow, run_shape::replicas_of_one_ipu, 256, 20, 2, 1, 456'906, "exact"},
    {"1 IPU, PopRT inference, batch 80", "graphcore/PopRT benchmarks/resnet50/README.md (batch 80, 128 batches per step, "
     "--enable_overlapio: 32 I/O tiles; a C600: its FP8 rows compile for ipu21, and ByteMLPerf's C600 gives "
     "7,062 and 13,542 images/s where the table gives 7,030 and 13,593)",
     ipu_generation::c600, run_shape::inference_on_one_ipu, 1, 80, 1, 128, 15'541, "exact", 32},
    {"1 IPU, PopRT inference, batch 1", "graphcore/PopRT benchmarks/resnet50/README.md (batch 1, 1 batch per step; "
     "a C600, as the batch-80 row)",
     ipu_generation::c600, run_shape::inference_on_one_ipu, 1, 1, 1, 1, 3'119, "exact"},
};

/// tessera's dry run of a figure: images/s on the IPUs alone (the host left out: the published
/// systems' hosts are not tessera's host models), whether it fits, and its fullest IPU.
struct published_estimate {
    double images_per_second = 0;
    bool fits = false;
    std::size_t fullest_ipu_bytes = 0;
};

template <class Net>
[[nodiscard]] published_estimate dry_run_figure(const Net& net, const published_figure& f, emulator::device_spec gc200 = {}) {
    namespace cfg = config;
    const emulator::device_spec device = device_of(f.ipu, gc200);
    // Half partials, as the configurations set them (MLPerf v1.1's configs.yml: enable_half_partials
    // for every ResNet-50 entry; Graphcore's examples' configs.yml: half_partial); v1.0's and PopRT's
    // are assumed the same.
    exec::session_options settings{.device = device, .record_trace = false, .io_tiles = f.io_tiles,
                                   .partials = emulator::partials_type::float16};
    if (f.shape != run_shape::inference_on_one_ipu) settings.recompute_checkpoints = exec::checkpoint_every_unit(net);
    const config::options counts{.micro_batch = f.micro_batch, .gradient_accumulation = f.gradient_accumulation,
                                 .device_iterations = f.device_iterations, .replicas = f.replicas};
    const optim::sgd sgd({.momentum = 0.9});
    const auto run = [&]<class C>() {
        const auto e = exec::dry_run<C>(net, sgd, {1, 224, 224, 3}, counts, 1'281'167, settings, 1, exec::over_budget::reported);
        published_estimate p;
        p.images_per_second = double(e.samples) / double(e.calls) / e.call_device_seconds;  // one call's images
        p.fits = e.fits;
        for (const auto& ipu : e.memory.ipus) p.fullest_ipu_bytes = std::max(p.fullest_ipu_bytes, ipu.on_chip());
        return p;
    };
    using data_parallel = cfg::config<cfg::half, cfg::replication<cfg::dynamic>, cfg::gradient_accumulation<cfg::dynamic>,
                                      cfg::micro_batch<cfg::dynamic>, cfg::device_iterations<cfg::dynamic>, cfg::eight_bit_io>;
    using pipelined = cfg::config<cfg::half, cfg::pipelined<cfg::one_f_one_b, 4>, cfg::replication<cfg::dynamic>,
                                  cfg::gradient_accumulation<cfg::dynamic>, cfg::micro_batch<cfg::dynamic>,
                                  cfg::device_iterations<cfg::dynamic>, cfg::eight_bit_io>;
    switch (f.shape) {
        case run_shape::replicas_of_one_ipu: return run.template operator()<data_parallel>();
        case run_shape::pipeline_of_four: return run.template operator()<pipelined>();
        case run_shape::inference_on_one_ipu: return run.template operator()<typename data_parallel::for_inference>();
    }
    return {};
}

}  // namespace tessera::programs
