#pragma once
// What the host sends to the first stage for one micro-batch: values, or 8-bit pixels the IPU normalises.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/data/concepts.hpp"
#include "tessera/data/normalize.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/nn/sequence_mask.hpp"
#include "tessera/tensor/dense.hpp"
#include "tessera/tensor/stochastic_rounding.hpp"

namespace tessera::exec {

/// One micro-batch's input as it crosses the host link. With float or half I/O the host has
/// normalised it into the compute type (an NHWC activation); with 8-bit I/O it carries the raw
/// pixels (CHW per sample, one byte each) and the normalisation, which prepare() applies on the
/// IPU that receives it, as PopTorch's tutorials do on the device. Either way prepare() yields the
/// same activation the host would have made: the arithmetic is data::normalize's.
/// @code
///   exec::host_input<cfg::half> in = exec::host_input<cfg::half>::pixels(bytes, shape, rows, norm);
///   nn::activation<cfg::half> x = std::move(in).prepare();   // on the IPU thread
/// @endcode
template <nn::Numeric P>
class host_input {
public:
    using value_type = typename P::data_type;

    host_input() = default;
    /// Values already normalised on the host (implicit: a feed may return an activation).
    host_input(nn::activation<P> values) noexcept : m_values(std::move(values)) {}  // NOLINT(google-explicit-constructor)
    /// Sequences (token ids in the values' bits) with their mask, which travels to every stage
    /// (exec::staged_activation); throws tensor::shape_error when the mask's tables do not fit the values.
    host_input(nn::activation<P> values, std::shared_ptr<const nn::sequence_mask> mask)
        : m_values(std::move(values)), m_mask(std::move(mask)) {
        if (!m_mask) return;
        m_mask->check();
        const auto s = tessera::tensor::shape_of(m_values);
        if (m_mask->samples != s.n || m_mask->length != s.w)
            throw tessera::tensor::shape_error("tessera::exec::host_input: a mask of " + std::to_string(m_mask->samples) +
                                               " samples of " + std::to_string(m_mask->length) + " positions for input " +
                                               s.str());
    }

    /// `rows` samples of `shape` as raw 8-bit pixels (rows × C × H × W), normalised on the device by `norm`.
    [[nodiscard]] static host_input pixels(std::vector<std::uint8_t> chw, data::sample_shape shape, std::size_t rows,
                                           std::shared_ptr<const data::normalization> norm) {
        host_input in;
        in.m_pixels = std::move(chw);
        in.m_shape = shape;
        in.m_rows = rows;
        in.m_norm = std::move(norm);
        in.m_eight_bit = true;
        return in;
    }

    [[nodiscard]] bool eight_bit() const noexcept { return m_eight_bit; }
    /// The sequences' mask (null: none).
    [[nodiscard]] const std::shared_ptr<const nn::sequence_mask>& mask() const noexcept { return m_mask; }
    /// Bytes that cross the host link.
    [[nodiscard]] std::size_t payload_bytes() const noexcept {
        return (m_eight_bit ? m_pixels.size() : m_values.size() * sizeof(value_type)) + (m_mask ? m_mask->bytes() : 0);
    }

    /// The activation the first stage computes on: as sent, or normalised from the pixels into NHWC,
    /// each value rounded to the data type as `rounding` says (NHWC element i drawing the bits of i).
    [[nodiscard]] nn::activation<P> prepare(const tessera::tensor::rounding& rounding = {}) && {
        if (!m_eight_bit) return std::move(m_values);
        const std::size_t C = m_shape.channels, H = m_shape.height, W = m_shape.width, per = m_shape.size();
        std::vector<float> chw(m_rows * per);
        data::normalize<std::uint8_t, float>(std::span<const std::uint8_t>(m_pixels), m_shape,
                                             m_norm ? *m_norm : data::normalization{}, std::span<float>(chw));
        auto x = tessera::tensor::make_nhwc<value_type>({m_rows, H, W, C});
        to_nhwc(chw.data(), x.data(), m_rows, C, H, W, rounding);
        return x;
    }

    /// CHW samples (float) to NHWC values of the compute type: the layout change both paths share.
    static void to_nhwc(const float* chw, value_type* out, std::size_t rows, std::size_t C, std::size_t H, std::size_t W,
                        const tessera::tensor::rounding& rounding = {}) {
        const std::uint64_t base = tessera::tensor::counter_base(rounding.seed, rounding.stream);
        const bool stochastic = std::is_same_v<value_type, tessera::half> && rounding.stochastic;
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t h = 0; h < H; ++h)
                for (std::size_t w = 0; w < W; ++w)
                    for (std::size_t c = 0; c < C; ++c) {
                        const std::size_t k = ((i * H + h) * W + w) * C + c;
                        const float v = chw[((i * C + c) * H + h) * W + w];
                        if constexpr (std::is_same_v<value_type, tessera::half>)
                            if (stochastic) {
                                out[k] = tessera::tensor::round_to_half_stochastic(
                                    v, tessera::tensor::element_bits(base, static_cast<std::uint32_t>(k)));
                                continue;
                            }
                        out[k] = static_cast<value_type>(v);
                    }
    }

private:
    nn::activation<P> m_values{};
    std::vector<std::uint8_t> m_pixels{};
    data::sample_shape m_shape{};
    std::size_t m_rows = 0;
    std::shared_ptr<const data::normalization> m_norm{};
    std::shared_ptr<const nn::sequence_mask> m_mask{};
    bool m_eight_bit = false;
};

}  // namespace tessera::exec
