#pragma once
// The kernel threads and scratch memory of a staged network's IPUs: one pool and one scratch per IPU,
// copied as sizes, never shared.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/kernels/thread_pool.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::exec {

/// Kernel threads and scratch of a staged network: one pool and one kernels::scratch per IPU, shared
/// by the stages that IPU runs (they never run at the same time). A copy — another replica, running
/// at the same time — starts pools and scratch of its own with the same sizes.
class ipu_kernel_pools {
public:
    ipu_kernel_pools() = default;
    /// `threads` per IPU (the IPU's own thread and threads - 1 workers); ipu_of_stage[s]: stage s's IPU.
    ipu_kernel_pools(std::size_t threads, std::vector<std::size_t> ipu_of_stage)
        : m_threads(threads), m_ipu_of_stage(std::move(ipu_of_stage)) {
        if (threads == 0)
            throw config::config_error("tessera::exec::staged_network: kernel threads per IPU must be at least 1, got 0");
        std::size_t ipus = 0;
        for (const std::size_t i : m_ipu_of_stage) ipus = std::max(ipus, i + 1);
        for (std::size_t i = 0; i < ipus; ++i) m_scratch.push_back(std::make_unique<kernels::scratch>());
        if (threads == 1) return;
        for (std::size_t i = 0; i < ipus; ++i) m_pools.push_back(std::make_unique<kernels::thread_pool>(threads));
    }
    ipu_kernel_pools(const ipu_kernel_pools& other) : ipu_kernel_pools(other.m_threads, other.m_ipu_of_stage) {}
    ipu_kernel_pools& operator=(const ipu_kernel_pools& other) {
        if (this != &other) *this = ipu_kernel_pools(other);
        return *this;
    }
    ipu_kernel_pools(ipu_kernel_pools&&) noexcept = default;
    ipu_kernel_pools& operator=(ipu_kernel_pools&&) noexcept = default;
    ~ipu_kernel_pools() = default;

    [[nodiscard]] std::size_t threads() const noexcept { return m_threads; }
    /// The context of stage s: `base` with this stage's IPU's scratch, threads and pool (one thread:
    /// base's threads and pool).
    [[nodiscard]] nn::context context(std::size_t s, nn::context base) const {
        if (!m_scratch.empty()) base.scratch = m_scratch.at(m_ipu_of_stage.at(s)).get();
        if (m_pools.empty()) return base;
        base.threads = m_threads;
        base.pool = m_pools.at(m_ipu_of_stage.at(s)).get();
        return base;
    }

private:
    std::size_t m_threads = 1;
    std::vector<std::size_t> m_ipu_of_stage;
    std::vector<std::unique_ptr<kernels::thread_pool>> m_pools;
    std::vector<std::unique_ptr<kernels::scratch>> m_scratch;
};

}  // namespace tessera::exec
