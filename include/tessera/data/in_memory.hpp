#pragma once
// in_memory_dataset: labelled samples held in one contiguous buffer (also what the file readers return).
#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/data/concepts.hpp"
#include "tessera/data/error.hpp"

namespace tessera::data {

/// A map-style dataset over samples kept in memory: `size()` samples of `shape()`, CHW, contiguous.
/// Checked at construction: the value count matches the labels, every label is in range.
/// @code
///   data::in_memory_dataset<float> ds({1, 2, 2}, /*classes=*/2, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1});
///   ds.size();   // 2
/// @endcode
template <SampleValue T>
class in_memory_dataset {
public:
    using value_type = T;

    in_memory_dataset(sample_shape shape, std::size_t num_classes, std::vector<T> values,
                      std::vector<label_t> labels, std::string name = "in-memory dataset")
        : m_shape(shape), m_classes(num_classes), m_values(std::move(values)), m_labels(std::move(labels)),
          m_name(std::move(name)) {
        if (m_shape.size() == 0) throw shape_error(m_name, 0, "an empty sample shape " + to_string(m_shape), "C, H, W > 0");
        if (m_classes == 0) throw label_error(m_name, 0, "0 classes", "at least one class");
        if (m_values.size() != m_labels.size() * m_shape.size())
            throw count_mismatch_error(m_name, 0,
                                       std::to_string(m_values.size()) + " values for " + std::to_string(m_labels.size()) +
                                           " labels",
                                       std::to_string(m_labels.size()) + " x " + to_string(m_shape) + " = " +
                                           std::to_string(m_labels.size() * m_shape.size()) + " values");
        for (std::size_t i = 0; i < m_labels.size(); ++i)
            if (m_labels[i] < 0 || static_cast<std::size_t>(m_labels[i]) >= m_classes)
                throw label_error(m_name, i, "label " + std::to_string(m_labels[i]) + " of sample " + std::to_string(i),
                                  "a label in [0, " + std::to_string(m_classes) + ")");
    }

    [[nodiscard]] std::size_t size() const noexcept { return m_labels.size(); }
    [[nodiscard]] sample_shape shape() const noexcept { return m_shape; }
    [[nodiscard]] std::size_t num_classes() const noexcept { return m_classes; }
    [[nodiscard]] const std::string& name() const noexcept { return m_name; }

    /// Copies sample i into `out` (shape().size() values) and returns its label.
    label_t read(std::size_t i, std::span<T> out) const {
        if (i >= size())
            throw std::out_of_range("tessera::data::in_memory_dataset::read: index " + std::to_string(i) +
                                    " >= size " + std::to_string(size()));
        if (out.size() != m_shape.size())
            throw shape_error(m_name, i, "a buffer of " + std::to_string(out.size()) + " values",
                              std::to_string(m_shape.size()) + " values (" + to_string(m_shape) + ")");
        const auto first = m_values.begin() + static_cast<std::ptrdiff_t>(i * m_shape.size());
        std::copy(first, first + static_cast<std::ptrdiff_t>(m_shape.size()), out.begin());
        return m_labels[i];
    }

    /// Sample i, without copying.
    [[nodiscard]] std::span<const T> sample(std::size_t i) const {
        return std::span<const T>(m_values).subspan(i * m_shape.size(), m_shape.size());
    }
    [[nodiscard]] std::span<const T> values() const noexcept { return m_values; }
    [[nodiscard]] std::span<const label_t> labels() const noexcept { return m_labels; }

    /// Samples [first, first + count) as a new dataset (small subsets for quick runs and tests).
    [[nodiscard]] in_memory_dataset subset(std::size_t first, std::size_t count) const {
        if (first > size() || count > size() - first)
            throw std::out_of_range("tessera::data::in_memory_dataset::subset: [" + std::to_string(first) + ", " +
                                    std::to_string(first + count) + ") is not inside [0, " + std::to_string(size()) + ")");
        const auto n = m_shape.size();
        std::vector<T> v(m_values.begin() + static_cast<std::ptrdiff_t>(first * n),
                         m_values.begin() + static_cast<std::ptrdiff_t>((first + count) * n));
        std::vector<label_t> l(m_labels.begin() + static_cast<std::ptrdiff_t>(first),
                               m_labels.begin() + static_cast<std::ptrdiff_t>(first + count));
        return in_memory_dataset(m_shape, m_classes, std::move(v), std::move(l), m_name);
    }

private:
    sample_shape m_shape;
    std::size_t m_classes;
    std::vector<T> m_values;
    std::vector<label_t> m_labels;
    std::string m_name;
};

static_assert(Dataset<in_memory_dataset<float>> && Dataset<in_memory_dataset<std::uint8_t>>);

}  // namespace tessera::data
