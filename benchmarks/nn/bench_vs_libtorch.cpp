// tessera's training step against libtorch's, the same network both ways: ResNet-20 on 1×28×28 and
// torchvision's ResNet-18 on 3×32×32, both with projection shortcuts (1×1 convolution + batch norm
// where the shape changes, option B), batch 32, fp32, softmax cross-entropy, SGD with momentum 0.9
// and weight decay 5e-4.
//
// Each measurement is a process of its own (libtorch's: this program with --worker; tessera's:
// tessera_step_worker beside it, which does not link libtorch), so that each framework's peak
// resident memory is its own: the rounds alternate libtorch NCHW, libtorch channels-last and
// tessera, at 1 and 2 threads. libtorch runs at its best settings found here: oneDNN (MKL-DNN) on,
// intra-op threads = the thread count, one inter-op thread, gradients set to none between steps; both
// memory formats are measured and the faster one is the baseline. Counters: images/s of each
// (median of the rounds), tessera's ratio to the faster libtorch, and peak RSS of each process.
//
//   bench_vs_libtorch                                  all of it (three rounds per model and thread count)
//   bench_vs_libtorch --worker torch|torch-cl --threads N [--steps K] [--model resnet20|resnet18]
//   tessera_step_worker --threads N [--steps K] [--model resnet20|resnet18]
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits.h>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>


namespace {

constexpr std::int64_t batch = 32, classes = 10;

// ---- libtorch's ResNet-20 -------------------------------------------------------------------------

struct BasicBlockImpl : torch::nn::Module {
    BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride) {
        using namespace torch::nn;
        conv1 = register_module("conv1", Conv2d(Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
        bn1 = register_module("bn1", BatchNorm2d(out));
        conv2 = register_module("conv2", Conv2d(Conv2dOptions(out, out, 3).stride(1).padding(1).bias(false)));
        bn2 = register_module("bn2", BatchNorm2d(out));
        if (stride != 1 || in != out) {
            down = register_module("down", Conv2d(Conv2dOptions(in, out, 1).stride(stride).bias(false)));
            down_bn = register_module("down_bn", BatchNorm2d(out));
        }
    }
    torch::Tensor forward(const torch::Tensor& x) {
        auto y = torch::relu(bn1(conv1(x)));
        y = bn2(conv2(y));
        return torch::relu(y + (down ? down_bn(down(x)) : x));
    }
    torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, down{nullptr};
    torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, down_bn{nullptr};
};
TORCH_MODULE(BasicBlock);

// A ResNet of basic blocks: a stem (convolution, batch norm, ReLU, and for ImageNet's 3×3 max
// pooling), `stages` stages of `blocks` blocks whose width doubles from `width` (stride 2 where it
// does), global average pooling and a 10-class head.
struct resnet_shape {
    std::int64_t in_channels, width, stem_kernel, stem_stride, stages, blocks;
    bool max_pool;
};
constexpr resnet_shape resnet20_shape{1, 16, 3, 1, 3, 3, false};  // tessera's cifar_stem, [3, 3, 3]
constexpr resnet_shape resnet18_shape{3, 64, 7, 2, 4, 2, true};   // torchvision's ResNet-18, [2, 2, 2, 2]

struct ResNetImpl : torch::nn::Module {
    explicit ResNetImpl(const resnet_shape& shape) : max_pool(shape.max_pool) {
        using namespace torch::nn;
        stem = register_module("stem", Conv2d(Conv2dOptions(shape.in_channels, shape.width, shape.stem_kernel)
                                                  .stride(shape.stem_stride)
                                                  .padding(shape.stem_kernel / 2)
                                                  .bias(false)));
        bn = register_module("bn", BatchNorm2d(shape.width));
        std::int64_t in = shape.width;
        for (std::int64_t stage = 0; stage < shape.stages; ++stage)
            for (std::int64_t b = 0; b < shape.blocks; ++b) {
                const std::int64_t width = shape.width << stage, stride = (b == 0 && stage > 0) ? 2 : 1;
                blocks->push_back(BasicBlock(in, width, stride));
                in = width;
            }
        register_module("blocks", blocks);
        fc = register_module("fc", Linear(in, classes));
    }
    torch::Tensor forward(const torch::Tensor& x) {
        auto y = torch::relu(bn(stem(x)));
        if (max_pool) y = torch::max_pool2d(y, {3, 3}, {2, 2}, {1, 1});
        return fc(torch::adaptive_avg_pool2d(blocks->forward(y), {1, 1}).flatten(1));
    }
    bool max_pool;
    torch::nn::Conv2d stem{nullptr};
    torch::nn::BatchNorm2d bn{nullptr};
    torch::nn::Sequential blocks;
    torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

// Seconds per step of libtorch's ResNet of `shape` on side × side images over `steps` steps (after
// 3 warm-up steps).
double torch_seconds_per_step(const resnet_shape& shape, std::int64_t side, int threads, bool channels_last, int steps) {
    torch::set_num_interop_threads(1);
    torch::set_num_threads(threads);
    at::globalContext().setUserEnabledMkldnn(true);
    torch::manual_seed(1);
    ResNet model(shape);
    model->train();
    auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    model->to(torch::kCPU, torch::kFloat32);
    if (channels_last)
        for (auto& p : model->parameters())
            if (p.dim() == 4) p.set_data(p.data().contiguous(format));
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(5e-4));
    const auto x = torch::randn({batch, shape.in_channels, side, side}).contiguous(format);
    const auto y = torch::randint(0, classes, {batch}, torch::kLong);
    const auto step = [&] {
        for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();  // set to none
        auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
        loss.backward();
        opt.step();
    };
    for (int i = 0; i < 3; ++i) step();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
}

// ---- the rounds ------------------------------------------------------------------------------------

struct worker_result {
    double images_per_s = 0, peak_rss_mib = 0;
};

std::string self_path() {
    std::array<char, PATH_MAX> buf{};
    const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n <= 0) throw std::runtime_error("bench_vs_libtorch: cannot read /proc/self/exe");
    return std::string(buf.data(), static_cast<std::size_t>(n));
}

// Runs a worker and reads its one line: "<images/s> <peak RSS MiB>". libtorch's are this program,
// tessera's the program beside it.
worker_result run_worker(const std::string& kind, const std::string& model, int threads) {
    const std::string self = self_path();
    const std::string program = kind == "tessera" ? self.substr(0, self.rfind('/') + 1) + "tessera_step_worker"
                                                  : self + " --worker " + kind;
    const std::string command = program + " --model " + model + " --threads " + std::to_string(threads);
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) throw std::runtime_error("bench_vs_libtorch: cannot start " + command);
    worker_result r;
    const int read = std::fscanf(pipe, "%lf %lf", &r.images_per_s, &r.peak_rss_mib);
    const int status = ::pclose(pipe);
    if (read != 2 || status != 0)
        throw std::runtime_error("bench_vs_libtorch: worker '" + command + "' failed (status " + std::to_string(status) + ")");
    return r;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

void step_vs_libtorch(benchmark::State& state, const std::string& model) {
    const int threads = static_cast<int>(state.range(0));
    std::vector<double> nchw, cl, ours, nchw_rss, cl_rss, our_rss;
    for (auto _ : state) {  // one round: the three processes in turn
        const auto a = run_worker("torch", model, threads), b = run_worker("torch-cl", model, threads);
        const auto c = run_worker("tessera", model, threads);
        nchw.push_back(a.images_per_s), cl.push_back(b.images_per_s), ours.push_back(c.images_per_s);
        nchw_rss.push_back(a.peak_rss_mib), cl_rss.push_back(b.peak_rss_mib), our_rss.push_back(c.peak_rss_mib);
    }
    const bool cl_best = median(cl) > median(nchw);
    const double torch_best = std::max(median(cl), median(nchw));
    state.counters["libtorch_nchw_img_s"] = median(nchw);
    state.counters["libtorch_channels_last_img_s"] = median(cl);
    state.counters["tessera_img_s"] = median(ours);
    state.counters["ratio_to_best_libtorch"] = median(ours) / torch_best;
    state.counters["libtorch_peak_rss_MiB"] = median(cl_best ? cl_rss : nchw_rss);
    state.counters["tessera_peak_rss_MiB"] = median(our_rss);
    state.counters["rss_ratio"] = median(our_rss) / median(cl_best ? cl_rss : nchw_rss);
    state.SetLabel("libtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                   (at::hasMKLDNN() ? ", oneDNN on" : ", no oneDNN") +
                   ", best format " + (cl_best ? "channels-last" : "NCHW"));
}
BENCHMARK_CAPTURE(step_vs_libtorch, resnet20, std::string("resnet20"))->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kSecond);
BENCHMARK_CAPTURE(step_vs_libtorch, resnet18, std::string("resnet18"))->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kSecond);

int worker_main(int argc, char** argv) {
    std::string kind, model = "resnet20";
    int threads = 1, steps = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view flag = argv[i];
        if (flag == "--worker") kind = argv[i + 1];
        else if (flag == "--model") model = argv[i + 1];
        else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
        else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    }
    if (threads < 1 || steps < 1 || (kind != "torch" && kind != "torch-cl") || (model != "resnet20" && model != "resnet18")) {
        std::fprintf(stderr, "usage: bench_vs_libtorch --worker torch|torch-cl --threads N [--steps K] [--model resnet20|resnet18]\n");
        return 2;
    }
    const bool cl = kind == "torch-cl";
    const double seconds = model == "resnet20" ? torch_seconds_per_step(resnet20_shape, 28, threads, cl, steps)
                                               : torch_seconds_per_step(resnet18_shape, 32, threads, cl, steps);
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    std::printf("%.3f %.1f\n", static_cast<double>(batch) / seconds, static_cast<double>(usage.ru_maxrss) / 1024.0);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::string_view(argv[1]) == "--worker") return worker_main(argc, argv);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
