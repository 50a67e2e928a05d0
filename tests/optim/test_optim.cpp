// Optimisers against hand-written references, schedules, loss scaling (16.16 converges), gradient
// buffers, and checkpoints: exact resume and every kind of corrupt file.
#include <catch2/catch.hpp>

#include <span>

#include <algorithm>

#include <cstring>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "tessera/config.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

namespace test_optim {

using namespace tessera;

namespace {

/// Two parameter tensors with gradients, as a ParameterSet.
struct toy_params {
    std::vector<float> a{0.5f, -1.0f, 2.0f}, b{0.25f};
    std::vector<float> ga{0.1f, -0.2f, 0.3f}, gb{-1.0f};
    template <class F>
    void visit_parameters(F&& f) {
        f("a", std::span<float>(a), std::span<float>(ga));
        f("b", std::span<float>(b), std::span<float>(gb));
    }
};
static_assert(optim::ParameterSet<toy_params>);

/// One parameter of any length stored as W, with fp32 gradients, as a ParameterSet.
template <class W = float>
struct wide_params {
    std::vector<W> w;
    std::vector<float> g;
    template <class F>
    void visit_parameters(F&& f) {
        f("w", std::span<W>(w), std::span<float>(g));
    }
};

std::filesystem::path temp_path(const std::string& name) {
    return std::filesystem::temp_directory_path() / ("tessera_test_" + std::to_string(::getpid()) + "_" + name);
}

/// Files named "<path>.tmp..." in path's directory: save_checkpoint's temporary files left behind.
std::size_t temporary_files_beside(const std::filesystem::path& path) {
    std::size_t n = 0;
    const std::string prefix = path.filename().string() + ".tmp";
    for (const auto& e : std::filesystem::directory_iterator(path.parent_path()))
        n += e.path().filename().string().rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
}

}  // namespace

TEST_CASE("sgd follows PyTorch's update rule: momentum, dampening, Nesterov, weight decay", "[optim][sgd]") {
    for (const bool nesterov : {false, true}) {
        toy_params p;
        const optim::sgd_options o{.learning_rate = 0.1, .momentum = 0.9, .dampening = nesterov ? 0.0 : 0.2,
                                   .weight_decay = 0.01, .nesterov = nesterov};
        optim::sgd opt(o);
        std::vector<double> x(p.a.begin(), p.a.end()), buf(3, 0.0);
        for (int step = 0; step < 3; ++step) {
            opt.step(p, 0.5);  // gradients carry a loss scale of 2
            for (std::size_t k = 0; k < 3; ++k) {
                double g = p.ga[k] * 0.5 + o.weight_decay * x[k];
                buf[k] = step == 0 ? g : o.momentum * buf[k] + (1 - o.dampening) * g;
                g = nesterov ? g + o.momentum * buf[k] : buf[k];
                x[k] -= o.learning_rate * g;
                REQUIRE(p.a[k] == Approx(x[k]).epsilon(1e-6));
            }
        }
        REQUIRE(opt.steps() == 3);
    }
    REQUIRE_THROWS_AS(optim::sgd({.learning_rate = -1}), std::invalid_argument);
    REQUIRE_THROWS_AS(optim::sgd({.momentum = 0, .nesterov = true}), std::invalid_argument);
}

TEST_CASE("adamw follows the decoupled-decay update with bias correction", "[optim][adamw]") {
    toy_params p;
    const optim::adamw_options o{.learning_rate = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
    optim::adamw opt(o);
    double x = p.b[0], m = 0, v = 0;
    for (int t = 1; t <= 4; ++t) {
        p.gb[0] = static_cast<float>(-1.0 + 0.3 * t);
        opt.step(p);
        const double g = p.gb[0];
        x *= 1 - o.learning_rate * o.weight_decay;
        m = o.beta1 * m + (1 - o.beta1) * g;
        v = o.beta2 * v + (1 - o.beta2) * g * g;
        x -= o.learning_rate * (m / (1 - std::pow(o.beta1, t))) / (std::sqrt(v / (1 - std::pow(o.beta2, t))) + o.eps);
        REQUIRE(p.b[0] == Approx(x).epsilon(1e-6));
    }
    REQUIRE_THROWS_AS(optim::adamw({.beta1 = 1.0}), std::invalid_argument);
}

TEST_CASE("sgd and adamw fuse each product into the sum it feeds, as simd::fused_multiply_add rounds it, bit for bit",
          "[optim][sgd][adamw]") {
    // One parameter of 1,000 values and gradients over several octaves: a product left to the
    // compiler's contraction, or fused with the other operand of its sum, rounds differently for some.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    wide_params<> start;
    for (int k = 0; k < 1000; ++k) {
        start.w.push_back(u(rng) * std::ldexp(1.0f, k % 7 - 3));
        start.g.push_back(u(rng) * std::ldexp(1.0f, k % 5 - 2));
    }
    const auto fused = [](float a, float b, float c) { return kernels::simd::fused_multiply_add(a, b, c); };
    const auto gradients = [&](auto& p, int step) {
        for (std::size_t k = 0; k < p.g.size(); ++k) p.g[k] = start.g[(k + static_cast<std::size_t>(step) * 31) % p.g.size()];
    };
    for (const bool nesterov : {false, true}) {
        const optim::sgd_options o{.learning_rate = 0.1, .momentum = 0.9, .dampening = nesterov ? 0.0 : 0.3,
                                   .weight_decay = 0.01, .nesterov = nesterov};
        const float lr = 0.1f, mom = 0.9f, damp = static_cast<float>(1.0 - o.dampening), wd = 0.01f, gs = 0.5f;
        wide_params<> p = start;
        std::vector<float> x = start.w, b(x.size());
        optim::sgd opt(o);
        for (int step = 0; step < 3; ++step) {
            gradients(p, step);
            opt.step(p, 0.5);
            for (std::size_t k = 0; k < x.size(); ++k) {
                float g = fused(p.g[k], gs, wd * x[k]);
                b[k] = step == 0 ? g : fused(mom, b[k], damp * g);
                g = nesterov ? fused(mom, b[k], g) : b[k];
                x[k] = fused(-lr, g, x[k]);
            }
            REQUIRE(p.w == x);
        }
    }
    const optim::adamw_options o{.learning_rate = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
    wide_params<> p = start;
    std::vector<float> x = start.w, m(x.size()), v(x.size());
    optim::adamw opt(o);
    const float b1 = 0.9f, b2 = 0.99f, lr = 0.01f, decay = static_cast<float>(1.0 - 0.01 * 0.1);
    for (int t = 1; t <= 3; ++t) {
        gradients(p, t);
        opt.step(p);
        const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(0.9, t))), c2 = static_cast<float>(1.0 / (1.0 - std::pow(0.99, t)));
        for (std::size_t k = 0; k < x.size(); ++k) {
            const float g = p.g[k];
            m[k] = fused(b1, m[k], (1 - b1) * g);
            v[k] = fused(b2, v[k], (1 - b2) * g * g);
            x[k] = fused(x[k], decay, -(lr * (m[k] * c1) / (std::sqrt(v[k] * c2) + 1e-8f)));
        }
        REQUIRE(p.w == x);
    }
    // 16-bit weights rounded to nearest: the update in fp32, each element rounded once to half.
    wide_params<tensor::half> h{{}, start.g};
    for (const float w : start.w) h.w.emplace_back(w);
    std::vector<tensor::half> y = h.w;
    std::vector<float> hb(y.size());
    optim::sgd hopt({.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    for (int step = 0; step < 3; ++step) {
        gradients(h, step);
        hopt.step(h);
        for (std::size_t k = 0; k < y.size(); ++k) {
            const float w = static_cast<float>(y[k]), g = fused(h.g[k], 1.0f, 0.01f * w);
            hb[k] = step == 0 ? g : fused(0.9f, hb[k], 1.0f * g);
            y[k] = tensor::half(fused(-0.1f, hb[k], w));
        }
        REQUIRE(std::equal(h.w.begin(), h.w.end(), y.begin(), [](tensor::half a, tensor::half b) { return a.bits() == b.bits(); }));
    }
}

TEST_CASE("step and cosine learning-rate schedules", "[optim][schedule]") {
    const optim::step_lr s{.base = 0.1, .step_size = 30, .gamma = 0.1};
    REQUIRE(s(0) == Approx(0.1));
    REQUIRE(s(29) == Approx(0.1));
    REQUIRE(s(30) == Approx(0.01));
    REQUIRE(s(65) == Approx(0.001));
    const optim::cosine_lr c{.base = 0.1, .total = 100, .min = 0.001, .warmup = 0};
    REQUIRE(c(0) == Approx(0.1));
    REQUIRE(c(50) == Approx(0.001 + 0.099 * 0.5));
    REQUIRE(c(100) == Approx(0.001));
    const optim::cosine_lr w{.base = 0.2, .total = 20, .min = 0.0, .warmup = 4};
    REQUIRE(w(0) == Approx(0.05));
    REQUIRE(w(3) == Approx(0.2));
    REQUIRE(w(4) == Approx(0.2));
    REQUIRE(w(12) == Approx(0.1));
    REQUIRE_THROWS_AS((optim::cosine_lr{.total = 5, .warmup = 5})(0), std::invalid_argument);
}

TEST_CASE("gradient buffers sum or average micro-batches and combine replicas", "[optim][accumulation]") {
    toy_params p;
    optim::gradient_buffer acc, other;
    for (int mb = 1; mb <= 3; ++mb) {
        p.ga = {float(mb), 0.0f, -float(mb)};
        p.gb = {2.0f};
        acc.accumulate(p);
    }
    REQUIRE(acc.count() == 3);
    acc.write_to(p, optim::reduction::mean);
    REQUIRE(p.ga == std::vector<float>{2.0f, 0.0f, -2.0f});
    acc.write_to(p, optim::reduction::sum);
    REQUIRE(p.gb[0] == 6.0f);
    other.accumulate(p);  // gb = 6
    acc.add(other);
    acc.write_to(p, optim::reduction::mean);
    REQUIRE(p.gb[0] == Approx(3.0f));  // (2+2+2+6)/4
    acc.clear();
    REQUIRE(acc.count() == 0);
    REQUIRE_THROWS_AS(acc.write_to(p), std::logic_error);
}

TEST_CASE("loss scaling: static keeps its factor, dynamic skips overflowing updates and grows back", "[optim][loss_scaling]") {
    toy_params p;
    optim::sgd opt({.learning_rate = 1.0});
    optim::loss_scaler<config::static_loss_scaling<128.0>> fixed;
    p.ga = {128.0f, 0.0f, 0.0f};
    REQUIRE(fixed.step(p, opt));
    REQUIRE(p.a[0] == Approx(-0.5f));  // 0.5 − 1.0 · 128/128
    REQUIRE(fixed.scale() == 128.0);

    optim::loss_scaler<config::dynamic_loss_scaling<1024.0, 2, 2.0>> dyn;
    const float before = p.a[0];
    p.ga[0] = std::numeric_limits<float>::infinity();
    REQUIRE_FALSE(dyn.step(p, opt));
    REQUIRE(p.a[0] == before);  // skipped
    REQUIRE(dyn.scale() == 512.0);
    REQUIRE(dyn.skipped() == 1);
    p.ga[0] = 0;
    REQUIRE(dyn.step(p, opt));
    REQUIRE(dyn.scale() == 512.0);
    REQUIRE(dyn.step(p, opt));
    REQUIRE(dyn.scale() == 1024.0);  // two clean updates: grow
}

namespace {

/// A small convolutional classifier on a synthetic task: the class is the quadrant holding a bright blob.
template <class P>
auto make_net() {
    auto net = nn::sequential(nn::conv2d<P>(1, 8, {3, 3, 1, 1}), nn::batch_norm<P>(8), nn::relu<P>(),
                              nn::conv2d<P>(8, 8, {3, 3, 2, 1}), nn::batch_norm<P>(8), nn::relu<P>(),
                              nn::linear<P>(4 * 4 * 8, 4));
    std::mt19937_64 rng(3);
    net.initialize(rng);
    return net;
}

void make_batch(std::mt19937& rng, std::vector<float>& x, std::vector<std::int32_t>& y, std::size_t n) {
    std::normal_distribution<float> noise(0.0f, 1.0f);
    x.assign(n * 64, 0.0f);
    y.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        y[i] = static_cast<std::int32_t>(rng() % 4);
        const std::size_t oy = (y[i] / 2) * 4, ox = (y[i] % 2) * 4;
        for (std::size_t p = 0; p < 64; ++p) x[i * 64 + p] = noise(rng);
        for (std::size_t dy = 1; dy < 3; ++dy)
            for (std::size_t dx = 1; dx < 3; ++dx) x[i * 64 + (oy + dy) * 8 + ox + dx] += 1.0f;
    }
}

/// Trains for `steps` updates; returns the mean loss of the last 10.
template <class P, class Scaling>
double train(std::size_t steps, optim::loss_scaler<Scaling>& scaler) {
    auto net = make_net<P>();
    optim::sgd opt({.learning_rate = 0.05, .momentum = 0.9});
    nn::softmax_cross_entropy<P> loss;
    typename decltype(net)::state st;
    std::mt19937 rng(7);
    std::vector<float> xf;
    std::vector<std::int32_t> y;
    auto x = tensor::make_nhwc<typename P::data_type>({16, 8, 8, 1});
    double tail = 0;
    for (std::size_t s = 0; s < steps; ++s) {
        make_batch(rng, xf, y, 16);
        kernels::convert_n(xf.data(), x.data(), xf.size());
        const auto r = loss(net.forward(x, st, {}), y, scaler.scale());
        net.backward(loss.gradient(), st, {}, false);
        scaler.step(net, opt);
        optim::zero_grad(net);
        if (s + 10 >= steps) tail += r.loss / 10;
    }
    return tail;
}

}  // namespace

TEST_CASE("16.16 training converges with loss scaling, as fp32 does", "[optim][loss_scaling][half]") {
    optim::loss_scaler<config::no_loss_scaling> none;
    const double fp32 = train<config::fp32>(120, none);
    // Starts at 2^24: dlogits = 2^24·(p − onehot)/16 overflows fp16 (max 65504) until the scale has halved enough.
    optim::loss_scaler<config::dynamic_loss_scaling<16777216.0, 50, 2.0>> dyn;
    const double half = train<config::half>(120, dyn);
    optim::loss_scaler<config::static_loss_scaling<256.0>> fixed;
    const double half_static = train<config::half>(120, fixed);
    CAPTURE(fp32, half, half_static, dyn.scale(), dyn.skipped());
    REQUIRE(fp32 < 0.8);  // ln 4 = 1.39 at chance; the noise keeps the best loss near 0.5
    REQUIRE(half < 0.8);
    REQUIRE(half_static < 0.8);
    REQUIRE(std::abs(half - fp32) < 0.15);
    REQUIRE(dyn.skipped() >= 4);  // 2^24 → 2^20 at least
    REQUIRE(dyn.scale() < 16777216.0);
}

TEST_CASE("checkpoints resume training exactly", "[optim][checkpoint]") {
    using P = config::fp32;
    const auto path = temp_path("resume.ckpt");
    auto run_steps = [](auto& net, auto& opt, std::mt19937& rng, int steps) {
        nn::softmax_cross_entropy<P> loss;
        typename std::remove_reference_t<decltype(net)>::state st;
        std::vector<float> xf;
        std::vector<std::int32_t> y;
        auto x = tensor::make_nhwc<float>({8, 8, 8, 1});
        for (int s = 0; s < steps; ++s) {
            make_batch(rng, xf, y, 8);
            std::ranges::copy(xf, x.begin());
            loss(net.forward(x, st, {}), y);
            net.backward(loss.gradient(), st, {}, false);
            opt.step(net);
            optim::zero_grad(net);
        }
    };
    auto a = make_net<P>();
    optim::sgd opt_a({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
    std::mt19937 rng_a(1);
    run_steps(a, opt_a, rng_a, 3);
    optim::save_checkpoint(path, a, opt_a, {{"epoch", 3.0}});
    REQUIRE(temporary_files_beside(path) == 0);
    std::mt19937 rng_b = rng_a;
    run_steps(a, opt_a, rng_a, 3);

    auto b = make_net<P>();
    std::mt19937_64 other(99);
    b.initialize(other);  // different weights, overwritten by the load
    optim::sgd opt_b({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
    std::map<std::string, double> scalars;
    optim::load_checkpoint(path, b, opt_b, &scalars);
    REQUIRE(scalars.at("epoch") == 3.0);
    REQUIRE(opt_b.steps() == 3);
    run_steps(b, opt_b, rng_b, 3);

    std::vector<float> wa, wb;
    a.visit_parameters([&](std::string_view, std::span<float> v, auto) { wa.insert(wa.end(), v.begin(), v.end()); });
    b.visit_parameters([&](std::string_view, std::span<float> v, auto) { wb.insert(wb.end(), v.begin(), v.end()); });
    REQUIRE(wa == wb);  // bit-identical: same data, same order of operations, same state
    std::vector<float> ra, rb;
    a.visit_buffers([&](std::string_view, std::span<float> v) { ra.insert(ra.end(), v.begin(), v.end()); });
    b.visit_buffers([&](std::string_view, std::span<float> v) { rb.insert(rb.end(), v.begin(), v.end()); });
    REQUIRE(ra == rb);

    // AdamW state and half weights round-trip too: after steps that moved weights and moments away
    // from their initial values, a differently initialised network and a fresh AdamW take them all.
    nn::resnet20<config::half> h(1, 10);
    optim::adamw adam({.learning_rate = 0.01});
    adam.prepare(h);
    h.visit_parameters([](std::string_view, auto, auto grad) {
        for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = 0.01f * float(i % 7) - 0.02f;
    });
    adam.step(h);
    adam.step(h);
    const auto hpath = temp_path("half.ckpt");
    optim::save_checkpoint(hpath, h, adam);
    nn::resnet20<config::half> h2(1, 10);
    std::mt19937_64 reseed(12345);
    h2.initialize(reseed);
    optim::adamw adam2;
    optim::load_checkpoint(hpath, h2, adam2);
    const auto half_bits = [](nn::resnet20<config::half>& net) {
        std::vector<std::uint16_t> bits;
        net.visit_parameters([&](std::string_view, auto v, auto) {
            for (const auto x : v) {
                std::uint16_t pattern;
                std::memcpy(&pattern, &x, sizeof pattern);
                bits.push_back(pattern);
            }
        });
        return bits;
    };
    const auto state = [](optim::adamw& o) {
        std::vector<float> all;
        o.visit_state([&](std::string_view, std::span<float> v) { all.insert(all.end(), v.begin(), v.end()); });
        return all;
    };
    CHECK(half_bits(h2) == half_bits(h));
    CHECK(state(adam2) == state(adam));
    CHECK(adam2.steps() == 2);
    const auto moments = state(adam);
    CHECK(std::any_of(moments.begin(), moments.end(), [](float v) { return v != 0.0f; }));
    std::filesystem::remove(hpath);
    std::filesystem::remove(path);
}

namespace {
// A parameter set that names two parameters alike, and an optimizer with an impossible step count:
// what save_checkpoint writes from them has valid checksums, so only the structural checks can refuse it.
struct twins {
    std::vector<float> a = {1, 2}, b = {3, 4}, g = {0, 0};
    template <class F>
    void visit_parameters(F&& f) {
        f("w", std::span<float>(a), std::span<float>(g));
        f("w", std::span<float>(b), std::span<float>(g));
    }
};
struct one {
    std::vector<float> a = {1, 2}, g = {0, 0};
    template <class F>
    void visit_parameters(F&& f) {
        f("w", std::span<float>(a), std::span<float>(g));
    }
};
struct far_future_optimizer {
    std::uint64_t n = std::uint64_t{1} << 60;
    template <class F>
    void visit_state(F&&) {}
    template <class S>
    void prepare(S&) {}
    [[nodiscard]] std::uint64_t steps() const { return n; }
    void set_steps(std::uint64_t s) { n = s; }
};
}  // namespace

TEST_CASE("checkpoints with valid checksums but a wrong structure are refused, and change nothing", "[optim][checkpoint]") {
    const auto path = temp_path("structure.ckpt");
    twins t;
    optim::sgd sgd;
    optim::save_checkpoint(path, t, sgd);
    one o;
    REQUIRE_THROWS_WITH(optim::load_checkpoint(path, o, sgd), Catch::Contains("entry 'w' appears twice"));
    far_future_optimizer future;
    optim::save_checkpoint(path, o, future);
    optim::sgd plain;
    REQUIRE_THROWS_WITH(optim::load_checkpoint(path, o, plain), Catch::Contains("not a whole number of steps"));
    // A momentum SGD loading a file without momentum: refused, and its state is not even allocated.
    optim::save_checkpoint(path, o, plain);
    optim::sgd momentum({.momentum = 0.9});
    REQUIRE_THROWS_WITH(optim::load_checkpoint(path, o, momentum), Catch::Contains("no entry 'momentum.0'"));
    std::size_t buffers = 0;
    momentum.visit_state([&](std::string_view, std::span<float>) { ++buffers; });
    CHECK(buffers == 0);
    CHECK(o.a == std::vector<float>{1, 2});
    std::filesystem::remove(path);
}

TEST_CASE("two writers of one checkpoint path never mix their files; a failed rename is a checkpoint_error",
          "[optim][checkpoint]") {
    const auto path = temp_path("two_writers.ckpt");
    // Each writer saves its own values many times at once with the other: every file that lands is
    // whole (its checksums hold) and one writer's, and no temporary file is left.
    std::vector<std::thread> writers;
    for (int w = 0; w < 2; ++w)
        writers.emplace_back([&path, w] {
            toy_params p;
            std::fill(p.a.begin(), p.a.end(), float(w + 1));
            optim::sgd opt(optim::sgd_options{});
            for (int i = 0; i < 50; ++i) optim::save_checkpoint(path, p, opt, {{"writer", double(w + 1)}});
        });
    for (auto& t : writers) t.join();
    toy_params loaded;
    optim::sgd opt(optim::sgd_options{});
    std::map<std::string, double> scalars;
    optim::load_checkpoint(path, loaded, opt, &scalars);
    const double writer = scalars.at("writer");
    CHECK((writer == 1.0 || writer == 2.0));
    CHECK(std::all_of(loaded.a.begin(), loaded.a.end(), [&](float v) { return v == float(writer); }));
    CHECK(temporary_files_beside(path) == 0);
    std::filesystem::remove(path);

    // A path that is a directory with a file in it: the rename fails, named, and nothing is left beside it.
    const auto dir = temp_path("occupied.ckpt");
    std::filesystem::create_directories(dir / "inside");
    toy_params p;
    CHECK_THROWS_AS(optim::save_checkpoint(dir, p, opt), optim::checkpoint_error);
    REQUIRE_THROWS_WITH(optim::save_checkpoint(dir, p, opt),
                        Catch::Contains("cannot rename") && Catch::Contains(dir.string()));
    CHECK(temporary_files_beside(dir) == 0);
    std::filesystem::remove_all(dir);
}

TEST_CASE("corrupt, truncated, foreign and mismatched checkpoints are refused", "[optim][checkpoint]") {
    using P = config::fp32;
    const auto path = temp_path("corrupt.ckpt");
    auto net = make_net<P>();
    optim::sgd opt({.momentum = 0.9});
    opt.prepare(net);
    optim::save_checkpoint(path, net, opt);
    std::vector<char> good;
    {
        std::ifstream in(path, std::ios::binary);
        good.assign(std::istreambuf_iterator<char>(in), {});
    }
    auto write = [&](const std::vector<char>& bytes) {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    };
    auto load_fails_with = [&](const std::string& text) {
        auto fresh = make_net<P>();
        optim::sgd o({.momentum = 0.9});
        REQUIRE_THROWS_WITH(optim::load_checkpoint(path, fresh, o), Catch::Contains(text));
    };
    auto bytes = good;
    bytes[bytes.size() / 2] ^= 0x10;
    write(bytes);
    load_fails_with("payload checksum mismatch");
    bytes = good;
    bytes.erase(bytes.end() - 7, bytes.end());  // drop the last 7 bytes
    write(bytes);
    load_fails_with("truncated or extended");
    bytes = good;
    bytes[0] = 'X';
    write(bytes);
    load_fails_with("bad magic");
    bytes = good;
    bytes[8] = 2;  // version 2, header checksum now wrong
    write(bytes);
    load_fails_with("header checksum");
    write({good.begin(), good.begin() + 10});
    load_fails_with("too short");
    std::filesystem::remove(path);
    load_fails_with("cannot open");

    write(good);
    auto wider = nn::sequential(nn::conv2d<P>(1, 16, {3, 3, 1, 1}), nn::batch_norm<P>(16));
    optim::sgd o({.momentum = 0.9});
    REQUIRE_THROWS_WITH(optim::load_checkpoint(path, wider, o), Catch::Contains("'0.weight'") && Catch::Contains("expects 144"));
    std::filesystem::remove(path);
}

}  // namespace test_optim
