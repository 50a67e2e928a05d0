#pragma once
// The values one emulated IPU holds between the instructions of its program, by (stage, micro-batch).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/exec/schedule.hpp"

namespace tessera::exec::detail {

/// Values per (stage, micro-batch) held by one IPU during a program. A value lives from the
/// instruction that makes it to the one that uses it, and a schedule has only a few micro-batches in
/// flight per stage, so each stage keeps a window of `width` slots (a power of two) indexed by
/// micro-batch mod width: the table stays small and hot in cache instead of streaming through one
/// slot per micro-batch of the step. A put that finds its slot taken by another micro-batch doubles
/// the window (then the table keeps that width for later calls), so any order of puts and takes
/// works; a schedule's first step sizes it.
template <class T>
class slots {
public:
    slots(std::size_t stages, std::size_t micro_batches)
        : m_stages(stages),
          m_mb(micro_batches),
          m_width(std::min(initial_width, std::bit_ceil(std::max<std::size_t>(micro_batches, 1)))),
          m_values(stages * m_width) {}

    void put(std::uint32_t s, std::uint32_t m, T&& value) {
        check(s, m);
        for (;;) {
            entry& e = m_values[index(s, m)];
            if (!e.value) [[likely]] {
                e.value.emplace(std::move(value));
                e.micro_batch = m;
                return;
            }
            if (e.micro_batch == m) held_twice(s, m);
            grow();
        }
    }

    T take(std::uint32_t s, std::uint32_t m, const instruction& in) {
        check(s, m);
        entry& e = m_values[index(s, m)];
        if (!e.value || e.micro_batch != m) [[unlikely]]
            missing(s, m, in);
        T v = std::move(*e.value);
        e.value.reset();
        return v;
    }

    /// Slots per stage (grows to the most micro-batches a stage holds at once, rounded up to a power of two).
    [[nodiscard]] std::size_t width() const noexcept { return m_width; }

private:
    static constexpr std::size_t initial_width = 4;
    struct alignas(64) entry {
        std::optional<T> value;
        std::uint32_t micro_batch = 0;
    };

    void check(std::uint32_t s, std::uint32_t m) const {
        if (s >= m_stages || m >= m_mb) [[unlikely]]
            outside(s, m);
    }
    [[noreturn, gnu::cold, gnu::noinline]] static void outside(std::uint32_t s, std::uint32_t m) {
        throw std::logic_error("tessera::exec::executor: stage " + std::to_string(s) + ", micro-batch " +
                               std::to_string(m) + " is outside the program");
    }
    [[noreturn, gnu::cold, gnu::noinline]] static void held_twice(std::uint32_t s, std::uint32_t m) {
        throw std::logic_error("tessera::exec::executor: stage " + std::to_string(s) + ", micro-batch " +
                               std::to_string(m) + " already holds a value");
    }
    [[noreturn, gnu::cold, gnu::noinline]] static void missing(std::uint32_t s, std::uint32_t m,
                                                               const instruction& in) {
        throw std::logic_error("tessera::exec::executor: '" + to_string(in) + "' finds no value for stage " +
                               std::to_string(s) + ", micro-batch " + std::to_string(m));
    }
    [[nodiscard]] std::size_t index(std::uint32_t s, std::uint32_t m) const noexcept {
        return std::size_t{s} * m_width + (m & (m_width - 1));
    }
    // Doubles the window and moves every held value to its new slot (distinct micro-batches of one
    // stage never collide in the wider window of the same stage: m mod 2w determines m mod w).
    void grow() {
        const std::size_t old_width = m_width;
        std::vector<entry> old = std::exchange(m_values, std::vector<entry>(m_stages * old_width * 2));
        m_width = old_width * 2;
        for (std::size_t s = 0; s < m_stages; ++s)
            for (std::size_t k = 0; k < old_width; ++k)
                if (entry& e = old[s * old_width + k]; e.value) {
                    entry& to = m_values[index(static_cast<std::uint32_t>(s), e.micro_batch)];
                    to.value.emplace(std::move(*e.value));
                    to.micro_batch = e.micro_batch;
                }
    }

    std::size_t m_stages, m_mb, m_width;
    std::vector<entry> m_values;
};

}  // namespace tessera::exec::detail
