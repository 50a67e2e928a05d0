#pragma once
// A GPT's training step on a fixed batch of random tokens: forward, per-token softmax cross-entropy
// on the next token, backward, the tied table's gradients added, AdamW, the tied copies made equal,
// zeroed gradients (the ResNet's step is training_step.hpp).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "step_parts.hpp"
#include "tessera/kernels/thread_pool.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

namespace bench {

/// A transformer's training step on `threads` threads over `batch` sequences of `length` uniform
/// token ids (seed 1), each position labelled with the next id; call() runs one step and returns
/// its loss (nats per token), timed() one step in its three parts.
template <class Model>
class token_step {
public:
    using P = typename Model::precision;

    token_step(Model model, std::size_t batch, std::size_t length, std::size_t threads,
               tessera::optim::adamw_options options)
        : m_model(std::move(model)), m_opt(options), m_pool(threads),
          m_ctx{.mode = tessera::nn::mode::train, .threads = threads, .pool = &m_pool, .scratch = &m_scratch} {
        const std::size_t vocab = m_model.spec().vocab;
        std::mt19937 rng(1);
        std::vector<std::int32_t> ids(batch * length), next(batch * (length + 1));
        for (auto& t : next) t = static_cast<std::int32_t>(rng() % vocab);
        m_labels.resize(batch * length);
        for (std::size_t s = 0; s < batch; ++s)
            for (std::size_t i = 0; i < length; ++i) {
                ids[s * length + i] = next[s * (length + 1) + i];
                m_labels[s * length + i] = next[s * (length + 1) + i + 1];
            }
        m_x = tessera::nn::token_activation<P>(std::span<const std::int32_t>(ids), batch, length);
    }

    double operator()() {
        const double loss = forward();
        backward();
        update();
        return loss;
    }

    [[nodiscard]] std::size_t parameters() const { return m_model.parameters(); }

    /// FNV-1a of the bits of every parameter, in the model's order (as training_step's).
    [[nodiscard]] std::uint64_t parameter_hash() { return bench::parameter_hash(m_model); }

    /// One step, its parts timed (forward includes the loss, update the tying and zeroing).
    [[nodiscard]] step_parts timed() {
        return timed_parts([&] { (void)forward(); }, [&] { backward(); }, [&] { update(); });
    }

private:
    double forward() { return static_cast<double>(m_loss(m_model.forward(m_x, m_state, m_ctx), m_labels).loss); }
    void backward() { (void)m_model.backward(m_loss.gradient(), m_state, m_ctx, false); }
    void update() {
        m_model.tie_gradients();  // a loop of one's own ties the table's two uses (docs/transformers.md)
        m_opt.step(m_model, 1.0, m_ctx.parallel());
        m_model.tie_weights();
        tessera::optim::zero_grad(m_model, m_ctx.parallel());
    }

    Model m_model;
    tessera::optim::adamw m_opt;
    tessera::nn::token_cross_entropy<P> m_loss;
    typename Model::state m_state;
    tessera::nn::activation<P> m_x;
    std::vector<std::int32_t> m_labels;
    tessera::kernels::thread_pool m_pool;
    tessera::kernels::scratch m_scratch;
    tessera::nn::context m_ctx;
};

}  // namespace bench
