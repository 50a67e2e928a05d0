#pragma once
// What the training-step benchmarks share about a step: the parameters' hash and a step timed in its
// three parts.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace bench {

/// FNV-1a of the bits of every parameter, in the model's order: two builds that train alike (bit
/// for bit) give the same hash after the same steps.
template <class Model>
[[nodiscard]] std::uint64_t parameter_hash(Model& model) {
    std::uint64_t h = 14695981039346656037ull;
    model.visit_parameters([&](std::string_view, auto value, auto) {
        const auto* bytes = reinterpret_cast<const unsigned char*>(value.data());
        for (std::size_t i = 0; i < value.size() * sizeof(*value.data()); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    });
    return h;
}

/// Seconds of one step's parts.
struct step_parts {
    double forward, backward, update;
};

/// Runs forward(), backward() and update() once, timing each.
template <class F, class B, class U>
[[nodiscard]] step_parts timed_parts(F&& forward, B&& backward, U&& update) {
    using clock = std::chrono::steady_clock;
    const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
    const auto t0 = clock::now();
    forward();
    const auto t1 = clock::now();
    backward();
    const auto t2 = clock::now();
    update();
    const auto t3 = clock::now();
    return {seconds(t1 - t0), seconds(t2 - t1), seconds(t3 - t2)};
}

}  // namespace bench
