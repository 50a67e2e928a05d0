#pragma once
// iterable_view: a map-style dataset read as a stream, split into contiguous parts as PyTorch's
// IterableDataset workers split theirs.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "tessera/data/concepts.hpp"

namespace tessera::data {

/// Streams the samples of a map-style dataset in index order. reset(part, parts) narrows the stream
/// to part `part` of `parts`: ceil(N / parts) samples each, the last part what remains (the split of
/// PyTorch's IterableDataset documentation, which PopTorch's rebatching example assumes).
/// Holds a pointer: the dataset must outlive the view.
template <Dataset D>
class iterable_view {
public:
    using value_type = typename D::value_type;

    explicit iterable_view(const D& dataset) noexcept : m_dataset(&dataset), m_end(dataset.size()) {}

    [[nodiscard]] sample_shape shape() const { return m_dataset->shape(); }
    [[nodiscard]] std::size_t num_classes() const { return m_dataset->num_classes(); }

    /// Next sample of the current part into `out`, its label; std::nullopt at the end of the part.
    std::optional<label_t> next(std::span<value_type> out) {
        if (m_cursor >= m_end) return std::nullopt;
        return m_dataset->read(m_cursor++, out);
    }

    /// Restart on part `part` of `parts` (reset(0, 1): the whole dataset).
    void reset(std::size_t part = 0, std::size_t parts = 1) {
        if (parts == 0 || part >= parts)
            throw std::invalid_argument("tessera::data::iterable_view::reset: part " + std::to_string(part) + " of " +
                                        std::to_string(parts) + " (need part < parts)");
        const std::size_t n = m_dataset->size();
        const std::size_t per_part = (n + parts - 1) / parts;
        m_cursor = std::min(n, part * per_part);
        m_end = std::min(n, m_cursor + per_part);
    }

private:
    const D* m_dataset;
    std::size_t m_cursor = 0;
    std::size_t m_end;
};

}  // namespace tessera::data
