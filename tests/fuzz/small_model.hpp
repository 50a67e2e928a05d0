#pragma once
// The checkpoint fuzz target's model: two parameters and a buffer, their starting values given
// (make_corpus writes a file from one set of values; the target loads into another, so a load shows).
#include <span>
#include <vector>

namespace tessera_fuzz {

struct small_model {
    std::vector<float> w, b, gw = std::vector<float>(6, 0.0f), gb = std::vector<float>(2, 0.0f), running;
    small_model(float weight, float bias, float running_value)
        : w(6, weight), b(2, bias), running(2, running_value) {}
    template <class F>
    void visit_parameters(F&& f) {
        f("layer.weight", std::span<float>(w), std::span<float>(gw));
        f("layer.bias", std::span<float>(b), std::span<float>(gb));
    }
    template <class F>
    void visit_buffers(F&& f) {
        f("layer.running", std::span<float>(running));
    }
};

}  // namespace tessera_fuzz
