#pragma once
// Gradient accumulation buffers: fp32 sums of gradients over micro-batches, owned by whoever needs
// them (a pipeline stage, a replica), separate from the layers' own gradients.
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/optim/parameters.hpp"

namespace tessera::optim {

/// How accumulated gradients are combined: PopTorch's default is the mean over micro-batches.
enum class reduction { mean, sum };

/// @code
///   optim::gradient_buffer acc;           // one per stage
///   for (mb : micro_batches) { backward(mb); acc.accumulate(stage); zero_grad(stage); }
///   acc.write_to(stage, optim::reduction::mean);  opt.step(stage);  acc.clear();
/// @endcode
class gradient_buffer {
public:
    /// Adds the current gradients of params to the buffer.
    template <ParameterSet S>
    void accumulate(S& params) {
        std::size_t i = 0;
        params.visit_parameters([&](std::string_view name, auto, auto grad) {
            auto& b = buffer_for(i++, grad.size(), name);
            for (std::size_t k = 0; k < grad.size(); ++k) b[k] += static_cast<float>(grad[k]);
        });
        ++m_count;
    }

    /// Adds another buffer (e.g. another replica's) element by element.
    void add(const gradient_buffer& other) {
        if (other.m_sums.size() != m_sums.size())
            throw std::invalid_argument("tessera::optim::gradient_buffer::add: " + std::to_string(other.m_sums.size()) +
                                        " tensors added to " + std::to_string(m_sums.size()));
        for (std::size_t i = 0; i < m_sums.size(); ++i) {
            if (other.m_sums[i].size() != m_sums[i].size())
                throw std::invalid_argument("tessera::optim::gradient_buffer::add: tensor " + std::to_string(i) + " sizes differ");
            for (std::size_t k = 0; k < m_sums[i].size(); ++k) m_sums[i][k] += other.m_sums[i][k];
        }
        m_count += other.m_count;
    }

    /// Overwrites params' gradients with the sum or the mean of what was accumulated.
    template <ParameterSet S>
    void write_to(S& params, reduction r = reduction::mean) const {
        if (m_count == 0) throw std::logic_error("tessera::optim::gradient_buffer::write_to: nothing accumulated");
        const float f = r == reduction::mean ? 1.0f / static_cast<float>(m_count) : 1.0f;
        std::size_t i = 0;
        params.visit_parameters([&](std::string_view name, auto, auto grad) {
            using G = typename decltype(grad)::value_type;
            if (i >= m_sums.size() || m_sums[i].size() != grad.size())
                throw std::invalid_argument("tessera::optim::gradient_buffer::write_to: parameter '" + std::string(name) +
                                            "' does not match the accumulated tensors");
            const auto& b = m_sums[i++];
            for (std::size_t k = 0; k < grad.size(); ++k) grad[k] = static_cast<G>(b[k] * f);
        });
    }

    /// Forgets the sums (keeps the memory).
    void clear() noexcept {
        for (auto& b : m_sums) std::fill(b.begin(), b.end(), 0.0f);
        m_count = 0;
    }

    [[nodiscard]] std::size_t count() const noexcept { return m_count; }
    [[nodiscard]] std::size_t tensors() const noexcept { return m_sums.size(); }
    [[nodiscard]] std::span<float> tensor(std::size_t i) { return m_sums.at(i); }

private:
    std::vector<float>& buffer_for(std::size_t i, std::size_t n, std::string_view name) {
        if (m_sums.size() <= i) m_sums.resize(i + 1);
        if (m_sums[i].empty()) m_sums[i].assign(n, 0.0f);
        if (m_sums[i].size() != n)
            throw std::invalid_argument("tessera::optim::gradient_buffer: parameter '" + std::string(name) + "' has " +
                                        std::to_string(n) + " values, its buffer " + std::to_string(m_sums[i].size()));
        return m_sums[i];
    }

    std::vector<std::vector<float>> m_sums;
    std::size_t m_count = 0;
};

}  // namespace tessera::optim
