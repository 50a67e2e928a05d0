#pragma once
// File paths as strings: joining, the directory of a path, whether a regular file is there. The data
// and checkpoint layers take paths as `const std::string&` (a std::filesystem::path converts to it),
// so no header of theirs pays for <filesystem>. Below every layer.
#include <string>
#include <string_view>

#include <sys/stat.h>

namespace tessera::detail {

/// `directory`/`name`, with one slash between them ("" gives `name`).
[[nodiscard]] inline std::string join_path(std::string_view directory, std::string_view name) {
    std::string out(directory);
    if (!out.empty() && out.back() != '/') out += '/';
    out += name;
    return out;
}

/// The directory that holds `path`: "." for a bare name, "/" for a name at the root.
[[nodiscard]] inline std::string parent_directory(std::string_view path) {
    while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
    const auto slash = path.rfind('/');
    if (slash == std::string_view::npos) return ".";
    if (slash == 0) return "/";
    return std::string(path.substr(0, slash));
}

/// True when `path` names a regular file (following symbolic links).
[[nodiscard]] inline bool is_regular_file(const std::string& path) noexcept {
    struct stat status {};
    return ::stat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode);
}

}  // namespace tessera::detail
