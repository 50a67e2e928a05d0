// The ResNet family: published parameter counts, shapes, units for stage cutting, a whole-model gradient check.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gradient_check.hpp"

namespace test_resnet {

using namespace tessera;
using tessera::tensor::shape;

namespace {

/// He et al.'s CIFAR ResNet with n blocks per stage, counted by hand: option A adds no parameters,
/// option B adds a 1×1 projection and batch norm at stages 2 and 3.
std::size_t cifar_count(std::size_t n, std::size_t in_channels, std::size_t classes, bool option_b) {
    auto conv = [](std::size_t i, std::size_t o, std::size_t k) { return i * o * k * k; };
    std::size_t total = conv(in_channels, 16, 3) + 2 * 16;
    const std::size_t widths[] = {16, 32, 64};
    std::size_t channels = 16;
    for (const std::size_t w : widths) {
        for (std::size_t b = 0; b < n; ++b) {
            total += conv(channels, w, 3) + conv(w, w, 3) + 4 * w;
            if (option_b && channels != w) total += conv(channels, w, 1) + 2 * w;
            channels = w;
        }
    }
    return total + 64 * classes + classes;
}

/// An input of shape s in P's storage type: random_activation's fp32 draw (seed), stored as P stores it.
template <class P>
nn::activation<P> random_input(const shape& s, std::uint64_t seed) {
    using T = typename P::data_type;
    const auto x32 = random_activation<config::fp32>(s, seed);
    auto x = tensor::make_nhwc<T>(s);
    std::ranges::transform(x32, x.begin(), [](float f) { return kernels::detail::store_as<T>(f); });
    return x;
}

/// Whether a and b hold the same bits, element by element.
bool same_bits(const auto& a, const auto& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const auto& p, const auto& q) { return std::memcmp(&p, &q, sizeof(p)) == 0; });
}

}  // namespace

// Single-threaded checks whose cost is in building large networks or many passes (44 and 47 s under
// AddressSanitizer, about 1 s each in Release): the Release build runs them; the sanitizer builds hide
// them, since the same layers run under both sanitizers in the ResNet-20 step and session tests.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TESSERA_NOT_UNDER_TSAN "[.]"
#else
#define TESSERA_NOT_UNDER_TSAN ""
#endif

TEST_CASE("ImageNet ResNets have torchvision's parameter counts", "[nn][resnet]" TESSERA_NOT_UNDER_TSAN) {
    REQUIRE(nn::resnet18<>(3, 1000).parameter_count() == 11'689'512);
    REQUIRE(nn::resnet34<>(3, 1000).parameter_count() == 21'797'672);
    REQUIRE(nn::resnet50<>(3, 1000).parameter_count() == 25'557'032);
    REQUIRE(nn::resnet101<>(3, 1000).parameter_count() == 44'549'160);
    REQUIRE(nn::resnet152<>(3, 1000).parameter_count() == 60'192'808);
}

TEST_CASE("CIFAR ResNets have He et al.'s parameter counts (option A)", "[nn][resnet]") {
    // The paper's table 6: 0.27M, 0.46M, 0.66M, 0.85M, 1.7M.
    REQUIRE(nn::resnet20<>(3, 10).parameter_count() == 269'722);
    REQUIRE(nn::resnet32<>(3, 10).parameter_count() == 464'154);
    REQUIRE(nn::resnet44<>(3, 10).parameter_count() == 658'586);
    REQUIRE(nn::resnet56<>(3, 10).parameter_count() == 853'018);
    REQUIRE(nn::resnet110<>(3, 10).parameter_count() == 1'727'962);
    REQUIRE(nn::resnet20<>(3, 10).parameter_count() == cifar_count(3, 3, 10, false));
    REQUIRE(nn::resnet110<>(3, 10).parameter_count() == cifar_count(18, 3, 10, false));
    // Fashion-MNIST: one input channel.
    REQUIRE(nn::resnet20<>(1, 10).parameter_count() == cifar_count(3, 1, 10, false));
    // Option B: projection shortcuts.
    using resnet20b = nn::resnet<nn::basic_block<config::fp32, nn::projection_shortcut>, nn::cifar_stem<config::fp32>, 3, 3, 3>;
    REQUIRE(resnet20b(3, 10).parameter_count() == 272'474);
    REQUIRE(resnet20b(3, 10).parameter_count() == cifar_count(3, 3, 10, true));
}

TEST_CASE("resnet names its units and parameters like torchvision and runs unit ranges", "[nn][resnet]") {
    nn::resnet20<config::fp32> model(1, 10);
    REQUIRE(model.units() == 11);
    REQUIRE(model.unit_name(0) == "stem");
    REQUIRE(model.unit_name(7) == "layer3[0]");
    REQUIRE(model.unit_index("layer3[2]") == 9);
    REQUIRE(model.unit_index("head") == 10);
    REQUIRE_THROWS_WITH(model.unit_index("layer4[0]"), Catch::Contains("layer4[0]"));
    nn::resnet56<config::fp32> deep(3, 10);
    REQUIRE(deep.unit_index("layer3[8]") == 1 + 9 + 9 + 8);  // "stage 2 begins at layer3[8]"

    std::vector<std::string> names;
    nn::resnet18<config::fp32> r18(3, 1000);
    r18.visit_parameters([&](std::string_view n, auto, auto) { names.emplace_back(n); });
    REQUIRE(names.front() == "conv1.weight");
    REQUIRE(std::ranges::find(names, "layer2.0.downsample.0.weight") != names.end());
    REQUIRE(std::ranges::find(names, "layer4.1.bn2.bias") != names.end());
    REQUIRE(names.back() == "fc.bias");

    const shape in{2, 28, 28, 1};
    REQUIRE(model.output_shape(in) == shape{2, 1, 1, 10});
    REQUIRE(model.unit_input_shape(7, in) == shape{2, 14, 14, 32});
    REQUIRE(r18.output_shape({1, 64, 64, 3}) == shape{1, 1, 1, 1000});

    // Running the units in two ranges equals running them at once.
    auto x = random_activation<config::fp32>(in, 30);
    decltype(model)::state whole, split;
    const nn::context ctx{nn::mode::eval, 1};
    const auto y = model.forward(x, whole, ctx);
    const auto& mid = model.forward_units(0, 8, x, split, ctx);
    const auto& y2 = model.forward_units(8, model.units(), mid, split, ctx);
    REQUIRE(max_abs_diff(y, y2) == 0.0);

    // In 16.16 with stochastic rounding too: each unit draws its own part of the micro-batch's stream,
    // whatever range runs it, so a pipeline stage rounds as the whole network does; the stream matters.
    nn::resnet20<config::half> half_model(1, 10);
    auto xh = random_activation<config::half>(in, 31);
    nn::context sr{nn::mode::train, 1};
    sr.rounding = {.stochastic = true, .seed = 1, .stream = 2};
    decltype(half_model)::state hw, hs, other;
    const auto yh = half_model.forward(xh, hw, sr);
    const auto& midh = half_model.forward_units(0, 8, xh, hs, sr);
    const auto& yh2 = half_model.forward_units(8, half_model.units(), midh, hs, sr);
    REQUIRE(std::equal(yh.begin(), yh.end(), yh2.begin(), yh2.end(),
                       [](tessera::half p, tessera::half q) { return p.bits() == q.bits(); }));
    nn::context sr2 = sr;
    sr2.rounding.stream = 3;
    const auto& yh3 = half_model.forward(xh, other, sr2);
    REQUIRE_FALSE(std::equal(yh.begin(), yh.end(), yh3.begin(), yh3.end(),
                             [](tessera::half p, tessera::half q) { return p.bits() == q.bits(); }));

    // ResNet-20: about 40.6 M multiply-adds per 32×32 image, so (28/32)² of that at 28×28 with one
    // input channel: ≈ 31 M multiply-adds = 62 MFLOPs (two per multiply-add), plus batch norm and ReLU.
    const auto c = model.cost({1, 28, 28, 1});
    REQUIRE(c.forward_flops > 60e6);
    REQUIRE(c.forward_flops < 65e6);
    REQUIRE(c.parameters == model.parameter_count());
}

TEST_CASE("a whole small ResNet passes a finite-difference gradient check", "[nn][resnet][gradcheck]" TESSERA_NOT_UNDER_TSAN) {
    nn::resnet20<fp64> model(2, 3);
    check_gradients(model, {2, 6, 6, 2}, 40, 6, 1e-7);
    nn::resnet<nn::bottleneck<fp64>, nn::cifar_stem<fp64>, 1, 1> bottle(1, 4);
    check_gradients(bottle, {2, 5, 5, 1}, 41, 6, 1e-7);
}

TEST_CASE("softmax cross-entropy drives a ResNet's backward, loss-scaled in half precision", "[nn][resnet][half]") {
    nn::resnet20<config::fp32> m32(1, 10);
    nn::resnet20<config::half> m16(1, 10);
    std::vector<std::vector<float>> w;
    m32.visit_parameters([&](std::string_view, std::span<float> v, auto) { w.emplace_back(v.begin(), v.end()); });
    std::size_t i = 0;
    m16.visit_parameters([&](std::string_view, std::span<half> v, auto) {
        std::ranges::transform(w[i++], v.begin(), [](float f) { return half(f); });
    });
    const shape in{4, 12, 12, 1};
    const auto x32 = random_activation<config::fp32>(in, 50);
    auto x16 = tensor::make_nhwc<half>(in);
    std::ranges::transform(x32, x16.begin(), [](float f) { return half(f); });
    const std::vector<std::int32_t> labels{1, 7, 3, 3};
    nn::softmax_cross_entropy<config::fp32> l32;
    nn::softmax_cross_entropy<config::half> l16;
    decltype(m32)::state s32;
    decltype(m16)::state s16;
    const nn::context ctx;
    const auto r32 = l32(m32.forward(x32, s32, ctx), labels);
    const auto r16 = l16(m16.forward(x16, s16, ctx), labels, 1024.0);  // static loss scale
    REQUIRE(r16.loss == Approx(r32.loss).epsilon(2e-2));
    m32.backward(l32.gradient(), s32, ctx, false);
    m16.backward(l16.gradient(), s16, ctx, false);
    std::vector<std::vector<float>> g32, g16;
    m32.visit_parameters([&](std::string_view, auto, std::span<float> g) { g32.emplace_back(g.begin(), g.end()); });
    m16.visit_parameters([&](std::string_view, auto, std::span<float> g) {
        g16.emplace_back();
        for (float v : g) g16.back().push_back(v / 1024.0f);  // unscale
    });
    // fp16 weights, activations and activation gradients: every gradient points the same way as fp32's
    // (cosine > 0.95 each, > 0.99 on average; batch-norm shifts of deep layers are the noisiest).
    double mean = 0;
    for (std::size_t p = 0; p < g32.size(); ++p) {
        CAPTURE(p);
        const double c = cosine(g16[p], g32[p]);
        REQUIRE(c > 0.95);
        mean += c / static_cast<double>(g32.size());
    }
    REQUIRE(mean > 0.99);
}

TEMPLATE_TEST_CASE("a ResNet-20 step gives bit-identical outputs, gradients and running statistics on 1, 2 and 3 threads",
                   "[nn][resnet][threads]", config::fp32, config::half) {
    // Convolutions add per-chunk partial sums in chunk order and batch norm adds per-block column sums
    // in block order, so the thread count never changes a rounding.
    using P = TestType;
    const shape in{12, 28, 28, 1};  // 9408 rows: sixteen batch-norm blocks in the first stage, 12 conv chunks
    const auto x = random_input<P>(in, 60);
    const std::vector<std::int32_t> labels{1, 7, 3, 3, 0, 9, 2, 5, 5, 8, 4, 6};
    struct outcome {
        float loss;
        std::vector<std::vector<float>> grads, buffers;
    };
    auto run = [&](std::size_t threads, kernels::thread_pool* pool) {
        nn::resnet20<P> model(1, 10);  // same initial parameters every time
        typename nn::resnet20<P>::state st;
        nn::softmax_cross_entropy<P> loss;
        const nn::context ctx{.mode = nn::mode::train, .threads = threads, .pool = pool};
        outcome o;
        o.loss = loss(model.forward(x, st, ctx), labels, 64.0).loss;
        model.backward(loss.gradient(), st, ctx, false);
        model.visit_parameters([&](std::string_view, auto, std::span<float> g) { o.grads.emplace_back(g.begin(), g.end()); });
        model.visit_buffers([&](std::string_view, std::span<float> b) { o.buffers.emplace_back(b.begin(), b.end()); });
        return o;
    };
    // "" when equal, else where they first differ (printing whole models on failure takes minutes).
    auto first_difference = [](const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
        if (a.size() != b.size()) return std::string("different tensor counts");
        for (std::size_t t = 0; t < a.size(); ++t)
            for (std::size_t i = 0; i < a[t].size(); ++i)
                if (a[t][i] != b[t][i])
                    return "tensor " + std::to_string(t) + " element " + std::to_string(i) + ": " +
                           std::to_string(a[t][i]) + " vs " + std::to_string(b[t][i]);
        return std::string();
    };
    const outcome one = run(1, nullptr);
    kernels::thread_pool pool(3);
    for (const std::size_t threads : {2u, 3u})
        for (kernels::thread_pool* p : {static_cast<kernels::thread_pool*>(nullptr), &pool}) {
            CAPTURE(threads, p != nullptr);
            const outcome o = run(threads, p);
            CHECK(o.loss == one.loss);
            CHECK(first_difference(o.grads, one.grads) == "");
            CHECK(first_difference(o.buffers, one.buffers) == "");
        }
}

TEMPLATE_TEST_CASE("a ResNet's backward masks each block's input gradient in the first convolution: the bits of its "
                   "units run one at a time, each with its ReLU's backward", "[nn][resnet]", config::fp32, config::half) {
    // Over a range of units, a block hands the block before it the gradient of that block's sum
    // (residual::backward_chained); a range of one unit hands back its input gradient, and the block
    // before runs its ReLU's backward itself. Both shortcut kinds (ResNet-20's padding; projections),
    // whole backward and its two halves, and in half with stochastic rounding.
    using P = TestType;
    using T = typename P::data_type;
    const shape in{4, 12, 12, 1};
    const auto x = random_input<P>(in, 61);
    const std::vector<std::int32_t> labels{1, 7, 3, 0};
    const auto check = [&]<class Model>(Model model, bool split, bool stochastic) {
        CAPTURE(split, stochastic);
        nn::context ctx{.mode = nn::mode::train};
        if (stochastic) ctx.rounding = {.stochastic = true, .seed = 5, .stream = 1};
        typename Model::state st;
        nn::softmax_cross_entropy<P> loss;
        (void)loss(model.forward(x, st, ctx), labels, 64.0);
        const auto gradients = [&] {
            std::vector<std::vector<float>> g;
            model.visit_parameters([&](std::string_view, auto, std::span<float> v) { g.emplace_back(v.begin(), v.end()); });
            return g;
        };
        // Chained: the whole range at once (its input gradient too).
        const auto& dx_chained =
            split ? model.backward_input(loss.gradient(), st, ctx, true) : model.backward(loss.gradient(), st, ctx, true);
        const std::vector<T> dx_a(dx_chained.begin(), dx_chained.end());
        if (split) model.backward_weights(st, ctx);
        const auto g_a = gradients();
        model.visit_parameters([](std::string_view, auto, std::span<float> g) { std::ranges::fill(g, 0.0f); });
        // One unit at a time, last first.
        const nn::activation<P>* cur = &loss.gradient();
        for (std::size_t u = model.units(); u-- > 0;) {
            if (split) {
                cur = &model.backward_units_input(u, u + 1, *cur, st, ctx, true);
                model.backward_units_weights(u, u + 1, st, ctx);
            } else {
                cur = &model.backward_units(u, u + 1, *cur, st, ctx, true);
            }
        }
        CHECK(same_bits(dx_a, std::vector<T>(cur->begin(), cur->end())));
        const auto g_b = gradients();
        REQUIRE(g_a.size() == g_b.size());
        for (std::size_t t = 0; t < g_a.size(); ++t) {
            CAPTURE(t);
            CHECK(same_bits(g_a[t], g_b[t]));
        }
    };
    for (const bool split : {false, true})
        for (const bool stochastic : {false, std::is_same_v<T, tessera::half>}) {
            check(nn::resnet20<P>(1, 10), split, stochastic);
            check(nn::resnet<nn::basic_block<P, nn::projection_shortcut>, nn::cifar_stem<P>, 2, 2, 2>(1, 10), split, stochastic);
        }
    // Masking the input gradient needs one.
    nn::basic_block<P> block(16, 16, 1);
    typename nn::basic_block<P>::state st;
    const auto xb = random_activation<P>({2, 6, 6, 16}, 62);
    const auto& y = block.forward(xb, st, nn::context{});
    CHECK_THROWS_AS(block.backward_chained(y, st, nn::context{}, false, false, true), std::logic_error);
}

TEMPLATE_TEST_CASE("a ResNet's backward on a state that ran before gives the bits of one on a fresh state: the blocks "
                   "write their gradients into buffers the blocks after them wrote and the call consumed",
                   "[nn][resnet]", config::fp32, config::half) {
    // gradient_recycler swaps a block's gradient buffers with those of blocks whose gradients the
    // call no longer reads. A buffer swapped in while still read would change the gradients; a
    // fresh state swaps nothing (its buffers have no shape until its blocks run).
    using P = TestType;
    using T = typename P::data_type;
    const shape in{4, 12, 12, 1};
    const std::vector<std::int32_t> labels{1, 7, 3, 0};
    struct outcome {
        std::vector<T> dx;
        std::vector<std::vector<float>> grads;
    };
    // One step of `model` on the k-th input through `st`: its input gradient and parameter gradients.
    const auto step = [&]<class Model>(Model& model, typename Model::state& st, std::uint64_t k) {
        const auto x = random_input<P>(in, 70 + k);
        const nn::context ctx{.mode = nn::mode::train};
        nn::softmax_cross_entropy<P> loss;
        (void)loss(model.forward(x, st, ctx), labels, 64.0);
        const auto& dx = model.backward(loss.gradient(), st, ctx, true);
        outcome o{std::vector<T>(dx.begin(), dx.end()), {}};
        model.visit_parameters([&](std::string_view, auto, std::span<float> g) {
            o.grads.emplace_back(g.begin(), g.end());
            std::ranges::fill(g, 0.0f);
        });
        return o;
    };
    // Where each block's gradient buffers are, in the order the blocks and their states list them.
    const auto buffers = [](auto& st) {
        std::vector<const void*> at;
        for (auto& b : st.blocks)
            nn::detail::for_each_gradient_buffer(b, [&](auto& g) {
                if (g.size() != 0) at.push_back(g.data());
            });
        return at;
    };
    const auto check = [&]<class Model>(Model reused_model) {
        Model fresh_model = reused_model;  // the same parameters, trained alike
        typename Model::state reused;
        std::vector<const void*> first_at;
        for (std::uint64_t k = 0; k < 3; ++k) {
            CAPTURE(k);
            typename Model::state fresh;
            const outcome a = step(reused_model, reused, k), b = step(fresh_model, fresh, k);
            CHECK(same_bits(a.dx, b.dx));
            REQUIRE(a.grads.size() == b.grads.size());
            for (std::size_t t = 0; t < a.grads.size(); ++t) {
                CAPTURE(t);
                CHECK(same_bits(a.grads[t], b.grads[t]));
            }
            const auto at = buffers(reused);
            if (k == 0) {
                first_at = at;
                continue;
            }
            // The buffers moved between blocks, and none was allocated or freed.
            CHECK(at != first_at);
            auto sorted = at, first_sorted = first_at;
            std::ranges::sort(sorted);
            std::ranges::sort(first_sorted);
            CHECK(sorted == first_sorted);
        }
    };
    check(nn::resnet20<P>(1, 10));  // padding shortcuts
    check(nn::resnet<nn::basic_block<P, nn::projection_shortcut>, nn::cifar_stem<P>, 2, 2, 2>(1, 10));
    check(nn::resnet_family<nn::bottleneck<P>, nn::cifar_stem<P>>(1, 10, {2, 2}));
}

TEST_CASE("the context chooses how convolutions are computed: every choice gives the same gradients within rounding",
          "[nn][resnet]") {
    const shape in{4, 28, 28, 1};
    const auto x = random_activation<config::fp32>(in, 61);
    const std::vector<std::int32_t> labels{2, 7, 0, 9};
    auto gradients = [&](kernels::conv_algorithm algorithm) {
        nn::resnet20<config::fp32> model(1, 10);
        nn::resnet20<config::fp32>::state st;
        nn::softmax_cross_entropy<config::fp32> loss;
        const nn::context ctx{.mode = nn::mode::train, .convolution = algorithm};
        (void)loss(model.forward(x, st, ctx), labels, 1.0);
        model.backward(loss.gradient(), st, ctx, false);
        std::vector<std::vector<float>> grads;
        model.visit_parameters([&](std::string_view, auto, std::span<float> g) { grads.emplace_back(g.begin(), g.end()); });
        return grads;
    };
    // The largest difference of a tensor relative to its largest magnitude, over all tensors.
    auto worst = [](const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
        REQUIRE(a.size() == b.size());
        double e = 0;
        for (std::size_t t = 0; t < a.size(); ++t) {
            double scale = 1e-30, diff = 0;
            for (std::size_t i = 0; i < a[t].size(); ++i) {
                scale = std::max(scale, std::abs(double(b[t][i])));
                diff = std::max(diff, std::abs(double(a[t][i]) - double(b[t][i])));
            }
            e = std::max(e, diff / scale);
        }
        return e;
    };
    const auto im2col = gradients(kernels::conv_algorithm::im2col);
    const auto automatic = gradients(kernels::conv_algorithm::automatic);
    const auto winograd = gradients(kernels::conv_algorithm::winograd);  // the 1-channel stem too
    CHECK(worst(automatic, im2col) < 1e-4);  // measured 3e-6
    CHECK(worst(winograd, im2col) < 1e-4);
    // Each choice took effect: other algorithms, other roundings.
    CHECK(worst(automatic, im2col) > 0);
    CHECK(worst(winograd, automatic) > 0);
}

namespace {

/// Every parameter's values of `layer`, in visiting order, as doubles.
template <class L>
std::vector<std::vector<double>> parameter_values(L& layer) {
    std::vector<std::vector<double>> out;
    layer.visit_parameters([&](std::string_view, auto values, auto) {
        auto& v = out.emplace_back();
        for (const auto x : values) v.push_back(kernels::detail::load_as<double>(x));
    });
    return out;
}

/// Built with defer_initialization, `deferred` has drawn nothing: each of its parameters is zero where
/// `drawn` (built drawing from its default seed) holds a draw, or the same constant (batch norm's 1
/// and 0). After both draw from the same generator, it holds what `drawn` holds, bit for bit.
template <class L>
void check_deferred(L deferred, L drawn) {
    const auto zero = [](const std::vector<double>& v) { return std::ranges::all_of(v, [](double x) { return x == 0.0; }); };
    const auto before = parameter_values(deferred), drawn_before = parameter_values(drawn);
    REQUIRE(before.size() == drawn_before.size());
    std::size_t deferred_draws = 0;
    for (std::size_t i = 0; i < before.size(); ++i) {
        REQUIRE((zero(before[i]) || before[i] == drawn_before[i]));
        if (zero(before[i]) && !zero(drawn_before[i])) ++deferred_draws;
    }
    REQUIRE(deferred_draws > 0);
    std::mt19937_64 a(7), b(7);
    deferred.initialize(a);
    drawn.initialize(b);
    REQUIRE(parameter_values(deferred) == parameter_values(drawn));
}

}  // namespace

TEST_CASE("layers built with defer_initialization draw nothing, then draw what layers built drawing do", "[nn][resnet]") {
    using nn::defer_initialization;
    check_deferred(nn::conv2d<config::fp32>(16, 32, {3, 3, 2, 1}, defer_initialization), nn::conv2d<config::fp32>(16, 32, {3, 3, 2, 1}));
    check_deferred(nn::linear<config::half>(64, 10, defer_initialization), nn::linear<config::half>(64, 10));
    check_deferred(nn::basic_block<config::fp32>(16, 32, 2, defer_initialization), nn::basic_block<config::fp32>(16, 32, 2));
    check_deferred(nn::basic_block<config::fp32, nn::padding_shortcut>(16, 32, 2, defer_initialization),
                   nn::basic_block<config::fp32, nn::padding_shortcut>(16, 32, 2));
    check_deferred(nn::bottleneck<config::half>(64, 32, 2, defer_initialization), nn::bottleneck<config::half>(64, 32, 2));
    check_deferred(nn::cifar_stem<config::fp32>(3, defer_initialization), nn::cifar_stem<config::fp32>(3));
    check_deferred(nn::imagenet_stem<config::half>(3, defer_initialization), nn::imagenet_stem<config::half>(3));
    check_deferred(nn::classifier_head<config::fp32>(64, 10, defer_initialization), nn::classifier_head<config::fp32>(64, 10));
}

}  // namespace test_resnet
