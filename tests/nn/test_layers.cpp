// Finite-difference gradient checks (fp64) for every layer, shapes and costs, fp16 storage vs fp32.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradient_check.hpp"

namespace test_layers {

using namespace tessera;
using tessera::tensor::shape;


TEST_CASE("the Layer concept accepts the layers and rejects other types", "[nn][concepts]") {
    STATIC_REQUIRE(nn::Layer<nn::conv2d<config::fp32>>);
    STATIC_REQUIRE(nn::Layer<nn::batch_norm<config::mixed>>);
    STATIC_REQUIRE(nn::Layer<nn::relu<config::half>>);
    STATIC_REQUIRE(nn::Layer<nn::max_pool<fp64>>);
    STATIC_REQUIRE(nn::Layer<nn::avg_pool<fp64>>);
    STATIC_REQUIRE(nn::Layer<nn::global_avg_pool<fp64>>);
    STATIC_REQUIRE(nn::Layer<nn::linear<fp64>>);
    STATIC_REQUIRE(nn::Layer<nn::basic_block<fp64>>);
    STATIC_REQUIRE(nn::Layer<nn::bottleneck<config::half>>);
    STATIC_REQUIRE(nn::Layer<nn::resnet20<config::fp32>>);
    STATIC_REQUIRE(nn::Block<nn::basic_block<config::fp32>>);
    STATIC_REQUIRE(nn::Stem<nn::cifar_stem<config::fp32>>);
    STATIC_REQUIRE_FALSE(nn::Layer<int>);
    STATIC_REQUIRE_FALSE(nn::Numeric<int>);
}

TEST_CASE("conv2d gradients match finite differences", "[nn][gradcheck]") {
    nn::conv2d<fp64> same(3, 4, {3, 3, 1, 1});
    check_gradients(same, {2, 5, 4, 3}, 1);
    nn::conv2d<fp64> strided(2, 3, {3, 3, 2, 1});
    check_gradients(strided, {1, 7, 6, 2}, 2);
    nn::conv2d<fp64> pointwise(5, 3, {1, 1, 2, 0});
    check_gradients(pointwise, {2, 5, 5, 5}, 3);
    // 3×3 stride 1 between 8 or more channels: Winograd, with an odd output width. On 4×5 images,
    // F(4×4, 3×3) (2 tiles of 36 multiplies against F(2×2, 3×3)'s 6 of 16); on 2×3, F(2×2, 3×3)
    // (2 tiles of 16 against one of 36).
    nn::conv2d<fp64> winograd(8, 9, {3, 3, 1, 1});
    REQUIRE(tessera::kernels::winograd_tile(tessera::kernels::conv_algorithm::automatic, {2, 4, 5, 8}, 9, {3, 3, 1, 1}) == 4);
    check_gradients(winograd, {2, 4, 5, 8}, 4);
    REQUIRE(tessera::kernels::winograd_tile(tessera::kernels::conv_algorithm::automatic, {2, 2, 3, 8}, 9, {3, 3, 1, 1}) == 2);
    check_gradients(winograd, {2, 2, 3, 8}, 5);
}

TEST_CASE("batch norm gradients match finite differences (training statistics)", "[nn][gradcheck]") {
    nn::batch_norm<fp64> bn(5);
    std::mt19937_64 rng(4);
    bn.visit_parameters([&](std::string_view, std::span<double> v, std::span<double>) {
        for (auto& x : v) x = std::uniform_real_distribution<double>(0.5, 1.5)(rng);
    });
    check_gradients(bn, {3, 2, 3, 5}, 5);
}

TEST_CASE("batch norm with its ReLU in one layer: finite differences, and batch norm then relu bit for bit",
          "[nn][gradcheck]") {
    nn::batch_norm_relu<fp64> fused64(5);
    std::mt19937_64 rng(4);
    fused64.visit_parameters([&](std::string_view, std::span<double> v, std::span<double>) {
        for (auto& x : v) x = std::uniform_real_distribution<double>(0.5, 1.5)(rng);
    });
    check_gradients(fused64, {3, 2, 3, 5}, 5);

    // fp32 and half storage, training and evaluation, 37 channels (a SIMD tail) over 2·5·7 rows.
    const auto same = [&]<class P>(P) {
        using T = typename P::data_type;
        const tensor::shape s{2, 5, 7, 37};
        nn::batch_norm_relu<P> fused(37);
        nn::batch_norm<P> bn(37);
        nn::relu<P> relu;
        const auto x = random_activation<P>(s, 11);
        const auto dy = random_activation<P>(s, 12);
        const auto bits = [](const nn::activation<P>& a) {
            std::vector<float> v;
            for (const T& e : a) v.push_back(static_cast<float>(e));
            return v;
        };
        for (const nn::mode m : {nn::mode::train, nn::mode::eval}) {
            CAPTURE(m == nn::mode::train);
            const nn::context ctx{.mode = m};
            typename nn::batch_norm_relu<P>::state fs;
            typename nn::batch_norm<P>::state bs;
            typename nn::relu<P>::state rs;
            const auto y_fused = bits(fused.forward(x, fs, ctx));
            const auto y_split = bits(relu.forward(bn.forward(x, bs, ctx), rs, ctx));
            CHECK(y_fused == y_split);
            if (m == nn::mode::eval) continue;
            CHECK(std::count(y_fused.begin(), y_fused.end(), 0.0f) > 0);  // the mask takes something away
            const auto dx_fused = bits(fused.backward(dy, fs, ctx, true));
            const auto dx_split = bits(bn.backward(relu.backward(dy, rs, ctx, true), bs, ctx, true));
            CHECK(dx_fused == dx_split);
            std::vector<std::vector<float>> g_fused, g_split;
            fused.visit_parameters([&](std::string_view, auto, std::span<float> g) { g_fused.emplace_back(g.begin(), g.end()); });
            bn.visit_parameters([&](std::string_view, auto, std::span<float> g) { g_split.emplace_back(g.begin(), g.end()); });
            CHECK(g_fused == g_split);
        }
    };
    same(config::fp32{});
    same(config::half{});
}

TEST_CASE("relu, pooling and linear gradients match finite differences", "[nn][gradcheck]") {
    nn::relu<fp64> r;
    check_gradients(r, {2, 3, 3, 4}, 6);
    nn::max_pool<fp64> mp({3, 3, 2, 1});
    check_gradients(mp, {2, 5, 6, 3}, 7);
    nn::avg_pool<fp64> ap({2, 2, 2, 0});
    check_gradients(ap, {1, 4, 6, 3}, 8);
    nn::global_avg_pool<fp64> gap;
    check_gradients(gap, {3, 3, 2, 4}, 9);
    nn::linear<fp64> fc(12, 5);
    check_gradients(fc, {3, 2, 2, 3}, 10);  // flattens h·w·c = 12 features
}

TEST_CASE("sequential and residual blocks: gradients, shapes and names", "[nn][gradcheck]") {
    nn::sequential seq(nn::conv2d<fp64>(2, 3, {3, 3, 1, 1}), nn::batch_norm<fp64>(3), nn::relu<fp64>(),
                       nn::linear<fp64>(3 * 4 * 4, 2));
    REQUIRE(seq.output_shape({5, 4, 4, 2}) == shape{5, 1, 1, 2});
    check_gradients(seq, {2, 4, 4, 2}, 11);

    nn::basic_block<fp64> identity(4, 4, 1);
    REQUIRE(identity.skip_branch().type() == nn::shortcut<fp64>::kind::identity);
    check_gradients(identity, {2, 4, 3, 4}, 12);

    nn::basic_block<fp64> projection(3, 6, 2);
    REQUIRE(projection.skip_branch().type() == nn::shortcut<fp64>::kind::projection);
    REQUIRE(projection.output_shape({2, 5, 5, 3}) == shape{2, 3, 3, 6});
    check_gradients(projection, {2, 5, 5, 3}, 13);

    nn::basic_block<fp64, nn::padding_shortcut> padding(2, 6, 2);  // option A
    REQUIRE(padding.skip_branch().type() == nn::shortcut<fp64>::kind::padding);
    check_gradients(padding, {2, 5, 4, 2}, 14);

    nn::bottleneck<fp64> bott(4, 2, 2);
    REQUIRE(bott.output_shape({1, 6, 6, 4}) == shape{1, 3, 3, 8});
    check_gradients(bott, {2, 6, 5, 4}, 15);

    std::vector<std::string> names;
    projection.visit_parameters([&](std::string_view n, auto, auto) { names.emplace_back(n); }, "layer2.0");
    REQUIRE(names == std::vector<std::string>{"layer2.0.conv1.weight", "layer2.0.bn1.weight", "layer2.0.bn1.bias",
                                              "layer2.0.conv2.weight", "layer2.0.bn2.weight", "layer2.0.bn2.bias",
                                              "layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight",
                                              "layer2.0.downsample.1.bias"});
}

TEST_CASE("layers reject inputs of the wrong shape, naming both", "[nn][errors]") {
    nn::conv2d<config::fp32> conv(3, 8, {3, 3, 1, 1});
    REQUIRE_THROWS_WITH(conv.output_shape({1, 8, 8, 4}), Catch::Contains("4 channels") && Catch::Contains("expects 3"));
    nn::linear<config::fp32> fc(10, 2);
    REQUIRE_THROWS_AS(fc.output_shape({1, 3, 3, 1}), tensor::shape_error);
    REQUIRE_THROWS_AS(nn::conv2d<config::fp32>(3, 8, {5, 5, 1, 0}).output_shape({1, 3, 3, 3}), tensor::shape_error);
}

TEST_CASE("costs count multiply-adds as two FLOPs", "[nn][cost]") {
    nn::conv2d<config::fp32> conv(16, 32, {3, 3, 2, 1});
    const auto c = conv.cost({8, 28, 28, 16});
    REQUIRE(c.forward_flops == 2.0 * 8 * 14 * 14 * 32 * (3 * 3 * 16));
    REQUIRE(c.backward_flops == 2 * c.forward_flops);
    REQUIRE(c.parameters == 3 * 3 * 16 * 32);
    nn::conv2d<config::half> conv_h(16, 32, {3, 3, 2, 1});
    REQUIRE(conv_h.cost({8, 28, 28, 16}).forward_bytes == Approx(c.forward_bytes / 2));  // fp16 storage halves bytes
}

TEST_CASE("a layer's kept bytes are the activations its state holds after a forward", "[nn][cost]") {
    const nn::context ctx{nn::mode::train, 1};
    const shape s{4, 9, 9, 8};
    const auto x = random_activation<config::fp32>(s, 30);
    const auto held = [](const auto& a) { return double(a.size() * sizeof(float)); };
    nn::conv2d<config::fp32> conv(8, 16, {3, 3, 2, 1});
    nn::conv2d<config::fp32>::state cs;
    conv.forward(x, cs, ctx);
    CHECK(conv.cost(s).kept_bytes == held(cs.output));
    nn::batch_norm<config::fp32> bn(8);
    nn::batch_norm<config::fp32>::state bs;
    bn.forward(x, bs, ctx);
    CHECK(bn.cost(s).kept_bytes == held(bs.output) + held(bs.saved.mean) + held(bs.saved.inv_std));
    nn::relu<config::fp32> relu;
    nn::relu<config::fp32>::state rs;
    relu.forward(x, rs, ctx);
    CHECK(relu.cost(s).kept_bytes == held(rs.output));
    nn::max_pool<config::fp32> pool({3, 3, 2, 1});
    nn::max_pool<config::fp32>::state ps;
    pool.forward(x, ps, ctx);
    CHECK(pool.cost(s).kept_bytes == held(ps.output) + double(ps.argmax.size() * sizeof(std::uint32_t)));
    nn::linear<config::fp32> fc(9 * 9 * 8, 10);
    nn::linear<config::fp32>::state fs;
    fc.forward(x, fs, ctx);
    CHECK(fc.cost(s).kept_bytes == held(fs.output));
    // A basic block with a projection: two convolutions and two batch norms on the main branch, one of
    // each on the shortcut, and the block's output (the add and its ReLU write it once).
    nn::basic_block<config::fp32> block(8, 16, 2);
    const double out = 4.0 * 5 * 5 * 16 * sizeof(float), statistics = 2.0 * 16 * sizeof(float);
    CHECK(block.cost(s).kept_bytes == 7 * out + 3 * statistics);
    CHECK(block.cost(s).stash_bytes() < block.cost(s).forward_bytes / 2);  // not every byte it reads and writes
    // Inference holds less at once: the main branch (each layer beside its input: at most a batch norm's
    // input, output and statistics), then the shortcut's convolution and batch norm beside the main
    // branch's output, then the add beside both branches' outputs.
    const double bn_step = out + out + statistics;
    CHECK(block.cost(s).peak_bytes == std::max({bn_step, out + bn_step, 3 * out}));
    CHECK(block.cost(s).peak_bytes == out + bn_step);
    CHECK(conv.cost(s).inference_peak_bytes() == conv.cost(s).kept_bytes);  // a layer alone: what it keeps
    // A cost that does not say what it keeps (a user's layer may not): its forward bytes stand in, also in a sum.
    nn::cost unknown{1, 1, 100, 100, 0, {}};
    CHECK(unknown.stash_bytes() == 100);
    nn::cost sum = conv.cost(s);
    sum += unknown;
    CHECK(sum.stash_bytes() == held(cs.output) + 100);
    CHECK(sum.inference_peak_bytes() == sum.stash_bytes());  // a sum does not know its parts' order
    // A chain: the next layer's peak beside its input.
    const auto chain = conv.cost(s).then(relu.cost(conv.output_shape(s)), held(cs.output));
    CHECK(chain.inference_peak_bytes() == 2 * held(cs.output));
    CHECK(chain.stash_bytes() == 2 * held(cs.output));
}

TEST_CASE("a basic block in mixed and half precision follows fp32", "[nn][half]") {
    nn::basic_block<config::fp32> b32(8, 16, 2);
    nn::basic_block<config::mixed> b16(8, 16, 2);
    nn::basic_block<config::half> bhh(8, 16, 2);
    std::vector<std::vector<float>> weights;
    b32.visit_parameters([&](std::string_view, std::span<float> v, auto) { weights.emplace_back(v.begin(), v.end()); });
    std::size_t i = 0;
    b16.visit_parameters([&](std::string_view, std::span<float> v, auto) { std::ranges::copy(weights[i++], v.begin()); });
    i = 0;
    bhh.visit_parameters([&](std::string_view, std::span<half> v, auto) {
        std::ranges::transform(weights[i++], v.begin(), [](float f) { return half(f); });
    });
    const shape s{4, 9, 9, 8};
    auto x32 = random_activation<config::fp32>(s, 20);
    nn::activation<config::mixed> x16 = tensor::make_nhwc<half>(s);
    std::ranges::transform(x32, x16.begin(), [](float f) { return half(f); });
    auto dy32 = random_activation<config::fp32>(b32.output_shape(s), 21);
    nn::activation<config::mixed> dy16 = tensor::make_nhwc<half>(b32.output_shape(s));
    std::ranges::transform(dy32, dy16.begin(), [](float f) { return half(f); });

    nn::context ctx;
    decltype(b32)::state s32;
    decltype(b16)::state s16;
    decltype(bhh)::state shh;
    const auto& y32 = b32.forward(x32, s32, ctx);
    const auto& y16 = b16.forward(x16, s16, ctx);
    const auto& yhh = bhh.forward(x16, shh, ctx);
    const auto& dx32 = b32.backward(dy32, s32, ctx, true);
    const auto& dx16 = b16.backward(dy16, s16, ctx, true);
    const auto& dxhh = bhh.backward(dy16, shh, ctx, true);
    // Outputs are O(1); fp16 storage of inputs, weights and activations gives ~1e-3 relative error.
    REQUIRE(max_abs_diff(y16, y32) < 2e-2);
    REQUIRE(max_abs_diff(yhh, y32) < 2e-2);
    REQUIRE(max_abs_diff(dx16, dx32) < 2e-2);
    REQUIRE(max_abs_diff(dxhh, dx32) < 2e-2);
    std::vector<std::vector<float>> g32, g16;
    b32.visit_parameters([&](std::string_view, auto, std::span<float> g) { g32.emplace_back(g.begin(), g.end()); });
    bhh.visit_parameters([&](std::string_view, auto, std::span<float> g) { g16.emplace_back(g.begin(), g.end()); });
    for (std::size_t p = 0; p < g32.size(); ++p) REQUIRE(cosine(g16[p], g32[p]) > 0.999);
}

TEST_CASE("the residual add of half activations is fp32's sum rounded once, bit for bit", "[nn][half]") {
    const std::size_t n = 70001;  // above the per-thread grain, odd: a scalar tail
    std::mt19937 rng(80);
    std::normal_distribution<float> value(0.0f, 3.0f);
    std::vector<tessera::half> a(n), b(n), out(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = tessera::half(value(rng)), b[i] = tessera::half(value(rng));
    nn::detail::add<float>(a.data(), b.data(), out.data(), n, {2});
    std::size_t differing = 0;
    for (std::size_t i = 0; i < n; ++i)
        differing += out[i].bits() != tessera::half(float(a[i]) + float(b[i])).bits();
    CHECK(differing == 0);
}

TEST_CASE("the residual add with its ReLU is the ReLU of the rounded sum, bit for bit, in fp32 and in half rounded either way",
          "[nn][half][rounding]") {
    const std::size_t n = 70001;  // over two threads, a scalar tail
    std::mt19937 rng(82);
    std::normal_distribution<float> value(0.0f, 3.0f);
    std::vector<float> af(n), bf(n), outf(n), sumf(n);
    for (std::size_t i = 0; i < n; ++i) af[i] = value(rng), bf[i] = value(rng);
    nn::detail::add<float, true>(af.data(), bf.data(), outf.data(), n, {2});
    nn::detail::add<float>(af.data(), bf.data(), sumf.data(), n, {2});
    std::size_t differing = 0, zeros = 0;
    for (std::size_t i = 0; i < n; ++i) {
        differing += outf[i] != std::max(sumf[i], 0.0f);
        zeros += outf[i] == 0.0f;
    }
    CHECK(differing == 0);
    CHECK(zeros > n / 3);  // the ReLU did cut the negative sums
    std::vector<tessera::half> a(n), b(n), out(n), sum(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = tessera::half(af[i]), b[i] = tessera::half(bf[i]);
    for (const bool stochastic : {false, true}) {
        CAPTURE(stochastic);
        const tessera::tensor::rounding r{.stochastic = stochastic, .seed = 5, .stream = 6};
        nn::detail::add<float, true>(a.data(), b.data(), out.data(), n, {2}, r);
        nn::detail::add<float>(a.data(), b.data(), sum.data(), n, {2}, r);
        differing = 0;
        for (std::size_t i = 0; i < n; ++i) differing += out[i].bits() != tessera::half(std::max(float(sum[i]), 0.0f)).bits();
        CHECK(differing == 0);
    }
}

TEST_CASE("a residual block's training forward runs its last batch norm, the add and the ReLU in one pass, with the "
          "bits of the layers run apart",
          "[nn][residual]") {
    STATIC_REQUIRE(nn::detail::ends_in_batch_norm<nn::detail::basic_main<config::fp32>>);
    STATIC_REQUIRE(nn::detail::ends_in_batch_norm<nn::detail::bottleneck_main<config::half>>);
    STATIC_REQUIRE_FALSE(nn::detail::ends_in_batch_norm<nn::sequential<nn::conv2d<config::fp32>, nn::batch_norm_relu<config::fp32>>>);
    for (const std::size_t stride : {1u, 2u}) {  // an identity shortcut, and a projection
        CAPTURE(stride);
        nn::basic_block<config::fp32> fused(16, 16 * stride, stride);
        auto apart = fused;
        const shape s{4, 9, 9, 16};
        const auto x = random_activation<config::fp32>(s, 90);
        const nn::context ctx{nn::mode::train, 2};
        decltype(fused)::state fs, as;
        const auto& y = fused.forward(x, fs, ctx);
        // The same layers and contexts, each pass apart: the main branch, the shortcut, the add and ReLU.
        const auto& a = apart.main_branch().forward(x, as.main, ctx.child(0));
        const auto& b = apart.skip_branch().forward(x, as.skip, ctx.child(1));
        std::vector<float> expected(a.size());
        nn::detail::add<float, true>(a.data(), b.data(), expected.data(), a.size());
        REQUIRE(std::equal(y.begin(), y.end(), expected.begin(), expected.end()));
        // The last batch norm kept what its backward reads (its input and statistics), not its output.
        const auto& bn = std::get<3>(fs.main.parts);
        CHECK(bn.input == &std::get<2>(fs.main.parts).output);
        CHECK(bn.output.size() == 0);
        CHECK(bn.saved.mean == std::get<3>(as.main.parts).saved.mean);
        CHECK(bn.saved.inv_std == std::get<3>(as.main.parts).saved.inv_std);
        std::vector<float> running_fused, running_apart;
        fused.visit_buffers(
            [&](std::string_view, std::span<float> v) { running_fused.insert(running_fused.end(), v.begin(), v.end()); });
        apart.visit_buffers(
            [&](std::string_view, std::span<float> v) { running_apart.insert(running_apart.end(), v.begin(), v.end()); });
        CHECK(running_fused == running_apart);
        // Backward from either state: the same gradients.
        const auto dy = random_activation<config::fp32>(fused.output_shape(s), 91);
        decltype(fused)::state ref;
        const auto& yr = apart.forward(x, ref, ctx);  // apart's own (fused) forward, for its backward
        REQUIRE(std::equal(yr.begin(), yr.end(), y.begin(), y.end()));
        const auto& dx = fused.backward(dy, fs, ctx, true);
        std::vector<float> dx_fused(dx.begin(), dx.end());
        // The unfused forward's state: the main branch's layers and the shortcut as above, the block's
        // output written by the add.
        decltype(fused)::state unfused;
        const auto& ua = apart.main_branch().forward(x, unfused.main, ctx.child(0));
        const auto& ub = apart.skip_branch().forward(x, unfused.skip, ctx.child(1));
        nn::detail::ensure_shape(unfused.out.output, tensor::shape_of(ua));
        nn::detail::add<float, true>(ua.data(), ub.data(), unfused.out.output.data(), ua.size());
        const auto& dxu = apart.backward(dy, unfused, ctx, true);
        REQUIRE(std::equal(dx_fused.begin(), dx_fused.end(), dxu.begin(), dxu.end()));
        // Backward adds the shortcut's gradient to the main branch's in the first convolution: the
        // bits of the two branches' backward passes and an add after them.
        auto third = apart;
        decltype(fused)::state t;
        (void)third.forward(x, t, ctx);
        nn::relu<config::fp32> relu;
        const auto& dsum = relu.backward(dy, t.out, ctx.child(2), true);
        const auto& da = third.main_branch().backward(dsum, t.main, ctx.child(0), true);
        std::vector<float> expected_dx(da.begin(), da.end());
        const auto& db = third.skip_branch().backward(dsum, t.skip, ctx.child(1), true);
        for (std::size_t i = 0; i < expected_dx.size(); ++i) expected_dx[i] += db.data()[i];
        REQUIRE(dx_fused == expected_dx);
        std::vector<float> grads_fused, grads_apart;
        fused.visit_parameters(
            [&](std::string_view, auto, std::span<float> g) { grads_fused.insert(grads_fused.end(), g.begin(), g.end()); });
        apart.visit_parameters(
            [&](std::string_view, auto, std::span<float> g) { grads_apart.insert(grads_apart.end(), g.begin(), g.end()); });
        CHECK(grads_fused == grads_apart);
        CHECK(std::any_of(grads_fused.begin(), grads_fused.end(), [](float g) { return g != 0.0f; }));
    }
}

TEMPLATE_TEST_CASE("a sequential hands a batch norm's input and map to the convolution after it, with the bits of the "
                   "layers run apart",
                   "[nn][sequential]", config::fp32, config::half) {
    using P = TestType;
    using T = typename P::data_type;
    STATIC_REQUIRE(nn::detail::maps_into<nn::batch_norm_relu<P>, nn::conv2d<P>>);
    STATIC_REQUIRE_FALSE(nn::detail::maps_into<nn::conv2d<P>, nn::batch_norm_relu<P>>);
    const shape s{4, 9, 9, 16};
    const auto x = random_activation<P>(s, 140);
    for (const std::size_t threads : {1u, 2u}) {
        CAPTURE(threads);
        auto net = nn::detail::make_basic_main<P>(16, 16, 1, true);  // conv1, bn1 with its ReLU, conv2, bn2
        auto apart = net;
        const nn::context ctx{nn::mode::train, threads};
        typename decltype(net)::state fs, as;
        const auto& y = net.forward(x, fs, ctx);
        // Each layer's own forward, with the contexts sequential gives them.
        const auto& a0 = apart.template get<0>().forward(x, std::get<0>(as.parts), ctx.child(0));
        const auto& a1 = apart.template get<1>().forward(a0, std::get<1>(as.parts), ctx.child(1));
        const auto& a2 = apart.template get<2>().forward(a1, std::get<2>(as.parts), ctx.child(2));
        const auto& a3 = apart.template get<3>().forward(a2, std::get<3>(as.parts), ctx.child(3));
        REQUIRE(storage_bits(y) == storage_bits(a3));
        // The batch norm wrote no output; the convolution after it reads the batch norm's input.
        CHECK(std::get<1>(fs.parts).output.size() == 0);
        CHECK(std::get<2>(fs.parts).input == &std::get<0>(fs.parts).output);
        CHECK(std::get<2>(fs.parts).input_map.has_value());
        CHECK(std::get<1>(as.parts).output.size() == a0.size());
        const auto dy = random_activation<P>(tensor::shape_of(y), 141);
        const auto dx = storage_bits(net.backward(dy, fs, ctx, true));
        CHECK(dx == storage_bits(apart.backward(dy, as, ctx, true)));
        const auto g = parameter_gradients(net);
        CHECK(g == parameter_gradients(apart));
        CHECK(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.0f; }));
        // A range that ends between the two runs them apart: the batch norm's output is the range's.
        typename decltype(net)::state cut;
        const auto& head = net.forward_units(0, 2, x, cut, ctx);
        CHECK(&head == &std::get<1>(cut.parts).output);
        CHECK(storage_bits(net.forward_units(2, 4, head, cut, ctx)) == storage_bits(y));
        // Evaluation runs each layer alone.
        typename decltype(net)::state ev;
        (void)net.forward(x, ev, nn::context{nn::mode::eval, threads});
        CHECK(std::get<1>(ev.parts).output.size() == a0.size());
        CHECK_FALSE(std::get<2>(ev.parts).input_map.has_value());
        if constexpr (std::is_same_v<T, tessera::half>) {
            // An output rounded stochastically has no map to stand for it.
            nn::context sr = ctx;
            sr.rounding = {.stochastic = true, .seed = 5, .stream = 1};
            typename decltype(net)::state st;
            (void)net.forward(x, st, sr);
            CHECK(std::get<1>(st.parts).output.size() == a0.size());
            CHECK_FALSE(net.template get<1>().maps(sr.child(1)));
        }
    }
    // Misuse is an error: a map into a convolution that does not run by Winograd, a map in evaluation.
    nn::conv2d<P> strided(16, 16, {3, 3, 2, 1});
    nn::batch_norm_relu<P> bn(16);
    typename nn::batch_norm_relu<P>::state bs;
    typename nn::conv2d<P>::state cs;
    const nn::context train{nn::mode::train, 1};
    const auto map = bn.forward_map(x, bs, train);
    CHECK_FALSE(strided.takes_mapped_input(s, train));
    CHECK_THROWS_AS(strided.forward_mapped(x, map, cs, train), std::logic_error);
    CHECK_THROWS_AS(bn.forward_map(x, bs, nn::context{nn::mode::eval, 1}), std::logic_error);
}

TEMPLATE_TEST_CASE("a batch norm hands the convolution before it its map in backward, with the bits of the layers run "
                   "apart",
                   "[nn][sequential][residual]", config::fp32, config::half) {
    using P = TestType;
    using T = typename P::data_type;
    STATIC_REQUIRE(nn::detail::gradient_maps_into<nn::conv2d<P>, nn::batch_norm<P>>);
    STATIC_REQUIRE(nn::detail::gradient_maps_into<nn::conv2d<P>, nn::batch_norm_relu<P>>);
    STATIC_REQUIRE_FALSE(nn::detail::gradient_maps_into<nn::batch_norm<P>, nn::conv2d<P>>);
    STATIC_REQUIRE(nn::detail::starts_with_mapped_pair<nn::detail::basic_main<P>>);
    // The gradients, then zeroed for the next backward to accumulate from nothing.
    const auto grads = [](auto& model) {
        auto g = parameter_gradients(model);
        model.visit_parameters([](std::string_view, auto, std::span<float> v) { std::ranges::fill(v, 0.0f); });
        return g;
    };
    const shape s{4, 9, 9, 16};
    const auto x = random_activation<P>(s, 170);
    for (const std::size_t threads : {1u, 2u})
        for (const bool stochastic : {false, std::is_same_v<T, tessera::half>}) {
            CAPTURE(threads, stochastic);
            nn::context ctx{nn::mode::train, threads};
            if (stochastic) ctx.rounding = {.stochastic = true, .seed = 7, .stream = 3};
            // A sequential conv1, bn1 with its ReLU, conv2, bn2: backward whole, and in two halves.
            auto net = nn::detail::make_basic_main<P>(16, 16, 1, true);
            typename decltype(net)::state st;
            const auto& y = net.forward(x, st, ctx);
            const auto dy = random_activation<P>(tensor::shape_of(y), 171);
            const auto dx = storage_bits(net.backward(dy, st, ctx, true));
            // Written only where the pairs could not run (the stochastic rounding of a 16-bit gradient).
            CHECK((std::get<1>(st.parts).grad_input.size() == 0) == !stochastic);
            CHECK((std::get<3>(st.parts).grad_input.size() == 0) == !stochastic);
            const auto g = grads(net);
            const auto dx_split = storage_bits(net.backward_input(dy, st, ctx, true));
            net.backward_weights(st, ctx);
            CHECK(dx_split == dx);
            CHECK(grads(net) == g);
            // Each layer's own backward, last first, with the contexts sequential gives them.
            const auto* cur = &dy;
            for (std::size_t u = 4; u-- > 0;)
                [&]<std::size_t... I>(std::index_sequence<I...>) {
                    ((I == u ? (cur = &net.template get<I>().backward(*cur, std::get<I>(st.parts), ctx.child(I), true), 0) : 0), ...);
                }(std::make_index_sequence<4>{});
            CHECK(storage_bits(*cur) == dx);
            CHECK(grads(net) == g);
            CHECK(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.0f; }));

            // A basic block (identity and projection shortcuts): conv1 reads bn1's gradient through its
            // map as it adds the shortcut's, conv2 bn2's.
            for (const std::size_t stride : {1u, 2u}) {
                CAPTURE(stride);
                nn::basic_block<P> block(16, 16 * stride, stride);
                typename nn::basic_block<P>::state bst;
                const auto& by = block.forward(x, bst, ctx);
                const auto bdy = random_activation<P>(tensor::shape_of(by), 172);
                const auto bdx = storage_bits(block.backward(bdy, bst, ctx, true));
                const auto bg = grads(block);
                // Apart: the ReLU's backward, the main branch's layers one by one, the shortcut, the add.
                nn::relu<P> relu;
                const auto& dsum = relu.backward(bdy, bst.out, ctx.child(2), true);
                auto& main = block.main_branch();
                auto& parts = bst.main.parts;
                const nn::context m = ctx.child(0);
                const auto& d3 = main.template get<3>().backward(dsum, std::get<3>(parts), m.child(3), true);
                const auto& d2 = main.template get<2>().backward(d3, std::get<2>(parts), m.child(2), true);
                const auto& d1 = main.template get<1>().backward(d2, std::get<1>(parts), m.child(1), true);
                const auto& db = block.skip_branch().backward(dsum, bst.skip, ctx.child(1), true);
                const auto& d0 = main.template get<0>().backward_adding(d1, db, std::get<0>(parts), m.child(0));
                CHECK(storage_bits(d0) == bdx);
                CHECK(grads(block) == bg);
            }
        }
    // Misuse is an error: a map into a convolution that does not run by Winograd, a map in evaluation.
    nn::conv2d<P> strided(16, 16, {3, 3, 2, 1});
    nn::batch_norm<P> bn(16);
    typename nn::conv2d<P>::state cs;
    typename nn::batch_norm<P>::state bs;
    const nn::context train{nn::mode::train, 1};
    const auto& z = strided.forward(x, cs, train);
    (void)bn.forward(z, bs, train);
    const auto dz = random_activation<P>(tensor::shape_of(z), 173);
    CHECK_FALSE(strided.takes_mapped_gradient(s, train));
    const auto map = bn.backward_map(dz, bs, train);
    CHECK_THROWS_AS(strided.backward_mapped(dz, map, cs, train, true), std::logic_error);
    typename nn::batch_norm<P>::state eval_state;
    (void)bn.forward(z, eval_state, nn::context{nn::mode::eval, 1});
    CHECK_FALSE(bn.maps_gradient(eval_state, nn::context{nn::mode::eval, 1}));
    CHECK_THROWS_AS(bn.backward_map(dz, eval_state, nn::context{nn::mode::eval, 1}), std::logic_error);
}

TEST_CASE("a residual block whose main branch is one convolution adds the shortcut's gradient in it", "[nn][residual]") {
    using P = config::fp32;
    using Main = nn::sequential<nn::conv2d<P>>;
    STATIC_REQUIRE(nn::detail::starts_with_adding_layer<Main>);
    nn::residual<Main> block(Main(nn::conv2d<P>(8, 8, {3, 3, 1, 1})), nn::shortcut<P>(8, 8, 1, true));
    auto apart = block;
    const shape s{3, 5, 6, 8};
    const auto x = random_activation<P>(s, 150), dy = random_activation<P>(s, 151);
    const nn::context ctx{nn::mode::train, 1};
    decltype(block)::state st, as;
    (void)block.forward(x, st, ctx);
    const auto& dx = block.backward(dy, st, ctx, true);
    (void)apart.forward(x, as, ctx);
    nn::relu<P> relu;
    const auto& dsum = relu.backward(dy, as.out, ctx.child(2), true);
    const auto& da = apart.main_branch().backward(dsum, as.main, ctx.child(0), true);
    std::vector<float> expected(da.begin(), da.end());
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += dsum.data()[i];  // the identity shortcut's
    REQUIRE(std::equal(dx.begin(), dx.end(), expected.begin(), expected.end()));
}

TEST_CASE("the residual add rounds the half sum stochastically when asked, element i with the bits of element i",
          "[nn][half][rounding]") {
    const std::size_t n = 70001;  // over two threads, a scalar tail
    std::mt19937 rng(81);
    std::normal_distribution<float> value(0.0f, 3.0f);
    std::vector<tessera::half> a(n), b(n), out(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = tessera::half(value(rng)), b[i] = tessera::half(value(rng));
    const tessera::tensor::rounding r{.stochastic = true, .seed = 3, .stream = 4};
    nn::detail::add<float>(a.data(), b.data(), out.data(), n, {2}, r);
    std::size_t differing = 0, other_than_nearest = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const float sum = float(a[i]) + float(b[i]);
        differing += out[i].bits() !=
                     tessera::tensor::round_element(sum, r, i).bits();
        other_than_nearest += out[i].bits() != tessera::half(sum).bits();
    }
    CHECK(differing == 0);
    CHECK(other_than_nearest > n / 10);  // it did not round to nearest
}

}  // namespace test_layers
