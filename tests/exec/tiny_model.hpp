#pragma once
// A small model for the executor tests: dense layers (one per stage) with hand-written backward,
// a leaky ReLU between them, mean squared error, plain SGD. Deterministic for a seed.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/exec/cost.hpp"

namespace tessera::test {

class tiny_mlp {
public:
    using tensor = std::vector<float>;  // [batch × features], row-major
    using label = std::vector<float>;
    struct stash {
        tensor input, pre_activation;
        tensor grad_output{};  // backward_input to backward_weights
    };

    /// widths = {in, h1, ..., out}: one dense layer (one stage) per consecutive pair.
    tiny_mlp(std::vector<std::size_t> widths, std::size_t batch, float learning_rate, std::uint32_t seed)
        : m_batch(batch), m_lr(learning_rate) {
        std::mt19937 rng(seed);
        for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
            layer L{widths[l], widths[l + 1], {}, {}};
            std::normal_distribution<float> init(0.0f, 1.0f / std::sqrt(float(L.in)));
            L.params.resize(L.out * L.in + L.out);
            for (auto& p : L.params) p = init(rng);
            L.grads.assign(L.params.size(), 0.0f);
            m_layers.push_back(std::move(L));
        }
    }

    [[nodiscard]] std::size_t stages() const noexcept { return m_layers.size(); }
    [[nodiscard]] std::size_t batch() const noexcept { return m_batch; }
    [[nodiscard]] std::size_t width(std::size_t s) const { return m_layers.at(s).in; }
    [[nodiscard]] std::size_t out_width() const { return m_layers.back().out; }

    std::pair<tensor, stash> forward(std::size_t s, tensor x) {
        const auto& L = m_layers.at(s);
        if (x.size() != m_batch * L.in) throw std::invalid_argument("tiny_mlp::forward: bad input size");
        if (fail_stage == static_cast<long>(s) && --fail_countdown < 0)
            throw std::domain_error("tiny_mlp: stage " + std::to_string(s) + " failed");
        tensor pre(m_batch * L.out);
        for (std::size_t b = 0; b < m_batch; ++b)
            for (std::size_t o = 0; o < L.out; ++o) {
                float acc = L.params[L.out * L.in + o];
                for (std::size_t i = 0; i < L.in; ++i) acc += L.params[o * L.in + i] * x[b * L.in + i];
                pre[b * L.out + o] = acc;
            }
        tensor y = pre;
        if (s + 1 < stages())
            for (auto& v : y) v = v > 0 ? v : 0.1f * v;
        return {std::move(y), stash{std::move(x), std::move(pre)}};
    }

    std::pair<float, tensor> loss(const tensor& y, const label& t) const {
        float l = 0;
        tensor g(y.size());
        const float n = float(y.size());
        for (std::size_t k = 0; k < y.size(); ++k) {
            const float d = y[k] - t[k];
            l += d * d;
            g[k] = 2.0f * d / n;
        }
        return {l / n, std::move(g)};
    }

    tensor backward(std::size_t s, tensor g, stash st) {
        auto& L = m_layers.at(s);
        if (s + 1 < stages())
            for (std::size_t k = 0; k < g.size(); ++k)
                if (!(st.pre_activation[k] > 0)) g[k] *= 0.1f;
        tensor gx(m_batch * L.in, 0.0f);
        for (std::size_t b = 0; b < m_batch; ++b)
            for (std::size_t o = 0; o < L.out; ++o) {
                const float go = g[b * L.out + o];
                L.grads[L.out * L.in + o] += go;
                for (std::size_t i = 0; i < L.in; ++i) {
                    L.grads[o * L.in + i] += go * st.input[b * L.in + i];
                    gx[b * L.in + i] += go * L.params[o * L.in + i];
                }
            }
        return gx;
    }

    /// The input gradient alone (a split backward, as zero-bubble schedules run it); keeps the output
    /// gradient in the stash for backward_weights. The two give backward's sums: each gradient adds
    /// the same terms in the same order.
    tensor backward_input(std::size_t s, tensor g, stash& st) {
        const auto& L = m_layers.at(s);
        if (s + 1 < stages())
            for (std::size_t k = 0; k < g.size(); ++k)
                if (!(st.pre_activation[k] > 0)) g[k] *= 0.1f;
        tensor gx(m_batch * L.in, 0.0f);
        for (std::size_t b = 0; b < m_batch; ++b)
            for (std::size_t o = 0; o < L.out; ++o)
                for (std::size_t i = 0; i < L.in; ++i) gx[b * L.in + i] += g[b * L.out + o] * L.params[o * L.in + i];
        st.grad_output = std::move(g);
        return gx;
    }
    void backward_weights(std::size_t s, stash st) {
        auto& L = m_layers.at(s);
        if (fail_weights_stage == static_cast<long>(s))
            throw std::domain_error("tiny_mlp: stage " + std::to_string(s) + " weight gradient failed");
        for (std::size_t b = 0; b < m_batch; ++b)
            for (std::size_t o = 0; o < L.out; ++o) {
                const float go = st.grad_output[b * L.out + o];
                L.grads[L.out * L.in + o] += go;
                for (std::size_t i = 0; i < L.in; ++i) L.grads[o * L.in + i] += go * st.input[b * L.in + i];
            }
    }

    std::span<float> gradients(std::size_t s) { return m_layers.at(s).grads; }

    void update(std::size_t s, float scale) {
        auto& L = m_layers.at(s);
        for (std::size_t k = 0; k < L.params.size(); ++k) {
            L.params[k] -= m_lr * (scale * L.grads[k]);
            L.grads[k] = 0.0f;
        }
    }

    [[nodiscard]] exec::stage_cost cost(std::size_t s) const {
        const auto& L = m_layers.at(s);
        const double macs = double(m_batch * L.in * L.out);
        return {.forward_flops = 2 * macs,
                .backward_flops = 4 * macs,
                .update_flops = 2.0 * double(L.params.size()),
                .weight_bytes = L.params.size() * sizeof(float),
                .optimiser_bytes = 0,
                .input_bytes = m_batch * L.in * sizeof(float),
                .output_bytes = m_batch * L.out * sizeof(float),
                .stash_bytes = m_batch * (L.in + L.out) * sizeof(float),
                .recompute = recompute};
    }

    [[nodiscard]] std::vector<float> weights() const {
        std::vector<float> all;
        for (const auto& L : m_layers) all.insert(all.end(), L.params.begin(), L.params.end());
        return all;
    }

    bool recompute = false;
    long fail_stage = -1;     ///< a test's fault: this stage's forward throws ...
    long fail_countdown = 0;  ///< ... after this many successful calls
    long fail_weights_stage = -1;  ///< a test's fault: this stage's weight-gradient pass throws

private:
    struct layer {
        std::size_t in, out;
        std::vector<float> params, grads;  // [out × in] weights then [out] biases
    };
    std::vector<layer> m_layers;
    std::size_t m_batch;
    float m_lr;
};

/// Deterministic data: micro-batch (r, d, m) from a fixed seed.
struct synthetic_feed {
    std::size_t batch, in, out;
    std::uint32_t seed = 7;
    std::pair<std::vector<float>, std::vector<float>> operator()(std::size_t r, std::size_t d, std::size_t m) const {
        std::mt19937 rng(seed + std::uint32_t(1000003 * r + 7919 * d + m));
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> x(batch * in), y(batch * out);
        for (auto& v : x) v = u(rng);
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t o = 0; o < out; ++o) y[b * out + o] = std::sin(x[b * in + o % in]) + 0.5f * x[b * in];
        return {std::move(x), std::move(y)};
    }
};

}  // namespace tessera::test
