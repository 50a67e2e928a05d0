#pragma once
// Accounts every allocation of one IPU against its memory budget.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/detail/small_sort.hpp"

#include "tessera/emulator/error.hpp"

namespace tessera::emulator {

/// What an allocation holds; the memory report groups by it.
enum class memory_kind { weights, optimiser_state, gradient_accumulators, activations, io_buffers, code, other };

[[nodiscard]] constexpr const char* to_string(memory_kind k) noexcept {
    switch (k) {
        case memory_kind::weights: return "weights";
        case memory_kind::optimiser_state: return "optimiser state";
        case memory_kind::gradient_accumulators: return "gradient accumulators";
        case memory_kind::activations: return "activations";
        case memory_kind::io_buffers: return "I/O buffers";
        case memory_kind::code: return "code";
        case memory_kind::other: return "other";
    }
    return "?";
}

/// A live allocation in an arena.
struct allocation_record {
    std::uint64_t id;
    std::string name;
    std::size_t bytes;
    memory_kind kind;
};

/// Allocations are accounted, not backed: the arena tracks bytes in use and the peak, and refuses
/// an allocation that would exceed the budget with out_of_device_memory naming the IPU, the budget
/// and the largest items. Thread-safe.
/// @code
///   memory_arena arena(/*ipu=*/0, spec.memory_bytes());
///   auto w = arena.allocate("stage 0 weights", bytes, memory_kind::weights);
///   arena.release(w);
/// @endcode
class memory_arena {
public:
    memory_arena(std::size_t ipu, std::size_t budget) : m_ipu(ipu), m_budget(budget) {}

    /// Accounts `bytes`; throws out_of_device_memory (nothing is accounted) when over budget.
    [[nodiscard]] std::uint64_t allocate(std::string name, std::size_t bytes, memory_kind kind) {
        std::lock_guard lock(m_mutex);
        if (bytes > m_budget - m_used) {
            std::vector<out_of_device_memory::item> items;
            items.reserve(m_live.size() + 1);
            for (const auto& [id, r] : m_live) items.push_back({r.name, r.bytes});
            items.push_back({name, bytes});
            tessera::detail::small_stable_sort(items, [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
            if (items.size() > 3) items.resize(3);
            throw out_of_device_memory(m_ipu, m_budget, m_used, {std::move(name), bytes}, std::move(items));
        }
        const std::uint64_t id = m_next_id++;
        m_live.emplace(id, allocation_record{id, std::move(name), bytes, kind});
        m_used += bytes;
        m_peak = std::max(m_peak, m_used);
        return id;
    }

    /// Returns an allocation's bytes to the budget; throws std::invalid_argument for an unknown id.
    void release(std::uint64_t id) {
        std::lock_guard lock(m_mutex);
        const auto it = m_live.find(id);
        if (it == m_live.end())
            throw std::invalid_argument("tessera::emulator::memory_arena::release: IPU " + std::to_string(m_ipu) +
                                        " has no live allocation " + std::to_string(id));
        m_used -= it->second.bytes;
        m_live.erase(it);
    }

    /// Releases everything; the peak is kept.
    void clear() noexcept {
        std::lock_guard lock(m_mutex);
        m_live.clear();
        m_used = 0;
    }

    [[nodiscard]] std::size_t ipu() const noexcept { return m_ipu; }
    [[nodiscard]] std::size_t budget() const noexcept { return m_budget; }
    [[nodiscard]] std::size_t used() const {
        std::lock_guard lock(m_mutex);
        return m_used;
    }
    [[nodiscard]] std::size_t peak() const {
        std::lock_guard lock(m_mutex);
        return m_peak;
    }
    /// Live allocations in allocation order.
    [[nodiscard]] std::vector<allocation_record> live() const {
        std::lock_guard lock(m_mutex);
        std::vector<allocation_record> out;
        out.reserve(m_live.size());
        for (const auto& [id, r] : m_live) out.push_back(r);
        return out;
    }
    /// Bytes in use of one kind.
    [[nodiscard]] std::size_t used(memory_kind kind) const {
        std::lock_guard lock(m_mutex);
        std::size_t n = 0;
        for (const auto& [id, r] : m_live)
            if (r.kind == kind) n += r.bytes;
        return n;
    }

private:
    std::size_t m_ipu, m_budget;
    mutable std::mutex m_mutex;
    std::map<std::uint64_t, allocation_record> m_live;
    std::size_t m_used = 0, m_peak = 0;
    std::uint64_t m_next_id = 1;
};

}  // namespace tessera::emulator
