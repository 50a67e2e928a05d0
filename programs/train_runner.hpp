#pragma once
// tessera-train for one precision, in the order a run takes: request -> configuration type
// (dispatch, choice_of) -> network (with_network) -> a dry run (train_dry_run.hpp) or a session and
// its loader (train_network) -> epochs (train_loop.hpp) -> test split and report (train_report.hpp).
// Only train_network needs the configuration type; the loop, the evaluation and the report take
// exec::basic_session, so they are compiled once per network and I/O type. The request's counts,
// loader, host and session options come from train_settings.hpp, its dataset from train_datasets.hpp.
// Included by one file per precision.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "any_optimizer.hpp"
#include "train_datasets.hpp"
#include "train_dry_run.hpp"
#include "train_loop.hpp"
#include "train_onnx.hpp"
#include "train_report.hpp"
#include "train_request.hpp"
#include "train_settings.hpp"
#include "train_text.hpp"

namespace tessera::programs {

/// The staged network tessera-train's sessions run, training and inference alike: an inference
/// session never steps its optimizer (and the memory plan and clock count optimizer state only in
/// training), so it takes the same type and the executor, loop and evaluation are compiled once.
template <class Net>
using staged_model = exec::staged_network<Net, any_optimizer>;

/// The inference session of the test split for a trained network (made after training, from its weights).
template <class Net>
using test_session_factory = std::function<std::shared_ptr<exec::basic_session<staged_model<Net>>>(const Net&)>;

/// Trains `session` on `loader`, then evaluates the test split through `make_test_session` and
/// reports (rank 0). Every configuration of one network and I/O type shares this code.
template <class Net, class Loader>
int train_and_report(const train_request& r, exec::basic_session<staged_model<Net>>& session, Loader& loader,
                     const dataset_pair& ds, std::size_t images, const test_session_factory<Net>& make_test_session) {
    using io = typename Loader::value_type;
    const data::normalization device_norm = std::is_same_v<io, std::uint8_t> ? ds.norm : data::normalization{};
    const auto history = train_epochs(r, session, loader, device_norm, configuration_text(r, images));
    if (history.stopped) return 0;
    // The test split is scored with global replica 0's network on every rank, as one process scores it:
    // the weights are the same on every rank, the batch-norm statistics are each replica's own.
    const Net* scored = &session.model().network();
    std::optional<Net> replica_zero;
    if constexpr (requires(Net& n) { n.visit_buffers([](std::string_view, auto) {}); })
        if (r.processes.several()) {
            replica_zero.emplace(*scored);
            replica_zero->visit_buffers(
                [&](std::string_view, auto values) { r.processes.broadcast(std::as_writable_bytes(values)); });
            scored = &*replica_zero;
        }
    const auto eval = make_test_session(*scored);
    const exec::evaluation test =
        evaluate_test_split<staged_model<Net>, data::in_memory_dataset<std::uint8_t>, io>(r, *eval, ds.test, ds.norm);
    if (r.processes.lead())
        report_training(r, images, session.batching(), session.plan(), history.epochs, test,
                        history.last ? &history.last->clocks : nullptr);
    return 0;
}

/// Trains network `first` under configuration C: the session and loader C makes, then
/// train_and_report. Every rank starts from rank 0's weights.
template <class C, class Net>
int train_network(const train_request& r, const Net& first, const dataset_pair& ds) {
    const process_group& group = r.processes;
    Net prototype = first;
    if (group.several())
        prototype.visit_parameters([&](std::string_view, auto values, auto) { group.broadcast(std::as_writable_bytes(values)); });
    const auto sample_shape = ds.train.shape();
    const tessera::tensor::shape sample{1, sample_shape.height, sample_shape.width, sample_shape.channels};
    const config::options counts = counts_of(r);
    const config::batching b = config::make_batching<C>(counts);  // rules broken: a typed error, before loading
    const auto train_set = r.images ? ds.train.subset(0, std::min(r.images, ds.train.size())) : ds.train;
    const data::loader_options loading = loader_options_of<C>(r, ds.norm);
    if (loading.drop_last) b.check_fits_dataset(train_set.size());  // before the session sizes its buffers
    exec::session_options settings = session_options_of(r, prototype, b, loading);
    settings.progress = group.lead() ? &std::cout : nullptr;
    if (group.several()) settings.across = group.gradient_reduction(b.stages);

    const any_optimizer optimizer = optimizer_of(r);
    auto session = exec::training_model<C>(prototype, optimizer, sample, counts, settings);
    if (group.lead()) std::printf("%s\n", compiled_text<C>(session, settings, prototype, optimizer).c_str());
    auto loader = data::make_data_loader<C>(train_set, counts, loading);
    // The test split: 100 images a micro-batch, D = the stage count (pipelined inference needs D >= S).
    const test_session_factory<Net> make_test_session = [&](const Net& trained) {
        exec::session_options eval_settings = settings;
        eval_settings.progress = nullptr;
        eval_settings.outputs.reset();
        eval_settings.loss_scale.reset();
        eval_settings.dynamic_loss_scaling.reset();
        eval_settings.stochastic_rounding.reset();  // evaluation rounds to nearest: the same score whatever the seed
        const any_optimizer never_steps = optimizer_of(r);
        using eval_session = decltype(exec::inference_model<C>(trained, never_steps, sample, {}, eval_settings));
        return std::make_shared<eval_session>(exec::inference_model<C>(
            trained, never_steps, sample,
            {.micro_batch = 100, .device_iterations = std::max<std::size_t>(b.stages, 1), .replicas = r.replicas,
             .instances = r.instances, .input_group = r.input_replica_group, .stages = b.stages},
            eval_settings));
    };
    return train_and_report<Net>(r, session, loader, ds, train_set.size(), make_test_session);
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

/// The graph of --model FILE.onnx priced at precision P; a file tessera cannot read or price is a
/// usage error that names it.
template <class P>
[[nodiscard]] onnx::imported_network<P> imported_network_of(const train_request& r) {
    try {
        return onnx::imported_network<P>(read_onnx_graph(r.model));
    } catch (const onnx::import_error& e) {
        throw usage_error("--model " + r.model + ": " + e.what());
    }
}

/// Calls f(network) with the network tessera-plan searches for --model: an ONNX file's graph of
/// images for --model FILE.onnx (tessera::onnx::imported_network, shapes only), else with_network's.
template <class P, class F>
decltype(auto) with_dry_run_network(const train_request& r, std::size_t channels, std::size_t classes, F&& f) {
    using numeric = cfg::precision<typename P::data_type, typename P::weight_type>;
    if (onnx_model(r)) {
        auto net = imported_network_of<numeric>(r);
        if (net.reads_tokens())
            throw usage_error("--model " + r.model + " reads token ids: tessera-plan searches ONNX graphs of images so "
                              "far (tessera-train --dry-run --dataset wikipedia prices this one)");
        return f(net);
    }
    return with_network<P>(r, channels, classes, f);
}

/// What a dry run of --model FILE.onnx read: the file's producer and opset, its nodes as tessera's
/// layers and units, and its parameters; a graph whose batch norms were folded into its
/// convolutions (an inference export) is said to be a different network to train.
template <class P>
void describe_imported(const train_request& r, const onnx::imported_network<P>& net) {
    const auto& g = net.source();
    std::printf("model: %s (%s, opset %lld): %zu nodes priced as %zu layers in %zu units, %zu parameters%s\n",
                r.model.c_str(), g.producer.empty() ? "producer unnamed" : g.producer.c_str(),
                static_cast<long long>(g.opset), g.nodes.size(), net.layers().size(), net.units(), net.parameters(),
                net.tied_table_elements() > 0 ? " (a table tied to a decoder counted once)" : "");
    if (net.batch_norms_folded())
        std::printf("model: its convolutions carry biases and no batch norm follows them: an inference export, "
                    "its batch norms folded (a different network to train; export with "
                    "training=TrainingMode.TRAINING, do_constant_folding=False to keep them)\n");
}

/// The dataset of a dry run of an ONNX graph: images by --dataset's shape, or for a graph of token
/// ids, --dataset wikipedia by shape (sequences of the graph's length, --packing not taken).
template <class Net>
[[nodiscard]] dataset_shape imported_dataset(const train_request& r, const Net& net) {
    if (!net.reads_tokens()) return shape_of_dataset(r);
    if (r.dataset != "wikipedia")
        throw usage_error("--dataset " + r.dataset + ": " + r.model + " reads token ids; its dry run takes --dataset "
                          "wikipedia (by shape)");
    return {1, 1, net.sample().w, wikipedia_sequences, 0, 0, true};
}

/// The dry run of --model FILE.onnx under configuration C, printed: images with a class per sample,
/// or token ids with a token per position (exec::token_loss).
template <class C>
int onnx_dry_run(const train_request& r) {
    using numeric = cfg::precision<typename C::precision::data_type, typename C::precision::weight_type>;
    const auto net = imported_network_of<numeric>(r);
    describe_imported(r, net);
    const dataset_shape shape = imported_dataset(r, net);
    if (net.reads_tokens()) {
        // Token ids travel as integers: only the float-I/O configurations price them (tessera-train
        // refuses --eight-bit-io for such a graph before dispatching).
        if constexpr (std::is_same_v<typename C::io_type, float>)
            return report_dry_run<C>(r, net, shape, exec::token_loss<numeric>{});
        else
            throw usage_error("--eight-bit-io sends 8-bit images, and " + r.model + " reads token ids");
    }
    return report_dry_run<C>(r, net, shape);
}

/// A request under configuration C: its dry run, or its training on the dataset's images.
template <class C>
int train_model(const train_request& r) {
    if (text_model(r)) {
        if constexpr (std::is_same_v<typename C::io_type, float>)
            return train_text<C>(r);
        else
            throw usage_error("--eight-bit-io sends 8-bit images, and " + r.model + " reads token ids");
    }
    if (onnx_model(r) && r.dry_run) return onnx_dry_run<C>(r);
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
    // Interleaved 1F1B is the 1F1B configuration with model chunks per IPU (options::virtual_stages),
    // looped BFS the GPipe one with them, and zero-bubble the 1F1B configuration with its backward
    // passes split (options::zero_bubble).
    const std::string schedule = r.schedule == "interleaved" || zero_bubble_of(r) != config::zero_bubble_kind::none
                                     ? "1f1b"
                                 : r.schedule == "looped-bfs" ? "gpipe"
                                                              : r.schedule;
    return {.precision = r.precision, .strategy = r.strategy, .schedule = schedule, .eight_bit_io = r.eight_bit_io};
}

/// Trains with precision P's configurations.
template <class P>
int train_with(const train_request& r) {
    return config::dispatch_for<P>(choice_of(r), [&]<class C>() { return train_model<C>(r); });
}

}  // namespace tessera::programs
