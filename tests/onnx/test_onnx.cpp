// ONNX graphs read and priced: every CNN operator against the layer that computes it, torchvision's
// ResNet-50 against tessera's resnet50, and bad files refused with bounded memory.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <tessera/onnx/read.hpp>
#include <tessera/tessera.hpp>

namespace test_onnx {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
namespace optim = tessera::optim;
namespace tensor = tessera::tensor;
namespace tx = tessera::onnx;  // ::onnx is protobuf's

namespace {

const std::filesystem::path dir = TESSERA_ONNX_TEST_DIR;

tx::imported_network<cfg::fp32> imported(const char* file) { return tx::imported_network<cfg::fp32>(tx::read_model(dir / file)); }

/// An imported graph's unit costs, units [first, last) summed, against one of tessera's units.
template <class Net>
void check_units(const Net& net, std::size_t first, std::size_t last, const tensor::shape& x, const nn::cost& want) {
    nn::cost got;
    for (std::size_t v = first; v < last; ++v) got += net.unit_cost(v, net.unit_input_shape(v, x));
    CHECK(got.forward_flops == want.forward_flops);
    CHECK(got.backward_flops == want.backward_flops);
    CHECK(got.parameters == want.parameters);
    CHECK(got.stash_bytes() == want.stash_bytes());
    CHECK(got.passes.size() == want.passes.size());
}

/// An imported graph's dry run against tessera's own model's: the epoch and each IPU's memory within 1 %.
void check_dry_runs(const exec::epoch_estimate& got, const exec::epoch_estimate& want) {
    const auto within = [](double a, double b) { return std::abs(a - b) <= 0.01 * std::abs(b); };
    INFO("epoch " << got.seconds << " s against " << want.seconds << " s");
    CHECK(within(got.seconds, want.seconds));
    REQUIRE(got.memory.ipus.size() == want.memory.ipus.size());
    for (std::size_t i = 0; i < got.memory.ipus.size(); ++i) {
        INFO("IPU " << i << ": " << got.memory.ipus[i].on_chip() << " bytes against " << want.memory.ipus[i].on_chip());
        CHECK(within(double(got.memory.ipus[i].on_chip()), double(want.memory.ipus[i].on_chip())));
    }
}

}  // namespace

TEST_CASE("every CNN operator is read, fused and priced as the layer that computes it", "[onnx]") {
    const auto net = imported("cnn_ops.onnx");
    // Conv, BatchNormalization + Relu, Conv, BatchNormalization, Add + Relu, MaxPool, AveragePool, Relu,
    // GlobalAveragePool, Reshape, Identity, Gemm: the shape arithmetic (Shape, Gather, Unsqueeze,
    // Concat) folded away.
    using k = tx::layer_kind;
    std::vector<k> kinds;
    for (const auto& l : net.layers()) kinds.push_back(l.kind);
    CHECK(kinds == std::vector<k>{k::convolution, k::batch_norm, k::convolution, k::batch_norm, k::add, k::max_pool,
                                  k::average_pool, k::relu, k::global_average, k::view, k::view, k::linear});
    CHECK(net.layers()[0].bias);
    CHECK(net.layers()[1].relu);
    CHECK_FALSE(net.layers()[3].relu);
    CHECK(net.layers()[4].relu);
    CHECK_FALSE(net.batch_norms_folded());  // a biased convolution, but batch norms too
    // Units where one tensor alone crosses: the residual block is one, the views stay with the pooling.
    std::vector<std::string> names;
    for (std::size_t u = 0; u < net.units(); ++u) names.push_back(net.unit_name(u));
    CHECK(names == std::vector<std::string>{"stem.conv", "stem", "block", "pool", "avg", "act", "gap", "fc"});
    CHECK(net.unit_index("block") == 2);
    CHECK(net.unit_index("/block/conv/Conv") == 2);  // a unit's first node names it
    CHECK_THROWS_WITH(net.unit_index("/block/Add"), Catch::Contains("inside unit block"));
    CHECK_THROWS_WITH(net.unit_index("nowhere"), Catch::Contains("no unit or node named 'nowhere'"));

    // By hand, for 2 samples of 3 × 8 × 8: the parameters, and each unit's forward FLOPs.
    const tensor::shape x{2, 8, 8, 3};
    CHECK(net.sample() == tensor::shape{1, 8, 8, 3});
    CHECK(net.output_shape(x) == tensor::shape{2, 1, 1, 5});
    CHECK(net.cost(x).parameters == 108 + 4 + 8 + 144 + 8 + 20 + 5);
    const double positions = 2 * 8 * 8;
    const auto forward = [&](std::size_t u) { return net.unit_cost(u, net.unit_input_shape(u, x)).forward_flops; };
    CHECK(forward(0) == 2 * positions * 4 * 27 + positions * 4);    // the 3×3 products, then the bias
    CHECK(forward(1) == 6 * positions * 4);                         // batch norm with its ReLU
    CHECK(forward(2) == 2 * positions * 4 * 36 + 5 * positions * 4 + 2 * positions * 4);  // conv, bn, add + relu
    CHECK(forward(3) == 2.0 * 4 * 4 * 4 * 4);                       // 2×2 windows over 2 × 4 × 4 × 4 outputs
    CHECK(forward(7) == 2.0 * 2 * 4 * 5);                           // the classifier
    // The block's inference peak: its batch norm's output and statistics beside the convolution's output.
    const double block = 2 * 8 * 8 * 4 * sizeof(float);
    CHECK(net.unit_cost(2, net.unit_input_shape(2, x)).inference_peak_bytes() == 2 * block + 2 * 4 * sizeof(float));
    // The samples must be the graph's.
    CHECK_THROWS_WITH(net.unit_input_shape(0, tensor::shape{2, 32, 32, 3}), Catch::Contains("the graph's input 'x'"));
    // It prices; it does not run.
    auto copy = net;
    decltype(copy)::state st;
    nn::activation<cfg::fp32> a;
    CHECK_THROWS_AS(copy.forward_units(0, 1, a, st, nn::context{}), std::logic_error);
}

TEST_CASE("transformer operators outside BERT's patterns are priced value by value or as layers", "[onnx]") {
    const auto net = imported("transformer_ops.onnx");
    using k = tx::layer_kind;
    std::vector<k> kinds;
    for (const auto& l : net.layers()) kinds.push_back(l.kind);
    CHECK(kinds == std::vector<k>{k::layer_norm, k::token_linear, k::elementwise, k::elementwise, k::softmax, k::layout,
                                  k::layout, k::elementwise, k::view, k::batched, k::dropout});
    CHECK_FALSE(net.reads_tokens());
    CHECK(net.sample() == tensor::shape{1, 1, 4, 8});  // 4 positions of 8 features
    const tensor::shape x{2, 1, 4, 8};
    CHECK(net.cost(x).parameters == 8 + 8 + 64 + 8);
    CHECK(net.layers()[1].bias);
    CHECK(net.layers()[10].ratio == Approx(0.1));
    // By hand: 64 values; Tanh and the scale read one activation each, Sub two; Softmax's passes; the
    // product of d (4 × 8) and its transpose per sample: 4 × 4 results of 8 products.
    std::vector<double> forward;
    for (std::size_t u = 0; u < net.units(); ++u) forward.push_back(net.unit_cost(u, net.unit_input_shape(u, x)).forward_flops);
    const nn::cost all = net.cost(x);
    const double values = 2 * 4 * 8;
    const double norm = nn::layer_norm<cfg::fp32>(8, 1e-5).cost(x).forward_flops, linear = 2 * 8 * 8 * 8;
    const double product = 2.0 * 2 * 4 * 4 * 8, scores = 2 * 4 * 4;
    CHECK(all.forward_flops == norm + linear + values + values + 5 * values + 0 + 0 + values + product + 2 * scores);
    CHECK(net.output_shape(x) == tensor::shape{2, 1, 4, 4});
}

TEST_CASE("torchvision's ResNet-50 is priced as tessera's resnet50, unit by unit and in dry runs", "[onnx][dry-run]") {
    // scripts/export-onnx.py resnet50: training mode, no constant folding, export_params=False.
    const auto onnx_net = imported("resnet50.onnx");
    nn::resnet50<cfg::fp32> own(3, 1000);
    const tensor::shape x{4, 224, 224, 3};
    REQUIRE(onnx_net.units() == 21);  // conv1, bn1, maxpool, 16 blocks, avgpool, fc
    CHECK(onnx_net.cost(x).parameters == 25'557'032);
    CHECK(onnx_net.cost(x).parameters == own.cost(x).parameters);
    // The stem is three units, the head two; the blocks one each, as tessera's.
    tensor::shape s = x;
    for (std::size_t u = 0; u < own.units(); ++u) {
        const nn::cost want = own.unit_cost(u, s);
        const std::size_t first = u == 0 ? 0 : u + 2, last = u == 0 ? 3 : u == own.units() - 1 ? 21 : u + 3;
        INFO("unit " << own.unit_name(u) << " as units " << first << " to " << last);
        check_units(onnx_net, first, last, x, want);
        if (u > 0 && u + 1 < own.units()) {
            CHECK(onnx_net.unit_name(first) == "layer" + own.unit_name(u).substr(5, 1) + "." + own.unit_name(u).substr(7, 1));
            CHECK(onnx_net.unit_cost(first, s).inference_peak_bytes() == want.inference_peak_bytes());
        }
        s = own.unit_output_shape(u, s);
    }

    // Dry runs: one IPU, and a 4-stage 1F1B pipeline cut before the same blocks.
    const optim::sgd sgd({.learning_rate = 0.1, .momentum = 0.9});
    const tensor::shape sample{1, 224, 224, 3};
    using single = cfg::config<cfg::single, cfg::gradient_accumulation<4>, cfg::float_io, cfg::fp32>;
    using piped = cfg::config<cfg::pipelined<cfg::one_f_one_b, 4>, cfg::gradient_accumulation<8>, cfg::float_io, cfg::fp32>;
    exec::session_options settings;
    check_dry_runs(exec::dry_run<single>(onnx_net, sgd, sample, {.micro_batch = 4}, 1024, settings, 1, exec::over_budget::reported),
            exec::dry_run<single>(own, sgd, sample, {.micro_batch = 4}, 1024, settings, 1, exec::over_budget::reported));
    exec::session_options cut = settings, own_cut = settings;
    cut.first_units = {0, onnx_net.unit_index("layer2.0"), onnx_net.unit_index("/layer3/layer3.0/conv1/Conv"),
                       onnx_net.unit_index("layer4.0")};
    own_cut.first_units = {0, own.unit_index("layer2[0]"), own.unit_index("layer3[0]"), own.unit_index("layer4[0]")};
    check_dry_runs(exec::dry_run<piped>(onnx_net, sgd, sample, {.micro_batch = 4}, 1024, cut, 1, exec::over_budget::reported),
            exec::dry_run<piped>(own, sgd, sample, {.micro_batch = 4}, 1024, own_cut, 1, exec::over_budget::reported));
}

TEST_CASE("BERT-Base written in torch.nn is priced as tessera's bert-base, unit by unit and in dry runs",
          "[onnx][dry-run]") {
    // scripts/export-onnx.py bert-base: 128 tokens, dropout 0.1, export_params=False.
    const auto onnx_net = imported("bert_base.onnx");
    nn::transformer_spec spec = nn::bert_spec("base");
    spec.dropout = spec.attention_dropout = 0.1;
    const auto own = nn::make_bert<cfg::fp32>(spec, nn::shapes_only);
    REQUIRE(onnx_net.reads_tokens());
    CHECK(onnx_net.sample() == tensor::shape{1, 1, 128, 1});
    CHECK(onnx_net.parameters() == 109'514'298);  // the tied table counted once
    CHECK(onnx_net.parameters() == own.parameters());
    CHECK(onnx_net.tied_table_elements() == 30522 * 768);
    // Its units: the embedding, its layer norm and dropout; per block the attention half, ln_1, the
    // MLP half, ln_2; the head's dense, GELU, layer norm and decoder. Each of tessera's units is a run of them.
    REQUIRE(onnx_net.units() == 3 + 12 * 4 + 4);
    CHECK(onnx_net.unit_name(3) == "encoder.layer.0");
    CHECK(onnx_net.unit_index("encoder.layer.6") == own.unit_index("encoder.layer.6") * 4 - 1);
    const tensor::shape x{4, 1, 128, 1};
    tensor::shape s = x;
    for (std::size_t u = 0; u < own.units(); ++u) {
        const nn::cost want = own.unit_cost(u, s);
        const std::size_t first = u == 0 ? 0 : 4 * u - 1, last = u == 0 ? 3 : 4 * u + 3;
        INFO("unit " << own.unit_name(u) << " as units " << first << " to " << last);
        check_units(onnx_net, first, last, x, want);
        s = own.unit_output_shape(u, s);
    }
    // Dry runs: one IPU, and a 4-stage 1F1B pipeline cut before the same blocks.
    const optim::sgd sgd({.learning_rate = 0.1, .momentum = 0.9});
    const tensor::shape sample{1, 1, 128, 1};
    using single = cfg::config<cfg::single, cfg::gradient_accumulation<4>, cfg::float_io, cfg::half>;
    using piped = cfg::config<cfg::pipelined<cfg::one_f_one_b, 4>, cfg::gradient_accumulation<8>, cfg::float_io, cfg::half>;
    using half_bert = nn::bert<cfg::half>;
    const half_bert own_half = nn::make_bert<cfg::half>(spec, nn::shapes_only);
    const tx::imported_network<cfg::half> onnx_half(tx::read_model(dir / "bert_base.onnx"));
    const exec::token_loss<cfg::half> loss{};
    exec::session_options settings;
    check_dry_runs(exec::dry_run<single>(onnx_half, sgd, sample, {.micro_batch = 8}, 4096, settings, 1, exec::over_budget::reported, loss),
            exec::dry_run<single>(own_half, sgd, sample, {.micro_batch = 8}, 4096, settings, 1, exec::over_budget::reported, loss));
    exec::session_options cut = settings, own_cut = settings;
    for (const char* name : {"encoder.layer.3", "encoder.layer.6", "encoder.layer.9"}) {
        cut.first_units.push_back(onnx_half.unit_index(name));
        own_cut.first_units.push_back(own_half.unit_index(name));
    }
    cut.first_units.insert(cut.first_units.begin(), 0);
    own_cut.first_units.insert(own_cut.first_units.begin(), 0);
    check_dry_runs(exec::dry_run<piped>(onnx_half, sgd, sample, {.micro_batch = 8}, 4096, cut, 1, exec::over_budget::reported, loss),
            exec::dry_run<piped>(own_half, sgd, sample, {.micro_batch = 8}, 4096, own_cut, 1, exec::over_budget::reported, loss));
}

namespace {

/// Reads `file` in a child process: what it threw (empty: nothing) and how far its resident memory
/// rose above what it held before reading, in bytes.
std::pair<std::string, long> refusal_of(const std::filesystem::path& file) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(fds[0]);
        long pages = 0, resident = 0;
        if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
            if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
            std::fclose(f);
        }
        const long before = resident * ::sysconf(_SC_PAGESIZE);
        std::string what;
        try {
            const tx::imported_network<cfg::fp32> net(tx::read_model(file));
        } catch (const std::exception& e) {
            what = e.what();
        }
        rusage use{};
        ::getrusage(RUSAGE_SELF, &use);
        const std::string message = std::to_string(use.ru_maxrss * 1024 - before) + "\n" + what;
        const auto written = ::write(fds[1], message.data(), message.size());
        ::_exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
    }
    ::close(fds[1]);
    std::string text;
    char buffer[4096];
    for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, std::size_t(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    const auto newline = text.find('\n');
    return {text.substr(newline + 1), std::stol(text.substr(0, newline))};
}

}  // namespace

TEST_CASE("a bad file is refused by name, within its size plus 64 MB of memory", "[onnx][errors]") {
    const std::pair<const char*, std::vector<const char*>> cases[] = {
        {"unsupported.onnx", {"'/norm/LRN' (LRN)", "operator LRN is not supported", "Conv, BatchNormalization"}},
        {"grouped.onnx", {"'/conv/Conv' (Conv)", "group=3", "grouped convolution"}},
        {"declared_too_large.onnx", {"tensor 'w' declares 10000000000 elements", "holds 4 bytes"}},
        {"external_too_large.onnx", {"external_small.bin", "which holds 16"}},
        {"runtime_reshape.onnx", {"'/view/Reshape' (Reshape)", "computed at run time"}},
        {"opset9.onnx", {"opset 9", "11 to 17"}},
        {"truncated.onnx", {"truncated.onnx", "not an ONNX model, or truncated"}},
        {"not_a_model.onnx", {"not_a_model.onnx", "not an ONNX model"}},
        {"missing.onnx", {"missing.onnx", "cannot open"}},
    };
    for (const auto& [file, expected] : cases) {
        const std::filesystem::path path = dir / file;
        const auto [what, rise] = refusal_of(path);
        INFO(file << ": " << what << " (memory +" << rise << " bytes)");
        for (const char* part : expected) CHECK_THAT(what, Catch::Contains(part));
        const long size = std::filesystem::exists(path) ? long(std::filesystem::file_size(path)) : 0;
        CHECK(rise < size + (64L << 20));
    }
}

}  // namespace test_onnx
