#pragma once
// A whole file's bytes through <cstdio>: the readers of datasets and host files share it, and no
// header of theirs pays for <fstream>. Below every layer.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/stat.h>

namespace tessera::detail {

/// Why a whole-file read failed, in words a caller can put in its error.
enum class file_read_failure { cannot_open, not_a_regular_file, read_error };

[[nodiscard]] constexpr const char* describe(file_read_failure f) noexcept {
    switch (f) {
        case file_read_failure::cannot_open: return "a file that cannot be opened";
        case file_read_failure::not_a_regular_file: return "not a regular file";
        case file_read_failure::read_error: return "a read error";
    }
    return "?";
}

/// Reads the whole file at `path` into `out` (replacing its content); the failure otherwise, with
/// `out` left empty.
[[nodiscard]] inline std::optional<file_read_failure> read_whole_file(const std::string& path,
                                                                      std::vector<std::uint8_t>& out) {
    out.clear();
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!file) return file_read_failure::cannot_open;
    struct stat status {};
    if (::fstat(::fileno(file.get()), &status) != 0 || !S_ISREG(status.st_mode))
        return file_read_failure::not_a_regular_file;
    out.resize(static_cast<std::size_t>(status.st_size));
    if (!out.empty() && std::fread(out.data(), 1, out.size(), file.get()) != out.size()) {
        out.clear();
        return file_read_failure::read_error;
    }
    return std::nullopt;
}

}  // namespace tessera::detail
