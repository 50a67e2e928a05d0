#pragma once
// tessera-train's training loop for one precision: dispatch to the configuration type, load the
// data, train with bars, evaluate, report. Included by one file per precision.
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
#include "train_request.hpp"

namespace tessera::programs {

namespace cfg = tessera::config;

struct dataset_pair {
    data::in_memory_dataset<std::uint8_t> train, test;
    data::normalization norm;
    std::size_t classes = 10;
};

inline data::in_memory_dataset<std::uint8_t> materialise(const data::synthetic_images& s, std::string name) {
    std::vector<std::uint8_t> values(s.size() * s.shape().size());
    std::vector<data::label_t> labels(s.size());
    for (std::size_t i = 0; i < s.size(); ++i)
        labels[i] = s.read(i, std::span<std::uint8_t>(values).subspan(i * s.shape().size(), s.shape().size()));
    return {s.shape(), s.num_classes(), std::move(values), std::move(labels), std::move(name)};
}

inline dataset_pair load_dataset(const train_request& r) {
    if (r.dataset == "fashion-mnist") {
        const std::string dir = r.data_dir.empty() ? std::string(data::fashion_mnist_default_path) : r.data_dir;
        return {data::fashion_mnist(data::split::train, dir), data::fashion_mnist(data::split::test, dir),
                {.mean = {0.2860f}, .stddev = {0.3530f}}};
    }
    if (r.dataset == "cifar10") {
        if (r.data_dir.empty()) throw usage_error("--dataset cifar10 needs the directory of its binary files (--dataset cifar10 DIR)");
        return {data::cifar10(data::split::train, r.data_dir), data::cifar10(data::split::test, r.data_dir),
                {.mean = {0.4914f, 0.4822f, 0.4465f}, .stddev = {0.2470f, 0.2435f, 0.2616f}}};
    }
    if (r.dataset == "synthetic") {
        const std::size_t n = r.images ? r.images : 8192;
        return {materialise(data::synthetic_images(n, {3, 32, 32}, 10, r.seed), "synthetic"),
                materialise(data::synthetic_images(std::max<std::size_t>(n / 4, 1), {3, 32, 32}, 10, r.seed + 1), "synthetic test"),
                {}};
    }
    throw usage_error("--dataset '" + r.dataset + "' is not one of fashion-mnist, cifar10 DIR, synthetic");
}

inline exec::output_selection parse_output_mode(const std::string& s) {
    if (s == "final") return {cfg::output_kind::final, 0};
    if (s == "all") return {cfg::output_kind::all, 0};
    if (s == "sum") return {cfg::output_kind::sum, 0};
    if (s.rfind("every:", 0) == 0) {
        std::size_t n = 0;
        try {
            n = std::stoul(s.substr(6));
        } catch (const std::exception&) {
        }
        if (n == 0) throw usage_error("--output-mode every:N needs N > 0, got '" + s + "'");
        return {cfg::output_kind::every_n, n};
    }
    throw usage_error("--output-mode '" + s + "' is not one of final, all, sum, every:N");
}

/// The loss scale a --loss-scaling value gives (empty: the config's, i.e. none or dynamic's initial).
inline std::optional<double> static_scale(const std::string& s) {
    if (s == "none" || s == "dynamic") return std::nullopt;
    if (s.rfind("static:", 0) == 0) {
        double f = 0;
        try {
            f = std::stod(s.substr(7));
        } catch (const std::exception&) {
        }
        if (!(f > 0) || !std::isfinite(f)) throw usage_error("--loss-scaling static:F needs a positive factor, got '" + s + "'");
        return f;
    }
    throw usage_error("--loss-scaling '" + s + "' is not one of none, static:F, dynamic");
}

inline std::string mib(std::size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
    return b;
}

/// What a checkpoint must have been made for: everything that shapes the weights and the data order.
inline std::string configuration_text(const train_request& r, std::size_t images) {
    std::string split;
    for (const auto& c : r.split) split += c + ",";
    return r.model + " " + r.dataset + " images=" + std::to_string(images) + " b=" + std::to_string(r.batch_size) +
           " " + r.precision + " " + r.loss_scaling + " G=" + std::to_string(r.gradient_accumulation) +
           " D=" + std::to_string(r.device_iterations) + " R=" + std::to_string(r.replicas) + " " + r.strategy + " " +
           r.schedule + " ipus=" + std::to_string(r.ipus_per_replica) + " split=" + split + " " + r.optimizer +
           " lr=" + std::to_string(r.lr) + " epochs=" + std::to_string(r.epochs) + " seed=" + std::to_string(r.seed);
}

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
    const config::options counts{.micro_batch = r.batch_size, .gradient_accumulation = r.gradient_accumulation,
                                 .device_iterations = r.device_iterations, .replicas = r.replicas,
                                 .instances = r.instances, .input_group = r.input_replica_group};
    const config::batching b = config::make_batching<C>(counts);  // rules broken: a typed error, before loading
    const auto train_set = r.images ? ds.train.subset(0, std::min(r.images, ds.train.size())) : ds.train;
    const exec::output_selection outputs = parse_output_mode(r.output_mode);
    data::loader_options loading{.shuffle = true, .seed = r.seed, .num_workers = r.workers,
                                 .mode = r.async_dataloader ? data::loader_mode::async : data::loader_mode::sync,
                                 .rank = group.rank, .augment = data::horizontal_flip{}};
    if constexpr (!std::is_same_v<io, std::uint8_t>) loading.normalize = ds.norm;  // float I/O: on the host
    const data::normalization device_norm = std::is_same_v<io, std::uint8_t> ? ds.norm : data::normalization{};

    // Set member by member: GCC 12 warns (falsely) that a designated initializer leaves `across`
    // uninitialised in some of the dispatched instantiations.
    exec::session_options settings;
    settings.progress = lead ? &std::cout : nullptr;
    settings.record_trace = !r.timeline.empty();
    settings.outputs = outputs;
    settings.loss_scale = static_scale(r.loss_scaling);
    settings.dynamic_loss_scaling = r.loss_scaling == "dynamic";
    settings.loading = exec::loading_of(loading);
    if (!r.split.empty()) {
        settings.first_units.push_back(0);
        for (const auto& name : r.split) settings.first_units.push_back(prototype.unit_index(name));
        if (settings.first_units.size() != C::strategy::stages)
            throw usage_error("--split names " + std::to_string(r.split.size()) + " cuts, the strategy has " +
                              std::to_string(C::strategy::stages) + " stages (give " +
                              std::to_string(C::strategy::stages - 1) + ")");
    }
    if (r.recompute) settings.recompute.assign(C::strategy::stages, true);
    if (group.several()) settings.across = group.gradient_reduction(C::strategy::stages);

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
        const std::size_t eval_batch = 100, eval_d = std::max<std::size_t>(C::strategy::stages, 1);
        exec::session_options eval_settings = settings;
        eval_settings.progress = nullptr;
        eval_settings.outputs.reset();
        eval_settings.loss_scale.reset();
        eval_settings.dynamic_loss_scaling.reset();
        auto eval = exec::inference_model<C>(session.model().network(), sample,
                                             {.micro_batch = eval_batch, .device_iterations = eval_d,
                                              .replicas = r.replicas, .instances = r.instances,
                                              .input_group = r.input_replica_group},
                                             eval_settings);
        data::loader_options test_loading{.drop_last = false, .rank = group.rank};
        if constexpr (!std::is_same_v<io, std::uint8_t>) test_loading.normalize = ds.norm;
        auto test_loader = data::make_data_loader<typename C::for_inference>(
            ds.test, {.micro_batch = eval_batch, .device_iterations = eval_d, .replicas = r.replicas,
                      .instances = r.instances, .input_group = r.input_replica_group},
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
                    b.replicas * C::ipus_per_replica);
        for (const auto& ipu : session.plan().ipus)
            std::printf("IPU %zu memory: %s of %s%s\n", ipu.ipu, mib(ipu.on_chip()).c_str(), mib(ipu.budget).c_str(),
                        b.replicas > 1 ? " (each replica)" : "");

        if (!r.metrics_json.empty()) {
            std::ofstream out(r.metrics_json);
            if (!out) throw std::runtime_error("cannot write " + r.metrics_json);
            report::json_writer j(out);
            j.begin_object();
            j.key("configuration").begin_object();
            j.member("model", r.model).member("dataset", r.dataset).member("batch_size", r.batch_size);
            j.member("precision", r.precision).member("loss_scaling", r.loss_scaling);
            j.member("gradient_accumulation", r.gradient_accumulation).member("device_iterations", r.device_iterations);
            j.member("replicas", r.replicas).member("instances", r.instances).member("strategy", r.strategy);
            j.member("schedule", r.schedule).member("ipus_per_replica", r.ipus_per_replica);
            j.member("eight_bit_io", r.eight_bit_io).member("async_dataloader", r.async_dataloader);
            j.member("output_mode", r.output_mode).member("epochs", r.epochs).member("lr", r.lr);
            j.member("optimizer", r.optimizer).member("seed", r.seed).member("images", train_set.size());
            j.end_object();
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
    if (r.optimizer != "sgd" && r.optimizer != "adamw")
        throw usage_error("--optimizer '" + r.optimizer + "' is not one of sgd, adamw");
    return run_with(r.optimizer == "sgd"
                        ? any_optimizer(optim::sgd({.learning_rate = r.lr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true}))
                        : any_optimizer(optim::adamw({.learning_rate = r.lr, .weight_decay = 0.05})));
}

/// The model of --model at precision P, in one of three types (the CIFAR ResNets, the ImageNet
/// ones with basic blocks, with bottlenecks), their depth at run time.
template <class C>
int train_model(const train_request& r) {
    using P = typename C::precision;
    using numeric = cfg::precision<typename P::data_type, typename P::weight_type>;
    const dataset_pair ds = load_dataset(r);
    const std::size_t in = ds.train.shape().channels, classes = ds.train.num_classes();
    const auto cifar = [&](std::size_t n) {
        return nn::resnet_family<nn::basic_block<numeric, nn::padding_shortcut>, nn::cifar_stem<numeric>>(in, classes, {n, n, n});
    };
    using basic = nn::resnet_family<nn::basic_block<numeric>, nn::imagenet_stem<numeric>>;
    using deep = nn::resnet_family<nn::bottleneck<numeric>, nn::imagenet_stem<numeric>>;
    const std::string& m = r.model;
    if (m == "resnet20") return train_network<C>(r, cifar(3), ds);
    if (m == "resnet32") return train_network<C>(r, cifar(5), ds);
    if (m == "resnet44") return train_network<C>(r, cifar(7), ds);
    if (m == "resnet56") return train_network<C>(r, cifar(9), ds);
    if (m == "resnet110") return train_network<C>(r, cifar(18), ds);
    if (m == "resnet18") return train_network<C>(r, basic(in, classes, {2, 2, 2, 2}), ds);
    if (m == "resnet34") return train_network<C>(r, basic(in, classes, {3, 4, 6, 3}), ds);
    if (m == "resnet50") return train_network<C>(r, deep(in, classes, {3, 4, 6, 3}), ds);
    if (m == "resnet101") return train_network<C>(r, deep(in, classes, {3, 4, 23, 3}), ds);
    if (m == "resnet152") return train_network<C>(r, deep(in, classes, {3, 8, 36, 3}), ds);
    throw usage_error("--model '" + m + "' is not one of resnet20, resnet32, resnet44, resnet56, resnet110, resnet18, "
                      "resnet34, resnet50, resnet101, resnet152");
}

/// The configuration choice of a request.
inline config::choice choice_of(const train_request& r) {
    if (r.loss_scaling != "dynamic") (void)static_scale(r.loss_scaling);  // checks the spelling
    // Loss scaling is chosen at run time (session_options): one configuration type serves all three modes.
    return {.precision = r.precision, .dynamic_loss_scaling = false, .strategy = r.strategy,
            .schedule = r.schedule, .ipus_per_replica = r.strategy == "single" ? 1 : r.ipus_per_replica,
            .eight_bit_io = r.eight_bit_io};
}

/// Trains with precision P's configurations.
template <class P>
int train_with(const train_request& r) {
    // Two IPUs per replica for the staged strategies: each further count is a full set of sessions.
    return config::dispatch_for<P, config::stage_counts<2>>(choice_of(r), [&]<class C>() { return train_model<C>(r); });
}

}  // namespace tessera::programs
