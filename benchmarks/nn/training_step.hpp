#pragma once
// What the training-step benchmarks share: one step of a model on a fixed random batch (forward,
// softmax cross-entropy, backward, SGD with momentum 0.9 and weight decay 5e-4, zeroed gradients),
// and the FLOPs a convolution really executes.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "step_parts.hpp"
#include "tessera/kernels/conv.hpp"
#include "tessera/kernels/thread_pool.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

namespace bench {

/// A model's training step on `threads` threads over a batch of normal pixels and uniform labels
/// (seed 1); call() runs one step, timed() one step in its three parts.
template <class Model>
class training_step {
public:
    using P = typename Model::precision;
    using T = typename P::data_type;
    static constexpr std::size_t classes = 10;

    training_step(Model model, tessera::tensor::shape input, std::size_t threads)
        : m_model(std::move(model)), m_x(tessera::tensor::make_nhwc<T>(input)), m_labels(input.n), m_pool(threads),
          m_ctx{.mode = tessera::nn::mode::train, .threads = threads, .pool = &m_pool, .scratch = &m_scratch} {
        std::mt19937 rng(1);
        std::normal_distribution<float> pixel;
        for (auto& v : m_x) v = T(pixel(rng));
        for (auto& l : m_labels) l = static_cast<std::int32_t>(rng() % classes);
    }

    void operator()() {
        forward();
        backward();
        update();
    }

    /// FNV-1a of the bits of every parameter, in the model's order: two builds that train alike
    /// (bit for bit) give the same hash after the same steps.
    [[nodiscard]] std::uint64_t parameter_hash() { return bench::parameter_hash(m_model); }

    /// One step, its parts timed (update: the optimiser's step and zeroing the gradients).
    [[nodiscard]] step_parts timed() {
        return timed_parts([&] { (void)forward(); }, [&] { backward(); }, [&] { update(); });
    }

private:
    void forward() { (void)m_loss(m_model.forward(m_x, m_state, m_ctx), m_labels); }
    void backward() { (void)m_model.backward(m_loss.gradient(), m_state, m_ctx, false); }
    void update() {
        m_opt.step(m_model, 1.0, m_ctx.parallel());
        tessera::optim::zero_grad(m_model, m_ctx.parallel());
    }

    Model m_model;
    tessera::optim::sgd m_opt{{.learning_rate = 0.01, .momentum = 0.9, .weight_decay = 5e-4}};
    tessera::nn::softmax_cross_entropy<P> m_loss;
    typename Model::state m_state;
    tessera::tensor::dense<T, 4> m_x;
    std::vector<std::int32_t> m_labels;
    tessera::kernels::thread_pool m_pool;
    tessera::kernels::scratch m_scratch;  // the layers' shared scratch, as a session's IPU gives them
    tessera::nn::context m_ctx;
};

/// FLOPs a convolution executes over those of the direct convolution (what nn::cost counts), as the
/// kernels run it by the automatic choice: Winograd F(m×m, 3×3) multiplies (m + 2)² values per m × m
/// output tile (the tiles the output's edge cuts off counted whole) where the direct convolution
/// multiplies 9 per output pixel (the transforms are not counted); im2col + GEMM multiplies over the
/// kernel taps that read the image.
[[nodiscard]] inline double executed_share(const tessera::tensor::shape& in, std::size_t cout,
                                           const tessera::kernels::window& g) {
    namespace k = tessera::kernels;
    if (const std::size_t m = k::winograd_tile(k::conv_algorithm::automatic, in, cout, g)) {
        const double oh = static_cast<double>(g.out_h(in.h)), ow = static_cast<double>(g.out_w(in.w));
        const std::size_t tiles = m == 4 ? k::winograd::detail::tiling<4>(in, g).per_image
                                         : k::winograd::detail::tiling<2>(in, g).per_image;
        return static_cast<double>((m + 2) * (m + 2) * tiles) / (9.0 * oh * ow);
    }
    return static_cast<double>(k::live_taps(in, g).columns(in.c)) / static_cast<double>(g.kh * g.kw * in.c);
}

}  // namespace bench
