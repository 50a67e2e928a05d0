#pragma once
// tessera-train for one precision: request -> configuration type (dispatch) -> network -> a dry run
// (train_dry_run.hpp) or a session trained epoch by epoch with bars, evaluated and reported.
// The request's counts, loader, host and session options come from train_settings.hpp, its dataset
// from train_datasets.hpp. Included by one file per precision.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "any_optimizer.hpp"
#include "train_datasets.hpp"
#include "train_dry_run.hpp"
#include "train_report.hpp"
#include "train_request.hpp"
#include "train_settings.hpp"

namespace tessera::programs {

/// The metrics of one epoch.
struct epoch_metrics {
    double loss = 0, accuracy = 0, wall_seconds = 0, modelled_seconds = 0, images_per_second = 0,
           modelled_images_per_second = 0;
};

/// Adds the per-rank values of a multi-process run (in rank order; nothing to do in one process).
inline void sum_over_processes(const process_group& g, std::span<double> values) {
    if (g.several()) g.sum(values);
}

template <class C, class Net>
int train_network(const train_request& r, const Net& first, const dataset_pair& ds) {
    using P = typename Net::precision;
    using io = typename C::io_type;
    const process_group& group = r.processes;
    const bool lead = group.lead();  // rank 0 alone prints bars and lines and writes files
    std::ostream quiet(nullptr);
    std::ostream& console = lead ? std::cout : quiet;
    // Every rank starts from rank 0's weights.
    Net prototype = first;
    if (group.several())
        prototype.visit_parameters([&](std::string_view, auto values, auto) { group.broadcast(std::as_writable_bytes(values)); });
    const auto sample_shape = ds.train.shape();
    const tessera::tensor::shape sample{1, sample_shape.height, sample_shape.width, sample_shape.channels};
    const config::options counts = counts_of(r);
    const config::batching b = config::make_batching<C>(counts);  // rules broken: a typed error, before loading
    const auto train_set = r.images ? ds.train.subset(0, std::min(r.images, ds.train.size())) : ds.train;
    const data::loader_options loading = loader_options_of<C>(r, ds.norm);
    const data::normalization device_norm = std::is_same_v<io, std::uint8_t> ? ds.norm : data::normalization{};
    exec::session_options settings = session_options_of(r, prototype, b, loading);
    settings.progress = lead ? &std::cout : nullptr;
    const exec::output_selection outputs = *settings.outputs;
    if (group.several()) settings.across = group.gradient_reduction(b.stages);

    const auto run_with = [&](any_optimizer optimizer) -> int {
        auto session = exec::training_model<C>(prototype, optimizer, sample, counts, settings);
        auto loader = data::make_data_loader<C>(train_set, counts, loading);
        const std::size_t calls = loader.batches_per_epoch();
        const std::size_t updates = calls * r.epochs * r.device_iterations;
        const optim::cosine_lr schedule{.base = r.lr, .total = std::max<std::size_t>(updates, 2),
                                        .min = 0.0, .warmup = std::min<std::size_t>(updates / 20, updates - 1)};
        std::vector<epoch_metrics> history;
        std::size_t step = 0, first_epoch = 1, skip = 0;
        const std::string fingerprint = configuration_text(r, train_set.size());
        if (!r.resume.empty()) {
            const auto at = exec::load_session(r.resume, session, fingerprint);
            first_epoch = at.epoch + 1, skip = at.calls, step = at.steps;
            if (lead)
                std::printf("resumed from %s: epoch %zu, %zu calls into it, %zu updates done\n", r.resume.c_str(),
                            first_epoch, skip, step);
        }
        std::size_t calls_run = 0;
        std::optional<exec::run_result<typename decltype(session)::tensor>> last;
        for (std::size_t epoch = first_epoch; epoch <= r.epochs; ++epoch) {
            char name[32];
            std::snprintf(name, sizeof name, "[Epoch %02zu]", epoch);
            report::progress_bar bar(console, name, calls);
            double loss_sum = 0, hits = 0, seen = 0, wall = 0;
            const double modelled_start = session.host().now();
            const std::size_t count = r.device_iterations * r.gradient_accumulation;  // micro-batches per replica and call
            loader.seek(epoch - 1);  // an epoch's order depends on the seed and its number only
            std::size_t done = 0, ran = 0;
            for (auto& batch_ref : loader) {  // the loader's workers live across these epochs
                auto* batch = &batch_ref;
                if (done < skip) {  // resumed: these calls ran before the checkpoint
                    ++done;
                    bar.update();
                    continue;
                }
                session.set_learning_rate(schedule(step));
                auto result = [&] {
                    try {
                        return session(exec::batch_feed<P, io>(*batch, session.batching(), device_norm));
                    } catch (const exec::non_finite_loss& e) {
                        throw std::runtime_error("epoch " + std::to_string(epoch) + ", call " + std::to_string(done + 1) +
                                                 " of " + std::to_string(calls) + ": " + e.what());
                    }
                }();
                step += r.device_iterations;
                ++done, ++ran, ++calls_run;
                wall += result.wall_seconds;
                // The losses the output mode returned: their mean (sum: the total over the call's micro-batches).
                const auto& losses = result.losses.front();
                double l = 0;
                for (float v : losses) l += v;
                l = outputs.kind == cfg::output_kind::sum ? l / double(count) : l / double(std::max<std::size_t>(losses.size(), 1));
                double call[3] = {l, 0, 0};  // this rank's loss, hits, samples; then all ranks'
                for (const auto& s : result.scores.front()) call[1] += double(s.correct), call[2] += double(s.samples);
                sum_over_processes(group, call);
                loss_sum += call[0] / double(group.size);
                hits += call[1], seen += call[2];
                bar.set_postfix("loss", loss_sum / double(ran), 3);
                bar.set_postfix("acc", seen > 0 ? 100.0 * hits / seen : 0.0, 1);
                bar.update();
                if (!r.timeline.empty()) last = std::move(result);
                if (r.stop_after != 0 && calls_run == r.stop_after) {  // stop here, resumable
                    bar.close();
                    if (!r.checkpoint.empty() && lead)
                        exec::save_session(r.checkpoint, session, {.epoch = epoch - 1, .calls = done, .steps = step, .seed = r.seed},
                                           fingerprint);
                    if (lead)
                        std::printf("stopped after %zu calls%s\n", calls_run,
                                    r.checkpoint.empty() ? "" : (", checkpoint " + r.checkpoint).c_str());
                    return 0;
                }
            }
            skip = 0;
            bar.close();
            if (!r.checkpoint.empty() && lead)
                exec::save_session(r.checkpoint, session, {.epoch = epoch, .calls = 0, .steps = step, .seed = r.seed},
                                   fingerprint);
            epoch_metrics m;
            m.loss = loss_sum / double(std::max<std::size_t>(ran, 1));
            m.accuracy = seen > 0 ? hits / seen : 0.0;
            m.wall_seconds = wall;
            m.modelled_seconds = session.host().now() - modelled_start;
            const double images = double(ran * b.combined_batch() * b.instances);
            m.images_per_second = wall > 0 ? images / wall : 0;
            m.modelled_images_per_second = m.modelled_seconds > 0 ? images / m.modelled_seconds : 0;
            history.push_back(m);
            if (lead) std::printf("[Epoch %02zu] loss: %.3f, acc: %.1f\n", epoch, m.loss, 100.0 * m.accuracy);
            std::fflush(stdout);
        }

        // The test split through an inference session of the trained weights; every image counts.
        const std::size_t eval_batch = 100, eval_d = std::max<std::size_t>(b.stages, 1);
        exec::session_options eval_settings = settings;
        eval_settings.progress = nullptr;
        eval_settings.outputs.reset();
        eval_settings.loss_scale.reset();
        eval_settings.dynamic_loss_scaling.reset();
        auto eval = exec::inference_model<C>(session.model().network(), sample,
                                             {.micro_batch = eval_batch, .device_iterations = eval_d,
                                              .replicas = r.replicas, .instances = r.instances,
                                              .input_group = r.input_replica_group, .stages = b.stages},
                                             eval_settings);
        data::loader_options test_loading{.drop_last = false, .rank = group.rank};
        if constexpr (!std::is_same_v<io, std::uint8_t>) test_loading.normalize = ds.norm;
        auto test_loader = data::make_data_loader<typename C::for_inference>(
            ds.test, {.micro_batch = eval_batch, .device_iterations = eval_d, .replicas = r.replicas,
                      .instances = r.instances, .input_group = r.input_replica_group, .stages = b.stages},
            test_loading);
        auto test = exec::evaluate(eval, test_loader, device_norm);
        if (group.several()) {  // each rank evaluated its shard of the test split
            double totals[3] = {test.loss * double(test.samples), double(test.correct), double(test.samples)};
            sum_over_processes(group, totals);
            test.samples = static_cast<std::size_t>(totals[2]), test.correct = static_cast<std::size_t>(totals[1]);
            test.loss = totals[2] > 0 ? totals[0] / totals[2] : 0.0;
        }
        if (!lead) return 0;
        double wall = 0, modelled = 0, images = 0;
        for (const auto& m : history) {
            wall += m.wall_seconds, modelled += m.modelled_seconds;
            images += m.images_per_second * m.wall_seconds;
        }
        std::printf("test accuracy: %.2f%% of %zu images (loss %.3f)\n", 100.0 * test.accuracy(), test.samples, test.loss);
        std::printf("throughput: %.0f images/s on this machine, %.0f images/s modelled on %zu IPUs and their host\n",
                    wall > 0 ? images / wall : 0.0, modelled > 0 ? images / modelled : 0.0,
                    b.replicas * b.ipus_per_replica);
        for (const auto& ipu : session.plan().ipus)
            std::printf("IPU %zu memory: %s of %s%s\n", ipu.ipu, mib(ipu.on_chip()).c_str(), mib(ipu.budget).c_str(),
                        b.replicas > 1 ? " (each replica)" : "");

        if (!r.metrics_json.empty()) {
            std::ofstream out(r.metrics_json);
            if (!out) throw std::runtime_error("cannot write " + r.metrics_json);
            report::json_writer j(out);
            j.begin_object();
            write_configuration(j, r, train_set.size());
            j.key("epochs").begin_array();
            for (std::size_t e = 0; e < history.size(); ++e) {
                const auto& m = history[e];
                j.begin_object().member("epoch", e + 1).member("loss", m.loss).member("accuracy", m.accuracy);
                j.member("wall_seconds", m.wall_seconds).member("modelled_seconds", m.modelled_seconds);
                j.member("images_per_second", m.images_per_second);
                j.member("modelled_images_per_second", m.modelled_images_per_second).end_object();
            }
            j.end_array();
            j.member("test_accuracy", test.accuracy()).member("test_loss", test.loss).member("test_images", test.samples);
            j.key("ipus").begin_array();
            for (const auto& ipu : session.plan().ipus)
                j.begin_object().member("ipu", ipu.ipu).member("memory_bytes", ipu.on_chip()).member("budget_bytes", ipu.budget).end_object();
            j.end_array();
            j.end_object();
            out << '\n';
        }
        if (!r.timeline.empty() && last) {
            std::ofstream out(r.timeline);
            if (!out) throw std::runtime_error("cannot write " + r.timeline);
            out << exec::timeline_svg(last->clocks);
        }
        return 0;
    };
    return run_with(optimizer_of(r));
}

/// Calls f(network) with the network of --model at precision P for `channels` input channels and
/// `classes` classes: the CIFAR ResNets, the ImageNet ones with basic blocks, or with bottlenecks
/// (three types, their depth at run time).
template <class P, class F>
decltype(auto) with_network(const train_request& r, std::size_t channels, std::size_t classes, F&& f) {
    using numeric = cfg::precision<typename P::data_type, typename P::weight_type>;
    using cifar = nn::resnet_family<nn::basic_block<numeric, nn::padding_shortcut>, nn::cifar_stem<numeric>>;
    using basic = nn::resnet_family<nn::basic_block<numeric>, nn::imagenet_stem<numeric>>;
    using deep = nn::resnet_family<nn::bottleneck<numeric>, nn::imagenet_stem<numeric>>;
    const auto c = [&](std::size_t n) { return cifar(channels, classes, {n, n, n}); };
    const std::string& m = r.model;
    if (m == "resnet20") return f(c(3));
    if (m == "resnet32") return f(c(5));
    if (m == "resnet44") return f(c(7));
    if (m == "resnet56") return f(c(9));
    if (m == "resnet110") return f(c(18));
    if (m == "resnet18") return f(basic(channels, classes, {2, 2, 2, 2}));
    if (m == "resnet34") return f(basic(channels, classes, {3, 4, 6, 3}));
    if (m == "resnet50") return f(deep(channels, classes, {3, 4, 6, 3}));
    if (m == "resnet101") return f(deep(channels, classes, {3, 4, 23, 3}));
    if (m == "resnet152") return f(deep(channels, classes, {3, 8, 36, 3}));
    throw usage_error("--model '" + m + "' is not one of resnet20, resnet32, resnet44, resnet56, resnet110, resnet18, "
                      "resnet34, resnet50, resnet101, resnet152");
}

/// A request under configuration C: its dry run, or its training on the dataset's images.
template <class C>
int train_model(const train_request& r) {
    const dataset_shape shape = shape_of_dataset(r);
    if (r.dry_run)
        return with_network<typename C::precision>(r, shape.channels, shape.classes,
                                                   [&](const auto& net) { return report_dry_run<C>(r, net, shape); });
    const dataset_pair ds = load_dataset(r);
    return with_network<typename C::precision>(r, ds.train.shape().channels, ds.train.num_classes(),
                                               [&](const auto& net) { return train_network<C>(r, net, ds); });
}

/// The configuration choice of a request: the policies that are types. Loss scaling is chosen at
/// run time (session_options) and the stage count is a count (options::stages), so one configuration
/// type serves every loss-scaling mode and stage count.
inline config::choice choice_of(const train_request& r) {
    if (r.loss_scaling != "dynamic") (void)static_scale(r.loss_scaling);  // checks the spelling
    return {.precision = r.precision, .strategy = r.strategy, .schedule = r.schedule, .eight_bit_io = r.eight_bit_io};
}

/// Trains with precision P's configurations.
template <class P>
int train_with(const train_request& r) {
    return config::dispatch_for<P>(choice_of(r), [&]<class C>() { return train_model<C>(r); });
}

}  // namespace tessera::programs
