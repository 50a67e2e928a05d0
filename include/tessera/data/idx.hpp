#pragma once
// The IDX file format of (Fashion-)MNIST: big-endian header, then unsigned bytes; gzip or plain.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
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

/// Reads an IDX file of unsigned bytes with `rank` dimensions (3 for images, 1 for labels), gzip-
/// compressed or not. Errors: missing_file_error, bad_magic_error (expects 0x000008<rank>),
/// corrupt_data_error (bad gzip, header cut short), count_mismatch_error (payload size differs
/// from what the header declares).
[[nodiscard]] inline idx_array parse_idx(std::vector<std::uint8_t> bytes, const std::string& name, std::size_t rank);

[[nodiscard]] inline idx_array read_idx(const std::filesystem::path& path, std::size_t rank) {
    if (rank == 0 || rank > 8)
        throw std::invalid_argument("tessera::data::read_idx: rank must be 1 to 8, got " + std::to_string(rank));
    return parse_idx(read_maybe_gzip(path), path.string(), rank);
}

/// read_idx on bytes already read (and inflated); `name` is used in messages.
[[nodiscard]] inline idx_array parse_idx(std::vector<std::uint8_t> bytes, const std::string& name, std::size_t rank) {
    if (rank == 0 || rank > 8)
        throw std::invalid_argument("tessera::data::parse_idx: rank must be 1 to 8, got " + std::to_string(rank));
    const auto expected_magic = static_cast<std::uint32_t>(0x0800u | rank);
    const std::string expected_text =
        detail::hex32(expected_magic) + " (IDX of unsigned bytes with " + std::to_string(rank) + " dimensions)";
    if (bytes.size() < 4)
        throw corrupt_data_error(name, bytes.size(), "the end of the data after " + std::to_string(bytes.size()) + " bytes",
                                 "a 4-byte IDX magic number");
    const std::uint32_t magic = detail::big_endian32(bytes.data());
    if (magic != expected_magic) throw bad_magic_error(name, 0, "magic number " + detail::hex32(magic), expected_text);
    idx_array out;
    out.header_bytes = 4 + 4 * rank;
    if (bytes.size() < out.header_bytes)
        throw corrupt_data_error(name, bytes.size(), "the end of the data inside the header",
                                 std::to_string(out.header_bytes) + " header bytes");
    std::size_t count = 1;
    bool overflow = false;
    for (std::size_t d = 0; d < rank; ++d) {
        out.dims.push_back(detail::big_endian32(bytes.data() + 4 + 4 * d));
        overflow = overflow || (out.dims.back() != 0 && count > std::numeric_limits<std::size_t>::max() / out.dims.back());
        if (!overflow) count *= out.dims.back();
    }
    const std::size_t present = bytes.size() - out.header_bytes;
    if (overflow || present != count) {
        std::string declared = std::to_string(out.dims[0]);
        for (std::size_t d = 1; d < rank; ++d) {
            declared += 'x';  // appended separately: GCC 12 at -O3 warns (-Wrestrict) on "x" + std::string
            declared += std::to_string(out.dims[d]);
        }
        throw count_mismatch_error(name, out.header_bytes, std::to_string(present) + " bytes of values",
                                   (overflow ? std::string("more bytes than memory can address") : std::to_string(count) + " bytes") +
                                       ", as the header declares " + declared);
    }
    bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(out.header_bytes));
    out.values = std::move(bytes);
    return out;
}

/// An image dataset from an IDX image file (N x H x W) and an IDX label file (N), e.g. MNIST.
/// Labels must be below `num_classes`; the counts must agree.
[[nodiscard]] inline in_memory_dataset<std::uint8_t> read_idx_dataset(const std::filesystem::path& images,
                                                                      const std::filesystem::path& labels,
                                                                      std::size_t num_classes) {
    auto pixels = read_idx(images, 3);
    const auto marks = read_idx(labels, 1);
    if (pixels.dims[0] != marks.dims[0])
        throw count_mismatch_error(labels.string(), 4, std::to_string(marks.dims[0]) + " labels",
                                   std::to_string(pixels.dims[0]) + " labels, one per image of " + images.string());
    std::vector<label_t> y(marks.values.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        if (marks.values[i] >= num_classes)
            throw label_error(labels.string(), marks.header_bytes + i, "label " + std::to_string(marks.values[i]),
                              "a label in [0, " + std::to_string(num_classes) + ")");
        y[i] = marks.values[i];
    }
    const sample_shape shape{1, pixels.dims[1], pixels.dims[2]};
    return in_memory_dataset<std::uint8_t>(shape, num_classes, std::move(pixels.values), std::move(y), images.string());
}

}  // namespace tessera::data
