// tessera-plan: the fastest configurations of a model that fit N IPUs and a host, found by searching
// with the modelled clock (tessera-train's dry run), each printed as its tessera-train command line.
//   tessera-plan --model resnet50 --dataset imagenet --ipus 16 --host native [--json F] [--csv F] [--svg F]
// Flags that shape the model's training (--optimizer, --images) are the plans' own; limits narrow
// the search (--precisions, --strategies, --max-batch-size, --max-stages, --max-samples-per-update).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plan_search.hpp"
#include "plan_transformer.hpp"

namespace {

namespace programs = tessera::programs;

// The tessera-train command line of a request (every flag that differs from a run's defaults, and the
// ones a reader needs to see).
std::string command_of(const programs::train_request& r) {
    const bool text = programs::text_model(r);  // priced by --dry-run only
    std::string c = std::string("tessera-train") + (text ? " --dry-run" : "") + " --model " + r.model + " --dataset " + r.dataset;
    if (r.images) c += " --images " + std::to_string(r.images);
    if (text) {
        c += " --seq-len " + std::to_string(r.seq_len);
        char packing[32];
        std::snprintf(packing, sizeof packing, "%g", r.packing);
        if (r.packing != 1) c += std::string(" --packing ") + packing;
        if (r.mask_tokens) c += " --mask-tokens " + std::to_string(r.mask_tokens);
    }
    c += " --precision " + r.precision + " --strategy " + r.strategy;
    if (r.partials != "float") c += " --partials " + r.partials;
    if (r.available_memory_proportion != std::vector{tessera::emulator::default_available_memory_proportion}) {
        c += " --available-memory-proportion ";
        for (std::size_t i = 0; i < r.available_memory_proportion.size(); ++i) {
            char amp[32];
            std::snprintf(amp, sizeof amp, "%s%g", i == 0 ? "" : ",", r.available_memory_proportion[i]);
            c += amp;
        }
    }
    if (r.strategy == "pipelined") c += " --schedule " + r.schedule;
    if (programs::runs_chunks(r)) c += " --virtual-stages " + std::to_string(r.virtual_stages);
    if (r.strategy != "single") c += " --ipus-per-replica " + std::to_string(r.ipus_per_replica);
    for (std::size_t i = 0; i < r.layers_per_ipu.size(); ++i)
        c += (i == 0 ? " --layers-per-ipu " : ",") + std::to_string(r.layers_per_ipu[i]);
    if (r.recompute) c += " --recompute";
    for (std::size_t i = 0; i < r.recompute_checkpoints.size(); ++i)
        c += (i == 0 ? " --recompute-checkpoints " : ",") + r.recompute_checkpoints[i];
    if (r.optimizer_sharding) c += " --optimizer-sharding";
    if (r.optimizer_state_offchip) c += " --optimizer-state-offchip";
    if (r.serialize_matmul != 1) c += " --serialize-matmul " + std::to_string(r.serialize_matmul);
    c += " --batch-size " + std::to_string(r.batch_size) + " --gradient-accumulation " +
         std::to_string(r.gradient_accumulation) + " --device-iterations " + std::to_string(r.device_iterations) +
         " --replicas " + std::to_string(r.replicas);
    if (!text) c += r.eight_bit_io ? " --eight-bit-io" : " --no-eight-bit-io";
    c += r.async_dataloader ? " --async-dataloader" : " --no-async-dataloader";
    c += " --workers " + std::to_string(r.workers) + " --host " + r.host + " --optimizer " + r.optimizer;
    if (!r.device.empty()) c += " --device " + r.device;
    else if (r.ipu != "gc200") c += " --ipu " + r.ipu;
    return c;
}

// The samples of an epoch a plan leaves out (drop_last), and their share of the epoch.
std::size_t left_out(const programs::plan_candidate& c) { return c.epoch_samples - std::min(c.images, c.epoch_samples); }
double left_out_share(const programs::plan_candidate& c) {
    return c.epoch_samples ? double(left_out(c)) / double(c.epoch_samples) : 0.0;
}

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> v;
    std::size_t at = 0;
    while (at <= s.size()) {
        const auto comma = s.find(',', at);
        v.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return v;
}

void write_file(const std::string& path, const auto& write) {
    if (path.empty()) return;
    std::ofstream out(path);
    if (!out) throw std::runtime_error("cannot write " + path);
    write(out);
}

// Epoch seconds against the fullest IPU's memory, every refined plan a dot, the plans printed ringed.
void write_svg(std::ostream& out, const std::vector<programs::plan_candidate>& all, std::size_t top,
               const std::string& title) {
    const double w = 720, h = 440, left = 70, right = 20, topm = 40, bottom = 50;
    tessera::report::svg_canvas svg(w, h);
    svg.text(10, 22, title, 13);
    double tmax = 0, mmax = 0;
    for (const auto& c : all) tmax = std::max(tmax, c.epoch_seconds), mmax = std::max(mmax, double(c.max_ipu_memory_bytes));
    if (tmax <= 0 || mmax <= 0) tmax = mmax = 1;
    const auto x = [&](double bytes) { return left + bytes / mmax * (w - left - right); };
    const auto y = [&](double s) { return h - bottom - s / tmax * (h - topm - bottom); };
    svg.line(left, h - bottom, w - right, h - bottom, "#000");
    svg.line(left, topm, left, h - bottom, "#000");
    svg.text((left + w - right) / 2, h - 12, "largest IPU memory (MiB), up to " + programs::mib(std::size_t(mmax)), 11, "middle");
    svg.text(14, topm - 8, "modelled epoch (s), up to " + std::to_string(int(tmax + 0.5)), 11);
    for (std::size_t i = all.size(); i-- > 0;) {
        const auto& c = all[i];
        const bool chosen = i < top;
        const double px = x(double(c.max_ipu_memory_bytes)), py = y(c.epoch_seconds), r = chosen ? 5 : 2.5;
        svg.rect(px - r, py - r, 2 * r, 2 * r, chosen ? "#d62728" : "#4c72b0",
                 (chosen ? "plan " + std::to_string(i + 1) + ": " : std::string()) + command_of(c.request));
    }
    svg.text(w - right, topm - 8, "red: the plans printed; blue: the other configurations searched", 10, "end");
    svg.write(out);
}

}  // namespace

int main(int argc, char** argv) {
    programs::plan_request q;
    q.base.host = "tutorial";
    std::string precisions = "16.16,16.32,32.32", strategies = "single,sharded,pipelined,phased", schedules = "1f1b,gpipe,interleaved";
    std::string json_path, csv_path, svg_path;
    CLI::App app{"tessera-plan: the fastest configurations that fit, searched on the modelled clock"};
    app.add_option("--model", q.base.model, "resnet20|32|44|56|110, resnet18|34|50|101|152, bert-tiny|base|large or "
                                            "gpt-tiny|small|medium|large|xl, or FILE.onnx (an ONNX graph)")
        ->check(programs::model_names({"resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "resnet18", "resnet34",
                               "resnet50", "resnet101", "resnet152", "bert-tiny", "bert-base", "bert-large", "gpt-tiny",
                               "gpt-small", "gpt-medium", "gpt-large", "gpt-xl"}));
    auto* dataset = app.add_option("--dataset", q.base.dataset,
                                   "fashion-mnist, cifar10, imagenet or synthetic (by shape); BERT and GPT: wikipedia (by "
                                   "shape, the default)")
                        ->check(CLI::IsMember({"fashion-mnist", "cifar10", "imagenet", "synthetic", "wikipedia"}));
    auto* images = app.add_option("--images", q.base.images, "training images per epoch (default: the dataset's)");
    auto* seq_len = app.add_option("--seq-len", q.base.seq_len, "BERT and GPT: tokens a sequence holds (128 by default)")
                        ->check(CLI::PositiveNumber);
    auto* packing = app.add_option("--packing", q.base.packing, "BERT and GPT: sequences per pack of --seq-len tokens, on "
                                                               "average (1: none)")
                        ->check(CLI::Range(1.0, 64.0));
    auto* mask_tokens = app.add_option("--mask-tokens", q.base.mask_tokens,
                                       "BERT: the positions its head predicts, the first of each sequence (0: all)");
    app.add_option("--ipus", q.ipus, "IPUs of the system")->check(CLI::PositiveNumber);
    app.add_option("--host", q.base.host, "tutorial, native or a host_spec JSON file");
    auto* ipu = app.add_option("--ipu", q.base.ipu, "the modelled IPU: gc200, bow or c600")
                    ->check(CLI::IsMember({"gc200", "bow", "c600"}));
    app.add_option("--device", q.base.device, "the modelled IPU from a device_spec JSON file (tessera-train "
                                              "--print-device writes one)")
        ->excludes(ipu);
    app.add_option("--partials", q.base.partials, "partial sums of 16-bit contractions: float (PopTorch's default) or half")
        ->check(CLI::IsMember({"float", "half"}));
    app.add_option("--available-memory-proportion", q.base.available_memory_proportion,
                   "share of each tile's memory a contraction's temporaries may take (0 to 1; default 0.6), one for "
                   "every IPU")
        ->expected(1)
        ->check(CLI::Range(0.0, 1.0));
    auto* optimizer = app.add_option("--optimizer", q.base.optimizer, "sgd, adamw or lamb (its state takes memory; BERT: "
                                                                      "lamb by default, as Graphcore's BERT trained)")
                          ->check(CLI::IsMember({"sgd", "adamw", "lamb"}));
    auto* precisions_flag = app.add_option("--precisions", precisions, "allowed precisions, e.g. 16.16,16.32 (BERT: 16.16 "
                                                                       "by default)");
    app.add_option("--strategies", strategies, "allowed strategies, e.g. pipelined,single");
    app.add_option("--schedules", schedules, "allowed pipeline schedules, e.g. 1f1b (interleaved: 2 model chunks per IPU; looped-bfs, "
                   "zero-bubble and zero-bubble-h2 on request)");
    app.add_option("--max-batch-size", q.max_batch_size, "largest micro-batch tried")->check(CLI::PositiveNumber);
    app.add_option("--max-stages", q.max_stages, "most stages per replica tried")->check(CLI::PositiveNumber);
    app.add_option("--max-samples-per-update", q.max_samples_per_update, "micro-batch x G x replicas at most");
    double max_left_out_percent = 100.0 * q.max_left_out;
    app.add_option("--max-left-out", max_left_out_percent,
                   "percent of an epoch's samples a plan may leave out (whole combined batches are trained, as "
                   "tessera-train trains: drop_last; default 1)")
        ->check(CLI::Range(0.0, 100.0));
    app.add_option("--top", q.top, "plans printed")->check(CLI::PositiveNumber);
    app.add_option("--refine", q.refine, "device candidates per precision whose host settings are searched")
        ->check(CLI::PositiveNumber);
    app.add_option("--json", json_path, "write the plans as JSON");
    app.add_option("--csv", csv_path, "write every refined configuration as CSV");
    app.add_option("--svg", svg_path, "draw epoch time against memory, the plans marked");
    std::string trace_path;
    app.add_option("--trace-top", trace_path, "write the top plan's dry run as a Trace Event Format file (Perfetto, "
                                              "chrome://tracing, speedscope), as its command's --trace would");
    if (const std::string twice = programs::repeated_option({argv + 1, std::size_t(argc > 0 ? argc - 1 : 0)});
        !twice.empty()) {
        std::fprintf(stderr, "%s: error: %s is given more than once; give each flag once\n", "tessera-plan", twice.c_str());
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }
    q.max_left_out = max_left_out_percent / 100.0;
    try {
        const bool text = programs::text_model(q.base);
        if (text) {  // Wikipedia by shape, LAMB (BERT) or AdamW (GPT), 16.16; tokens travel as integers
            if (dataset->count() == 0) q.base.dataset = "wikipedia";
            if (optimizer->count() == 0) q.base.optimizer = q.base.model.rfind("bert-", 0) == 0 ? "lamb" : "adamw";
            if (precisions_flag->count() == 0) precisions = "16.16";
            q.base.eight_bit_io = false, q.base.tokenizer = "by-shape", q.base.dry_run = true;
            if (q.base.dataset != "wikipedia")
                throw programs::usage_error("--dataset " + q.base.dataset + " holds images, and " + q.base.model +
                                            " is planned on wikipedia (by shape)");
            if (images->count() > 0)
                throw programs::usage_error("--images counts training images, and " + q.base.model +
                                            " trains on Wikipedia's sequences (--seq-len sets their length)");
        } else {
            for (const auto& [option, flag] : {std::pair{seq_len, "--seq-len"}, std::pair{packing, "--packing"},
                                               std::pair{mask_tokens, "--mask-tokens"}})
                if (option->count() > 0)
                    throw programs::usage_error(std::string(flag) + " shapes BERT's sequences, and " + q.base.model +
                                                " reads images");
            if (q.base.dataset == "wikipedia")
                throw programs::usage_error("--dataset wikipedia holds text, and " + q.base.model + " reads images");
        }
        q.precisions = split_list(precisions), q.strategies = split_list(strategies), q.schedules = split_list(schedules);
        for (const auto& p : q.precisions)
            if (p != "32.32" && p != "16.32" && p != "16.16")
                throw programs::usage_error("--precisions: '" + p + "' is not one of 32.32, 16.32, 16.16");
        for (const auto& s : q.strategies)
            if (s != "single" && s != "sharded" && s != "pipelined" && s != "phased")
                throw programs::usage_error("--strategies: '" + s + "' is not one of single, sharded, pipelined, phased");
        for (const auto& s : q.schedules)
            if (s != "1f1b" && s != "gpipe" && s != "interleaved" && s != "looped-bfs" && s != "zero-bubble" &&
                s != "zero-bubble-h2")
                throw programs::usage_error("--schedules: '" + s + "' is not one of 1f1b, gpipe, interleaved, looped-bfs, "
                                            "zero-bubble, zero-bubble-h2");
        const std::optional<programs::text_dry_run_inputs> text_inputs =
            text ? std::optional(programs::text_inputs_of(q.base)) : std::nullopt;
        const programs::dataset_shape shape = text ? text_inputs->shape : programs::shape_of_dataset(q.base);
        (void)programs::host_of(q.base);  // a bad host file: refused before searching
        (void)programs::device_of(q.base);  // and a bad device file

        const std::size_t total =
            (text ? programs::transformer_candidates(q, text_inputs->spec.layers)
                  : programs::device_candidates(q)) *
            q.precisions.size();
        const auto start = std::chrono::steady_clock::now();
        programs::plan_outcome out;
        {
            tessera::report::progress_bar bar(std::cout, "Searching", total);
            const std::function<void()> tick = [&] { bar.update(); };
            for (const auto& p : q.precisions) {
                programs::plan_request qp = q;
                qp.base.precision = p;
                if (text) {
                    if (p == "32.32") programs::plan_text_fp32(qp, out, tick);
                    if (p == "16.32") programs::plan_text_mixed(qp, out, tick);
                    if (p == "16.16") programs::plan_text_half(qp, out, tick);
                    continue;
                }
                if (p == "32.32") programs::plan_fp32(qp, shape, out, tick);
                if (p == "16.32") programs::plan_mixed(qp, shape, out, tick);
                if (p == "16.16") programs::plan_half(qp, shape, out, tick);
            }
        }
        const double searched = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // The judged plans first (their figures are tessera-train's), then the others, each fastest
        // first by images/s, which counts only the images an epoch trains on (drop_last; a plan leaves
        // out at most --max-left-out of them): one order for the table, the JSON, the CSV's ranks, the
        // SVG's marks and why the rest lost.
        std::sort(out.plans.begin(), out.plans.end(), [](const auto& a, const auto& b) {
            if (a.judged != b.judged) return a.judged;
            return a.images_per_second > b.images_per_second;
        });
        // The plans printed: the best judged ones (dry-run again through tessera-train's path, so their
        // figures are its figures).
        std::vector<programs::plan_candidate> plans;
        for (const auto& c : out.plans)
            if (c.judged && plans.size() < q.top) plans.push_back(c);
        const double per_sample = shape.sequences_per_sample;  // packed sequences: several a sample
        if (text)
            std::printf("tessera-plan: %s on %s (%.0f sequences of %zu tokens%s), %zu IPUs, host %s\n", q.base.model.c_str(),
                        q.base.dataset.c_str(), double(programs::epoch_images(q.base, shape)) * per_sample, shape.width,
                        per_sample != 1 ? (", " + std::to_string(programs::epoch_images(q.base, shape)) + " packs").c_str() : "",
                        q.ipus, q.base.host.c_str());
        else
            std::printf("tessera-plan: %s on %s (%zu images of %zu x %zu x %zu), %zu IPUs, host %s\n", q.base.model.c_str(),
                        q.base.dataset.c_str(), programs::epoch_images(q.base, shape), shape.channels, shape.height,
                        shape.width, q.ipus, q.base.host.c_str());
        std::size_t refused = 0;
        for (const auto& [why, n] : out.refused) refused += n;
        std::printf("searched %zu configurations in %.1f s: %zu fit, %zu refused\n", out.considered, searched,
                    out.plans.size() + out.device.size(), refused);
        if (plans.empty()) {
            std::printf("no configuration fits: ");
            for (const auto& [why, n] : out.refused) std::printf("%zu %s; ", n, why.c_str());
            std::printf("\n");
            return 1;
        }
        std::printf("%4s %10s %10s %9s %8s %12s %10s %7s  %s\n", "rank", "epoch s", text ? "seq/s" : "images/s",
                    text ? "sequences" : "images", "left out", "IPU memory", "bottleneck", "bubble", "command");
        for (std::size_t i = 0; i < plans.size(); ++i) {
            const auto& c = plans[i];
            std::printf("%4zu %10.2f %10.0f %9.0f %7.2f%% %12s %10s %6.1f%%  %s\n", i + 1, c.epoch_seconds,
                        c.images_per_second * per_sample, double(c.images) * per_sample, 100.0 * left_out_share(c),
                        programs::mib(c.max_ipu_memory_bytes).c_str(), c.bottleneck.c_str(), 100.0 * c.bubble_fraction,
                        command_of(c.request).c_str());
        }
        // Why the rest lost: refused (rules, memory) or slower, by what limits them.
        std::map<std::string, std::size_t> lost = out.refused;
        for (std::size_t i = plans.size(); i < out.plans.size(); ++i) {
            const auto& b = out.plans[i].bottleneck;
            ++lost[b == "host" ? "host-bound" : b == "bubble" ? "bubble" : b == "links" ? "link-bound" : "slower: " + b];
        }
        if (!out.device.empty()) lost["slower IPUs (host settings not searched)"] += out.device.size();
        std::printf("why the rest lost:");
        for (const auto& [why, n] : lost) std::printf(" %zu %s;", n, why.c_str());
        std::printf("\n");

        if (!trace_path.empty()) {  // the top plan's command with --trace
            programs::train_request top = plans.front().request;
            top.trace = trace_path, top.dry_run = true;
            if (top.precision == "32.32") programs::trace_plan_fp32(top, shape);
            if (top.precision == "16.32") programs::trace_plan_mixed(top, shape);
            if (top.precision == "16.16") programs::trace_plan_half(top, shape);
        }
        write_file(json_path, [&](std::ostream& o) {
            tessera::report::json_writer j(o);
            j.begin_object();
            j.key("plans").begin_array();
            for (std::size_t i = 0; i < plans.size(); ++i) {
                const auto& c = plans[i];
                j.begin_object().member("rank", i + 1).member("command", command_of(c.request));
                j.member("modelled_epoch_seconds", c.epoch_seconds).member("images_per_second", c.images_per_second);
                j.member("images_per_epoch", c.images);
                // in images_per_epoch's unit (a text model's: sequences_per_epoch's)
                j.member("left_out_per_epoch", std::llround(double(left_out(c)) * per_sample));
                j.member("max_ipu_memory_bytes", c.max_ipu_memory_bytes).member("bottleneck", c.bottleneck);
                j.member("bubble_fraction", c.bubble_fraction).member("precision", c.request.precision);
                j.member("strategy", c.request.strategy).member("schedule", c.request.schedule);
                j.member("ipus_per_replica", programs::ipus_per_replica_of(c.request));
                j.member("replicas", c.request.replicas);
                j.member("batch_size", c.request.batch_size).member("gradient_accumulation", c.request.gradient_accumulation);
                j.member("device_iterations", c.request.device_iterations).member("eight_bit_io", c.request.eight_bit_io);
                j.member("async_dataloader", c.request.async_dataloader).member("workers", c.request.workers);
                j.member("recompute", c.request.recompute);
                j.member("recompute_checkpoints", !c.request.recompute_checkpoints.empty());
                j.member("optimizer_sharding", c.request.optimizer_sharding);
                if (text) {
                    j.member("sequences_per_second", c.images_per_second * per_sample);
                    j.member("sequences_per_epoch", std::llround(double(c.images) * per_sample));
                    j.key("layers_per_ipu").begin_array();
                    for (const std::size_t n : c.request.layers_per_ipu) j.value(n);
                    j.end_array();
                    j.member("optimizer_state_offchip", c.request.optimizer_state_offchip);
                    j.member("serialize_matmul", c.request.serialize_matmul);
                }
                j.end_object();
            }
            j.end_array();
            j.member("considered", out.considered).member("search_seconds", searched);
            j.key("refused").begin_object();
            for (const auto& [why, n] : out.refused) j.member(why, n);
            j.end_object();
            j.key("lost").begin_object();
            for (const auto& [why, n] : lost) j.member(why, n);
            j.end_object();
            j.end_object();
            o << '\n';
        });
        write_file(csv_path, [&](std::ostream& o) {
            o << "rank,epoch_seconds,images_per_second,images_per_epoch,left_out_per_epoch,max_ipu_memory_bytes,bottleneck,"
                 "command\n";
            for (std::size_t i = 0; i < out.plans.size(); ++i) {
                const auto& c = out.plans[i];
                o << i + 1 << ',' << c.epoch_seconds << ',' << c.images_per_second << ',' << c.images << ',' << left_out(c)
                  << ',' << c.max_ipu_memory_bytes << ','
                  << c.bottleneck << ",\"" << command_of(c.request) << "\"\n";
            }
        });
        write_file(svg_path, [&](std::ostream& o) {
            write_svg(o, out.plans, std::min(q.top, out.plans.size()),
                      "tessera-plan: " + q.base.model + " on " + q.base.dataset + ", " + std::to_string(q.ipus) + " IPUs");
        });
        return 0;
    } catch (const programs::usage_error& e) {
        std::fprintf(stderr, "tessera-plan: error: %s\n", e.what());
        return 2;
    } catch (const tessera::config::config_error& e) {
        std::fprintf(stderr, "tessera-plan: error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera-plan: %s\n", e.what());
        return 1;
    }
}
