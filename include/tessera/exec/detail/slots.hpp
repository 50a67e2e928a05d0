#pragma once
// The values one emulated IPU holds between the instructions of its program, by (stage, micro-batch).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/exec/schedule.hpp"

namespace tessera::exec::detail {

/// Values per (stage, micro-batch) held by one IPU during a program: a flat table, no allocation per value.
template <class T>
class slots {
public:
    slots(std::size_t stages, std::size_t micro_batches) : m_mb(micro_batches), m_values(stages * micro_batches) {}
    void put(std::uint32_t s, std::uint32_t m, T value) { m_values[index(s, m)].emplace(std::move(value)); }
    [[nodiscard]] bool has(std::uint32_t s, std::uint32_t m) const { return m_values[index(s, m)].has_value(); }
    T take(std::uint32_t s, std::uint32_t m, const instruction& in) {
        auto& slot = m_values[index(s, m)];
        if (!slot)
            throw std::logic_error("tessera::exec::executor: '" + to_string(in) + "' finds no value for stage " +
                                   std::to_string(s) + ", micro-batch " + std::to_string(m));
        T v = std::move(*slot);
        slot.reset();
        return v;
    }

private:
    [[nodiscard]] std::size_t index(std::uint32_t s, std::uint32_t m) const {
        const std::size_t i = std::size_t{s} * m_mb + m;
        if (m >= m_mb || i >= m_values.size())
            throw std::logic_error("tessera::exec::executor: stage " + std::to_string(s) + ", micro-batch " +
                                   std::to_string(m) + " is outside the program");
        return i;
    }
    std::size_t m_mb;
    std::vector<std::optional<T>> m_values;
};

}  // namespace tessera::exec::detail
