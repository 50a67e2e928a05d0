// float <-> half conversion throughput: the F16C path against the portable one, in the same run.
// Read the ratio of items_per_second between the dispatched (F16C) and portable rows. Stochastic
// rounding (what 16-bit activations cost with it on) against rounding to nearest (the dispatched
// row): the bulk conversion, and one general rounding per element (what it would cost without the
// vectorised path).
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "tessera/tensor/convert.hpp"
#include "tessera/tensor/stochastic_rounding.hpp"

namespace {

namespace detail = tessera::tensor::detail;
constexpr std::size_t count = 1 << 16;

std::vector<float> floats() {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(i % 4096) * 0.37f - 700.0f;
    return v;
}

std::vector<tessera::half> halves() {
    std::vector<tessera::half> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = tessera::half::from_bits(static_cast<std::uint16_t>(i * 7919u));
    return v;
}

template <class Convert>
void run(benchmark::State& state, Convert convert) {
    for (auto _ : state) {
        convert();
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}

void float_to_half_portable(benchmark::State& state) {
    const auto in = floats();
    std::vector<std::uint16_t> out(count);
    run(state, [&] {
        for (std::size_t i = 0; i < count; ++i) out[i] = detail::float_to_half_bits_portable(in[i]);
        benchmark::DoNotOptimize(out.data());
    });
}

void float_to_half_dispatched(benchmark::State& state) {
    const auto in = floats();
    std::vector<tessera::half> out(count);
    run(state, [&] {
        tessera::tensor::convert(std::span<const float>(in), std::span<tessera::half>(out));
        benchmark::DoNotOptimize(out.data());
    });
    state.SetLabel(detail::cpu_has_f16c() ? "F16C" : "portable (no F16C)");
}

void half_to_float_portable(benchmark::State& state) {
    const auto in = halves();
    std::vector<float> out(count);
    run(state, [&] {
        for (std::size_t i = 0; i < count; ++i) out[i] = detail::half_bits_to_float_portable(in[i].bits());
        benchmark::DoNotOptimize(out.data());
    });
}

void half_to_float_dispatched(benchmark::State& state) {
    const auto in = halves();
    std::vector<float> out(count);
    run(state, [&] {
        tessera::tensor::convert(std::span<const tessera::half>(in), std::span<float>(out));
        benchmark::DoNotOptimize(out.data());
    });
    state.SetLabel(detail::cpu_has_f16c() ? "F16C" : "portable (no F16C)");
}

constexpr tessera::tensor::rounding stochastic{.stochastic = true, .seed = 1, .stream = 2};

void float_to_half_stochastic(benchmark::State& state) {
    const auto in = floats();
    std::vector<tessera::half> out(count);
    run(state, [&] {
        tessera::tensor::convert_stochastic(in.data(), out.data(), count, stochastic);
        benchmark::DoNotOptimize(out.data());
    });
}

void float_to_half_stochastic_per_element(benchmark::State& state) {
    const auto in = floats();
    std::vector<tessera::half> out(count);
    run(state, [&] {
        for (std::size_t i = 0; i < count; ++i) out[i] = tessera::tensor::round_element(in[i], stochastic, i);
        benchmark::DoNotOptimize(out.data());
    });
}

}  // namespace

BENCHMARK(float_to_half_stochastic);
BENCHMARK(float_to_half_stochastic_per_element);
BENCHMARK(float_to_half_portable);
BENCHMARK(float_to_half_dispatched);
BENCHMARK(half_to_float_portable);
BENCHMARK(half_to_float_dispatched);
