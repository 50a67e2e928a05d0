#pragma once
// Helpers for the tests that train unit networks through sessions against a reference run whole.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/config/precision.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::test {

/// Plain SGD: the same arithmetic in the stages and in a reference.
struct plain_sgd {
    float learning_rate = 0.05f;
    template <class S>
    void step(S& params, double scale) {
        params.visit_parameters([&](std::string_view, auto value, auto grad) {
            for (std::size_t k = 0; k < value.size(); ++k) value[k] -= learning_rate * (static_cast<float>(scale) * grad[k]);
        });
    }
};

/// Random NHWC images and class labels, the same for the same (replica, iteration, micro-batch) and seed.
struct random_images {
    std::size_t batch, side, channels, classes;
    std::uint32_t seed;
    std::pair<nn::activation<config::fp32>, std::vector<std::int32_t>> operator()(std::size_t r, std::size_t d,
                                                                                 std::size_t m) const {
        std::mt19937 rng(static_cast<std::uint32_t>(seed + 1009 * r + 101 * d + m));
        std::normal_distribution<float> pixel(0.0f, 1.0f);
        std::uniform_int_distribution<std::int32_t> cls(0, static_cast<std::int32_t>(classes) - 1);
        auto x = tensor::make_nhwc<float>({batch, side, side, channels});
        for (auto& v : x) v = pixel(rng);
        std::vector<std::int32_t> y(batch);
        for (auto& v : y) v = cls(rng);
        return {std::move(x), std::move(y)};
    }
};

/// Every parameter, then every buffer (batch-norm running statistics), in visiting order.
template <class Net>
std::vector<float> parameters_and_buffers(Net& net) {
    std::vector<float> all;
    net.visit_parameters([&](std::string_view, auto value, auto) { all.insert(all.end(), value.begin(), value.end()); });
    net.visit_buffers([&](std::string_view, auto value) { all.insert(all.end(), value.begin(), value.end()); });
    return all;
}

}  // namespace tessera::test
