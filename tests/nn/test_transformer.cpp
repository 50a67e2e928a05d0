// The transformer layers: finite-difference gradients (fp64), causality, masks, dropout streams,
// 16-bit outputs rounded once, thread counts, and the published parameter counts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "gradient_check.hpp"
#include "tessera/emulator/pass_model.hpp"
#include "tessera/optim/adamw.hpp"

namespace test_transformer {

using namespace tessera;
using tessera::tensor::shape;

template <class P>
nn::activation<P> random_tokens(std::size_t samples, std::size_t length, std::size_t vocab, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::uint32_t> ids(samples * length);
    for (auto& id : ids) id = static_cast<std::uint32_t>(rng() % vocab);
    return nn::token_activation<P>(std::span<const std::uint32_t>(ids), samples, length);
}

// A GPT of the given blocks: embedding, blocks, final layer norm and an untied LM head.
template <class P, class Placement = nn::pre_norm>
auto tiny_gpt(std::size_t vocab, std::size_t width, std::size_t heads, std::size_t positions, double dropout) {
    nn::block_spec b{.width = width, .heads = heads, .causal = true, .dropout = dropout, .attention_dropout = dropout};
    return nn::sequential(nn::token_embedding<P>({.vocab = vocab, .width = width, .positions = positions}),
                          nn::transformer_block<P, Placement>(b), nn::transformer_block<P, Placement>(b),
                          nn::layer_norm<P>(width), nn::token_linear<P>(width, vocab, false))
        .named({"wte", "h.0", "h.1", "ln_f", "lm_head"});
}

TEST_CASE("the transformer layers are Layers, and those with weights split their backward", "[nn][transformer][concepts]") {
    STATIC_REQUIRE(nn::SplitBackwardLayer<nn::token_linear<config::fp32>>);
    STATIC_REQUIRE(nn::Layer<nn::layer_norm<config::half>>);
    STATIC_REQUIRE(nn::Layer<nn::gelu<config::mixed>>);
    STATIC_REQUIRE(nn::Layer<nn::dropout<config::half>>);
    STATIC_REQUIRE(nn::Layer<nn::attention<config::fp32>>);
    STATIC_REQUIRE(nn::Layer<nn::token_embedding<config::half>>);
    STATIC_REQUIRE(nn::SplitBackwardLayer<nn::transformer_block<config::half, nn::pre_norm>>);
    STATIC_REQUIRE(nn::SplitBackwardLayer<nn::transformer_block<fp64, nn::post_norm>>);
    STATIC_REQUIRE(nn::NormPlacement<nn::post_norm>);
    STATIC_REQUIRE_FALSE(nn::NormPlacement<int>);
}

TEST_CASE("layer norm, GELU and a per-position linear match finite differences", "[nn][transformer][gradcheck]") {
    nn::layer_norm<fp64> ln(7);
    // weight and bias away from 1 and 0, so that their gradients and the input's are all tested
    std::mt19937_64 rng(3);
    ln.visit_parameters([&](std::string_view, std::span<double> v, auto) {
        for (auto& x : v) x = std::uniform_real_distribution<double>(0.5, 1.5)(rng);
    });
    check_gradients(ln, {3, 1, 5, 7}, 11);
    nn::gelu<fp64> erf_form(kernels::gelu_form::erf), tanh_form(kernels::gelu_form::tanh);
    check_gradients(erf_form, {2, 1, 4, 6}, 12);
    check_gradients(tanh_form, {2, 1, 4, 6}, 13);
    nn::token_linear<fp64> lin(6, 5);
    check_gradients(lin, {2, 1, 3, 6}, 14);
    nn::token_linear<fp64> no_bias(6, 4, false);
    check_gradients(no_bias, {2, 1, 3, 6}, 15);
}

TEST_CASE("GELU's values are the published ones; layer norm's rows have mean 0 and variance 1", "[nn][transformer]") {
    // Φ(1) = 0.8413447460685429 and the tanh form's 0.8411919906082768 (Python's math.erf, math.tanh)
    const double xs[] = {1.0, -0.5};
    const double erf_ref[] = {0.8413447460685429, -0.15426876936299344};
    const double tanh_ref[] = {0.8411919906082768, -0.15428599017485606};
    for (const auto& [form, ref, eps] : {std::tuple{kernels::gelu_form::erf, erf_ref, 1e-14},
                                        std::tuple{kernels::gelu_form::tanh, tanh_ref, 1e-14}}) {
        double y[2];
        kernels::workspace<double> ws;
        kernels::gelu_forward<double>(xs, 2, y, form, ws);
        for (int i = 0; i < 2; ++i) CHECK(y[i] == Approx(ref[i]).epsilon(eps));
        float xf[2] = {1.0f, -0.5f}, yf[2];
        kernels::workspace<float> wf;
        kernels::gelu_forward<float>(xf, 2, yf, form, wf);  // float lanes: within a few ulps
        for (int i = 0; i < 2; ++i) CHECK(yf[i] == Approx(ref[i]).epsilon(1e-6));
    }
    nn::layer_norm<fp64> ln(16, 1e-12);
    auto x = random_activation<fp64>({2, 1, 3, 16}, 5);
    nn::layer_norm<fp64>::state st;
    const auto& y = ln.forward(x, st, {});
    for (std::size_t r = 0; r < 6; ++r) {
        double mean = 0, var = 0;
        for (std::size_t i = 0; i < 16; ++i) mean += y.data()[r * 16 + i] / 16;
        for (std::size_t i = 0; i < 16; ++i) var += (y.data()[r * 16 + i] - mean) * (y.data()[r * 16 + i] - mean) / 16;
        CHECK(std::abs(mean) < 1e-12);
        CHECK(var == Approx(1.0).epsilon(1e-9));
    }
}

TEST_CASE("attention matches finite differences: causal, full, and with padded and packed segments",
          "[nn][transformer][gradcheck]") {
    nn::attention<fp64> causal(2, true), full(2, false);
    check_gradients(causal, {2, 1, 5, 3 * 6}, 21);
    check_gradients(full, {2, 1, 5, 3 * 6}, 22);
    // sample 0: two packed sequences (1 1 2 2 2); sample 1: three tokens and two of padding
    const std::vector<std::uint16_t> segments{1, 1, 2, 2, 2, 1, 1, 1, 0, 0};
    nn::context ctx{nn::mode::train, 1};
    ctx.segments = segments.data();
    check_gradients(full, {2, 1, 5, 3 * 6}, 23, 40, 1e-6, ctx);
    check_gradients(causal, {2, 1, 5, 3 * 6}, 24, 40, 1e-6, ctx);
    // dropout on the probabilities: the mask is a function of the stream, so finite differences see it
    nn::attention<fp64> dropped(2, true, 0.3);
    ctx.dropout = {.active = true, .seed = 11, .step = 4, .stream = 0, .first_sample = 5};
    check_gradients(dropped, {2, 1, 5, 3 * 6}, 25, 40, 1e-6, ctx);
}

// The attention kernels against naive loops, over lengths that span several causal blocks (a
// partial last one too): probabilities, context and the fused QKV's gradient, causal (the blocked
// path), causal with packed segments and full (the masked path), with dropout and without, on 1 and 3
// threads.
TEST_CASE("attention's kernels match naive loops across causal blocks, masked or not, with dropout",
          "[nn][transformer][attention]") {
    const std::size_t N = 2, heads = 2, dh = 3, d = heads * dh, ld = 3 * d;
    for (const std::size_t L : {kernels::detail::causal_block * 2 + 7, kernels::detail::causal_block}) {
        std::vector<std::uint16_t> segments(N * L, 1);
        for (std::size_t i = L / 3; i < L; ++i) segments[i] = 2;          // sample 0: two packed sequences
        for (std::size_t i = L - 5; i < L; ++i) segments[L + i] = 0;      // sample 1: five positions of padding
        const kernels::attention_shape a{N, L, heads, dh};
        std::mt19937_64 rng(L);
        std::uniform_real_distribution<double> uniform(-2, 2);
        std::vector<double> qkv(N * L * ld), dctx(N * L * d);
        for (auto& x : qkv) x = uniform(rng);
        for (auto& x : dctx) x = uniform(rng);
        for (const bool causal : {true, false})
            for (const bool packed : {false, true})
                for (const double p : {0.0, 0.2}) {
                    INFO("L " << L << " causal " << causal << " packed " << packed << " p " << p);
                    const kernels::attention_mask mask{causal, packed ? segments.data() : nullptr};
                    const kernels::attention_dropout drop{p, {.active = p > 0, .seed = 5, .step = 2, .first_sample = 3}};
                    const auto sees = [&](std::size_t s, std::size_t i, std::size_t j) {
                        if (causal && j > i) return false;
                        if (!packed) return true;
                        const std::uint16_t* seg = segments.data() + s * L;
                        return seg[i] != 0 && seg[j] == seg[i];
                    };
                    const std::uint64_t base = drop.stream.base(), threshold = kernels::dropout_threshold(p);
                    const auto mask_of = [&](std::size_t s, std::size_t h, std::size_t i, std::size_t j) {
                        if (p == 0) return 1.0;
                        const std::uint64_t e = (3 + s) * heads * L * L + (h * L + i) * L + j;
                        return kernels::dropout_keeps(base, e, threshold) ? 1 / (1 - p) : 0.0;
                    };
                    // naive: P, the context, then dV, dP, dS, dQ, dK
                    std::vector<double> P(a.probabilities(), 0.0), ctx(N * L * d, 0.0), dqkv(N * L * ld, 0.0);
                    const double scale = 1 / std::sqrt(double(dh));
                    for (std::size_t s = 0; s < N; ++s)
                        for (std::size_t h = 0; h < heads; ++h) {
                            const auto at = [&](std::size_t pos, std::size_t part, std::size_t c) {
                                return qkv[(s * L + pos) * ld + part * d + h * dh + c];
                            };
                            double* ph = P.data() + (s * heads + h) * L * L;
                            for (std::size_t i = 0; i < L; ++i) {
                                double top = -1e300, sum = 0;
                                std::vector<double> score(L);
                                for (std::size_t j = 0; j < L; ++j) {
                                    for (std::size_t c = 0; c < dh; ++c) score[j] += at(i, 0, c) * at(j, 1, c) * scale;
                                    if (sees(s, i, j)) top = std::max(top, score[j]);
                                }
                                for (std::size_t j = 0; j < L; ++j) sum += sees(s, i, j) ? std::exp(score[j] - top) : 0;
                                for (std::size_t j = 0; j < L; ++j) ph[i * L + j] = sees(s, i, j) ? std::exp(score[j] - top) / sum : 0;
                                for (std::size_t j = 0; j < L; ++j)
                                    for (std::size_t c = 0; c < dh; ++c)
                                        ctx[(s * L + i) * d + h * dh + c] += ph[i * L + j] * mask_of(s, h, i, j) * at(j, 2, c);
                            }
                            for (std::size_t i = 0; i < L; ++i) {
                                std::vector<double> dP(L, 0.0);
                                double rowsum = 0;
                                for (std::size_t j = 0; j < L; ++j) {
                                    for (std::size_t c = 0; c < dh; ++c) {
                                        const double go = dctx[(s * L + i) * d + h * dh + c];
                                        dP[j] += go * at(j, 2, c) * mask_of(s, h, i, j);
                                        dqkv[(s * L + j) * ld + 2 * d + h * dh + c] += ph[i * L + j] * mask_of(s, h, i, j) * go;
                                    }
                                    rowsum += ph[i * L + j] * dP[j];
                                }
                                for (std::size_t j = 0; j < L; ++j) {
                                    const double ds = ph[i * L + j] * (dP[j] - rowsum) * scale;
                                    for (std::size_t c = 0; c < dh; ++c) {
                                        dqkv[(s * L + i) * ld + h * dh + c] += ds * at(j, 1, c);
                                        dqkv[(s * L + j) * ld + d + h * dh + c] += ds * at(i, 0, c);
                                    }
                                }
                            }
                        }
                    std::vector<std::vector<double>> runs;
                    for (const std::size_t threads : {1, 3}) {
                        kernels::workspace<double> ws;
                        std::vector<double> probs(a.probabilities(), -1.0), out(N * L * d, -1.0), grad(N * L * ld, -1.0);
                        kernels::attention_forward<double>(qkv.data(), a, mask, probs.data(), out.data(), ws, threads, {}, {}, drop);
                        kernels::attention_backward<double>(qkv.data(), probs.data(), dctx.data(), a, mask, grad.data(), ws,
                                                            threads, {}, drop);
                        for (std::size_t e = 0; e < probs.size(); ++e) REQUIRE(probs[e] == Approx(P[e]).margin(1e-12));
                        for (std::size_t e = 0; e < out.size(); ++e) REQUIRE(out[e] == Approx(ctx[e]).margin(1e-12));
                        for (std::size_t e = 0; e < grad.size(); ++e) REQUIRE(grad[e] == Approx(dqkv[e]).margin(1e-11));
                        probs.insert(probs.end(), out.begin(), out.end());
                        probs.insert(probs.end(), grad.begin(), grad.end());
                        runs.push_back(std::move(probs));
                    }
                    REQUIRE(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(double)) == 0);
                }
    }
}

TEST_CASE("attention's dropout: the probabilities (i, j) of head h of sample s keep by the stream's element "
          "(first_sample + s)·heads·L² + (h·L + i)·L + j, scaled by 1/(1 − p); off in evaluation",
          "[nn][transformer][dropout]") {
    const std::size_t L = 6, heads = 2, dh = 3, d = heads * dh, N = 3;
    const double p = 0.25;
    nn::attention<fp64> attn(heads, true, p);
    auto x = random_activation<fp64>({N, 1, L, 3 * d}, 51);
    nn::context ctx{nn::mode::train, 1};
    ctx.dropout = {.active = true, .seed = 3, .step = 9, .stream = 17, .first_sample = 10};
    nn::attention<fp64>::state st;
    const auto y = attn.forward(x, st, ctx);
    const double* probs = st.probabilities.data();  // before dropout
    const std::uint64_t base = ctx.dropout.base(), threshold = kernels::dropout_threshold(p);
    std::size_t dropped = 0;
    for (std::size_t s = 0; s < N; ++s)
        for (std::size_t h = 0; h < heads; ++h)
            for (std::size_t i = 0; i < L; ++i)
                for (std::size_t c = 0; c < dh; ++c) {
                    double expected = 0;
                    for (std::size_t j = 0; j < L; ++j) {
                        const std::uint64_t e = (10 + s) * heads * L * L + (h * L + i) * L + j;
                        const bool keep = kernels::dropout_keeps(base, e, threshold);
                        dropped += keep ? 0 : 1;
                        const double v = x.data()[(s * L + j) * 3 * d + 2 * d + h * dh + c];
                        if (keep) expected += probs[((s * heads + h) * L + i) * L + j] / (1 - p) * v;
                    }
                    CHECK(y.data()[(s * L + i) * d + h * dh + c] == Approx(expected).margin(1e-12));
                }
    CHECK(dropped > 0);  // the test can fail: some probabilities were dropped
    // Sample 2 alone, as the micro-batch's first sample at index 12, draws the same masks.
    auto last = random_activation<fp64>({1, 1, L, 3 * d}, 1);
    std::copy(x.data() + 2 * L * 3 * d, x.data() + 3 * L * 3 * d, last.data());
    nn::context one = ctx;
    one.dropout.first_sample = 12;
    nn::attention<fp64>::state st1;
    const auto& y1 = attn.forward(last, st1, one);
    for (std::size_t k = 0; k < L * d; ++k) REQUIRE(y1.data()[k] == y.data()[2 * L * d + k]);
    // Evaluation: no dropout, the same as a layer without it.
    nn::context eval{nn::mode::eval, 1};
    eval.dropout = ctx.dropout;
    nn::attention<fp64> plain(heads, true);
    nn::attention<fp64>::state se, sp;
    const auto ye = attn.forward(x, se, eval);
    const auto& yp = plain.forward(x, sp, ctx);
    for (std::size_t k = 0; k < N * L * d; ++k) REQUIRE(ye.data()[k] == yp.data()[k]);
}

TEST_CASE("attention's probabilities: causal rows see no later key, segments see only their own, padding sees nothing",
          "[nn][transformer]") {
    const std::size_t L = 5;
    nn::attention<fp64> causal(1, true);
    const std::vector<std::uint16_t> segments{1, 1, 2, 2, 0};
    nn::context ctx{nn::mode::train, 1};
    ctx.segments = segments.data();
    auto x = random_activation<fp64>({1, 1, L, 3 * 4}, 7);
    nn::attention<fp64>::state st;
    const auto& y = causal.forward(x, st, ctx);
    const double* p = st.probabilities.data();
    for (std::size_t i = 0; i < L; ++i) {
        double sum = 0;
        for (std::size_t j = 0; j < L; ++j) {
            const bool visible = j <= i && segments[i] != 0 && segments[j] == segments[i];
            if (!visible) CHECK(p[i * L + j] == 0.0);
            sum += p[i * L + j];
        }
        CHECK(sum == Approx(segments[i] == 0 ? 0.0 : 1.0));
    }
    for (std::size_t c = 0; c < 4; ++c) CHECK(y.data()[(L - 1) * 4 + c] == 0.0);  // the padding position's context
    // position 2 starts segment 2: it sees itself alone, so its context is its own value row
    for (std::size_t c = 0; c < 4; ++c) CHECK(y.data()[2 * 4 + c] == Approx(x.data()[2 * 12 + 8 + c]));
}

TEST_CASE("a causal GPT: no position's logits or loss move when a later token changes", "[nn][transformer]") {
    auto gpt = tiny_gpt<config::fp32>(19, 8, 2, 6, 0.0);
    auto tokens = random_tokens<config::fp32>(1, 6, 19, 31);
    decltype(gpt)::state st;
    const auto before = gpt.forward(tokens, st, {});
    for (std::size_t t = 1; t < 6; ++t) {
        auto changed = tokens;
        changed.data()[t] = nn::token_element<float>((nn::token_id(tokens.data()[t]) + 7) % 19);
        decltype(gpt)::state s2;
        const auto& after = gpt.forward(changed, s2, {});
        for (std::size_t i = 0; i < t * 19; ++i) REQUIRE(after.data()[i] == before.data()[i]);
        bool moved = false;  // and the changed position's own logits do move (the test can fail)
        for (std::size_t i = t * 19; i < (t + 1) * 19; ++i) moved = moved || after.data()[i] != before.data()[i];
        CHECK(moved);
    }
}

TEST_CASE("transformer blocks, pre-LN and post-LN, match finite differences with dropout on",
          "[nn][transformer][gradcheck]") {
    nn::context ctx{nn::mode::train, 1};
    ctx.dropout = {.active = true, .seed = 5, .step = 2, .stream = 0, .first_sample = 3};
    nn::transformer_block<fp64, nn::pre_norm> gpt_block(
        {.width = 8, .heads = 2, .causal = true, .dropout = 0.25, .attention_dropout = 0.2});
    check_gradients(gpt_block, {2, 1, 4, 8}, 41, 30, 1e-6, ctx);
    nn::transformer_block<fp64, nn::post_norm> bert_block(
        {.width = 8, .heads = 2, .mlp_width = 12, .causal = false, .dropout = 0.25, .attention_dropout = 0.2, .eps = 1e-12,
         .gelu = kernels::gelu_form::erf, .names = nn::block_names::bert()});
    const std::vector<std::uint16_t> segments{1, 1, 1, 0, 1, 1, 1, 1};
    ctx.segments = segments.data();
    check_gradients(bert_block, {2, 1, 4, 8}, 42, 30, 1e-6, ctx);
}

TEST_CASE("a whole GPT's loss matches finite differences, the embedding's and the tied positions' gradients included",
          "[nn][transformer][gradcheck]") {
    auto gpt = tiny_gpt<fp64>(11, 8, 2, 5, 0.1);
    nn::context ctx{nn::mode::train, 1};
    ctx.dropout = {.active = true, .seed = 9};
    const std::size_t n = 2, L = 5, V = 11;
    auto tokens = random_tokens<fp64>(n, L, V, 3);
    std::vector<std::int32_t> labels(n * L);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = i % 4 == 3 ? kernels::ignore_label : std::int32_t(i % V);
    kernels::workspace<double> ws;
    const auto loss = [&] {
        decltype(gpt)::state st;
        const auto& logits = gpt.forward(tokens, st, ctx);
        return kernels::token_cross_entropy<double>(logits.data(), n * L, V, labels.data(), static_cast<double*>(nullptr),
                                                    1.0, ws).loss;
    };
    gpt.visit_parameters([](std::string_view, auto, auto g) { std::fill(g.begin(), g.end(), 0.0); });
    decltype(gpt)::state st;
    const auto& logits = gpt.forward(tokens, st, ctx);
    auto dlogits = tensor::make_nhwc<double>(tensor::shape_of(logits));
    kernels::token_cross_entropy<double>(logits.data(), n * L, V, labels.data(), dlogits.data(), 1.0, ws);
    gpt.backward(dlogits, st, ctx, false);
    std::size_t checked = 0;
    gpt.visit_parameters([&](std::string_view name, std::span<double> v, std::span<double> g) {
        const std::size_t step = std::max<std::size_t>(1, v.size() / 7);
        for (std::size_t i = 0; i < v.size(); i += step) {
            const double keep = v[i], h = 1e-6;
            v[i] = keep + h;
            const double lp = loss();
            v[i] = keep - h;
            const double lm = loss();
            v[i] = keep;
            const double numeric = (lp - lm) / (2 * h);
            CAPTURE(name, i, g[i], numeric);
            REQUIRE(std::abs(g[i] - numeric) <= 1e-7 + 1e-5 * std::abs(numeric));
            ++checked;
        }
    });
    CHECK(checked > 100);
}

TEST_CASE("the per-token loss is the mean over labelled positions, ignoring the rest, against a naive loop",
          "[nn][transformer][loss]") {
    const std::size_t rows = 6, V = 4;
    auto logits = random_activation<fp64>({1, 1, rows, V}, 17);
    const std::vector<std::int32_t> labels{2, kernels::ignore_label, 0, 3, kernels::ignore_label, 1};
    std::vector<double> grad(rows * V);
    kernels::workspace<double> ws;
    const auto r = kernels::token_cross_entropy<double>(logits.data(), rows, V, labels.data(), grad.data(), 2.0, ws);
    double sum = 0;
    std::size_t labelled = 0, correct = 0;
    for (std::size_t i = 0; i < rows; ++i) {
        const double* z = logits.data() + i * V;
        if (labels[i] == kernels::ignore_label) {
            for (std::size_t k = 0; k < V; ++k) CHECK(grad[i * V + k] == 0.0);
            continue;
        }
        double e = 0;
        for (std::size_t k = 0; k < V; ++k) e += std::exp(z[k]);
        sum += std::log(e) - z[labels[i]];
        ++labelled;
        correct += std::max_element(z, z + V) - z == labels[i];
        for (std::size_t k = 0; k < V; ++k)
            CHECK(grad[i * V + k] == Approx(2.0 * (std::exp(z[k]) / e - (int(k) == labels[i])) / 4.0));
    }
    CHECK(r.labelled == 4);
    CHECK(labelled == 4);
    CHECK(r.correct == correct);
    CHECK(r.loss == Approx(sum / 4));
    const std::vector<std::int32_t> bad{2, 7, 0, 0, 0, 0};
    REQUIRE_THROWS_WITH(kernels::token_cross_entropy<double>(logits.data(), rows, V, bad.data(), grad.data(), 1.0, ws),
                        Catch::Contains("label 7 of position 1"));
}

TEST_CASE("dropout: a counter stream keyed by the sample's place in the combined batch, off in evaluation",
          "[nn][transformer][dropout]") {
    nn::dropout<config::fp32> drop(0.2);
    const shape s{4, 1, 64, 32};
    auto x = random_activation<config::fp32>(s, 1);
    nn::context ctx{nn::mode::train, 1};
    ctx.dropout = {.active = true, .seed = 42, .step = 7, .stream = 0, .first_sample = 8};
    nn::dropout<config::fp32>::state whole;
    const auto y = drop.forward(x, whole, ctx);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
        REQUIRE((y.data()[i] == 0.0f || y.data()[i] == x.data()[i] * 1.25f));
        kept += y.data()[i] != 0.0f;
    }
    // 8,192 draws of p = 0.2: the keep rate within 0.03 of 0.8 (6 standard deviations)
    CHECK(std::abs(double(kept) / double(y.size()) - 0.8) < 0.03);
    // two micro-batches of two samples, given their first samples, draw what one of four drew
    for (std::size_t half = 0; half < 2; ++half) {
        auto part = tensor::make_nhwc<float>({2, 1, 64, 32});
        std::copy_n(x.data() + half * part.size(), part.size(), part.data());
        nn::context c = ctx;
        c.dropout.first_sample = 8 + 2 * half;
        nn::dropout<config::fp32>::state st;
        const auto& yp = drop.forward(part, st, c);
        for (std::size_t i = 0; i < part.size(); ++i) REQUIRE(yp.data()[i] == y.data()[half * part.size() + i]);
    }
    // the backward drops what the forward dropped; another step or layer draws other masks
    nn::dropout<config::fp32>::state st;
    drop.forward(x, st, ctx);
    const auto& dx = drop.backward(x, st, ctx, true);
    for (std::size_t i = 0; i < dx.size(); ++i) REQUIRE(dx.data()[i] == y.data()[i]);
    for (nn::context other : {ctx, ctx.child(1)}) {
        if (other.dropout == ctx.dropout) other.dropout.step = 8;
        nn::dropout<config::fp32>::state so;
        const auto& yo = drop.forward(x, so, other);
        std::size_t differ = 0;
        for (std::size_t i = 0; i < yo.size(); ++i) differ += (yo.data()[i] == 0.0f) != (y.data()[i] == 0.0f);
        CHECK(differ > 1000);
    }
    nn::context eval = ctx;
    eval.mode = nn::mode::eval;
    nn::dropout<config::fp32>::state se;
    const auto& ye = drop.forward(x, se, eval);
    for (std::size_t i = 0; i < ye.size(); ++i) REQUIRE(ye.data()[i] == x.data()[i]);
    REQUIRE_THROWS_WITH(nn::dropout<config::fp32>(1.0), Catch::Contains("[0, 1), got 1"));
}

TEST_CASE("the token embedding gathers rows and scatter-adds their gradients in position order; bad ids are refused",
          "[nn][transformer][embedding]") {
    nn::token_embedding<fp64> emb({.vocab = 5, .width = 3, .positions = 4, .types = 2, .token_name = "word_embeddings",
                                   .position_name = "position_embeddings"});
    const std::vector<std::uint32_t> ids{1, 4, 1, 0, 2, 2, 2, 3};
    const std::vector<std::uint16_t> types{0, 0, 1, 1, 0, 1, 0, 1};
    auto x = nn::token_activation<fp64>(std::span<const std::uint32_t>(ids), 2, 4);
    std::vector<std::span<double>> tables, grads;
    std::vector<std::string> names;
    emb.visit_parameters([&](std::string_view name, std::span<double> v, std::span<double> g) {
        names.emplace_back(name), tables.push_back(v), grads.push_back(g);
    });
    REQUIRE(names == std::vector<std::string>{"word_embeddings.weight", "position_embeddings.weight",
                                              "token_type_embeddings.weight"});
    nn::context ctx{nn::mode::train, 1};
    ctx.token_types = types.data();
    nn::token_embedding<fp64>::state st;
    const auto& y = emb.forward(x, st, ctx);
    auto dy = random_activation<fp64>(tensor::shape_of(y), 3);
    for (std::size_t r = 0; r < 8; ++r)
        for (std::size_t i = 0; i < 3; ++i)
            REQUIRE(y.data()[r * 3 + i] == tables[0][ids[r] * 3 + i] + tables[1][(r % 4) * 3 + i] + tables[2][types[r] * 3 + i]);
    emb.backward(dy, st, ctx, false);
    std::vector<double> naive_tokens(15, 0.0), naive_types(6, 0.0);
    for (std::size_t r = 0; r < 8; ++r)
        for (std::size_t i = 0; i < 3; ++i) {
            naive_tokens[ids[r] * 3 + i] += dy.data()[r * 3 + i];
            naive_types[types[r] * 3 + i] += dy.data()[r * 3 + i];
        }
    for (std::size_t k = 0; k < 15; ++k) REQUIRE(grads[0][k] == naive_tokens[k]);
    for (std::size_t k = 0; k < 6; ++k) REQUIRE(grads[2][k] == naive_types[k]);
    for (std::size_t i = 0; i < 3; ++i) REQUIRE(grads[1][i] == dy.data()[i] + dy.data()[12 + i]);  // position 0
    const std::vector<std::uint32_t> bad{1, 5, 0, 0};
    auto xb = nn::token_activation<fp64>(std::span<const std::uint32_t>(bad), 1, 4);
    REQUIRE_THROWS_WITH(emb.forward(xb, st, {}), Catch::Contains("token 5 at position 1 of sample 0"));
    auto long_x = random_tokens<fp64>(1, 5, 5, 1);
    REQUIRE_THROWS_WITH(emb.forward(long_x, st, {}), Catch::Contains("sequences of 5 tokens, the layer has 4 positions"));
    REQUIRE_THROWS_WITH(nn::token_embedding<config::half>({.vocab = 70000, .width = 4}),
                        Catch::Contains("a vocabulary of 70000 does not fit the 16-bit"));
    // 16-bit elements carry every id of a 65,536-token vocabulary
    const std::vector<std::uint32_t> big{0, 2047, 2049, 50256, 65535};
    auto xh = nn::token_activation<config::half>(std::span<const std::uint32_t>(big), 1, 5);
    for (std::size_t i = 0; i < big.size(); ++i) REQUIRE(nn::token_id(xh.data()[i]) == big[i]);
}

TEST_CASE("16-bit layer norm, GELU and attention outputs are the fp32 results rounded once", "[nn][transformer][half]") {
    const shape s{2, 1, 6, 12};
    auto xh = random_activation<config::half>(s, 4);
    auto xf = tensor::make_nhwc<float>(s);
    std::transform(xh.begin(), xh.end(), xf.begin(), [](tensor::half v) { return static_cast<float>(v); });
    const auto same_as_rounded = [](const auto& half_out, const auto& float_out) {
        for (std::size_t i = 0; i < float_out.size(); ++i)
            REQUIRE(storage_bits(std::vector<tensor::half>{half_out.data()[i]}) ==
                    storage_bits(std::vector<tensor::half>{tensor::half(float_out.data()[i])}));
    };
    nn::layer_norm<config::half> lnh(12);
    nn::layer_norm<config::fp32> lnf(12);
    nn::layer_norm<config::half>::state sh;
    nn::layer_norm<config::fp32>::state sf;
    same_as_rounded(lnh.forward(xh, sh, {}), lnf.forward(xf, sf, {}));
    nn::gelu<config::half> gh;
    nn::gelu<config::fp32> gf;
    nn::gelu<config::half>::state gsh;
    nn::gelu<config::fp32>::state gsf;
    same_as_rounded(gh.forward(xh, gsh, {}), gf.forward(xf, gsf, {}));
    // attention: the probabilities rounded once; the context from the rounded probabilities
    nn::attention<config::half> ah(2, true);
    nn::attention<config::fp32> af(2, true);
    nn::attention<config::half>::state ash;
    nn::attention<config::fp32>::state asf;
    ah.forward(xh, ash, {});
    af.forward(xf, asf, {});
    same_as_rounded(ash.probabilities, asf.probabilities);
}

TEST_CASE("attention, layer norm, the embedding and a block give the same bits on 1 and 3 threads",
          "[nn][transformer][threads]") {
    auto gpt = tiny_gpt<config::fp32>(37, 48, 4, 32, 0.1);
    auto tokens = random_tokens<config::fp32>(3, 32, 37, 8);
    const auto run = [&](std::size_t threads) {
        auto model = gpt;
        nn::context ctx{nn::mode::train, threads};
        ctx.dropout = {.active = true, .seed = 1, .step = 3};
        decltype(model)::state st;
        const auto& y = model.forward(tokens, st, ctx);
        auto dy = random_activation<config::fp32>(tensor::shape_of(y), 9);
        model.backward(dy, st, ctx, false);
        std::vector<float> out(y.begin(), y.end());
        const auto g = parameter_gradients(model);
        out.insert(out.end(), g.begin(), g.end());
        return out;
    };
    const auto one = run(1), three = run(3);
    REQUIRE(one.size() == three.size());
    REQUIRE(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)) == 0);
}

TEST_CASE("a block's split backward gives the bits of its whole backward", "[nn][transformer][split]") {
    nn::transformer_block<config::half, nn::post_norm> block(
        {.width = 16, .heads = 4, .causal = false, .dropout = 0.1, .attention_dropout = 0.1});
    auto x = random_activation<config::half>({2, 1, 8, 16}, 2);
    auto dy = random_activation<config::half>({2, 1, 8, 16}, 3);
    nn::context ctx{nn::mode::train, 1};
    ctx.dropout = {.active = true, .seed = 4};
    ctx.rounding = {true, 77, 5};
    auto whole = block, split = block;
    decltype(block)::state sw, ss;
    whole.forward(x, sw, ctx);
    const auto dx_whole = whole.backward(dy, sw, ctx, true);
    split.forward(x, ss, ctx);
    const auto dx_split = split.backward_input(dy, ss, ctx, true);
    const auto partial = parameter_gradients(split);
    split.backward_weights(ss, ctx);
    REQUIRE(storage_bits(dx_split) == storage_bits(dx_whole));
    const auto gw = parameter_gradients(whole), gs = parameter_gradients(split);
    REQUIRE(std::memcmp(gw.data(), gs.data(), gw.size() * sizeof(float)) == 0);
    CHECK(partial != gs);  // the weight gradients did wait for backward_weights
}

TEST_CASE("a serialized vocabulary projection: N products of vocab / N outputs, each with a piece's temporaries",
          "[nn][transformer][cost]") {
    nn::token_linear<config::half> whole(1024, 30522, true, nn::shapes_only), pieces = whole;
    pieces.set_serialization(2);
    const shape s{8, 1, 128, 1024};
    const auto one = whole.cost(s), two = pieces.cost(s);
    const auto forward_of = [](const nn::cost& c) { return c.passes_of(nn::pass_phase::forward); };
    REQUIRE(forward_of(one).size() == 1);
    REQUIRE(forward_of(two).size() == 2);
    CHECK(forward_of(two)[0].outputs == 15261);
    double macs_one = 0, macs_two = 0;
    for (const auto& p : one.passes) macs_one += p.macs();
    for (const auto& p : two.passes) macs_two += p.macs();
    CHECK(macs_two == macs_one);  // the same products, in pieces
    CHECK(two.flops() == one.flops());
    // with half partials, as Graphcore's BERT ran, the fullest pass of the pieces holds less on its
    // fullest tile than the whole product's (the memory plan counts the largest pass's temporaries)
    const tessera::emulator::device_spec gc200{};
    const auto fullest = [&](const nn::cost& c) {
        double most = 0;
        for (const auto& p : c.passes)
            most = std::max(most, tessera::emulator::cycles_of(p, gc200, 16, tessera::emulator::partials_type::float16).tile_bytes);
        return most;
    };
    CHECK(fullest(two) < fullest(one));
    CHECK_THROWS_WITH(pieces.set_serialization(4), Catch::Contains("4 serialized pieces do not divide its 30522 outputs"));
    auto spec = nn::bert_spec("base");
    spec.decoder_serialization = 3;  // 30522 = 3 × 10174
    const auto bert = nn::make_bert<config::fp32>(spec, nn::shapes_only);
    CHECK(bert.unit_cost(bert.units() - 1, {2, 1, 16, 768}).passes_of(nn::pass_phase::forward).size() == 1 + 1 + 2 + 3);  // dense, GELU, LN, 3 pieces
}

TEST_CASE("built from shapes alone, GPT-2 small and BERT-Base have the released checkpoints' parameter counts",
          "[nn][transformer][counts]") {
    using P = config::fp32;
    const auto count_blocks = [](const nn::block_spec& b, std::size_t n, const shape& s) {
        return n * nn::transformer_block<P, nn::pre_norm>(b, nn::shapes_only).cost(s).parameters;
    };
    const shape s{1, 1, 8, 768};
    // GPT-2 small (Hugging Face's gpt2: 124,439,808 with the LM head tied to wte)
    const nn::token_embedding<P> wte({.vocab = 50257, .width = 768, .positions = 1024}, nn::shapes_only);
    const std::size_t gpt2 = wte.parameters() + count_blocks({.width = 768, .heads = 12}, 12, s) +
                             nn::layer_norm<P>(768, 1e-5, nn::shapes_only).cost(s).parameters;
    CHECK(gpt2 == 124'439'808);
    // BERT-Base's BertModel (bert-base-uncased: embeddings, encoder, pooler): 109,482,240
    const nn::token_embedding<P> bert_emb({.vocab = 30522, .width = 768, .positions = 512, .types = 2}, nn::shapes_only);
    const std::size_t bert = bert_emb.parameters() + nn::layer_norm<P>(768, 1e-12, nn::shapes_only).cost(s).parameters +
                             count_blocks({.width = 768, .heads = 12, .causal = false}, 12, s) +
                             nn::token_linear<P>(768, 768, true, nn::shapes_only).parameters();
    CHECK(bert == 109'482'240);
    nn::token_linear<P> none(768, 768, true, nn::shapes_only);
    nn::token_linear<P>::state st;
    auto x = tensor::make_nhwc<float>({1, 1, 2, 768});
    REQUIRE_THROWS_WITH(none.forward(x, st, {}), Catch::Contains("built from shapes alone"));
}

TEST_CASE("GPT-2 and BERT from shapes alone: the released checkpoints' counts, Hugging Face's unit names",
          "[nn][transformer][counts]") {
    using P = config::fp32;
    // Hugging Face's gpt2, gpt2-medium, gpt2-large, gpt2-xl (the LM head tied to wte)
    const std::pair<const char*, std::size_t> gpt2[] = {
        {"small", 124'439'808}, {"medium", 354'823'168}, {"large", 774'030'080}, {"xl", 1'557'611'200}};
    for (const auto& [size, count] : gpt2) {
        const auto net = nn::make_gpt2<P>(nn::gpt2_spec(size), nn::shapes_only);
        CAPTURE(size);
        CHECK(net.parameters() == count);
    }
    const auto small = nn::make_gpt2<P>(nn::gpt2_spec("small"), nn::shapes_only);
    CHECK(small.units() == 14);
    CHECK(small.unit_name(0) == "wte");
    CHECK(small.unit_index("h.6") == 7);
    CHECK(small.unit_name(13) == "lm_head");
    REQUIRE_THROWS_WITH(small.unit_index("h.12"), Catch::Contains("no unit named 'h.12' (units are wte, h.0 ... h.11, lm_head)"));
    REQUIRE_THROWS_WITH(nn::gpt2_spec("huge"), Catch::Contains("no GPT-2 of size 'huge'"));
    CHECK(small.output_shape({2, 1, 128, 1}) == shape{2, 1, 128, 50257});
    // BERT-Base's BertModel (embeddings, encoder, pooler): 109,482,240. The family's MLM head aside,
    // its embedding and blocks plus the pooler (768 × 768 + 768) are that model.
    const auto base = nn::make_bert<P>(nn::bert_spec("base"), nn::shapes_only);
    std::size_t bert_model = 768 * 768 + 768;
    shape cur{1, 1, 8, 1};
    for (std::size_t u = 0; u + 1 < base.units(); ++u) {
        bert_model += base.unit_cost(u, cur).parameters;
        cur = base.unit_output_shape(u, cur);
    }
    CHECK(bert_model == 109'482'240);
    CHECK(base.unit_name(12) == "encoder.layer.11");
    CHECK(base.unit_name(13) == "cls");
}

TEST_CASE("a tied head: its gradient is the shared table's, both uses summed, and the copies stay equal through steps",
          "[nn][transformer][tied]") {
    auto spec = nn::gpt2_spec("tiny");
    spec.vocab = 13, spec.width = 8, spec.layers = 2, spec.heads = 2, spec.positions = 6, spec.dropout = 0.0;
    auto gpt = nn::make_gpt2<fp64>(spec);
    std::vector<std::string> names;
    std::vector<std::span<double>> values, grads;
    gpt.visit_parameters([&](std::string_view name, std::span<double> v, std::span<double> g) {
        names.emplace_back(name), values.push_back(v), grads.push_back(g);
    });
    REQUIRE(names.front() == "wte.weight");
    REQUIRE(names[1] == "wpe.weight");
    REQUIRE(names[2] == "h.0.ln_1.weight");
    REQUIRE(names[4] == "h.0.attn.c_attn.weight");
    REQUIRE(names[names.size() - 2] == "ln_f.bias");
    REQUIRE(names.back() == "lm_head.weight");
    REQUIRE(std::equal(values.front().begin(), values.front().end(), values.back().begin()));
    const std::size_t n = 2, L = 6, V = 13;
    auto tokens = random_tokens<fp64>(n, L, V, 5);
    std::vector<std::int32_t> labels(n * L);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int32_t((i * 5 + 3) % V);
    nn::token_cross_entropy<fp64> loss_of;
    const auto loss = [&] {
        decltype(gpt)::state st;
        return loss_of(gpt.forward(tokens, st, {}), labels).loss;
    };
    decltype(gpt)::state st;
    loss_of(gpt.forward(tokens, st, {}), labels);
    gpt.backward(loss_of.gradient(), st, {}, false);
    const std::vector<double> table_use(grads.front().begin(), grads.front().end());
    const std::vector<double> head_use(grads.back().begin(), grads.back().end());
    gpt.tie_gradients();
    for (std::size_t i = 0; i < table_use.size(); i += 3) {
        REQUIRE(grads.front()[i] == table_use[i] + head_use[i]);
        REQUIRE(grads.back()[i] == grads.front()[i]);
        // the loss as a function of the one shared value: both copies moved together
        const double keep = values.front()[i], h = 1e-6;
        values.front()[i] = values.back()[i] = keep + h;
        const double lp = loss();
        values.front()[i] = values.back()[i] = keep - h;
        const double lm = loss();
        values.front()[i] = values.back()[i] = keep;
        const double numeric = (lp - lm) / (2 * h);
        CAPTURE(i, grads.front()[i], numeric);
        REQUIRE(std::abs(grads.front()[i] - numeric) <= 1e-7 + 1e-5 * std::abs(numeric));
    }
    // a few AdamW steps on the same batch: the loss falls and the two copies stay bit-identical
    auto model = nn::make_gpt2<config::fp32>(spec);
    optim::adamw opt({.learning_rate = 1e-2});
    nn::token_cross_entropy<config::fp32> ce;
    auto tokens32 = random_tokens<config::fp32>(n, L, V, 5);
    double first = 0, last = 0;
    for (int step = 0; step < 40; ++step) {
        decltype(model)::state s32;
        const double l = ce(model.forward(tokens32, s32, {}), labels).loss;
        model.backward(ce.gradient(), s32, {}, false);
        model.tie_gradients();
        opt.step(model);
        optim::zero_grad(model);
        (step == 0 ? first : last) = l;
    }
    CAPTURE(first, last);
    CHECK(last < 0.5 * first);
    std::vector<std::vector<float>> copies;
    model.visit_parameters([&](std::string_view name, std::span<float> v, auto) {
        if (name == "wte.weight" || name == "lm_head.weight") copies.emplace_back(v.begin(), v.end());
    });
    REQUIRE(copies.size() == 2);
    REQUIRE(copies[0] == copies[1]);
}

TEST_CASE("a transformer's units run in any ranges as they run whole, split backward included", "[nn][transformer][units]") {
    auto spec = nn::bert_spec("tiny");
    spec.layers = 3, spec.width = 16, spec.heads = 2, spec.vocab = 29, spec.positions = 8;
    auto bert = nn::make_bert<config::fp32>(spec);
    auto tokens = random_tokens<config::fp32>(2, 8, 29, 2);
    const std::vector<std::uint16_t> segments{1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    nn::context ctx{nn::mode::train, 1};
    ctx.segments = segments.data();
    ctx.dropout = {.active = true, .seed = 3};
    auto whole = bert, parts = bert;
    decltype(bert)::state sw, sp;
    const auto y = whole.forward(tokens, sw, ctx);
    auto dy = random_activation<config::fp32>(tensor::shape_of(y), 4);
    whole.backward(dy, sw, ctx, false);
    // A whole backward holds one block's input gradients at a time: each block frees them once the
    // unit before it has read them; a range's first block keeps only the gradient it returns.
    const auto held = [](auto& block_state) {
        std::size_t n = 0;
        tessera::nn::detail::for_each_gradient_buffer(block_state, [&](auto& b) { n += b.size(); });
        return n;
    };
    for (auto& block_state : sw.blocks) CHECK(held(block_state) == 0);
    CHECK(held(sw.head) == 0);
    {
        auto stage = bert;
        decltype(bert)::state ss;
        const auto& x = stage.forward_units(0, 2, tokens, ss, ctx);
        stage.forward_units(2, stage.units(), x, ss, ctx);
        const auto& dx = stage.backward_units(2, stage.units(), dy, ss, ctx, true);
        CHECK(held(ss.blocks[2]) == 0);
        CHECK(held(ss.blocks[1]) == 2 * 8 * 16);  // unit 2's input gradient, returned
        CHECK(dx.size() == 2 * 8 * 16);
    }
    // two stages: units [0, 2) and [2, 5), the second's backward split into B and W
    const auto mid = parts.forward_units(0, 2, tokens, sp, ctx);
    const auto& y2 = parts.forward_units(2, parts.units(), mid, sp, ctx);
    REQUIRE(std::memcmp(y2.data(), y.data(), y.size() * sizeof(float)) == 0);
    const auto dmid = parts.backward_units_input(2, parts.units(), dy, sp, ctx, true);
    parts.backward_units_weights(2, parts.units(), sp, ctx);
    parts.backward_units(0, 2, dmid, sp, ctx, false);
    const auto gw = parameter_gradients(whole), gp = parameter_gradients(parts);
    REQUIRE(gw.size() == gp.size());
    REQUIRE(std::memcmp(gw.data(), gp.data(), gw.size() * sizeof(float)) == 0);
}

TEST_CASE("BERT's head on its first positions: their logits and every gradient as the whole head's with the rest "
          "unseen", "[nn][transformer][bert]") {
    auto spec = nn::bert_spec("tiny");
    spec.layers = 2, spec.width = 16, spec.heads = 2, spec.vocab = 29, spec.positions = 8;
    constexpr std::size_t n = 2, length = 8, kept = 3;
    auto whole = nn::make_bert<config::fp32>(spec);
    spec.predicted_positions = kept;
    auto first = nn::make_bert<config::fp32>(spec);  // the same weights: the same seed draws them
    const auto tokens = random_tokens<config::fp32>(n, length, 29, 5);
    nn::context ctx{nn::mode::train, 1};
    decltype(whole)::state sw, sf;
    const auto y = whole.forward(tokens, sw, ctx);
    const auto yk = first.forward(tokens, sf, ctx);
    REQUIRE(tensor::shape_of(yk) == shape{n, 1, kept, 29});
    CHECK(first.output_shape(shape{n, 1, length, 1}) == shape{n, 1, kept, 29});
    // The output gradient on the first positions, zeros on the rest (positions the loss does not see).
    auto dy = random_activation<config::fp32>(tensor::shape_of(y), 6);
    auto dyk = random_activation<config::fp32>(tensor::shape_of(yk), 7);
    for (std::size_t b = 0; b < n; ++b)
        for (std::size_t t = 0; t < length; ++t)
            for (std::size_t v = 0; v < 29; ++v) {
                const std::size_t i = (b * length + t) * 29 + v;
                if (t < kept) {
                    CHECK(yk.data()[(b * kept + t) * 29 + v] == Approx(y.data()[i]).epsilon(1e-6));
                    dyk.data()[(b * kept + t) * 29 + v] = dy.data()[i];
                } else {
                    dy.data()[i] = 0;
                }
            }
    whole.backward(dy, sw, ctx, false);
    first.backward(dyk, sf, ctx, false);
    const auto gw = parameter_gradients(whole), gf = parameter_gradients(first);
    REQUIRE(gw.size() == gf.size());
    for (std::size_t i = 0; i < gw.size(); ++i) CHECK(gf[i] == Approx(gw[i]).margin(1e-6).epsilon(1e-5));
    // The head's cost: its projections over the kept positions only.
    const auto head_flops = [](const auto& net) {
        const shape in{n, 1, length, 1};
        return net.unit_cost(net.units() - 1, net.unit_input_shape(net.units() - 1, in)).forward_flops;
    };
    CHECK(head_flops(first) == Approx(head_flops(whole) * double(kept) / double(length)));
}

}  // namespace test_transformer
