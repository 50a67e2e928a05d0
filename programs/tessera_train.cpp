// tessera-train: the PopTorch tutorials' main.py on the IPU emulator. Trains a ResNet with the
// tutorials' flags, a bar per epoch, then the test accuracy, both clocks and each IPU's memory.
//   tessera-train [--model resnet20] [--dataset fashion-mnist] [--batch-size 16] [--precision 16.16] ...
// With no flags: 3 epochs of ResNet-20 on Fashion-MNIST, a 2-IPU 1F1B pipeline, 16.16 with dynamic
// loss scaling, G = 8, D = 4, 8-bit I/O, an async loader. A rule the configuration breaks, or a
// value a flag does not allow, prints one line and exits with code 2.
#include <CLI/CLI.hpp>
#include <tessera/config.hpp>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "train_device.hpp"
#include "train_onnx.hpp"
#include "train_processes.hpp"
#include "train_request.hpp"

namespace {

// main.py's Namespace(...) line, with every resolved flag.
std::string namespace_line(const tessera::programs::train_request& r) {
    const auto yes = [](bool b) { return b ? "True" : "False"; };
    const auto joined = [](const std::vector<std::string>& names) {
        std::string all;
        for (const auto& s : names) all += (all.empty() ? "" : ",") + s;
        return all;
    };
    const std::string split = joined(r.split), checkpoints = joined(r.recompute_checkpoints);
    std::string layers;
    for (const std::size_t n : r.layers_per_ipu) layers += (layers.empty() ? "" : ",") + std::to_string(n);
    std::string shares;  // --available-memory-proportion: one for all IPUs, or one per IPU
    for (const double amp : r.available_memory_proportion) {
        char one[32];
        std::snprintf(one, sizeof one, "%s%g", shares.empty() ? "" : ",", amp);
        shares += one;
    }
    char line[2048];
    std::snprintf(line, sizeof line, "Namespace(async_dataloader=%s, available_memory_proportion=%s, batch_size=%zu, dataflow=%s, dataset='%s', device='%s', device_iterations=%zu, dropout=%g, dry_run=%s, "
                "eight_bit_io=%s, epochs=%zu, gradient_accumulation=%zu, head_ipu='%s', host='%s', images=%zu, inference=%s, input_replica_group=%zu, instances=%zu, ipu='%s', "
                "io_tiles=%zu, ipus_per_replica=%zu, layers_per_ipu='%s', loss_scaling='%s', lr=%g, mask_tokens=%zu, max_grad_norm=%g, model='%s', optimizer='%s', optimizer_sharding=%s, optimizer_state_offchip=%s, output_mode='%s', packing=%g, "
                "partials='%s', precision='%s', recompute=%s, recompute_checkpoints='%s', replicas=%zu, replicas_per_instance=%zu, schedule='%s', seed=%llu, "
                "seq_len=%zu, serialize_matmul=%zu, split='%s', stochastic_rounding=%s, strategy='%s', tokenizer='%s', virtual_stages=%zu, workers=%zu)\n",
                yes(r.async_dataloader), shares.c_str(), r.batch_size, yes(r.dataflow), r.dataset.c_str(), r.device.c_str(), r.device_iterations, r.dropout, yes(r.dry_run),
                yes(r.eight_bit_io), r.epochs, r.gradient_accumulation, r.head_ipu.c_str(), r.host.c_str(), r.images, yes(r.inference), r.input_replica_group, r.instances, r.ipu.c_str(), r.io_tiles,
                tessera::programs::ipus_per_replica_of(r), layers.c_str(), r.loss_scaling.c_str(), r.lr, r.mask_tokens,
                r.max_grad_norm,
                r.model.c_str(), r.optimizer.c_str(), yes(r.optimizer_sharding), yes(r.optimizer_state_offchip), r.output_mode.c_str(), r.packing, r.partials.c_str(), r.precision.c_str(), yes(r.recompute),
                checkpoints.c_str(),
                r.replicas, r.instances ? r.replicas / r.instances : r.replicas, r.schedule.c_str(),
                static_cast<unsigned long long>(r.seed), r.seq_len, r.serialize_matmul, split.c_str(), yes(r.stochastic_rounding), r.strategy.c_str(),
                r.tokenizer.c_str(), tessera::programs::virtual_stages_of(r), r.workers);
    return line;
}

}  // namespace

int main(int argc, char** argv) {
    namespace programs = tessera::programs;
    programs::train_request r;
    CLI::App app{"tessera-train: train a ResNet or a GPT through the IPU emulator, with PopTorch's options"};
    app.add_option("--model", r.model, "resnet20|32|44|56|110 (CIFAR), resnet18|34|50|101|152 (ImageNet), "
                                       "gpt-tiny|small|medium|large|xl (GPT-2, over the bytes of --dataset fortunes), "
                                       "bert-base|large (BERT, --dry-run only), or FILE.onnx (an ONNX graph, --dry-run only)")
        ->check(programs::model_names({"resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "resnet18", "resnet34",
                               "resnet50", "resnet101", "resnet152", "gpt-tiny", "gpt-small", "gpt-medium", "gpt-large",
                               "gpt-xl", "bert-base", "bert-large"}));
    std::vector<std::string> dataset{r.dataset};
    auto* dataset_flag = app.add_option("--dataset", dataset, "fashion-mnist [DIR] | cifar10 DIR | synthetic | imagenet "
                                        "(--dry-run only) | fortunes [DIR] (text models) | wikipedia (text models' dry runs, by "
                                        "shape)")->expected(1, 2);
    auto* seq_len = app.add_option("--seq-len", r.seq_len, "text models: tokens the model reads per window (its "
                                   "labels: the same window one token on)")->check(CLI::PositiveNumber);
    auto* dropout = app.add_option("--dropout", r.dropout, "text models: the probability of every dropout in the "
                                   "network (embedding, attention probabilities, residual branches; GPT-2 trained "
                                   "with 0.1); 0, the default, for runs of a few epochs")
                        ->check(CLI::Range(0.0, 0.99));
    auto* tokenizer = app.add_option("--tokenizer", r.tokenizer, "text models: bytes (each byte a token), or bpe:N, a "
                                     "byte-pair encoding of N tokens learnt on the training part (the model's vocabulary; "
                                     "bpe:1024 by default)");
    auto* batch_size = app.add_option("--batch-size", r.batch_size, "the micro-batch (text models: 8 by default)")->check(CLI::PositiveNumber);
    app.add_option("--precision", r.precision, "32.32, 16.32 or 16.16")->check(CLI::IsMember({"32.32", "16.32", "16.16"}));
    auto* loss_scaling = app.add_option("--loss-scaling", r.loss_scaling, "none, static:F or dynamic");
    auto* accumulation = app.add_option("--gradient-accumulation", r.gradient_accumulation, "G (text models: 4 by default)")->check(CLI::PositiveNumber);
    app.add_option("--device-iterations", r.device_iterations, "D")->check(CLI::PositiveNumber);
    app.add_option("--replicas", r.replicas, "R (over all instances)")->check(CLI::PositiveNumber);
    app.add_option("--instances", r.instances, "host processes (PopRun's --num-instances)")->check(CLI::PositiveNumber);
    app.add_option("--input-replica-group", r.input_replica_group, "replicas that share an input slice")
        ->check(CLI::PositiveNumber);
    app.add_option("--strategy", r.strategy, "single, sharded, pipelined or phased")
        ->check(CLI::IsMember({"single", "sharded", "pipelined", "phased"}));
    auto* schedule = app.add_option("--schedule", r.schedule, "pipelined: gpipe, 1f1b, interleaved (1F1B over "
                                    "--virtual-stages model chunks per IPU, stage s on IPU s mod IPUs), looped-bfs "
                                    "(GPipe over them, breadth first), zero-bubble "
                                    "(ZB-H1: 1F1B with each backward split into input and weight gradients, the "
                                    "weight gradients run later) or zero-bubble-h2 (ZB-H2: more warm-up, more memory)")
                         ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "looped-bfs", "zero-bubble",
                                                "zero-bubble-h2"}));
    auto* chunks = app.add_option("--virtual-stages", r.virtual_stages, "--schedule interleaved or looped-bfs: model chunks (stages) "
                                  "per IPU, 2 or more")->check(CLI::Range(std::size_t{2}, std::size_t{64}));
    auto* ipus = app.add_option("--ipus-per-replica", r.ipus_per_replica,
                                "stages, one per IPU (phased: one after another on one IPU); any count the model's "
                                "units allow (single: 1)")->check(CLI::PositiveNumber);
    auto* split_flag = app.add_option("--split", r.split, "the unit starting each stage after the first (PopTorch's "
                                                          "BeginBlock), e.g. layer3[0]; balanced by FLOPs when absent")
                           ->delimiter(',');
    auto* layers_flag = app.add_option("--layers-per-ipu", r.layers_per_ipu,
                                       "text models: the blocks on each IPU of a replica, e.g. 3,7,7,7 (Graphcore's "
                                       "layers_per_ipu), the embedding on the first IPU and the head where "
                                       "--head-ipu puts it; one count per IPU of --ipus-per-replica")
                            ->delimiter(',')
                            ->excludes(split_flag);
    auto* head_ipu = app.add_option("--head-ipu", r.head_ipu,
                                    "with --layers-per-ipu: first (the default, as Graphcore's BERT and GPT-2 place it "
                                    "beside the embedding whose table it shares: a last pipeline stage of its own on "
                                    "IPU 0) or last (with the last IPU's blocks)")
                         ->check(CLI::IsMember({"first", "last"}))
                         ->needs(layers_flag);
    auto* serialize = app.add_option("--serialize-matmul", r.serialize_matmul,
                                     "text models: price the head's vocabulary projection as N products of vocab/N "
                                     "outputs each, one after the other (PopTorch's serializedMatMul in OutputChannels "
                                     "mode; Graphcore's embedding_serialization_factor); N divides the vocabulary; "
                                     "modelled only")
                          ->check(CLI::PositiveNumber);
    auto* packing = app.add_option("--packing", r.packing,
                                   "text models' dry runs on --dataset wikipedia: sequences per pack of --seq-len "
                                   "tokens on average (Graphcore's BERT packed up to 3; its packing_factor: 1.17, 1.7 "
                                   "and 2.0 at 128, 384 and 512 tokens); a sample, micro-batch and batch count packs, "
                                   "sequences/s counts sequences; 1: unpacked")
                        ->check(CLI::Range(1.0, 64.0));
    auto* mask_tokens = app.add_option("--mask-tokens", r.mask_tokens,
                                       "BERT: the positions its masked-LM head predicts, the first N of each sample, "
                                       "where Graphcore's data put the masked tokens (its mask_tokens: 20 of 128, 76 "
                                       "of 512); 0: every position")
                            ->check(CLI::NonNegativeNumber);
    app.add_flag("--recompute,!--no-recompute", r.recompute, "recompute each stage's forward during its backward");
    auto* checkpoints = app.add_option("--recompute-checkpoints", r.recompute_checkpoints,
                                       "units whose input is a recomputation checkpoint (PopTorch's recomputationCheckpoint), e.g. "
                                       "layer2[0],layer3[0], or every-unit: a stage holding one stashes its checkpoints and recomputes "
                                       "one segment at a time during backward")->delimiter(',');
    app.add_flag("--stochastic-rounding,!--no-stochastic-rounding", r.stochastic_rounding,
                 "round 16-bit results (updated weights, activations, their gradients) up or down with "
                 "probability proportional to the distance, as the IPU's stochastic rounding does (keyed by "
                 "--seed; 16.16, or 16.32 for activations alone; evaluation rounds to nearest)");
    app.add_flag("--optimizer-state-offchip,!--no-optimizer-state-offchip", r.optimizer_state_offchip,
                 "keep the optimiser state in Streaming Memory, read and written back at each update (PopTorch's "
                 "setOptimizerLocation(useOnChipStorage(False)), Graphcore's BERT's optimizer_state_offchip); with "
                 "--optimizer-sharding each replica streams its shard; modelled only");
    app.add_flag("--optimizer-sharding,!--no-optimizer-sharding", r.optimizer_sharding,
                 "each replica keeps the optimiser state of 1/R of the weights and updates those, the all-reduce "
                 "becoming a reduce-scatter and an all-gather (PopTorch's replicated tensor sharding; needs --replicas > 1)");
    auto* eight_bit = app.add_flag("--eight-bit-io,!--no-eight-bit-io", r.eight_bit_io,
                                   "send 8-bit images, normalised on the device");
    app.add_flag("--async-dataloader,!--no-async-dataloader", r.async_dataloader, "prepare batches ahead");
    app.add_option("--workers", r.workers, "loader workers")->check(CLI::PositiveNumber);
    auto* output_mode = app.add_option("--output-mode", r.output_mode, "final, all, sum or every:N");
    auto* epochs = app.add_option("--epochs", r.epochs, "epochs (text models: 4 by default)")->check(CLI::PositiveNumber);
    auto* images = app.add_option("--images", r.images, "training images used (synthetic: its size)");
    auto* lr = app.add_option("--lr", r.lr, "peak learning rate (cosine schedule with warm-up; text models: 2e-3 by "
                                            "default)")->check(CLI::PositiveNumber);
    auto* optimizer = app.add_option("--optimizer", r.optimizer, "sgd, adamw or lamb (text models: adamw by default)")
                          ->check(CLI::IsMember({"sgd", "adamw", "lamb"}));
    auto* max_grad_norm = app.add_option("--max-grad-norm", r.max_grad_norm, "clip the gradients to this global L2 norm "
                                         "(PopTorch's max_grad_norm; default: never)")->check(CLI::PositiveNumber);
    app.add_option("--seed", r.seed, "shuffling, augmentation and synthetic data");
    app.add_option("--metrics-json", r.metrics_json, "write the metrics as JSON");
    auto* timeline = app.add_option("--timeline", r.timeline, "write the SVG timeline of the last host call");
    auto* trace = app.add_option("--trace", r.trace, "write the run's calls as a Trace Event Format file (Perfetto, "
                                                     "chrome://tracing, speedscope): the modelled IPUs and host, with "
                                                     "flows and memory counters, and (training) the emulator's threads "
                                                     "on the wall clock");
    auto* trace_calls = app.add_option("--trace-calls", r.trace_calls, "calls --trace writes (default: every call of "
                                                                       "training, 2 of a dry run's epoch)")
                            ->check(CLI::PositiveNumber);
    auto* checkpoint = app.add_option("--checkpoint", r.checkpoint, "write a checkpoint at the end of each epoch");
    auto* resume = app.add_option("--resume", r.resume, "resume from a checkpoint");
    app.add_flag("--dry-run", r.dry_run, "print the modelled epoch, each IPU's memory and where the time goes; "
                                         "nothing is trained and no data read (datasets by their shape); --epochs, "
                                         "--lr, --seed, --stochastic-rounding, --loss-scaling and --max-grad-norm "
                                         "change nothing in it (the clock prices no loss scale and no clipping)");
    app.add_flag("--inference", r.inference,
                 "with --dry-run: the configuration's inference form (G = 1; D micro-batches of "
                 "--batch-size per call): images/s and one micro-batch's latency");
    app.add_option("--io-tiles", r.io_tiles, "tiles per IPU set aside for host I/O (PopTorch's numIOTiles): inputs "
                                             "and outputs stream while the other tiles compute; 0: transfers stop them");
    app.add_flag("--dataflow", r.dataflow, "run pipelines as asynchronous dataflow, each pass as soon as its inputs "
                                           "arrive, instead of Poplar's lock-step pipeline cycles (a what-if: the same "
                                           "results, another modelled clock)");
    app.add_option("--partials", r.partials, "partial sums of 16-bit convolutions and matrix products (PopTorch's "
                                             "setPartialsType): float (the default) or half, twice the AMP rate; "
                                             "modelled only, the kernels sum in float")
        ->check(CLI::IsMember({"float", "half"}));
    app.add_option("--available-memory-proportion", r.available_memory_proportion,
                   "share of each tile's memory a convolution or matrix product may take for its temporaries "
                   "(PopTorch's setAvailableMemoryProportion, 0 to 1; default 0.6), one for every IPU or one per IPU "
                   "of a replica (0.15,0.25,0.25,0.25 as Graphcore's BERT): each pass's plan is the fastest that fits "
                   "it; modelled only")
        ->delimiter(',')
        ->check(CLI::Range(0.0, 1.0));
    app.add_option("--host", r.host, "the modelled host: tutorial (the tutorials' Python loader), native (tessera's "
                                     "C++ loader) or a JSON file of host_spec's fields");
    auto* ipu = app.add_option("--ipu", r.ipu, "the modelled IPU: gc200 (an IPU-M2000's, 1.33 GHz), bow (a Bow-2000's, "
                                               "1.85 GHz) or c600 (the C600 card's, 1.5 GHz)")
                    ->check(CLI::IsMember({"gc200", "bow", "c600"}));
    app.add_option("--device", r.device, "the modelled IPU from a JSON file of device_spec's fields, every one required "
                                         "(write one from a preset: tessera-train --ipu bow --print-device > my-ipu.json)")
        ->excludes(ipu);
    bool print_device = false;
    auto* print_device_flag = app.add_flag("--print-device", print_device,
                                           "print the modelled IPU (--ipu's or --device's) as the JSON --device reads, "
                                           "and exit");
    auto* stop_after = app.add_option("--stop-after", r.stop_after, "stop after this many host calls (then --checkpoint)");
    if (const std::string twice = programs::repeated_option({argv + 1, std::size_t(argc > 0 ? argc - 1 : 0)});
        !twice.empty()) {
        std::fprintf(stderr, "%s: error: %s is given more than once; give each flag once\n", "tessera-train", twice.c_str());
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }
    if (print_device) {
        for (const CLI::Option* option : app.get_options())
            if (option->count() > 0 && option != print_device_flag && option != ipu && option->get_name() != "--device") {
                std::fprintf(stderr, "tessera-train: error: --print-device prints the modelled IPU and runs nothing, "
                                     "and %s sets a run (give only --ipu or --device with it)\n",
                             option->get_name().c_str());
                return 2;
            }
        try {
            std::fputs(tessera::emulator::to_json(programs::device_of(r)).c_str(), stdout);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "tessera-train: error: %s\n", e.what());
            return 2;
        }
        return 0;
    }
    const bool bert = r.model.rfind("bert-", 0) == 0;
    if (packing->count() > 0 && !r.dry_run) {
        std::fprintf(stderr, "tessera-train: error: --packing %g prices packed sequences in a dry run; training reads "
                             "windows of the corpus, unpacked (add --dry-run)\n", r.packing);
        return 2;
    }
    if (bert && !r.dry_run) {
        std::fprintf(stderr, "tessera-train: error: %s is priced by --dry-run only (tessera-train trains GPTs)\n",
                     r.model.c_str());
        return 2;
    }
    if (programs::onnx_model(r) && !r.dry_run) {
        std::fprintf(stderr, "tessera-train: error: --model %s: an ONNX graph is priced by --dry-run (and tessera-plan); "
                             "tessera-train cannot train it\n", r.model.c_str());
        return 2;
    }
    // An ONNX graph of token ids is priced as BERT is: its defaults, and the text flags the file fixes refused.
    bool onnx_tokens = false;
    if (programs::onnx_model(r)) {
        try {
            onnx_tokens = programs::onnx_reads_tokens(r.model);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "tessera-train: error: --model %s: %s\n", r.model.c_str(), e.what());
            return 2;
        }
    }
    const std::tuple<const CLI::Option*, const char*, const char*> text_only[] = {
        {seq_len, "--seq-len", "window"}, {tokenizer, "--tokenizer", "tokens"}, {dropout, "--dropout", "dropout"},
        {layers_flag, "--layers-per-ipu", "blocks per IPU"}, {head_ipu, "--head-ipu", "head's IPU"}, {packing, "--packing", "sequences per pack"}, {mask_tokens, "--mask-tokens", "predicted positions"}, {serialize, "--serialize-matmul", "vocabulary projection"}};
    if (programs::onnx_model(r))
        for (const auto& [option, flag, what] : text_only)
            if (option->count() > 0) {
                std::fprintf(stderr, "tessera-train: error: %s sets a text model's %s, and an ONNX graph (%s) takes "
                                     "its sizes from its file\n", flag, what, r.model.c_str());
                return 2;
            }
    if (r.model.rfind("gpt-", 0) == 0 || bert || onnx_tokens) {
        // A text model's defaults are its own: bytes of the fortunes as token ids, AdamW, no image I/O;
        // BERT's (a dry run) Wikipedia by shape and LAMB, as Graphcore's BERT trained.
        const bool bert_like = bert || onnx_tokens;
        if (eight_bit->count() > 0 && r.eight_bit_io) {
            std::fprintf(stderr, "tessera-train: error: --eight-bit-io sends 8-bit images, and %s reads token ids "
                                 "(they travel as integers)\n", r.model.c_str());
            return 2;
        }
        if (images->count() > 0) {
            std::fprintf(stderr, "tessera-train: error: --images counts training images, and %s trains on text "
                                 "windows (--seq-len sets their length)\n", r.model.c_str());
            return 2;
        }
        r.eight_bit_io = false;
        if (dataset_flag->count() == 0) dataset = {bert_like ? "wikipedia" : "fortunes"};
        if (optimizer->count() == 0) r.optimizer = bert_like ? "lamb" : "adamw";
        if (dataset.front() == "wikipedia" && tokenizer->count() > 0) {
            std::fprintf(stderr, "tessera-train: error: --tokenizer learns tokens from the fortunes, and --dataset "
                                 "wikipedia is a shape with %s's own vocabulary\n", r.model.c_str());
            return 2;
        }
        if (lr->count() == 0) r.lr = 2e-3;
        if (epochs->count() == 0) r.epochs = 4;
        if (tokenizer->count() == 0) r.tokenizer = dataset.front() == "wikipedia" ? "by-shape" : "bpe:1024";
        // Smaller steps than the images' 16 x 8: 32 windows of 128 tokens an update, four times the updates.
        if (batch_size->count() == 0) r.batch_size = 8;
        if (accumulation->count() == 0) r.gradient_accumulation = 4;
    } else {
        for (const auto& [option, flag, what] : text_only)
            if (option->count() > 0) {
                std::fprintf(stderr, "tessera-train: error: %s sets a text model's %s, and %s reads images\n", flag,
                             what, r.model.c_str());
                return 2;
            }
    }
    if (r.strategy == "single" && ipus->count() > 0 && r.ipus_per_replica != 1) {
        std::fprintf(stderr, "tessera-train: error: --ipus-per-replica %zu needs a staged strategy; 'single' runs "
                             "the whole model on one IPU (use --strategy pipelined, sharded or phased)\n", r.ipus_per_replica);
        return 2;
    }
    // A flag that would change nothing is refused rather than silently ignored.
    if (r.strategy != "pipelined" && schedule->count() > 0) {
        std::fprintf(stderr, "tessera-train: error: --schedule %s orders a pipeline's micro-batches, and '%s' has no "
                             "pipeline (use --strategy pipelined)\n", r.schedule.c_str(), r.strategy.c_str());
        return 2;
    }
    if (r.strategy != "pipelined" && r.dataflow) {
        std::fprintf(stderr, "tessera-train: error: --dataflow runs a pipeline's stages without lock-step cycles, and "
                             "'%s' has no pipeline (use --strategy pipelined)\n", r.strategy.c_str());
        return 2;
    }
    if (chunks->count() > 0 && r.schedule != "interleaved" && r.schedule != "looped-bfs") {
        std::fprintf(stderr, "tessera-train: error: --virtual-stages %zu gives an interleaved pipeline its model chunks "
                             "per IPU, and the schedule is '%s' (use --schedule interleaved or looped-bfs)\n", r.virtual_stages,
                     r.schedule.c_str());
        return 2;
    }
    if (r.stochastic_rounding && r.precision == "32.32") {
        std::fprintf(stderr, "tessera-train: error: --stochastic-rounding rounds 16-bit results, and precision %s keeps "
                             "activations and weights in fp32 (use --precision 16.16 or 16.32)\n", r.precision.c_str());
        return 2;
    }
    if (r.optimizer_sharding && r.replicas < 2) {
        std::fprintf(stderr, "tessera-train: error: --optimizer-sharding splits the optimiser state between replicas, "
                             "and this run has %zu (use --replicas 2 or more)\n", r.replicas);
        return 2;
    }
    if (r.optimizer_sharding && r.instances > 1 && (checkpoint->count() > 0 || resume->count() > 0)) {
        std::fprintf(stderr, "tessera-train: error: checkpoints of an optimiser state sharded over %zu instances are not "
                             "supported (each process holds only its replicas' shards)\n", r.instances);
        return 2;
    }
    if (trace_calls->count() > 0 && trace->count() == 0) {
        std::fprintf(stderr, "tessera-train: error: --trace-calls %zu sets how many calls --trace writes, and no "
                             "--trace names a file\n", r.trace_calls);
        return 2;
    }
    if (r.inference && !r.dry_run) {
        std::fprintf(stderr, "tessera-train: error: --inference models an inference run and needs --dry-run (a "
                             "training run evaluates the test split after each run)\n");
        return 2;
    }
    if (r.inference) {
        // Flags of the backward pass and the optimiser, and the output mode inference replaces: refused
        // rather than accepted and ignored.
        const std::pair<bool, const char*> training_only[] = {
            {r.optimizer_sharding, "--optimizer-sharding"}, {r.optimizer_state_offchip, "--optimizer-state-offchip"},
            {r.recompute, "--recompute"},
            {checkpoints->count() > 0, "--recompute-checkpoints"}, {loss_scaling->count() > 0, "--loss-scaling"},
            {max_grad_norm->count() > 0, "--max-grad-norm"}, {optimizer->count() > 0, "--optimizer"},
            {accumulation->count() > 0, "--gradient-accumulation"}};
        for (const auto& [given, name] : training_only)
            if (given) {
                std::fprintf(stderr, "tessera-train: error: %s has nothing to do in inference, which has no backward "
                                     "pass and no optimiser\n", name);
                return 2;
            }
        if (schedule->count() > 0 && r.schedule != "interleaved" && r.schedule != "looped-bfs") {
            std::fprintf(stderr, "tessera-train: error: --schedule %s orders a training step's forward and backward "
                                 "passes, and inference runs forward passes alone, in one order under gpipe, 1f1b and "
                                 "zero-bubble (interleaved and looped-bfs place model chunks on the IPUs)\n",
                         r.schedule.c_str());
            return 2;
        }
        if (output_mode->count() > 0) {
            std::fprintf(stderr, "tessera-train: error: --output-mode %s has nothing to do in inference, whose calls "
                                 "return every micro-batch's output (PopTorch's inference output mode, all)\n",
                         r.output_mode.c_str());
            return 2;
        }
    }
    try {
        programs::check_output_mode(r);  // a count read whole, from 1 to D × G
    } catch (const programs::usage_error& e) {
        std::fprintf(stderr, "tessera-train: error: %s\n", e.what());
        return 2;
    }
    if (r.dry_run)
        for (const auto* flag : {timeline, checkpoint, resume, stop_after})
            if (flag->count() > 0) {
                std::fprintf(stderr, "tessera-train: error: %s has nothing to do in a dry run, which trains nothing\n",
                             flag->get_name().c_str());
                return 2;
            }
    r.dataset = dataset.front();
    if (dataset.size() > 1) r.data_dir = dataset[1];
    // Several instances: the ranks mpirun started (train_processes.cpp); an error on any rank ends them all.
    std::unique_ptr<programs::processes> ranks;
    const auto fail = [&](int code, const char* kind, const char* what) {
        const std::string who = r.processes.several() ? "rank " + std::to_string(r.processes.rank) + ": " : "";
        std::fprintf(stderr, "tessera-train: %s%s%s\n", who.c_str(), kind, what);
        if (ranks && r.processes.several()) ranks->abort(code);  // the other ranks may be waiting for this one
        return code;
    };
    try {
        const std::string line = namespace_line(r);
        // A dry run models --instances P host processes without starting them.
        if (!r.dry_run && (r.instances > 1 || programs::launched_by_mpirun())) {
            // The rules on replicas and instances first: they need no processes to be broken.
            namespace cfg = tessera::config;
            (void)cfg::make_batching<cfg::dispatched_config<cfg::fp32, cfg::single, cfg::float_io>>(
                {.micro_batch = r.batch_size, .gradient_accumulation = r.gradient_accumulation,
                 .device_iterations = r.device_iterations, .replicas = r.replicas, .instances = r.instances,
                 .input_group = r.input_replica_group});
            ranks = programs::start_processes(r);
            programs::check_processes(r, line);
        }
        if (r.processes.lead()) {
            std::fputs(line.c_str(), stdout);
            std::fflush(stdout);
        }
        if (r.precision == "32.32") return programs::train_fp32(r);
        if (r.precision == "16.32") return programs::train_mixed(r);
        return programs::train_half(r);
    } catch (const programs::usage_error& e) {
        return fail(2, "error: ", e.what());
    } catch (const tessera::config::config_error& e) {
        return fail(2, "error: ", e.what());
    } catch (const std::exception& e) {
        return fail(1, "", e.what());
    }
}
