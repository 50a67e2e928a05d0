#pragma once
// A sum of squares whose bits do not depend on the order of its terms: the global gradient norm of
// max_grad_norm and LAMB's per-tensor norms, the same however the stages, shards and threads cut
// the parameters.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

namespace tessera::optim {

namespace detail {
__extension__ typedef unsigned __int128 uint128;  // GCC and Clang; __extension__ keeps -Wpedantic quiet
}  // namespace detail

/// Σ x² in fixed point: each square, computed in double from the float x, is cut to a multiple of
/// 2⁻⁶⁴ and added as an integer, so any grouping and any order of the same terms give the same bits
/// (floating-point sums would differ with the stage split, the shard boundaries and the threads).
/// A square below 2⁻⁶⁴ (|x| < 2⁻³²) adds nothing; a sum reaching 2⁵² (a norm of 6.7·10⁷), or a term
/// that is not finite, makes value() +∞.
/// @code
///   optim::square_sum s;
///   for (float g : grads) s.add(g);
///   double norm = std::sqrt(s.value());
/// @endcode
class square_sum {
public:
    /// Largest sum held: 2⁵² (above, value() is +∞).
    static constexpr double limit = 4503599627370496.0;
    /// Floats carrying a sum through a float collective (chunks()): 12 bits each, so the sums of up
    /// to 4,096 participants' chunks stay exact in a float.
    static constexpr std::size_t chunk_count = 10;
    static constexpr std::size_t chunk_bits = 12;
    static constexpr std::size_t max_participants = std::size_t{1} << chunk_bits;

    constexpr square_sum() noexcept = default;

    /// Adds (x·scale)², the product and its square in double.
    void add(float x, double scale = 1.0) noexcept {
        const double v = static_cast<double>(x) * scale;
        const double sq = v * v;
        if (!(sq < limit)) {  // also NaN
            m_overflow = true;
            return;
        }
        const double whole = std::floor(sq);
        m_whole += static_cast<std::uint64_t>(whole);
        m_fraction += static_cast<std::uint64_t>(std::ldexp(sq - whole, 64));  // exact difference; 2⁻⁶⁴ units, cut
        if (m_whole >= static_cast<std::uint64_t>(limit)) m_overflow = true;
    }
    /// Adds the terms of `other` (exactly: the result is the same in any order).
    square_sum& operator+=(const square_sum& other) noexcept {
        m_whole += other.m_whole;
        m_fraction += other.m_fraction;
        m_overflow = m_overflow || other.m_overflow || m_whole >= static_cast<std::uint64_t>(limit);
        normalise();
        return *this;
    }

    [[nodiscard]] bool overflowed() const noexcept { return m_overflow || total() >= limit_units(); }
    /// The sum in double (its whole part exact, its fraction rounded); +∞ after an overflow.
    [[nodiscard]] double value() const noexcept {
        if (overflowed()) return std::numeric_limits<double>::infinity();
        const detail::uint128 t = total();
        return static_cast<double>(static_cast<std::uint64_t>(t >> 64)) +
               std::ldexp(static_cast<double>(static_cast<std::uint64_t>(t)), -64);
    }

    /// The sum as chunk_count floats, each an integer below 2¹², lowest bits first; an overflow as a
    /// first chunk of 2²⁴, which no sum of max_participants chunks below 2¹² reaches.
    void to_chunks(std::span<float> out) const {
        check(out.size());
        detail::uint128 t = overflowed() ? 0 : total();
        for (std::size_t k = 0; k < chunk_count; ++k, t >>= chunk_bits)
            out[k] = static_cast<float>(static_cast<std::uint32_t>(t & (max_participants - 1)));
        if (overflowed()) out[0] = static_cast<float>(max_participants) * static_cast<float>(max_participants);
    }
    /// The sum of the sums that `chunks` carried, chunk by chunk added over at most max_participants
    /// participants (a float collective's sums, exact below 2²⁴).
    [[nodiscard]] static square_sum from_chunks(std::span<const float> chunks) {
        check(chunks.size());
        square_sum s;
        if (!(chunks[0] < static_cast<float>(max_participants) * static_cast<float>(max_participants))) {
            s.m_overflow = true;
            return s;
        }
        detail::uint128 t = 0;
        for (std::size_t k = chunk_count; k-- > 0;) t = (t << chunk_bits) + static_cast<std::uint32_t>(chunks[k]);
        s.m_whole = static_cast<std::uint64_t>(t >> 64);
        s.m_fraction = static_cast<std::uint64_t>(t);
        if (s.m_whole >= static_cast<std::uint64_t>(limit)) s.m_overflow = true;
        return s;
    }

    friend bool operator==(const square_sum& a, const square_sum& b) noexcept {
        return a.overflowed() == b.overflowed() && (a.overflowed() || a.total() == b.total());
    }

private:
    static void check(std::size_t n) {
        if (n != chunk_count)
            throw std::invalid_argument("tessera::optim::square_sum: " + std::to_string(n) + " chunks given, not " +
                                        std::to_string(chunk_count));
    }
    [[nodiscard]] static constexpr detail::uint128 limit_units() noexcept {
        return static_cast<detail::uint128>(static_cast<std::uint64_t>(limit)) << 64;
    }
    [[nodiscard]] detail::uint128 total() const noexcept {
        return (static_cast<detail::uint128>(m_whole) << 64) + m_fraction;
    }
    void normalise() noexcept {
        const detail::uint128 t = total();
        if (t >= limit_units()) {
            m_overflow = true;
            return;
        }
        m_whole = static_cast<std::uint64_t>(t >> 64);
        m_fraction = static_cast<std::uint64_t>(t);
    }

    std::uint64_t m_whole = 0;     // Σ ⌊x²⌋
    detail::uint128 m_fraction = 0;  // Σ (x² − ⌊x²⌋)·2⁶⁴, cut: carries into m_whole at normalise()
    bool m_overflow = false;
};

}  // namespace tessera::optim
