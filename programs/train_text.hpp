#pragma once
// tessera-train for a language model: --model gpt-<size> on a text corpus (--dataset fortunes):
// its windows of --seq-len + 1 bytes, a session with a per-token loss, an epoch loop with a bar,
// then the held-out split's cross-entropy in bits per byte and its perplexity. Included by
// train_runner.hpp, for the float-I/O configurations (token ids travel as integers).
#include <tessera/tessera.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "any_optimizer.hpp"
#include "train_dry_run.hpp"
#include "train_loop.hpp"
#include "train_report.hpp"
#include "train_request.hpp"
#include "train_settings.hpp"

namespace tessera::programs {

/// Whether --model names a language model (gpt-<size>, or bert-<size> for dry runs).
[[nodiscard]] inline bool text_model(const train_request& r) noexcept {
    return r.model.rfind("gpt-", 0) == 0 || r.model.rfind("bert-", 0) == 0;
}

/// BERT's pre-training corpus by its shape: Krell et al. 2021 (arXiv 2107.02027, Graphcore's packing
/// paper) count "the Wikipedia dataset of over 16M sequences" (of up to 512 tokens): an epoch of a dry
/// run with --dataset wikipedia is that many sequences at any --seq-len, a lower bound.
inline constexpr std::size_t wikipedia_sequences = 16'000'000;

/// The corpus of --dataset: fortunes (Debian's `fortunes`, or the directory given after it).
[[nodiscard]] inline data::text_corpus text_corpus_of(const train_request& r) {
    if (r.dataset != "fortunes")
        throw usage_error("--dataset '" + r.dataset + "' is not a text corpus: " + r.model + " trains on fortunes [DIR]");
    return data::text_corpus(r.data_dir.empty() ? std::string(data::fortunes_default_path) : r.data_dir);
}

/// The documents of `part` (the windows' split: data::text_split's defaults).
[[nodiscard]] inline std::vector<std::string_view> part_documents(const data::text_corpus& corpus, data::text_part part) {
    const data::text_split split{};
    std::vector<std::string_view> documents;
    for (std::size_t i = 0; i < corpus.size(); ++i)
        if (split.in(part, i)) documents.push_back(corpus.document(i));
    return documents;
}

/// The tokenizer of --tokenizer: bytes (a BPE of no merges: each byte a token), or bpe:N, a
/// byte-pair encoding of N tokens learnt on the training part's documents.
[[nodiscard]] inline data::bpe_tokenizer tokenizer_of(const train_request& r, const data::text_corpus& corpus) {
    if (r.tokenizer == "bytes") return data::bpe_tokenizer(std::vector<data::bpe_tokenizer::merge>{});
    const std::string_view spec = r.tokenizer;
    std::size_t n = 0;
    const auto digits = spec.substr(spec.find(':') + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (spec.rfind("bpe:", 0) != 0 || ec != std::errc{} || end != digits.data() + digits.size() || n < 256 ||
        n > data::max_vocabulary_size)
        throw usage_error("--tokenizer '" + r.tokenizer + "': use bytes, or bpe:N with 256 <= N <= 65536 tokens");
    return data::bpe_tokenizer(part_documents(corpus, data::text_part::train), n);
}

/// Spec `s` with --dropout and --serialize-matmul, checked against --seq-len.
[[nodiscard]] inline nn::transformer_spec with_text_flags(const train_request& r, nn::transformer_spec s) {
    s.dropout = s.attention_dropout = r.dropout;
    if (r.seq_len > s.positions)
        throw usage_error("--seq-len " + std::to_string(r.seq_len) + " is longer than " + r.model + "'s " +
                          std::to_string(s.positions) + " positions");
    if (r.serialize_matmul == 0 || s.vocab % r.serialize_matmul != 0)
        throw usage_error("--serialize-matmul " + std::to_string(r.serialize_matmul) + " does not divide " + r.model +
                          "'s vocabulary of " + std::to_string(s.vocab) + " tokens");
    s.decoder_serialization = r.serialize_matmul;
    if (r.mask_tokens > 0 && r.model.rfind("bert-", 0) != 0)
        throw usage_error("--mask-tokens sets the positions BERT's masked-LM head predicts, and " + r.model +
                          " predicts every next token");
    if (r.mask_tokens > r.seq_len)
        throw usage_error("--mask-tokens " + std::to_string(r.mask_tokens) + " is more than the " +
                          std::to_string(r.seq_len) + " positions of --seq-len");
    s.predicted_positions = r.mask_tokens;
    return s;
}

/// The GPT of --model gpt-<size> over `vocabulary` tokens, its positions at least --seq-len, its head
/// tied to its embedding.
[[nodiscard]] inline nn::transformer_spec text_spec_of(const train_request& r, std::size_t vocabulary) {
    nn::transformer_spec s = nn::gpt2_spec(r.model.substr(4));
    s.vocab = vocabulary;
    return with_text_flags(r, s);
}

/// The held-out windows' cross-entropy: nats summed over the labelled tokens, and the bytes those
/// tokens hold.
struct held_out_score {
    double nats = 0;
    std::size_t tokens = 0, bytes = 0;
};

/// Scores the held-out windows, the network run on the host in evaluation mode (no dropout), `batch`
/// windows at a time on `threads` threads.
template <class Net, class Tok>
[[nodiscard]] held_out_score held_out_nats(Net net, const data::token_windows<Tok>& windows, const Tok& tokenizer,
                                           std::size_t batch, std::size_t threads) {
    using P = typename Net::precision;
    const std::size_t T = windows.context();
    nn::token_cross_entropy<P> loss;
    nn::context ctx{nn::mode::eval, threads};
    kernels::thread_pool pool(threads > 1 ? threads - 1 : 0);
    if (threads > 1) ctx.pool = &pool;
    held_out_score score;
    for (std::size_t first = 0; first < windows.size(); first += batch) {
        const std::size_t n = std::min(batch, windows.size() - first);
        std::vector<std::uint16_t> ids;
        std::vector<std::int32_t> labels;
        for (std::size_t i = first; i < first + n; ++i) {
            const auto w = windows.window(i);
            ids.insert(ids.end(), w.begin(), w.end() - 1);
            for (std::size_t t = 1; t <= T; ++t) {
                labels.push_back(w[t]);
                score.bytes += tokenizer.bytes_of(w[t]).size();
            }
        }
        const auto x = nn::token_activation<P>(std::span<const std::uint16_t>(ids), n, T);
        typename Net::state st;
        const auto r = loss(net.forward(x, st, ctx), labels);
        score.nats += r.sum;
        score.tokens += r.labelled;
    }
    return score;
}

/// What a text model's dry run is built from: its sizes (the flags applied) and its dataset's shape.
struct text_dry_run_inputs {
    nn::transformer_spec spec;
    dataset_shape shape;
    bool bert = false;  ///< bert-<size> (else gpt-<size>)
};

/// The inputs of request r's text dry run: gpt-<size> on the fortunes (the corpus read and, with a
/// BPE, its tokenizer learnt, to count its windows and its vocabulary) or on wikipedia (by shape,
/// GPT-2's own vocabulary; --packing: its sequences in packs); bert-<size> on wikipedia (by shape).
[[nodiscard]] inline text_dry_run_inputs text_inputs_of(const train_request& r) {
    const bool bert = r.model.rfind("bert-", 0) == 0;
    nn::transformer_spec spec = bert ? nn::bert_spec(r.model.substr(5)) : nn::gpt2_spec(r.model.substr(4));
    if (r.dataset != "fortunes") spec = with_text_flags(r, spec);  // the fortunes': their tokenizer's vocabulary
    dataset_shape shape{1, 1, r.seq_len, wikipedia_sequences, 0, spec.vocab, true};
    if (r.packing != 1 && r.dataset != "wikipedia")
        throw usage_error("--packing counts the sequences of --dataset wikipedia in packs, and " + r.dataset +
                          " is read as windows of --seq-len tokens");
    if (r.dataset == "fortunes") {
        if (bert) throw usage_error("--dataset fortunes: " + r.model + " is priced on --dataset wikipedia (by shape)");
        const data::text_corpus corpus = text_corpus_of(r);
        const data::bpe_tokenizer tokenizer = tokenizer_of(r, corpus);
        spec = text_spec_of(r, tokenizer.vocabulary_size());
        shape.images = data::token_windows<data::bpe_tokenizer>(corpus, data::text_part::train, r.seq_len, {}, tokenizer).size();
        shape.classes = spec.vocab;
    } else if (r.dataset == "wikipedia" && r.packing != 1) {  // the sequences in packs of --seq-len tokens
        shape.sequences_per_sample = r.packing;
        shape.images = static_cast<std::size_t>(std::ceil(double(wikipedia_sequences) / r.packing));
    } else if (r.dataset != "wikipedia") {
        throw usage_error("--dataset '" + r.dataset + "' is not a text corpus: a dry run of " + r.model + " takes " +
                          (bert ? "wikipedia (by shape)" : "fortunes [DIR] or wikipedia (by shape)"));
    }
    return {spec, shape, bert};
}

/// Calls f(net, shape, loss) with the network of a text model's dry run under configuration C, built
/// from shapes alone (no weights), the shape of its dataset and its loss (text_inputs_of).
/// text_dry_run prints it; tessera-sweep --published holds it against published figures.
template <class C, class F>
decltype(auto) with_text_dry_run(const train_request& r, F&& f) {
    using P = cfg::precision<typename C::precision::data_type, typename C::precision::weight_type>;
    const text_dry_run_inputs in = text_inputs_of(r);
    if (in.bert) return f(nn::make_bert<P>(in.spec, nn::shapes_only), in.shape, exec::token_loss<P>{});
    return f(nn::make_gpt2<P>(in.spec, nn::shapes_only), in.shape, exec::token_loss<P>{});
}

/// The dry run of a text model under configuration C, printed.
template <class C>
int text_dry_run(const train_request& r) {
    return with_text_dry_run<C>(r, [&](const auto& net, const dataset_shape& shape, auto loss) {
        return report_dry_run<C>(r, net, shape, loss);
    });
}

/// Trains --model gpt-<size> under configuration C on the corpus's training windows, then scores the
/// held-out windows: per epoch its training loss (nats per token), then bits per byte and perplexity.
template <class C>
int train_text(const train_request& r) {
    using P = cfg::precision<typename C::precision::data_type, typename C::precision::weight_type>;
    if (r.dry_run) return text_dry_run<C>(r);
    if (r.model.rfind("bert-", 0) == 0)
        throw usage_error(r.model + " is priced by --dry-run only: tessera-train trains GPTs (--model gpt-<size>)");
    if (r.instances > 1) throw usage_error("--instances " + std::to_string(r.instances) + ": " + r.model +
                                           " trains in one process so far");
    for (const auto* flag : {&r.metrics_json, &r.timeline, &r.checkpoint, &r.resume})
        if (!flag->empty())
            throw usage_error(std::string(flag == &r.metrics_json ? "--metrics-json" : flag == &r.timeline ? "--timeline"
                                          : flag == &r.checkpoint  ? "--checkpoint" : "--resume") +
                              ": not yet for " + r.model);
    if (r.stop_after > 0)
        throw usage_error("--stop-after " + std::to_string(r.stop_after) + " stops a run to resume it from --checkpoint, "
                          "and " + r.model + " has no checkpoints yet");
    const data::text_corpus corpus = text_corpus_of(r);
    const auto learning = std::chrono::steady_clock::now();
    const data::bpe_tokenizer tokenizer = tokenizer_of(r, corpus);
    const double learnt_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - learning).count();
    const nn::transformer_spec spec = text_spec_of(r, tokenizer.vocabulary_size());  // refuses --seq-len first
    using windows = data::token_windows<data::bpe_tokenizer>;
    const windows train_part(corpus, data::text_part::train, r.seq_len, {}, tokenizer);
    const windows held_out(corpus, data::text_part::held_out, r.seq_len, {}, tokenizer);
    const config::options counts = counts_of(r);
    const config::batching b = config::make_batching<C>(counts);
    auto net = nn::make_gpt2<P>(spec);
    data::loader_options loading{.shuffle = true, .seed = r.seed, .num_workers = r.workers,
                                 .mode = r.async_dataloader ? data::loader_mode::async : data::loader_mode::sync};
    b.check_fits_dataset(train_part.size());
    exec::session_options settings = session_options_of(r, net, b, loading);
    settings.progress = &std::cout;
    settings.dropout_seed = r.seed;
    const any_optimizer optimizer = optimizer_of(r);
    auto session = exec::training_model<C>(net, optimizer, {1, 1, r.seq_len, 1}, counts, settings, exec::token_loss<P>{});
    std::printf("%s, the LM head tied to wte\n", compiled_text<C>(session, settings, net, optimizer).c_str());
    std::printf("corpus: %s, %zu training windows of %zu + 1 tokens (%zu documents), %zu held out (%zu documents)\n",
                corpus.name().c_str(), train_part.size(), r.seq_len, train_part.documents(), held_out.size(),
                held_out.documents());
    if (tokenizer.merges().empty()) {
        std::printf("tokenizer: bytes (256 tokens)\n");
    } else {
        std::size_t bytes = 0;
        for (const std::string_view d : part_documents(corpus, data::text_part::train)) bytes += d.size();
        std::printf("tokenizer: BPE of %zu tokens learnt on the training part in %.1f s, %.2f bytes per token\n",
                    tokenizer.vocabulary_size(), learnt_s, double(bytes) / double(train_part.tokens().size()));
    }
    data::data_loader<windows> loader(train_part, b, loading);
    const exec::output_selection outputs = session.outputs();
    const std::size_t calls = loader.batches_per_epoch(), updates = calls * r.epochs * r.device_iterations;
    const optim::cosine_lr schedule{.base = r.lr, .total = std::max<std::size_t>(updates, 2), .min = 0.0,
                                    .warmup = std::min<std::size_t>(updates / 20, updates - 1)};
    const std::size_t micro_batches = r.device_iterations * r.gradient_accumulation;
    std::size_t step = 0, calls_run = 0;
    double trained_tokens = 0, wall_seconds = 0, modelled_seconds = 0;  // over every epoch, both clocks
    training_trace trace(r, session);  // --trace
    for (std::size_t epoch = 1; epoch <= r.epochs; ++epoch) {
        char name[32];
        std::snprintf(name, sizeof name, "[Epoch %02zu]", epoch);
        report::progress_bar bar(std::cout, name, calls);
        loader.seek(epoch - 1);
        double loss_sum = 0;
        std::size_t ran = 0;
        const auto started = std::chrono::steady_clock::now();
        const double modelled_start = session.host().now();
        for (auto& batch : loader) {
            session.set_learning_rate(schedule(step));
            const auto result = session(exec::token_feed<P>(batch, b));
            step += r.device_iterations;
            loss_sum += call_figures(result, outputs, micro_batches)[0];
            trace.add(session, result);
            ++ran, ++calls_run;
            bar.set_postfix("loss", loss_sum / double(ran), 3);
            bar.update();
        }
        bar.close();
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        const double tokens = double(ran * b.combined_batch() * r.seq_len);
        trained_tokens += tokens, wall_seconds += wall, modelled_seconds += session.host().now() - modelled_start;
        std::printf("[Epoch %02zu] loss: %.3f (nats per token), %.0f tokens/s\n", epoch,
                    loss_sum / double(std::max<std::size_t>(ran, 1)), wall > 0 ? tokens / wall : 0.0);
        std::fflush(stdout);
    }
    trace.finish(calls_run);
    const held_out_score score = held_out_nats(session.model().network(), held_out, tokenizer, 16,
                                               std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 2));
    // Bits per byte compare across tokenizers: the nats of every scored token over the bytes they hold.
    const double per_byte = score.bytes == 0 ? 0.0 : score.nats / double(score.bytes);
    std::printf("held-out: %.4f bits per byte, perplexity %.3f per byte (%zu windows, %zu tokens, %zu bytes scored)\n",
                per_byte / std::log(2.0), std::exp(per_byte), held_out.size(), score.tokens, score.bytes);
    print_speed_and_memory("tokens", trained_tokens, wall_seconds, modelled_seconds, b, session.plan());
    return 0;
}

}  // namespace tessera::programs
