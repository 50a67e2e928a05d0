#pragma once
// What tessera-train was asked to do: its flags, parsed and checked.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "tessera/config/strategy.hpp"
#include "tessera/emulator/available_memory.hpp"
#include "tessera/exec/cross_process.hpp"

namespace tessera::programs {

/// A flag's value that cannot work (exit code 2, one line).
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// The first long option given more than once in `args` (argv without the program's name), its
/// --no- form counted as the option itself: a second value would silently replace or extend the
/// first (--dataset takes a directory after its name). Empty when each is given once.
[[nodiscard]] inline std::string repeated_option(std::span<char* const> args) {
    std::vector<std::string> seen;
    for (const char* arg : args) {
        std::string name(arg);
        if (name.size() < 3 || name.compare(0, 2, "--") != 0) continue;  // a value, or "--"
        name = name.substr(0, name.find('='));
        if (name.compare(0, 5, "--no-") == 0) name = "--" + name.substr(5);
        for (const auto& s : seen)
            if (s == name) return name;
        seen.push_back(name);
    }
    return {};
}

/// The host processes of the run (MPI ranks, PopRun's instances), behind functions so that the
/// training loop compiles without MPI (train_processes.cpp fills them where MPI is). One process
/// by default.
struct process_group {
    std::size_t rank = 0, size = 1;
    /// The gradients' reduction across the processes for a network of `stages` stages.
    std::function<exec::cross_process_reduction(std::size_t stages)> gradient_reduction{};
    std::function<void(std::span<double>)> sum{};            ///< element-wise over the ranks, in rank order
    std::function<void(std::span<std::byte>)> broadcast{};   ///< rank 0's bytes to every rank
    /// Throws unless every rank passes the same text (naming `what`, the rank and both texts).
    std::function<void(const std::string& what, const std::string& text)> check_same{};
    [[nodiscard]] bool lead() const noexcept { return rank == 0; }  ///< prints and writes files
    [[nodiscard]] bool several() const noexcept { return size > 1; }
};

/// tessera-train's flags (defaults: the main job of README and docs/training.md). See tessera_train.cpp for their help.
struct train_request {
    std::string model = "resnet20";
    std::string dataset = "fashion-mnist";
    std::string data_dir;                 ///< cifar10 (and fashion-mnist, when not Debian's)
    std::size_t batch_size = 16;
    std::string precision = "16.16";
    std::string loss_scaling = "dynamic";  ///< "none", "static:F" or "dynamic"
    std::size_t gradient_accumulation = 8;
    std::size_t device_iterations = 4;
    std::size_t replicas = 1;
    std::size_t instances = 1;
    std::size_t input_replica_group = 1;
    std::string strategy = "pipelined";
    std::string schedule = "1f1b";        ///< "gpipe", "1f1b", "interleaved" (1F1B over model chunks),
                                          ///< "looped-bfs" (GPipe over model chunks), "zero-bubble" (ZB-H1)
                                          ///< or "zero-bubble-h2" (1F1B, backward split)
    std::size_t virtual_stages = 2;       ///< --schedule interleaved or looped-bfs: model chunks (stages) per IPU
    std::size_t ipus_per_replica = 2;
    std::vector<std::string> split;       ///< the first unit of each stage after the first (BeginBlock)
    std::vector<std::size_t> layers_per_ipu;  ///< text models: blocks per IPU (Graphcore's layers_per_ipu)
    std::string head_ipu = "first";       ///< with layers_per_ipu: the head on the "first" IPU (a stage of its own) or the "last"
    std::size_t serialize_matmul = 1;     ///< text models: the vocabulary projection in this many products
    double packing = 1;                   ///< --dataset wikipedia: sequences per pack of seq_len tokens (1: none)
    std::size_t mask_tokens = 0;          ///< BERT: the positions its head predicts, the first of each sample (0: all)
    bool recompute = false;
    std::vector<std::string> recompute_checkpoints;  ///< units whose input is a checkpoint, or "every-unit"
    bool stochastic_rounding = false;     ///< 16-bit weights, activations and gradients rounded stochastically
    bool optimizer_sharding = false;      ///< each replica keeps and steps 1/R of the optimiser state
    bool optimizer_state_offchip = false; ///< the optimiser state in Streaming Memory (PopTorch's setOptimizerLocation)
    bool eight_bit_io = true;
    bool async_dataloader = true;
    std::size_t workers = 1;
    std::string output_mode = "final";    ///< "final", "all", "sum" or "every:N"
    std::size_t epochs = 3;
    std::size_t images = 0;               ///< training images used (0: all)
    double lr = 0.1;
    double max_grad_norm = std::numeric_limits<double>::infinity();  ///< clip to this global gradient norm (+inf: never)
    std::string optimizer = "sgd";
    std::uint64_t seed = 42;
    std::size_t seq_len = 128;            ///< text models: tokens a window gives the model
    std::string tokenizer = "bytes";      ///< text models: bytes, or bpe:N (learnt on the training part)
    double dropout = 0.0;                 ///< text models: every dropout of the network (residual, embedding, attention)
    std::string metrics_json, timeline, checkpoint, resume;
    std::string trace;                    ///< a Trace Event Format file of the run's calls (Perfetto, speedscope)
    std::size_t trace_calls = 0;          ///< calls --trace writes (0: training's every call, a dry run's 2)
    bool dry_run = false;                 ///< the modelled epoch only: nothing trained, no data read
    bool inference = false;               ///< with dry_run: the configuration's inference form (G = 1)
    std::size_t io_tiles = 0;             ///< tiles per IPU for overlapped host I/O (PopTorch's numIOTiles)
    bool dataflow = false;                ///< pipelines as asynchronous dataflow, not lock-step cycles (a what-if)
    std::string partials = "float";       ///< partial sums of 16-bit contractions: "float" or "half" (setPartialsType)
    /// share of each tile's memory a contraction's temporaries may take (setAvailableMemoryProportion):
    /// one for every IPU, or one per IPU of a replica
    std::vector<double> available_memory_proportion{tessera::emulator::default_available_memory_proportion};
    std::string host = "tutorial";        ///< the modelled host: "tutorial", "native" or a host_spec JSON file
    std::string ipu = "gc200";            ///< the modelled IPU: "gc200", "bow" or "c600" (emulator/device_presets.hpp)
    std::string device;                   ///< a device_spec JSON file for the modelled IPU (replaces ipu); empty: ipu's
    std::size_t stop_after = 0;           ///< stop after this many host calls (tests of checkpoint/resume; 0: never)
    process_group processes{};            ///< not a flag: the ranks mpirun started (--instances)
};

/// Whether the request's schedule runs model chunks (--schedule interleaved or looped-bfs).
[[nodiscard]] inline bool runs_chunks(const train_request& r) noexcept {
    return r.strategy == "pipelined" && (r.schedule == "interleaved" || r.schedule == "looped-bfs");
}
/// The stage count of a request: --ipus-per-replica for the staged strategies (one stage per IPU;
/// phased runs them one after another on one IPU; with model chunks, --virtual-stages per IPU), 1 for single.
[[nodiscard]] inline std::size_t stages_of(const train_request& r) noexcept;
/// Whether the head is a stage of its own on the first IPU (--layers-per-ipu with --head-ipu first,
/// as Graphcore's BERT and GPT-2 place it beside the embedding whose table it shares): a pipeline or
/// sharded model of more than one IPU, one model chunk each.
[[nodiscard]] inline bool head_stage_on_first_ipu(const train_request& r) noexcept {
    return !r.layers_per_ipu.empty() && r.head_ipu == "first" && r.ipus_per_replica > 1 && !runs_chunks(r) &&
           (r.strategy == "pipelined" || r.strategy == "sharded");
}
/// The stage count of a request: --ipus-per-replica for the staged strategies (one stage per IPU;
/// phased runs them one after another on one IPU; with model chunks, --virtual-stages per IPU; one
/// more for a head on the first IPU), 1 for single.
[[nodiscard]] inline std::size_t stages_of(const train_request& r) noexcept {
    if (r.strategy == "single") return 1;
    if (head_stage_on_first_ipu(r)) return r.ipus_per_replica + 1;
    return runs_chunks(r) ? r.ipus_per_replica * r.virtual_stages : r.ipus_per_replica;
}
/// The IPU of each stage where it is not the strategy's own map (a head on the first IPU: 0, 1, ..., P - 1, 0).
[[nodiscard]] inline std::vector<std::size_t> ipu_map_of(const train_request& r) {
    std::vector<std::size_t> map;
    if (!head_stage_on_first_ipu(r)) return map;
    for (std::size_t i = 0; i < r.ipus_per_replica; ++i) map.push_back(i);
    map.push_back(0);
    return map;
}
/// Model chunks per IPU: --virtual-stages when interleaved or looped BFS, else 1.
[[nodiscard]] inline std::size_t virtual_stages_of(const train_request& r) noexcept {
    return runs_chunks(r) ? r.virtual_stages : 1;
}
/// The IPUs of a replica: the stages less a head's stage of its own, per model chunk; 1 for phased,
/// whose stages run one after another on one IPU.
[[nodiscard]] inline std::size_t ipus_per_replica_of(const train_request& r) noexcept {
    if (r.strategy == "phased") return 1;
    return (stages_of(r) - (head_stage_on_first_ipu(r) ? 1 : 0)) / virtual_stages_of(r);
}

/// The zero-bubble schedule a request asks for (none unless --schedule zero-bubble or zero-bubble-h2).
[[nodiscard]] inline config::zero_bubble_kind zero_bubble_of(const train_request& r) noexcept {
    if (r.strategy != "pipelined") return config::zero_bubble_kind::none;
    if (r.schedule == "zero-bubble") return config::zero_bubble_kind::h1;
    if (r.schedule == "zero-bubble-h2") return config::zero_bubble_kind::h2;
    return config::zero_bubble_kind::none;
}

/// The micro-batches of one host call per replica, D × G: the count over which --output-mode
/// every:N picks its micro-batches (exec::output_selection::selects, as the executor calls it: k from 0
/// to device iterations × micro-batches per iteration). SIZE_MAX when the product overflows (refused
/// later as more samples per call than a size_t can count).
[[nodiscard]] inline std::size_t call_micro_batches(const train_request& r) noexcept {
    const std::size_t d = r.device_iterations, g = r.gradient_accumulation;
    return g != 0 && d > std::numeric_limits<std::size_t>::max() / g ? std::numeric_limits<std::size_t>::max() : d * g;
}

/// The N of an output mode "every:N", read whole (decimal digits and nothing else, at least 1);
/// std::nullopt for another mode. usage_error for "every:3x", "every:-1", "every:", "every:0" or a
/// count beyond a size_t.
[[nodiscard]] inline std::optional<std::size_t> output_period_of(const std::string& mode) {
    if (mode.rfind("every:", 0) != 0) return std::nullopt;
    const char* first = mode.data() + 6;
    const char* last = mode.data() + mode.size();
    std::size_t n = 0;
    const auto [end, error] = std::from_chars(first, last, n);
    if (first == last || error != std::errc{} || end != last)  // from_chars takes no sign for a size_t
        throw usage_error("--output-mode every:N takes a whole count N (decimal digits only), got '" + mode + "'");
    if (n == 0) throw usage_error("--output-mode every:N needs N > 0, got '" + mode + "'");
    return n;
}

/// Refuses an output mode that is not final, all, sum or every:N, and an every:N that would return no
/// micro-batch of a call: N must be from 1 to D × G (call_micro_batches). --inference replaces the
/// output mode and is checked by tessera-train on its own.
inline void check_output_mode(const train_request& r) {
    if (r.output_mode == "final" || r.output_mode == "all" || r.output_mode == "sum") return;
    const auto n = output_period_of(r.output_mode);
    if (!n) throw usage_error("--output-mode '" + r.output_mode + "' is not one of final, all, sum, every:N");
    const std::size_t count = call_micro_batches(r);
    if (*n > count)
        throw usage_error("--output-mode " + r.output_mode + " returns one micro-batch in every " + std::to_string(*n) +
                          " of a host call, and a call runs " + std::to_string(count) +
                          " per replica (device iterations × gradient accumulation = " +
                          std::to_string(r.device_iterations) + " × " + std::to_string(r.gradient_accumulation) +
                          "): no loss would be returned (give N from 1 to " + std::to_string(count) + ")");
}

/// Runs the request with its precision's configurations (each precision is compiled in its own file).
int train_fp32(const train_request& r);
int train_mixed(const train_request& r);
int train_half(const train_request& r);

}  // namespace tessera::programs
