// tessera's training step against libtorch's, the same network both ways:
// - ResNet-20 on 1×28×28 and torchvision's ResNet-18 on 3×32×32, both with projection shortcuts
//   (1×1 convolution + batch norm where the shape changes, option B), batch 32, fp32, softmax
//   cross-entropy, SGD with momentum 0.9 and weight decay 5e-4;
// - a GPT of GPT-2's pre-LN blocks: d = 256, 4 layers, 4 heads, MLP width 1,024, sequence 256,
//   batch 16, vocabulary 256 (bytes), learned positions, layer norms of eps 1e-5, GELU's tanh form,
//   a final layer norm and an LM head tied to the token table (3,290,624 parameters), per-token
//   softmax cross-entropy on the next token, AdamW (lr 1e-3, betas 0.9 and 0.999, eps 1e-8, weight
//   decay 0.01 on every parameter), fp32, dropout 0 on both sides, weights normal(0, 0.02) as
//   GPT-2's. libtorch 1.13 has no fused attention: its attention is written with bmm, a causal
//   mask (masked_fill with −inf) and softmax. Random ids and their next-token labels, seed 1.
//
// Each measurement is a process of its own (libtorch's: this program with --worker; tessera's:
// tessera_step_worker beside it, which does not link libtorch), so that each framework's peak
// resident memory is its own: the rounds alternate libtorch NCHW, libtorch channels-last and
// tessera (the GPT: libtorch and tessera), at 1 and 2 threads. libtorch runs at its best settings
// found here: oneDNN (MKL-DNN) on, intra-op threads = the thread count, one inter-op thread,
// OpenBLAS's threads = the thread count and its AVX-512 kernels (openblas_environment), gradients
// set to none between steps; both memory formats are measured for the ResNets and the
// faster one is the baseline. Counters: images/s (tokens/s for the GPT) of each (median of the
// rounds), tessera's ratio to the (faster) libtorch, and peak RSS of each process and their ratio.
//
//   bench_vs_libtorch                                  all of it (three rounds per model and thread count)
//   bench_vs_libtorch --benchmark_filter=gpt           the GPT only
//   bench_vs_libtorch --worker torch|torch-cl --threads N [--steps K] [--model resnet20|resnet18]
//   bench_vs_libtorch --worker torch --model gpt --threads N [--steps K] [--check 1]
//   tessera_step_worker --threads N [--steps K] [--model resnet20|resnet18|gpt] [--check 1]
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits.h>
#include <limits>
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

// ---- libtorch's GPT ---------------------------------------------------------------------------------

struct gpt_shape {
    std::int64_t width, layers, heads, length, batch, vocab;
};
constexpr gpt_shape gpt{256, 4, 4, 256, 16, 256};  // tessera_step_worker's gpt_spec()

// GPT-2's pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(x)); attention by hand, as 1.13 has no
// fused attention: the fused QKV projection, bmm, the causal mask, softmax, bmm, the projection.
struct GptBlockImpl : torch::nn::Module {
    explicit GptBlockImpl(const gpt_shape& s) : heads(s.heads) {
        using namespace torch::nn;
        ln_1 = register_module("ln_1", LayerNorm(LayerNormOptions({s.width}).eps(1e-5)));
        c_attn = register_module("c_attn", Linear(s.width, 3 * s.width));
        attn_proj = register_module("attn_proj", Linear(s.width, s.width));
        ln_2 = register_module("ln_2", LayerNorm(LayerNormOptions({s.width}).eps(1e-5)));
        c_fc = register_module("c_fc", Linear(s.width, 4 * s.width));
        mlp_proj = register_module("mlp_proj", Linear(4 * s.width, s.width));
    }
    torch::Tensor attention(const torch::Tensor& x, const torch::Tensor& future) {
        const std::int64_t n = x.size(0), t = x.size(1), d = x.size(2), dh = d / heads;
        const auto qkv = c_attn(x).split(d, 2);  // q, k, v: n × t × d each
        const auto by_head = [&](const torch::Tensor& a) {
            return a.view({n, t, heads, dh}).transpose(1, 2).reshape({n * heads, t, dh});
        };
        const auto q = by_head(qkv[0]), k = by_head(qkv[1]), v = by_head(qkv[2]);
        auto scores = torch::bmm(q, k.transpose(1, 2)).mul_(1.0 / std::sqrt(static_cast<double>(dh)));
        scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
        const auto y = torch::bmm(torch::softmax(scores, -1), v);  // (n · heads) × t × dh
        return attn_proj(y.view({n, heads, t, dh}).transpose(1, 2).reshape({n, t, d}));
    }
    torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& future) {
        auto h = x + attention(ln_1(x), future);
        return h + mlp_proj(torch::gelu(c_fc(ln_2(h)), "tanh"));
    }
    std::int64_t heads;
    torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
    torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
};
TORCH_MODULE(GptBlock);

// Token and position tables, the blocks, ln_f, and the LM head: the token table itself (tied).
// Weights normal(0, 0.02), biases 0, layer norms 1 and 0, as tessera's make_gpt2.
struct GptImpl : torch::nn::Module {
    explicit GptImpl(const gpt_shape& s) {
        using namespace torch::nn;
        wte = register_module("wte", Embedding(s.vocab, s.width));
        wpe = register_module("wpe", Embedding(s.length, s.width));
        for (std::int64_t i = 0; i < s.layers; ++i) blocks.push_back(register_module("h" + std::to_string(i), GptBlock(s)));
        ln_f = register_module("ln_f", LayerNorm(LayerNormOptions({s.width}).eps(1e-5)));
        torch::NoGradGuard no_grad;
        for (auto& p : named_parameters()) {
            if (p.key().find("ln_") != std::string::npos) continue;  // ones and zeros already
            if (p.key().size() > 5 && p.key().compare(p.key().size() - 5, 5, ".bias") == 0) p.value().zero_();
            else p.value().normal_(0.0, 0.02);
        }
        future = torch::ones({s.length, s.length}, torch::kBool).triu(1);  // key after query: masked
    }
    torch::Tensor forward(const torch::Tensor& ids) {  // n × t ids → n × t × vocab logits
        const auto positions = torch::arange(ids.size(1), torch::kLong);
        auto x = wte(ids) + wpe(positions);
        for (auto& b : blocks) x = b->forward(x, future);
        return torch::matmul(ln_f(x), wte->weight.t());
    }
    torch::nn::Embedding wte{nullptr}, wpe{nullptr};
    std::vector<GptBlock> blocks;
    torch::nn::LayerNorm ln_f{nullptr};
    torch::Tensor future;
};
TORCH_MODULE(Gpt);

// libtorch's GPT step on a batch of uniform ids (seed 1) labelled with the next id: seconds per
// step over `steps` steps after 3 warm-up steps; with `check`, the parameter count and each step's
// loss on stdout instead.
double torch_gpt_seconds_per_step(int threads, int steps, bool check) {
    torch::set_num_interop_threads(1);
    torch::set_num_threads(threads);
    at::globalContext().setUserEnabledMkldnn(true);
    torch::manual_seed(1);
    Gpt model(gpt);
    model->train();
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
    const auto sequence = torch::randint(0, gpt.vocab, {gpt.batch, gpt.length + 1}, torch::kLong);
    const auto ids = sequence.slice(1, 0, gpt.length).contiguous();
    const auto labels = sequence.slice(1, 1, gpt.length + 1).reshape({gpt.batch * gpt.length});
    const auto step = [&] {
        for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();  // set to none
        auto loss = torch::nn::functional::cross_entropy(model->forward(ids).view({gpt.batch * gpt.length, gpt.vocab}), labels);
        loss.backward();
        opt.step();
        return loss.item<double>();
    };
    if (check) {
        std::int64_t n = 0;
        for (const auto& p : model->parameters()) n += p.numel();
        std::printf("parameters %lld\nloss", static_cast<long long>(n));
        for (int i = 0; i < steps; ++i) std::printf(" %.4f", step());
        std::printf("\n");
        return 0;
    }
    for (int i = 0; i < 3; ++i) step();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
}

// ---- the rounds ------------------------------------------------------------------------------------

struct worker_result {
    double per_s = 0, peak_rss_mib = 0;  ///< images/s (ResNets) or tokens/s (GPT)
};

std::string self_path() {
    std::array<char, PATH_MAX> buf{};
    const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n <= 0) throw std::runtime_error("bench_vs_libtorch: cannot read /proc/self/exe");
    return std::string(buf.data(), static_cast<std::size_t>(n));
}

// The environment of a libtorch worker: Debian's libtorch does its GEMMs in OpenBLAS (pthreads),
// whose threads libtorch's set_num_threads does not set, so OPENBLAS_NUM_THREADS does; and OpenBLAS
// 0.3.21 takes a CPU it does not know (Emerald Rapids, family 6 model 207, among them) for a
// Prescott and runs its SSE3 kernels, 3.6× slower than its AVX-512 ones on the GPT here, so on an
// AVX-512 CPU OPENBLAS_CORETYPE=SkylakeX, unless it is set already.
std::string openblas_environment(int threads) {
    std::string env = "OPENBLAS_NUM_THREADS=" + std::to_string(threads) + " ";
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr && __builtin_cpu_supports("avx512f")) env += "OPENBLAS_CORETYPE=SkylakeX ";
    return env;
}

// The OpenBLAS kernels a libtorch worker runs (OPENBLAS_CORETYPE as openblas_environment sets it).
std::string openblas_core() {
    if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) return forced;
    return __builtin_cpu_supports("avx512f") ? "SkylakeX (forced)" : "detected";
}

// Runs a worker and reads its one line: "<images/s or tokens/s> <peak RSS MiB>". libtorch's are this program,
// tessera's the program beside it.
// `environment` is added to a libtorch worker's.
worker_result run_worker(const std::string& kind, const std::string& model, int threads, const std::string& environment = "") {
    const std::string self = self_path();
    const std::string program = kind == "tessera" ? self.substr(0, self.rfind('/') + 1) + "tessera_step_worker"
                                                  : openblas_environment(threads) + environment + self + " --worker " + kind;
    const std::string command = program + " --model " + model + " --threads " + std::to_string(threads);
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) throw std::runtime_error("bench_vs_libtorch: cannot start " + command);
    worker_result r;
    const int read = std::fscanf(pipe, "%lf %lf", &r.per_s, &r.peak_rss_mib);
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
        nchw.push_back(a.per_s), cl.push_back(b.per_s), ours.push_back(c.per_s);
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
                   (at::hasMKLDNN() ? ", oneDNN on" : ", no oneDNN") + ", OpenBLAS core " + openblas_core() +
                   ", best format " + (cl_best ? "channels-last" : "NCHW"));
}
BENCHMARK_CAPTURE(step_vs_libtorch, resnet20, std::string("resnet20"))->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kSecond);
BENCHMARK_CAPTURE(step_vs_libtorch, resnet18, std::string("resnet18"))->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kSecond);

// libtorch's GPT runs its OpenMP threads as they come (spinning while they wait) and passive
// (OMP_WAIT_POLICY=PASSIVE), both measured: at two threads here OpenBLAS's own threads and the
// spinning OpenMP ones took turns on the two cores, and the passive run was 1.2-1.4x as fast.
void gpt_step_vs_libtorch(benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    std::vector<double> spin_rate, passive_rate, ours, spin_rss, passive_rss, our_rss;
    for (auto _ : state) {  // one round: the three processes in turn
        const auto a = run_worker("torch", "gpt", threads), p = run_worker("torch", "gpt", threads, "OMP_WAIT_POLICY=PASSIVE ");
        const auto b = run_worker("tessera", "gpt", threads);
        spin_rate.push_back(a.per_s), passive_rate.push_back(p.per_s), ours.push_back(b.per_s);
        spin_rss.push_back(a.peak_rss_mib), passive_rss.push_back(p.peak_rss_mib), our_rss.push_back(b.peak_rss_mib);
    }
    const bool passive_best = median(passive_rate) > median(spin_rate);
    const auto& torch_rate = passive_best ? passive_rate : spin_rate;
    const auto& torch_rss = passive_best ? passive_rss : spin_rss;
    state.counters["libtorch_spinning_tokens_s"] = median(spin_rate);
    state.counters["libtorch_passive_tokens_s"] = median(passive_rate);
    state.counters["libtorch_tokens_s"] = median(torch_rate);
    state.counters["tessera_tokens_s"] = median(ours);
    state.counters["ratio_to_libtorch"] = median(ours) / median(torch_rate);
    state.counters["libtorch_peak_rss_MiB"] = median(torch_rss);
    state.counters["tessera_peak_rss_MiB"] = median(our_rss);
    state.counters["rss_ratio"] = median(our_rss) / median(torch_rss);
    state.SetLabel("libtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                   ", bmm attention, OpenBLAS core " + openblas_core() + ", best OpenMP wait " +
                   (passive_best ? "passive" : "spinning"));
}
BENCHMARK(gpt_step_vs_libtorch)->Name("step_vs_libtorch/gpt")->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kSecond);

int worker_main(int argc, char** argv) {
    std::string kind, model = "resnet20";
    int threads = 1, steps = 20;
    bool check = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view flag = argv[i];
        if (flag == "--worker") kind = argv[i + 1];
        else if (flag == "--model") model = argv[i + 1];
        else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
        else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
        else if (flag == "--check") check = std::atoi(argv[i + 1]) != 0;
    }
    const bool gpt_model = model == "gpt";
    if (threads < 1 || steps < 1 || (kind != "torch" && kind != "torch-cl") ||
        (model != "resnet20" && model != "resnet18" && !gpt_model) || (gpt_model && kind != "torch") ||
        (check && !gpt_model)) {
        std::fprintf(stderr, "usage: bench_vs_libtorch --worker torch|torch-cl --threads N [--steps K] [--model resnet20|resnet18]\n"
                             "       bench_vs_libtorch --worker torch --model gpt --threads N [--steps K] [--check 1]\n");
        return 2;
    }
    if (check) return (void)torch_gpt_seconds_per_step(threads, steps, true), 0;
    const bool cl = kind == "torch-cl";
    const double per_s = gpt_model ? static_cast<double>(gpt.batch * gpt.length) / torch_gpt_seconds_per_step(threads, steps, false)
                         : model == "resnet20" ? static_cast<double>(batch) / torch_seconds_per_step(resnet20_shape, 28, threads, cl, steps)
                                               : static_cast<double>(batch) / torch_seconds_per_step(resnet18_shape, 32, threads, cl, steps);
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    std::printf("%.3f %.1f\n", per_s, static_cast<double>(usage.ru_maxrss) / 1024.0);
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
