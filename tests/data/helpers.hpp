#pragma once
// Test helpers of the data layer: a temporary directory and writers of IDX / gzip / CIFAR-10 files.
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace tessera_test {

/// A fresh directory under the system's temp dir, removed with everything in it at scope exit.
class temp_dir {
public:
    temp_dir() {
        std::random_device rd;
        m_path = std::filesystem::temp_directory_path() /
                 ("tessera-data-" + std::to_string(rd()) + "-" + std::to_string(rd()));
        std::filesystem::create_directories(m_path);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return m_path; }
    [[nodiscard]] std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

private:
    std::filesystem::path m_path;
};

inline void write_bytes(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::uint8_t> read_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// gzip-compresses through zlib's gzFile API (not the inflate code under test).
inline void write_gzip(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes) {
    gzFile f = gzopen(p.string().c_str(), "wb9");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
}

inline void put_be32(std::vector<std::uint8_t>& out, std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

/// An IDX file: magic 0x000008<rank>, the dims, then the values.
inline std::vector<std::uint8_t> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                           const std::vector<std::uint8_t>& values) {
    std::vector<std::uint8_t> out;
    put_be32(out, magic);
    for (auto d : dims) put_be32(out, d);
    out.insert(out.end(), values.begin(), values.end());
    return out;
}

}  // namespace tessera_test
