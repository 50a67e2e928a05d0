// A small sequential network cut into stages by the exec tests, its random images (fp32 and half),
// and the reference it must train to: replicas of the whole network run without stages or threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "network_helpers.hpp"
#include "tessera/config.hpp"
#include "tessera/exec/activation_rounding.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/batch_norm.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/loss.hpp"
#include "tessera/nn/sequential.hpp"

namespace tessera::test::sequential_stages {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace nn = tessera::nn;
using P = cfg::fp32;
using H = cfg::half;  // 16.16: half weights, activations and inputs, float gradients


constexpr std::size_t batch = 2, side = 8, channels = 3, classes = 5;

template <class Q = P>
auto make_net() {
    auto net = nn::sequential(nn::conv2d<Q>(channels, 8, {3, 3, 1, 1}), nn::batch_norm_relu<Q>(8),
                              nn::conv2d<Q>(8, 8, {3, 3, 2, 1}), nn::batch_norm<Q>(8), nn::relu<Q>(),
                              nn::linear<Q>(4 * 4 * 8, classes));
    net.named({"conv1", "bn1", "conv2", "bn2", "relu2", "fc"});
    std::mt19937_64 rng(5);
    net.initialize(rng);
    return net;
}
using net_t = decltype(make_net());

using tessera::test::parameters_and_buffers;
using tessera::test::plain_sgd;
inline const tessera::test::random_images images{batch, side, channels, classes, 7};

// R replicas of the whole network, G micro-batches each per update from `feed`, gradients summed in
// replica order, then each replica's copy of `optimizer` steps; returns every replica's network.
// With `rounding_seed`, activations and their gradients round stochastically, micro-batch m of
// replica r at step d drawing exec::micro_batch_rounding(seed, r, d, m), as sessions promise.
template <class Net, class Feed, class Opt = plain_sgd>
std::vector<Net> trained_replicas(const Net& initial, std::size_t R, std::size_t G, std::size_t D, const Feed& feed,
                                  const Opt& optimizer = {}, std::optional<std::uint64_t> rounding_seed = {}) {
    std::vector<Net> nets(R, initial);
    std::vector<Opt> opts(R, optimizer);
    for (std::size_t d = 0; d < D; ++d) {
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t m = 0; m < G; ++m) {
                auto [x, y] = feed(r, d, m);
                typename Net::state st;
                nn::context ctx{};
                if (rounding_seed) ctx.rounding = exec::micro_batch_rounding(*rounding_seed, r, d, m);
                nn::softmax_cross_entropy<typename Net::precision> loss;
                (void)loss(nets[r].forward(x, st, ctx), y, 1.0, exec::loss_gradient_rounding(ctx.rounding));
                (void)nets[r].backward(loss.gradient(), st, ctx, false);
            }
        std::vector<std::vector<std::span<float>>> g(R);
        for (std::size_t r = 0; r < R; ++r) nets[r].visit_parameters([&](std::string_view, auto, auto gr) { g[r].push_back(gr); });
        for (std::size_t p = 0; p < g[0].size(); ++p)
            for (std::size_t k = 0; k < g[0][p].size(); ++k) {
                float sum = g[0][p][k];
                for (std::size_t r = 1; r < R; ++r) sum += g[r][p][k];
                for (std::size_t r = 0; r < R; ++r) g[r][p][k] = sum;
            }
        for (std::size_t r = 0; r < R; ++r) {
            opts[r].step(nets[r], static_cast<double>(1.0f / static_cast<float>(G * R)));
            nets[r].visit_parameters([](std::string_view, auto, auto gr) { std::fill(gr.begin(), gr.end(), 0.0f); });
        }
    }
    return nets;
}

inline std::vector<float> reference(const net_t& initial, std::size_t R, std::size_t G, std::size_t D) {
    return parameters_and_buffers(trained_replicas(initial, R, G, D, images)[0]);
}


using half_net_t = decltype(make_net<H>());

inline std::pair<nn::activation<H>, std::vector<std::int32_t>> half_images(std::size_t r, std::size_t d, std::size_t m) {
    auto [x, y] = images(r, d, m);
    auto h = tessera::tensor::make_nhwc<tessera::half>(tessera::tensor::shape_of(x));
    std::copy(x.begin(), x.end(), h.begin());
    return {std::move(h), std::move(y)};
}

inline std::vector<float> parameters_only(half_net_t& net) {
    std::vector<float> all;
    net.visit_parameters([&](std::string_view, auto value, auto) { all.insert(all.end(), value.begin(), value.end()); });
    return all;
}

}  // namespace tessera::test::sequential_stages
