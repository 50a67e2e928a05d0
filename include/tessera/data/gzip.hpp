#pragma once
// Reading a whole file, and inflating a gzip stream through zlib with errors that name the offset.
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tessera/data/error.hpp"
#include "tessera/detail/file_bytes.hpp"
#include "tessera/detail/path.hpp"

namespace tessera::data {

/// The bytes of a file; missing_file_error when it cannot be opened or read.
[[nodiscard]] inline std::vector<std::uint8_t> read_file(const std::string& path) {
    if (!tessera::detail::is_regular_file(path))
        throw missing_file_error(path, 0, "no such file", "a readable regular file");
    std::vector<std::uint8_t> bytes;
    if (const auto failure = tessera::detail::read_whole_file(path, bytes))
        throw missing_file_error(path, 0, tessera::detail::describe(*failure), "a readable file");
    return bytes;
}

/// True when the bytes start with the gzip magic number 1f 8b.
[[nodiscard]] inline bool is_gzip(const std::vector<std::uint8_t>& bytes) noexcept {
    return bytes.size() >= 2 && bytes[0] == 0x1F && bytes[1] == 0x8B;
}

/// Bytes a gzip stream may inflate to unless the caller says otherwise: 4 GiB (the largest dataset
/// file tessera reads inflates to 150 MB; a "gzip bomb" stops here instead of exhausting memory).
inline constexpr std::size_t default_inflate_limit = std::size_t{4} << 30;

/// Deflate's largest compression ratio, 1032:1: a match copies at most 258 bytes and costs at least
/// two bits (a one-bit length code and a one-bit distance code), 258 x 8 / 2 = 1032 (RFC 1951,
/// section 3.2.5; zlib's technical details, https://zlib.net/zlib_tech.html: "the theoretical limit
/// for the zlib format is 1032:1"). A gzip file of n bytes inflates to at most n x 1032 bytes.
inline constexpr std::size_t deflate_max_ratio = 1032;

/// The most bytes `compressed_bytes` of gzip data can inflate to (deflate_max_ratio, saturating).
[[nodiscard]] constexpr std::size_t max_inflated_size(std::size_t compressed_bytes) noexcept {
    return compressed_bytes > std::numeric_limits<std::size_t>::max() / deflate_max_ratio
               ? std::numeric_limits<std::size_t>::max()
               : compressed_bytes * deflate_max_ratio;
}

namespace detail {

/// What inflate_gzip does on reaching `limit` bytes: throw (a whole file must fit) or stop (a prefix).
enum class at_limit { refuse, stop };

/// gunzip and gunzip_prefix: inflates members until the input ends or, with at_limit::stop, until
/// `limit` bytes are out. Output beyond `limit` (at_limit::refuse) is found by inflating one byte more.
[[nodiscard]] inline std::vector<std::uint8_t> inflate_gzip(const std::vector<std::uint8_t>& compressed,
                                                            const std::string& name, std::size_t limit, at_limit mode) {
    if (!is_gzip(compressed))
        throw bad_magic_error(name, 0, "no gzip header", "the gzip magic number 1f 8b");
    z_stream stream{};
    if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK)  // 16+: expect a gzip wrapper
        throw corrupt_data_error(name, 0, "zlib failed to initialise", "a usable zlib");
    std::vector<std::uint8_t> out;
    out.reserve(std::min(limit, compressed.size() * 4));
    // Output grows in chunks from about the compressed size up to 1 MiB (small files stay cheap).
    std::size_t chunk = std::clamp<std::size_t>(compressed.size() * 4, 4096, std::size_t{1} << 20);
    stream.next_in = const_cast<Bytef*>(compressed.data());  // zlib's API is not const-correct
    std::size_t remaining = compressed.size();
    std::uint64_t consumed = 0;  // compressed bytes of the members before this one
    const auto fail = [&](std::uint64_t where, const std::string& found, const std::string& expected) {
        inflateEnd(&stream);
        throw corrupt_data_error(name, where, found, expected);
    };
    for (;;) {
        if (stream.avail_in == 0 && remaining > 0) {
            const auto take = static_cast<uInt>(std::min<std::size_t>(remaining, std::numeric_limits<uInt>::max()));
            stream.avail_in = take;
            remaining -= take;
        }
        const std::size_t before = out.size();
        const std::size_t allowed = limit - before;  // out.size() <= limit here
        if (allowed == 0 && mode == at_limit::stop) break;
        // Refusing: one byte more than allowed is the bomb's tell (chunk is at most 1 MiB: no overflow).
        const std::size_t room = allowed < chunk ? allowed + (mode == at_limit::refuse ? 1 : 0) : chunk;
        out.resize(before + room);
        stream.next_out = out.data() + before;
        stream.avail_out = static_cast<uInt>(room);
        const int status = inflate(&stream, Z_NO_FLUSH);
        out.resize(before + (room - stream.avail_out));
        if (stream.avail_out == 0) chunk = std::min(chunk * 2, std::size_t{1} << 20);
        if (out.size() > limit)
            fail(consumed + stream.total_in, "a stream that inflates to more than " + std::to_string(limit) + " bytes",
                 "at most " + std::to_string(limit) + " bytes (a gzip bomb, or a file larger than the limit)");
        if (status == Z_STREAM_END) {
            if (stream.avail_in == 0 && remaining == 0) break;
            // More bytes: another member (concatenated gzip), or trailing garbage.
            consumed += stream.total_in;
            const std::size_t at = static_cast<std::size_t>(consumed);
            if (at + 2 > compressed.size() || compressed[at] != 0x1F || compressed[at + 1] != 0x8B)
                fail(consumed, std::to_string(compressed.size() - at) + " trailing bytes after the gzip stream",
                     "the end of the file or another gzip member");
            if (inflateReset(&stream) != Z_OK) fail(consumed, "zlib failed to reset", "a usable zlib");
            continue;
        }
        if (status == Z_OK) continue;
        const std::uint64_t where = consumed + stream.total_in;
        const std::string message = stream.msg ? stream.msg : "zlib error " + std::to_string(status);
        if (status == Z_BUF_ERROR && stream.avail_in == 0 && remaining == 0)
            fail(where, "the end of the file inside the gzip stream (truncated)", "a complete gzip stream");
        fail(where, "undecodable gzip data (" + message + ")", "a valid gzip stream");
    }
    inflateEnd(&stream);
    return out;
}

}  // namespace detail

/// Inflates a complete gzip file: one member, or several concatenated (as `cat a.gz b.gz` makes and
/// gzip -d reads). A stream that ends early (truncated file) or fails to decode (corrupted data, bad
/// CRC or length trailer), bytes after the last member that are not another member, or output
/// beyond `limit` bytes (any limit, SIZE_MAX included) throw corrupt_data_error with the compressed
/// offset where zlib stopped. `name` is used in messages (usually the file path).
[[nodiscard]] inline std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& compressed,
                                                      const std::string& name,
                                                      std::size_t limit = default_inflate_limit) {
    return detail::inflate_gzip(compressed, name, limit, detail::at_limit::refuse);
}

/// The first `n` inflated bytes of a gzip file (all of them when it inflates to fewer), without
/// inflating further: a reader learns from a header how much the file may hold before inflating it.
/// Errors as gunzip's for what is read; when the whole stream fits in `n`, it is checked to its end.
[[nodiscard]] inline std::vector<std::uint8_t> gunzip_prefix(const std::vector<std::uint8_t>& compressed,
                                                             const std::string& name, std::size_t n) {
    return detail::inflate_gzip(compressed, name, n, detail::at_limit::stop);
}

/// The content of a file, inflated when it is gzip-compressed (by its magic number, not its name).
[[nodiscard]] inline std::vector<std::uint8_t> read_maybe_gzip(const std::string& path) {
    auto bytes = read_file(path);
    return is_gzip(bytes) ? gunzip(bytes, path) : bytes;
}

}  // namespace tessera::data
