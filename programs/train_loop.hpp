#pragma once
// tessera-train's epoch loop: a compiled session and its loader, epoch by epoch, with a bar per
// epoch, the learning-rate schedule, checkpoints and --stop-after. It works on any configuration of
// one network (exec::basic_session<Model>), so it is compiled once per network and I/O type, not
// once per configuration.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "train_request.hpp"
#include "train_trace.hpp"

namespace tessera::programs {

/// The metrics of one epoch: loss and accuracy over every replica (and rank); wall time from asking
/// for the epoch's first batch to its last result, loading included.
struct epoch_metrics {
    double loss = 0, accuracy = 0, wall_seconds = 0, modelled_seconds = 0, images_per_second = 0,
           modelled_images_per_second = 0;
};

/// Adds the per-rank values of a multi-process run (in rank order; nothing to do in one process).
inline void sum_over_processes(const process_group& g, std::span<double> values) {
    if (g.several()) g.sum(values);
}

/// The mean loss of one call's returned losses as the output mode returned them (sum: the total
/// over the call's `micro_batches` micro-batches of each replica).
[[nodiscard]] inline double call_loss(std::span<const float> losses, const exec::output_selection& outputs,
                                      std::size_t micro_batches) noexcept {
    double l = 0;
    for (float v : losses) l += v;
    return outputs.kind == config::output_kind::sum ? l / double(micro_batches)
                                                    : l / double(std::max<std::size_t>(losses.size(), 1));
}

/// One call's figures over all of its replicas: {mean loss, correct, scored samples}.
template <class Tensor>
[[nodiscard]] std::array<double, 3> call_figures(const exec::run_result<Tensor>& result,
                                                 const exec::output_selection& outputs, std::size_t micro_batches) {
    std::array<double, 3> f{0, 0, 0};
    for (const auto& replica : result.losses) f[0] += call_loss(replica, outputs, micro_batches);
    f[0] /= double(std::max<std::size_t>(result.losses.size(), 1));
    for (const auto& replica : result.scores)
        for (const auto& s : replica) f[1] += double(s.correct), f[2] += double(s.samples);
    return f;
}

/// What train_epochs did: each epoch's metrics, whether --stop-after ended it, and the last call's
/// result when --timeline asks for it.
template <class Tensor>
struct training_history {
    std::vector<epoch_metrics> epochs;
    bool stopped = false;
    std::optional<exec::run_result<Tensor>> last;
};

/// Trains `session` on `loader` for the request's epochs (from a checkpoint when --resume names one):
/// each call's micro-batches fed by exec::batch_feed (8-bit batches normalised with `device_norm`
/// on the device), the learning rate following a cosine schedule with warm-up, a bar per epoch on
/// rank 0, a checkpoint (`fingerprint`: what it must be resumed with) at the end of each epoch.
template <class Model, class Loader>
[[nodiscard]] training_history<typename Model::tensor> train_epochs(const train_request& r,
                                                                    exec::basic_session<Model>& session, Loader& loader,
                                                                    const data::normalization& device_norm,
                                                                    const std::string& fingerprint) {
    using precision = typename Model::precision;
    using io = typename Loader::value_type;
    const process_group& group = r.processes;
    const bool lead = group.lead();  // rank 0 alone prints bars and lines and writes files
    std::ostream quiet(nullptr);
    std::ostream& console = lead ? std::cout : quiet;
    const config::batching& b = session.batching();
    const exec::output_selection outputs = session.outputs();
    const std::size_t calls = loader.batches_per_epoch();
    const std::size_t updates = calls * r.epochs * r.device_iterations;
    const optim::cosine_lr schedule{.base = r.lr, .total = std::max<std::size_t>(updates, 2), .min = 0.0,
                                    .warmup = std::min<std::size_t>(updates / 20, updates - 1)};
    const std::size_t micro_batches = r.device_iterations * r.gradient_accumulation;  // per replica and call
    training_history<typename Model::tensor> history;
    std::size_t step = 0, first_epoch = 1, skip = 0, calls_run = 0;
    training_trace trace(r, session);  // --trace
    if (!r.resume.empty()) {
        const auto at = exec::load_session(r.resume, session, fingerprint);
        // Inside an epoch, P processes have each read their part of its order; another P reads others.
        if (at.calls > 0 && at.instances != r.instances)
            throw usage_error("--resume: " + r.resume + " stopped " + std::to_string(at.calls) + " calls into epoch " +
                              std::to_string(at.epoch + 1) + " of a run with " + std::to_string(at.instances) +
                              " instances, and this run has " + std::to_string(r.instances) +
                              ", which would read the rest of the epoch in another order: resume it with --instances " +
                              std::to_string(at.instances) + ", or from a checkpoint written at the end of an epoch");
        first_epoch = at.epoch + 1, skip = at.calls, step = at.steps;
        if (lead)
            std::printf("resumed from %s: epoch %zu, %zu calls into it, %zu updates done\n", r.resume.c_str(),
                        first_epoch, skip, step);
    }
    for (std::size_t epoch = first_epoch; epoch <= r.epochs; ++epoch) {
        char name[32];
        std::snprintf(name, sizeof name, "[Epoch %02zu]", epoch);
        report::progress_bar bar(console, name, calls);
        double loss_sum = 0, hits = 0, seen = 0;
        const double modelled_start = session.host().now();
        loader.seek(epoch - 1);  // an epoch's order depends on the seed and its number only
        std::size_t done = 0, ran = 0;
        using wall_clock = std::chrono::steady_clock;
        auto started = wall_clock::now();  // asking for the first batch: loading counts
        for (auto& batch : loader) {  // the loader's workers live across these epochs
            if (done < skip) {  // resumed: these calls ran before the checkpoint
                ++done;
                bar.update();
                started = wall_clock::now();
                continue;
            }
            session.set_learning_rate(schedule(step));
            auto result = [&] {
                try {
                    return session(exec::batch_feed<precision, io>(batch, b, device_norm));
                } catch (const exec::non_finite_loss& e) {
                    throw std::runtime_error("epoch " + std::to_string(epoch) + ", call " + std::to_string(done + 1) +
                                             " of " + std::to_string(calls) + ": " + e.what());
                }
            }();
            step += r.device_iterations;
            ++done, ++ran, ++calls_run;
            std::array<double, 3> call = call_figures(result, outputs, micro_batches);  // then all ranks'
            sum_over_processes(group, call);
            loss_sum += call[0] / double(group.size);
            hits += call[1], seen += call[2];
            bar.set_postfix("loss", loss_sum / double(ran), 3);
            bar.set_postfix("acc", seen > 0 ? 100.0 * hits / seen : 0.0, 1);
            bar.update();
            trace.add(session, result);
            if (!r.timeline.empty()) history.last = std::move(result);
            if (r.stop_after != 0 && calls_run == r.stop_after) {  // stop here, resumable
                bar.close();
                if (!r.checkpoint.empty() && lead) {
                    const bool whole = done == calls;  // the epoch's last call: the checkpoint of its end
                    exec::save_session(r.checkpoint, session,
                                       {.epoch = whole ? epoch : epoch - 1, .calls = whole ? 0 : done, .steps = step,
                                        .seed = r.seed, .instances = r.instances},
                                       fingerprint);
                }
                if (lead)
                    std::printf("stopped after %zu calls%s\n", calls_run,
                                r.checkpoint.empty() ? "" : (", checkpoint " + r.checkpoint).c_str());
                history.stopped = true;
                trace.finish(calls_run);
                return history;
            }
        }
        const double wall = std::chrono::duration<double>(wall_clock::now() - started).count();
        skip = 0;
        bar.close();
        if (!r.checkpoint.empty() && lead)
            exec::save_session(r.checkpoint, session,
                               {.epoch = epoch, .calls = 0, .steps = step, .seed = r.seed, .instances = r.instances},
                               fingerprint);
        epoch_metrics m;
        m.loss = loss_sum / double(std::max<std::size_t>(ran, 1));
        m.accuracy = seen > 0 ? hits / seen : 0.0;
        m.wall_seconds = wall;
        m.modelled_seconds = session.host().now() - modelled_start;
        const double images = double(ran * b.combined_batch() * b.instances);
        m.images_per_second = wall > 0 ? images / wall : 0;
        m.modelled_images_per_second = m.modelled_seconds > 0 ? images / m.modelled_seconds : 0;
        history.epochs.push_back(m);
        if (lead) std::printf("[Epoch %02zu] loss: %.3f, acc: %.1f\n", epoch, m.loss, 100.0 * m.accuracy);
        std::fflush(stdout);
    }
    trace.finish(calls_run);
    return history;
}

/// The test split through inference session `eval` (every image counts: drop_last off), summed over
/// the ranks of a multi-process run (each evaluates its shard).
template <class Model, class Dataset, class Io>
[[nodiscard]] exec::evaluation evaluate_test_split(const train_request& r, exec::basic_session<Model>& eval,
                                                   const Dataset& test, const data::normalization& norm) {
    const process_group& group = r.processes;
    data::loader_options loading{.drop_last = false, .rank = group.rank};
    if constexpr (!std::is_same_v<Io, std::uint8_t>) loading.normalize = norm;
    data::data_loader<Dataset, Io> loader(test, eval.batching(), loading);
    auto e = exec::evaluate(eval, loader, std::is_same_v<Io, std::uint8_t> ? norm : data::normalization{});
    if (group.several()) {
        double totals[3] = {e.loss * double(e.samples), double(e.correct), double(e.samples)};
        sum_over_processes(group, totals);
        e.samples = static_cast<std::size_t>(totals[2]), e.correct = static_cast<std::size_t>(totals[1]);
        e.loss = totals[2] > 0 ? totals[0] / totals[2] : 0.0;
    }
    return e;
}

}  // namespace tessera::programs
