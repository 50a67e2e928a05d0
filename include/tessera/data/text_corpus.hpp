#pragma once
// text_corpus: the documents of a directory of fortune files (or of one file), or given in memory.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "tessera/data/error.hpp"
#include "tessera/detail/file_bytes.hpp"

namespace tessera::data {

/// Where Debian's `fortunes` package installs its English fortune files.
inline constexpr const char* fortunes_default_path = "/usr/share/games/fortunes";

/// A corpus of documents: the entries of fortune files (strfile's format), in a fixed order.
///
/// A fortune file is split into lines at '\n'; one '\r' ending a line is dropped (so CRLF files read
/// as LF ones); a line holding only `%` ends an entry, and the file's end ends the last one (with or
/// without a `%` after it). An entry is its lines joined by '\n' with its trailing whitespace (space,
/// '\t', '\n', '\r', '\v', '\f': Python's bytes.rstrip()) removed, and ONE '\n' appended: that is the
/// document. Entries that are empty once stripped are dropped. Leading whitespace is kept.
///
/// From a directory, the files read are its direct entries that are regular files (symbolic links
/// followed), in the byte order of their names, except: names starting with '.', names ending in
/// `.dat` (strfile's binary indexes) or `.u8` (Debian's links to the same text), and any file holding
/// a NUL byte (not text). Subdirectories are not entered (so `off/`, the offensive fortunes, is never
/// read). files() and skipped() list what was read and what was left out.
///
/// Memory: the documents' bytes, held once in one buffer (never more than the files hold), and one
/// file's bytes while it is read.
/// @code
///   const data::text_corpus corpus(data::fortunes_default_path);
///   std::string_view first = corpus.document(0);
/// @endcode
class text_corpus {
public:
    /// The documents of the fortune files under `path` (a directory, or one file, read whatever its
    /// name). Throws missing_file_error for a path that does not exist or a file that cannot be
    /// opened, corrupt_data_error for a read error, empty_dataset_error when no document is found.
    explicit text_corpus(const std::filesystem::path& path) : m_name(path.string()) {
        std::error_code ec;
        const auto status = std::filesystem::status(path, ec);
        if (ec || !std::filesystem::exists(status))
            throw missing_file_error(m_name, 0, "no such file or directory", "a fortune file or a directory of them");
        if (std::filesystem::is_directory(status)) {
            std::vector<std::filesystem::path> candidates;
            // increment(ec), not ++: a directory that fails midway is this class's error, not filesystem_error.
            for (std::filesystem::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
                const std::string name = it->path().filename().string();
                std::error_code kind;
                if (!it->is_regular_file(kind) || skipped_by_name(name))
                    m_skipped.push_back(it->path().string());
                else
                    candidates.push_back(it->path());
            }
            if (ec) throw missing_file_error(m_name, 0, "a directory that cannot be listed (" + ec.message() + ")",
                                             "a readable directory of fortune files");
            std::sort(candidates.begin(), candidates.end(),
                      [](const auto& a, const auto& b) { return a.filename().string() < b.filename().string(); });
            std::size_t total = candidates.size();  // each file's last entry may gain one '\n'
            for (const auto& file : candidates) {
                std::error_code size_ec;
                const auto size = std::filesystem::file_size(file, size_ec);
                if (!size_ec) total += static_cast<std::size_t>(size);
            }
            m_bytes.reserve(total);  // one buffer of the files' size, not a doubling one
            for (const auto& file : candidates) read_file(file.string());
            std::sort(m_skipped.begin(), m_skipped.end());
        } else {
            read_file(m_name);
        }
        if (m_starts.empty())
            throw empty_dataset_error(m_name, 0,
                                      "no document in " + std::to_string(m_files.size()) + " text file(s) (" +
                                          std::to_string(m_skipped.size()) + " skipped)",
                                      "at least one non-empty %-separated entry");
    }

    /// Documents given as they are (not split, not stripped), in this order; `name` is for messages.
    /// Throws empty_dataset_error for an empty list.
    explicit text_corpus(const std::vector<std::string>& documents, std::string name = "in-memory corpus")
        : m_name(std::move(name)) {
        for (const auto& d : documents) add(d);
        if (m_starts.empty()) throw empty_dataset_error(m_name, 0, "no document", "at least one document");
    }

    /// Number of documents.
    [[nodiscard]] std::size_t size() const noexcept { return m_starts.size(); }
    /// Document i's bytes (its final '\n' included when read from a file).
    [[nodiscard]] std::string_view document(std::size_t i) const noexcept {
        const std::size_t end = i + 1 < m_starts.size() ? m_starts[i + 1] : m_bytes.size();
        return std::string_view(m_bytes).substr(m_starts[i], end - m_starts[i]);
    }
    /// Bytes of all documents together.
    [[nodiscard]] std::size_t bytes() const noexcept { return m_bytes.size(); }
    /// The path given (or the name of an in-memory corpus), for messages.
    [[nodiscard]] const std::string& name() const noexcept { return m_name; }
    /// The files read, in order; and the directory entries left out (by name, kind or content), sorted.
    [[nodiscard]] const std::vector<std::string>& files() const noexcept { return m_files; }
    [[nodiscard]] const std::vector<std::string>& skipped() const noexcept { return m_skipped; }

private:
    [[nodiscard]] static bool ends_with(std::string_view s, std::string_view tail) noexcept {
        return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
    }
    [[nodiscard]] static bool skipped_by_name(std::string_view name) noexcept {
        return name.empty() || name.front() == '.' || ends_with(name, ".dat") || ends_with(name, ".u8");
    }
    [[nodiscard]] static bool is_space(char c) noexcept {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    }

    void add(std::string_view document) {
        m_starts.push_back(m_bytes.size());
        m_bytes.append(document);
    }

    void read_file(const std::string& path) {
        std::vector<std::uint8_t> raw;
        if (const auto failure = tessera::detail::read_whole_file(path, raw)) {
            if (*failure == tessera::detail::file_read_failure::read_error)
                throw corrupt_data_error(path, 0, tessera::detail::describe(*failure), "a readable fortune file");
            throw missing_file_error(path, 0, tessera::detail::describe(*failure), "a readable fortune file");
        }
        if (std::find(raw.begin(), raw.end(), std::uint8_t{0}) != raw.end()) {  // binary: not text
            m_skipped.push_back(path);
            return;
        }
        m_files.push_back(path);
        const std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
        std::size_t entry = m_bytes.size();  // where the current entry's text begins in m_bytes
        std::size_t lines = 0;               // lines of the current entry so far
        const auto end_entry = [&] {
            std::size_t end = m_bytes.size();
            while (end > entry && is_space(m_bytes[end - 1])) --end;
            m_bytes.resize(end);
            if (end > entry) {
                m_starts.push_back(entry);
                m_bytes.push_back('\n');
            }
            entry = m_bytes.size();
            lines = 0;
        };
        for (std::size_t pos = 0; pos <= text.size();) {
            std::size_t eol = text.find('\n', pos);
            if (eol == std::string_view::npos) eol = text.size();
            std::string_view line = text.substr(pos, eol - pos);
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            if (line == "%") {
                end_entry();
            } else {
                if (lines++ > 0) m_bytes.push_back('\n');  // joins the entry's lines
                m_bytes.append(line);
            }
            pos = eol + 1;
        }
        end_entry();
    }

    std::string m_name;
    std::string m_bytes;                // every document, one after another
    std::vector<std::size_t> m_starts;  // where document i begins in m_bytes
    std::vector<std::string> m_files, m_skipped;
};

}  // namespace tessera::data
