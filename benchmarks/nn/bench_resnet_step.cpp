// One ResNet-20 training step (batch 32, 1×28×28: forward, loss, backward, SGD update) in fp32 ("32.32")
// and fp16 ("16.16", static loss scaling), on 1 and 2 threads: images/s, model FLOPs per image (the
// direct convolution's) beside the FLOPs executed (Winograd layers multiply 2.25× less), GFLOP/s, its ratio to single-threaded OpenBLAS sgemm 512³ measured in the same run, and the peak
// heap memory of model, optimiser, activations and workspaces. resnet20_two_thread_scaling times
// one- and two-thread steps in the same loop, beside the machine's own two-thread scaling, and
// resnet20_step_vs_openblas alternates single-thread steps with OpenBLAS sgemm 512³ in one loop.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "baseline.hpp"
#include "training_step.hpp"
#include "tessera/config.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

// Heap accounting for the peak-memory counter: every operator new/delete of the program.
namespace {
std::atomic<std::size_t> g_current{0}, g_peak{0};
void note_alloc(std::size_t n) noexcept {
    const std::size_t now = g_current.fetch_add(n) + n;
    std::size_t p = g_peak.load();
    while (now > p && !g_peak.compare_exchange_weak(p, now)) {}
}
}  // namespace

void* operator new(std::size_t n) {
    void* p = std::malloc(n + 16);
    if (p == nullptr) throw std::bad_alloc();
    *static_cast<std::size_t*>(p) = n;
    note_alloc(n);
    return static_cast<char*>(p) + 16;
}
void* operator new(std::size_t n, std::align_val_t a) {
    const std::size_t align = std::max<std::size_t>(static_cast<std::size_t>(a), 16);
    void* raw = std::aligned_alloc(align, (n + align + align - 1) / align * align);
    if (raw == nullptr) throw std::bad_alloc();
    auto* user = static_cast<char*>(raw) + align;
    reinterpret_cast<std::size_t*>(user)[-1] = n;
    reinterpret_cast<void**>(user)[-2] = raw;
    note_alloc(n);
    return user;
}
void operator delete(void* p) noexcept {
    if (p == nullptr) return;
    char* base = static_cast<char*>(p) - 16;
    g_current.fetch_sub(*reinterpret_cast<std::size_t*>(base));
    std::free(base);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void operator delete(void* p, std::align_val_t) noexcept {
    if (p == nullptr) return;
    g_current.fetch_sub(static_cast<std::size_t*>(p)[-1]);
    std::free(static_cast<void**>(p)[-2]);
}
void operator delete(void* p, std::size_t, std::align_val_t a) noexcept { operator delete(p, a); }

namespace {

using namespace tessera;

// A ResNet-20 training step of precision P (model, optimiser, loss scaling, fixed input) whose
// call runs one step on `threads` threads (at most the pool's) and returns its wall time.
template <class P, class Scaling>
class timed_step {
public:
    explicit timed_step(std::size_t pool_threads = 2)
        : m_x(tensor::make_nhwc<typename P::data_type>({batch, 28, 28, 1})), m_labels(batch), m_pool(pool_threads) {
        std::mt19937 rng(1);
        std::normal_distribution<float> dist;
        for (auto& v : m_x) v = kernels::detail::store_as<typename P::data_type>(dist(rng));
        for (auto& l : m_labels) l = static_cast<std::int32_t>(rng() % 10);
        for (std::size_t t = 1; t <= pool_threads; ++t) (void)(*this)(t);  // warm up workspaces
    }
    double operator()(std::size_t threads) {
        const nn::context ctx{.mode = nn::mode::train, .threads = threads, .pool = &m_pool, .scratch = &m_scratch};
        const auto t0 = std::chrono::steady_clock::now();
        m_loss(m_model.forward(m_x, m_state, ctx), m_labels, m_scaler.scale());
        m_model.backward(m_loss.gradient(), m_state, ctx, false);
        m_scaler.step(m_model, m_opt);
        optim::zero_grad(m_model);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    [[nodiscard]] double flops() const { return static_cast<double>(batch) * m_model.cost({1, 28, 28, 1}).flops(); }
    static constexpr std::size_t batch = 32;

private:
    nn::resnet20<P> m_model{1, 10};
    optim::sgd m_opt{{.learning_rate = 0.01, .momentum = 0.9, .weight_decay = 5e-4}};
    optim::loss_scaler<Scaling> m_scaler;
    nn::softmax_cross_entropy<P> m_loss;
    typename nn::resnet20<P>::state m_state;
    tensor::dense<typename P::data_type, 4> m_x;
    std::vector<std::int32_t> m_labels;
    kernels::thread_pool m_pool;
    kernels::scratch m_scratch;  // the layers' shared scratch, as a session's IPU gives them
};

// FLOPs a ResNet-20 step on 28 × 28 images really executes, per image, beside the model FLOPs it
// is credited with (nn::cost: 2 × multiply-adds of the direct convolution). Convolutions that run
// as Winograd F(m×m, 3×3) (kernels::winograd_tile, automatic choice) multiply (m + 2)² values per
// m × m output tile and channel pair in each of their three passes instead of 9·m²
// (bench::executed_share); their transforms are not counted. The stem computes no input gradient
// (want_dx = false).
struct conv_desc {
    std::size_t h, w, cin, cout, stride;
};
inline double resnet20_executed_flops_per_image(double model_flops_per_image) {
    std::vector<conv_desc> convs{{28, 28, 1, 16, 1}};
    std::size_t side = 28, ch = 16;
    for (std::size_t stage = 0; stage < 3; ++stage)
        for (std::size_t b = 0; b < 3; ++b) {
            const std::size_t width = 16u << stage, stride = (b == 0 && stage > 0) ? 2 : 1;
            convs.push_back({side, side, ch, width, stride});
            side = (side + stride - 1) / stride;
            convs.push_back({side, side, width, width, 1});
            ch = width;
        }
    double model = 0, executed = 0;
    for (std::size_t i = 0; i < convs.size(); ++i) {
        const auto& c = convs[i];
        const std::size_t oh = (c.h + c.stride - 1) / c.stride, ow = (c.w + c.stride - 1) / c.stride;
        const double direct = 2.0 * double(oh * ow) * 9.0 * double(c.cin * c.cout);  // one pass
        model += 3 * direct;  // as nn::cost counts it: forward, data and weight gradients
        const double passes = i == 0 ? 2 : 3;
        executed += passes * direct * bench::executed_share({1, c.h, c.w, c.cin}, c.cout, {3, 3, c.stride, 1});
    }
    return model_flops_per_image - model + executed;
}

template <class P, class Scaling>
void resnet20_step(benchmark::State& state) {
    const std::size_t threads = static_cast<std::size_t>(state.range(0));
    const double blas = bench::openblas_512();  // before our allocations, so they do not count
    const std::size_t before = g_current.load();
    g_peak.store(before);
    {
        timed_step<P, Scaling> step(threads);
        for (auto _ : state) (void)step(threads);
        const double flops_per_image = step.flops() / static_cast<double>(step.batch);
        const double images = static_cast<double>(step.batch * state.iterations());
        state.counters["images_per_s"] = benchmark::Counter(images, benchmark::Counter::kIsRate);
        state.counters["GFLOPs"] = benchmark::Counter(images * flops_per_image / 1e9, benchmark::Counter::kIsRate);
        state.counters["MFLOP_per_image"] = flops_per_image / 1e6;
        const double executed = resnet20_executed_flops_per_image(flops_per_image);
        state.counters["executed_MFLOP_per_image"] = executed / 1e6;
        state.counters["executed_GFLOPs"] = benchmark::Counter(images * executed / 1e9, benchmark::Counter::kIsRate);
        state.counters["openblas_512_GFLOPs"] = blas;
        state.counters["peak_MB"] = static_cast<double>(g_peak.load() - before) / 1e6;
    }
    state.SetLabel(std::string(P::name));
}

// Two-thread scaling measured within one run: each iteration times a one-thread step, a two-thread
// step and, as the machine's ceiling at that moment, the same FMA work on one thread and split over two.
template <class P, class Scaling>
void resnet20_two_thread_scaling(benchmark::State& state) {
    timed_step<P, Scaling> step;
    auto machine = [&](int threads) {
        constexpr long work = 4'000'000;  // ~25 ms of FMAs on one core
        const auto t0 = std::chrono::steady_clock::now();
        float a = 0, b = 0;
        if (threads == 1) {
            a = bench::fma_work(work);
        } else {
            std::jthread other([&] { b = bench::fma_work(work / 2); });
            a = bench::fma_work(work / 2);
        }
        benchmark::DoNotOptimize(a + b);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    double one = 0, two = 0, m1 = 0, m2 = 0;
    for (auto _ : state) {
        one += step(1);
        two += step(2);
        m1 += machine(1);
        m2 += machine(2);
    }
    state.counters["two_thread_scaling"] = one / two;
    state.counters["machine_two_thread_scaling"] = m1 / m2;
    state.counters["scaling_over_machine"] = (one / two) / (m1 / m2);
    state.SetLabel(std::string(P::name));
}

// The single-thread target's ratio measured within one loop: each iteration times one step and, right
// after it, OpenBLAS sgemm 512³ calls taking about as long, so both see the machine at the same
// moments; both GFLOP/s are totals over the loop (means, not best batches).
template <class P, class Scaling>
void resnet20_step_vs_openblas(benchmark::State& state) {
    timed_step<P, Scaling> step;
    bench::openblas_core();
    constexpr int n = 512;
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
    auto sgemm = [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    };
    sgemm();
    const double sgemm_flops = 2.0 * n * n * n;
    const int calls = std::max(1, static_cast<int>(step.flops() / sgemm_flops / 2));  // ~ the step's time at half its speed
    double ours = 0, theirs = 0;
    for (auto _ : state) {
        ours += step(1);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) sgemm();
        theirs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const double iters = static_cast<double>(state.iterations());
    const double ours_gflops = step.flops() * iters / ours / 1e9, blas_gflops = sgemm_flops * calls * iters / theirs / 1e9;
    state.counters["step_GFLOPs"] = ours_gflops;
    state.counters["openblas_512_GFLOPs"] = blas_gflops;
    state.counters["step_over_openblas"] = ours_gflops / blas_gflops;  // model FLOPs (as credited)
    const double executed = resnet20_executed_flops_per_image(step.flops() / double(step.batch)) * double(step.batch);
    state.counters["executed_step_over_openblas"] = executed * iters / ours / 1e9 / blas_gflops;  // FLOPs really run
    state.SetLabel(std::string(P::name));
}

}  // namespace

BENCHMARK_TEMPLATE(resnet20_two_thread_scaling, config::fp32, config::no_loss_scaling)
    ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK_TEMPLATE(resnet20_two_thread_scaling, config::half, config::static_loss_scaling<1024.0>)
    ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK_TEMPLATE(resnet20_step_vs_openblas, config::fp32, config::no_loss_scaling)
    ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK_TEMPLATE(resnet20_step_vs_openblas, config::half, config::static_loss_scaling<1024.0>)
    ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);

// ratio to OpenBLAS: GFLOPs / openblas_512_GFLOPs (both in the output of the same run).
BENCHMARK_TEMPLATE(resnet20_step, config::fp32, config::no_loss_scaling)
    ->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_TEMPLATE(resnet20_step, config::half, config::static_loss_scaling<1024.0>)
    ->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
