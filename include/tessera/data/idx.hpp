#pragma once
// The IDX file format of (Fashion-)MNIST: big-endian header, then unsigned bytes; gzip or plain.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/data/concepts.hpp"
#include "tessera/data/error.hpp"
#include "tessera/data/gzip.hpp"
#include "tessera/data/in_memory.hpp"

namespace tessera::data {

/// One IDX array of unsigned bytes: its dimensions and its values (header stripped).
struct idx_array {
    std::vector<std::size_t> dims;
    std::vector<std::uint8_t> values;
    std::size_t header_bytes = 0;  // offset of values[0] in the decompressed file
};

namespace detail {
[[nodiscard]] inline std::string hex32(std::uint32_t v) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08X", v);
    return text;
}
[[nodiscard]] inline std::uint32_t big_endian32(const std::uint8_t* p) noexcept {
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}
}  // namespace detail

namespace detail {

/// What the header at the start of an IDX file declares.
struct idx_header {
    std::vector<std::size_t> dims;
    std::size_t header_bytes = 0;  // 4 + 4 x rank
    std::size_t count = 0;         // values declared (dims' product)
};

/// "3x28x28": the declared dimensions, for messages.
[[nodiscard]] inline std::string dims_text(const std::vector<std::size_t>& dims) {
    std::string text = std::to_string(dims.front());
    for (std::size_t d = 1; d < dims.size(); ++d) {
        text += 'x';  // appended separately: GCC 12 at -O3 warns (-Wrestrict) on "x" + std::string
        text += std::to_string(dims[d]);
    }
    return text;
}

/// The header at the start of `bytes` (the whole file, or at least its header): bad_magic_error for
/// another magic number, corrupt_data_error when the bytes end inside it, count_mismatch_error when
/// the declared count overflows (`values` says what follows the header, for the message).
[[nodiscard]] inline idx_header read_idx_header(const std::vector<std::uint8_t>& bytes, const std::string& name,
                                                std::size_t rank, const std::string& values) {
    if (rank == 0 || rank > 8)
        throw std::invalid_argument("tessera::data::read_idx: rank must be 1 to 8, got " + std::to_string(rank));
    const auto expected_magic = static_cast<std::uint32_t>(0x0800u | rank);
    if (bytes.size() < 4)
        throw corrupt_data_error(name, bytes.size(), "the end of the data after " + std::to_string(bytes.size()) + " bytes",
                                 "a 4-byte IDX magic number");
    const std::uint32_t magic = big_endian32(bytes.data());
    if (magic != expected_magic)
        throw bad_magic_error(name, 0, "magic number " + hex32(magic),
                              hex32(expected_magic) + " (IDX of unsigned bytes with " + std::to_string(rank) + " dimensions)");
    idx_header h;
    h.header_bytes = 4 + 4 * rank;
    if (bytes.size() < h.header_bytes)
        throw corrupt_data_error(name, bytes.size(), "the end of the data inside the header",
                                 std::to_string(h.header_bytes) + " header bytes");
    std::size_t count = 1;
    bool overflow = false;
    for (std::size_t d = 0; d < rank; ++d) {
        h.dims.push_back(big_endian32(bytes.data() + 4 + 4 * d));
        const std::size_t room = std::numeric_limits<std::size_t>::max() - h.header_bytes;
        overflow = overflow || (h.dims.back() != 0 && count > room / h.dims.back());
        if (!overflow) count *= h.dims.back();
    }
    if (overflow)
        throw count_mismatch_error(name, h.header_bytes, values,
                                   "more bytes than memory can address, as the header declares " + dims_text(h.dims));
    h.count = count;
    return h;
}

}  // namespace detail

/// read_idx on bytes already read (and inflated); `name` is used in messages.
[[nodiscard]] inline idx_array parse_idx(std::vector<std::uint8_t> bytes, const std::string& name, std::size_t rank) {
    const auto present = [&](std::size_t header) { return std::to_string(bytes.size() - std::min(header, bytes.size())) + " bytes of values"; };
    const detail::idx_header h = detail::read_idx_header(bytes, name, rank, present(4 + 4 * rank));
    if (bytes.size() - h.header_bytes != h.count)
        throw count_mismatch_error(name, h.header_bytes, present(h.header_bytes),
                                   std::to_string(h.count) + " bytes, as the header declares " + detail::dims_text(h.dims));
    bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(h.header_bytes));
    return {h.dims, std::move(bytes), h.header_bytes};
}

/// Reads an IDX file of unsigned bytes with `rank` dimensions (3 for images, 1 for labels), gzip-
/// compressed or not. Errors: missing_file_error, bad_magic_error (expects 0x000008<rank>),
/// corrupt_data_error (bad gzip, header cut short), count_mismatch_error (payload size differs
/// from what the header declares). A gzip file is inflated no further than its header declares and
/// one byte more: a small file that declares two images but inflates to gigabytes is refused after a
/// few kilobytes. Before inflating past the header, a gzip file whose header declares more than
/// default_inflate_limit bytes (corrupt_data_error), or more than its compressed size can inflate to
/// at deflate's largest ratio (count_mismatch_error, see deflate_max_ratio), is refused: a small file
/// that declares a terabyte costs no more memory than its own size.
[[nodiscard]] inline idx_array read_idx(const std::string& path, std::size_t rank) {
    if (rank == 0 || rank > 8)
        throw std::invalid_argument("tessera::data::read_idx: rank must be 1 to 8, got " + std::to_string(rank));
    auto bytes = read_file(path);
    if (!is_gzip(bytes)) return parse_idx(std::move(bytes), path, rank);
    const std::string& name = path;
    const detail::idx_header h =
        detail::read_idx_header(gunzip_prefix(bytes, name, 4 + 4 * rank), name, rank, "values of any size");
    const std::size_t declared = h.header_bytes + h.count;  // read_idx_header refuses a sum that overflows
    const std::string declares = std::to_string(declared) + " bytes, as the header declares " + detail::dims_text(h.dims);
    if (declared > default_inflate_limit)
        throw corrupt_data_error(name, h.header_bytes, "a file of " + declares,
                                 "at most " + std::to_string(default_inflate_limit) +
                                     " bytes inflated (data::default_inflate_limit)");
    if (declared > max_inflated_size(bytes.size()))
        throw count_mismatch_error(name, h.header_bytes,
                                   std::to_string(bytes.size()) + " bytes of gzip data, which inflate to at most " +
                                       std::to_string(max_inflated_size(bytes.size())) + " bytes (deflate's largest ratio, " +
                                       std::to_string(deflate_max_ratio) + ":1)",
                                   declares);
    auto plain = gunzip_prefix(bytes, name, h.header_bytes + h.count + 1);
    if (plain.size() > h.header_bytes + h.count)
        throw count_mismatch_error(name, h.header_bytes, "more than " + std::to_string(h.count) + " bytes of values",
                                   std::to_string(h.count) + " bytes, as the header declares " + detail::dims_text(h.dims));
    return parse_idx(std::move(plain), name, rank);
}

/// An image dataset from an IDX image file (N x H x W) and an IDX label file (N), e.g. MNIST.
/// Labels must be below `num_classes`; the counts must agree.
[[nodiscard]] inline in_memory_dataset<std::uint8_t> read_idx_dataset(const std::string& images, const std::string& labels,
                                                                      std::size_t num_classes) {
    auto pixels = read_idx(images, 3);
    const auto marks = read_idx(labels, 1);
    if (pixels.dims[0] != marks.dims[0])
        throw count_mismatch_error(labels, 4, std::to_string(marks.dims[0]) + " labels",
                                   std::to_string(pixels.dims[0]) + " labels, one per image of " + images);
    std::vector<label_t> y(marks.values.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        if (marks.values[i] >= num_classes)
            throw label_error(labels, marks.header_bytes + i, "label " + std::to_string(marks.values[i]),
                              "a label in [0, " + std::to_string(num_classes) + ")");
        y[i] = marks.values[i];
    }
    const sample_shape shape{1, pixels.dims[1], pixels.dims[2]};
    return in_memory_dataset<std::uint8_t>(shape, num_classes, std::move(pixels.values), std::move(y), images);
}

}  // namespace tessera::data
