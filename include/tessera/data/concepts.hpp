#pragma once
// What a dataset is: the map-style Dataset and the iterable-style IterableDataset concepts.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "tessera/tensor/half.hpp"

namespace tessera::data {

/// Class index of a sample, in [0, num_classes()).
using label_t = std::int32_t;

/// Shape of one image sample, channels-first (CHW), as the device consumes it.
struct sample_shape {
    std::size_t channels = 1;
    std::size_t height = 1;
    std::size_t width = 1;

    /// Values in one sample.
    [[nodiscard]] constexpr std::size_t size() const noexcept { return channels * height * width; }
    friend constexpr bool operator==(const sample_shape&, const sample_shape&) = default;
};

/// "3x32x32" (channels x height x width), for messages.
[[nodiscard]] inline std::string to_string(const sample_shape& s) {
    return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

/// Element types an image sample may be stored in: raw 8-bit pixels or float (what normalisation
/// and augmentation accept).
template <class T>
concept PixelValue = std::same_as<T, std::uint8_t> || std::same_as<T, float>;

/// Element types a sample may be stored in: pixels (PixelValue), or token ids as std::uint16_t
/// (vocabularies of up to 65,536 ids), which no path of the data layer augments, normalises or
/// converts: they reach the batch as the dataset wrote them.
template <class T>
concept SampleValue = PixelValue<T> || std::same_as<T, std::uint16_t>;

/// Element types a batch may carry to the device: raw 8-bit pixels (8-bit I/O), float or half
/// normalised on the host (half is declared in tessera/tensor/half.hpp), or std::uint16_t token ids.
template <class T>
concept BatchValue = SampleValue<T> || std::same_as<T, tessera::half>;

/// A map-style dataset (PyTorch's Dataset): random access to `size()` samples with labels.
/// `read(i, out)` writes sample i (CHW, shape().size() values) into the caller's buffer and returns
/// its label. read() is const and must be safe to call from several threads at once: the loader's
/// workers share one dataset.
/// @code
///   std::vector<std::uint8_t> pixels(ds.shape().size());
///   data::label_t y = ds.read(17, pixels);
/// @endcode
template <class D>
concept Dataset = requires(const D& d, std::size_t i, std::span<typename D::value_type> out) {
    typename D::value_type;
    requires SampleValue<typename D::value_type>;
    { d.size() } -> std::convertible_to<std::size_t>;
    { d.shape() } -> std::convertible_to<sample_shape>;
    { d.num_classes() } -> std::convertible_to<std::size_t>;
    { d.read(i, out) } -> std::convertible_to<label_t>;
};

/// An iterable-style dataset (PyTorch's IterableDataset): a stream of labelled samples.
/// `next(out)` writes the next sample and returns its label, or std::nullopt once exhausted;
/// `reset(part, parts)` restarts the stream on part `part` of `parts` disjoint parts that together
/// cover the stream (how worker `w` of `W` gets its share; `reset(0, 1)` is the whole stream).
/// The loader copies the dataset once per worker, so it must be copyable.
template <class D>
concept IterableDataset = std::copy_constructible<D> &&
    requires(D& d, const D& cd, std::size_t part, std::span<typename D::value_type> out) {
        typename D::value_type;
        requires SampleValue<typename D::value_type>;
        { cd.shape() } -> std::convertible_to<sample_shape>;
        { cd.num_classes() } -> std::convertible_to<std::size_t>;
        { d.next(out) } -> std::same_as<std::optional<label_t>>;
        d.reset(part, part);
    };

/// Either kind: what data_loader accepts.
template <class D>
concept AnyDataset = Dataset<D> || IterableDataset<D>;

}  // namespace tessera::data
