#pragma once
// Published IPU results for BERT pre-training, each with the configuration it ran, and tessera's
// dry run of it as tessera-train --dry-run prices it: `tessera-sweep --published` prints them beside
// the ResNet-50 rows (docs/validation.md). No constant of the model is fitted to any of them.
#include <tessera/tessera.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "published_figures.hpp"
#include "train_request.hpp"
#include "train_text.hpp"

namespace tessera::programs {

/// One published figure: sequences/s of BERT pre-training (16.16, half partials, LAMB, the blocks'
/// inputs checkpointed, the head on IPU 0 beside the embedding, predicting the masked positions:
/// mask_tokens 20 of 128 and 76 of 512, Graphcore's configs_pretraining.yml) at a configuration.
struct published_transformer {
    const char* system;  ///< as its source names it
    const char* source;  ///< where the figure and the configuration are printed
    ipu_generation ipu;
    const char* model;   ///< bert-large or bert-base
    std::size_t seq_len, replicas;
    std::vector<std::size_t> layers_per_ipu;  ///< one count per IPU of a replica (Graphcore's layers_per_ipu)
    std::vector<double> available_memory_proportion;  ///< one, or one per IPU
    std::size_t micro_batch, gradient_accumulation;   ///< in packs when packed
    double packing;                  ///< sequences per pack (1: unpacked)
    std::size_t serialize_matmul;    ///< the vocabulary projection's pieces
    std::size_t mask_tokens;         ///< the positions the masked-LM head predicts (mask_tokens)
    bool optimizer_state_offchip;    ///< LAMB's state in Streaming Memory; sharded over the replicas either way
    double sequences_per_second;     ///< the published figure
    const char* kind;                ///< "exact", "approximate" (with why), or how it was derived
};

// Sources. [perf]: graphcore.cn/performance-results, "Bow platform - training" (SDK 3.1), its configs
// in graphcore/examples: nlp/bert/pytorch/configs_pretraining.yml (PyTorch: packing_factor 1.17 at 128
// and 2.0 at 512 tokens divides G, args.py) and nlp/bert/popart/configs/packed/ (PopART, SDK 3.1).
// [mlperf]: mlcommons/training_results_v1.0, Graphcore/results/ipu-pod{16,64}-POPART-closed/bert:
// sequences/s = the eval_accuracy epoch_num between blocks over block_start -> block_stop, median of
// the blocks and of the ten runs; configs in .../implementations/popart/configs/mk2/ (packs of 512
// tokens, 2 sequences a pack on average: avg_seq_per_pack); v1.1 likewise (training_results_v1.1).
// [paddle]: PaddlePaddle/PaddleNLP, examples/language_model/bert/static_ipu/README.md ("tput 11700") and run_pretrain.sh.
inline const std::vector<published_transformer> published_transformers = {
    {"Bow Pod16, BERT-Large phase 1, PyTorch", "[perf] pretrain_large_128 (G 2048 / 1.17 = 1751 packs)",
     ipu_generation::bow, "bert-large", 128, 4, {3, 7, 7, 7}, {0.15, 0.25, 0.25, 0.25}, 8, 1751, 1.17, 2, 20, true, 5'592, "exact"},
    {"Bow Pod64, BERT-Large phase 1, PyTorch", "[perf] pretrain_large_128_POD64 (G 512 / 1.17 = 438 packs)",
     ipu_generation::bow, "bert-large", 128, 16, {3, 7, 7, 7}, {0.14, 0.19, 0.19, 0.19}, 8, 438, 1.17, 2, 20, true, 18'494, "exact"},
    {"Bow Pod16, BERT-Large phase 2, PyTorch", "[perf] pretrain_large_512 (G 2048 / 2.0 = 1024 packs)",
     ipu_generation::bow, "bert-large", 512, 4, {3, 7, 7, 7}, {0.10, 0.15, 0.15, 0.15}, 2, 1024, 2.0, 2, 76, true, 1'969,
     "exact but the vocabulary's serialization (2 assumed)"},
    {"Bow Pod64, BERT-Large phase 2, PyTorch", "[perf] pretrain_large_512_POD64 (G 512 / 2.0 = 256 packs)",
     ipu_generation::bow, "bert-large", 512, 16, {3, 7, 7, 7}, {0.13, 0.19, 0.19, 0.19}, 2, 256, 2.0, 2, 76, true, 6'510,
     "exact but the vocabulary's serialization (2 assumed)"},
    {"Bow Pod16, BERT-Large phase 1, PopART", "[perf] packed_pretrain_large_128.json (batch 54,784 packs: G 1712)",
     ipu_generation::bow, "bert-large", 128, 4, {3, 7, 7, 7}, {0.15, 0.25, 0.25, 0.25}, 8, 1712, 1.17, 2, 20, true, 6'044,
     "approximate: PopART's sequences per pack taken as PyTorch's 1.17; its serialization 5 does not divide 30,522 (2)"},
    {"Bow Pod64, BERT-Large phase 1, PopART", "[perf] packed_pretrain_large_128.json, 16 replicas (G 428)",
     ipu_generation::bow, "bert-large", 128, 16, {3, 7, 7, 7}, {0.15, 0.25, 0.25, 0.25}, 8, 428, 1.17, 2, 20, true, 22'759,
     "approximate, as the Pod16 row"},
    {"Bow Pod16, BERT-Large phase 2, PopART", "[perf] packed_pretrain_large_512.json (batch 9,600 packs: G 1200)",
     ipu_generation::bow, "bert-large", 512, 4, {3, 7, 7, 7}, {0.16, 0.21, 0.21, 0.21}, 2, 1200, 2.0, 2, 76, true, 2'126,
     "approximate: 2 sequences per pack, as MLPerf's packs of 512"},
    {"Bow Pod64, BERT-Large phase 2, PopART", "[perf] packed_pretrain_large_512.json, 16 replicas (G 300)",
     ipu_generation::bow, "bert-large", 512, 16, {3, 7, 7, 7}, {0.16, 0.21, 0.21, 0.21}, 2, 300, 2.0, 2, 76, true, 7'789,
     "approximate, as the Pod16 row"},
    {"IPU-POD16, MLPerf Training v1.0 BERT", "[mlperf] pod16-closed.json (2 packs of 512 x G 192, 4 x 4 IPUs)",
     ipu_generation::gc200, "bert-large", 512, 4, {3, 7, 7, 7}, {0.20, 0.20, 0.25, 0.25}, 2, 192, 2.0, 2, 76, true, 1'419,
     "derived from the MLPerf logs; vocabulary 30,522 (MLPerf's 30,400 in 5 pieces)"},
    {"IPU-POD64, MLPerf Training v1.0 BERT", "[mlperf] pod64-closed.json (2 packs x G 96, 8 x 8 IPUs, state on chip)",
     ipu_generation::gc200, "bert-large", 512, 8, {0, 3, 3, 3, 3, 4, 4, 4}, {1.0}, 2, 96, 2.0, 2, 76, false, 4'241,
     "derived from the MLPerf logs; vocabulary 30,522 (MLPerf's 30,400 in 5 pieces)"},
    {"IPU-POD128, MLPerf Training v1.1 BERT", "[mlperf] v1.1 pod128-closed.json (2 packs x G 96, 16 x 8 IPUs, state on chip)",
     ipu_generation::gc200, "bert-large", 512, 16, {1, 2, 3, 4, 3, 4, 3, 4}, {0.20, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25},
     2, 96, 2.0, 2, 76, false, 9'027,
     "approximate: the run placed attention and FFN apart (IPU 3: 4 and 3); whole blocks by its attention counts"},
    {"Bow Pod16, BERT-Base phase 1, PopART", "[perf] pretrain_base_128.json (32 x G 512, blocks from IPU 1)",
     ipu_generation::bow, "bert-base", 128, 4, {0, 4, 4, 4}, {0.28}, 32, 512, 1.0, 2, 20, true, 16'391, "exact"},
    {"IPU-POD16, BERT-Base phase 1, PaddlePaddle", "[paddle] 32 x G 512, 4 x 4 IPUs, blocks from IPU 1",
     ipu_generation::gc200, "bert-base", 128, 4, {0, 4, 4, 4}, {0.28}, 32, 512, 1.0, 2, 20, true, 11'700, "exact"},
};

/// The tessera-train request that dry-runs figure `f` (on the IPUs alone: the host is the native one).
[[nodiscard]] inline train_request request_of(const published_transformer& f) {
    train_request r;
    r.model = f.model, r.dataset = "wikipedia", r.dry_run = true;
    r.precision = "16.16", r.partials = "half", r.optimizer = "lamb", r.eight_bit_io = false, r.tokenizer = "by-shape";
    r.strategy = "pipelined", r.schedule = "1f1b";
    r.seq_len = f.seq_len, r.replicas = f.replicas, r.ipus_per_replica = f.layers_per_ipu.size();
    r.layers_per_ipu = f.layers_per_ipu, r.available_memory_proportion = f.available_memory_proportion;
    r.batch_size = f.micro_batch, r.gradient_accumulation = f.gradient_accumulation, r.packing = f.packing;
    r.serialize_matmul = f.serialize_matmul, r.optimizer_state_offchip = f.optimizer_state_offchip;
    r.mask_tokens = f.mask_tokens;
    r.optimizer_sharding = true;  // replicated tensor sharding, in every configuration above
    r.recompute_checkpoints = {"every-unit"};
    r.host = "native";
    r.ipu = f.ipu == ipu_generation::bow ? "bow" : f.ipu == ipu_generation::c600 ? "c600" : "gc200";
    return r;
}

/// The command that prints the dry run of `f` (tessera-train's flags for request_of(f)).
[[nodiscard]] inline std::string command_of(const published_transformer& f) {
    const auto list = [](const auto& values) {
        std::string s;
        for (const auto v : values) {
            char one[32];
            std::snprintf(one, sizeof one, "%s%g", s.empty() ? "" : ",", double(v));
            s += one;
        }
        return s;
    };
    const train_request r = request_of(f);
    char packing[32];
    std::snprintf(packing, sizeof packing, "%g", r.packing);
    return "tessera-train --dry-run --model " + r.model + " --ipu " + r.ipu + " --seq-len " + std::to_string(r.seq_len) +
           " --batch-size " + std::to_string(r.batch_size) + " --gradient-accumulation " +
           std::to_string(r.gradient_accumulation) + " --replicas " + std::to_string(r.replicas) +
           " --strategy pipelined --ipus-per-replica " + std::to_string(r.ipus_per_replica) + " --layers-per-ipu " +
           list(r.layers_per_ipu) + " --available-memory-proportion " + list(r.available_memory_proportion) +
           (r.packing != 1 ? std::string(" --packing ") + packing : std::string()) + " --serialize-matmul " +
           std::to_string(r.serialize_matmul) + " --mask-tokens " + std::to_string(r.mask_tokens) + " --optimizer-sharding" +
           (r.optimizer_state_offchip ? " --optimizer-state-offchip" : "") +
           " --recompute-checkpoints every-unit --partials half --host native";
}

/// tessera's dry run of figure `f`: sequences/s on the IPUs alone (the published systems' hosts are
/// not tessera's host models), whether it fits, and its fullest IPU.
[[nodiscard]] inline published_estimate dry_run_transformer(const published_transformer& f) {
    using C = config::dispatched_config<config::half, config::pipelined<config::one_f_one_b, config::dynamic>, config::float_io>;
    const train_request r = request_of(f);
    return with_text_dry_run<C>(r, [&](const auto& net, const dataset_shape& shape, auto loss) {
        const exec::epoch_estimate e = dry_run_request<C>(r, net, shape, false, loss);
        published_estimate p;
        p.images_per_second = shape.sequences_per_sample * double(e.samples) / double(e.calls) / e.call_device_seconds;
        p.fits = e.fits;
        for (const auto& ipu : e.memory.ipus) p.fullest_ipu_bytes = std::max(p.fullest_ipu_bytes, ipu.on_chip());
        return p;
    });
}

}  // namespace tessera::programs
