#pragma once
// A plain-text table with aligned columns.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::report {

enum class align { left, right };

/// Rows of cells under a header; numbers (cells that parse as a number) align right by default.
/// @code
///   report::table t({"IPU", "used", "budget"});
///   t.add_row({"0", "12.5 MB", "900.0 MB"});
///   std::cout << t;
/// @endcode
class table {
public:
    explicit table(std::vector<std::string> header) : m_header(std::move(header)) {
        if (m_header.empty()) throw std::invalid_argument("tessera::report::table: the header has no columns");
    }

    /// Adds a row; it must have as many cells as the header.
    void add_row(std::vector<std::string> cells) {
        if (cells.size() != m_header.size())
            throw std::invalid_argument("tessera::report::table::add_row: row has " + std::to_string(cells.size()) +
                                        " cells, the header has " + std::to_string(m_header.size()));
        m_rows.push_back(std::move(cells));
    }

    /// Forces the alignment of one column.
    void set_align(std::size_t column, align a) {
        if (column >= m_header.size())
            throw std::out_of_range("tessera::report::table::set_align: column " + std::to_string(column) +
                                    " of " + std::to_string(m_header.size()));
        m_align.resize(m_header.size(), -1);
        m_align[column] = a == align::left ? 0 : 1;
    }

    [[nodiscard]] std::size_t rows() const noexcept { return m_rows.size(); }
    [[nodiscard]] std::size_t columns() const noexcept { return m_header.size(); }

    /// Header, a rule of dashes, then the rows; two spaces between columns, no trailing spaces.
    void write(std::ostream& out) const {
        const std::size_t n = m_header.size();
        std::vector<std::size_t> width(n);
        for (std::size_t c = 0; c < n; ++c) width[c] = display_width(m_header[c]);
        for (const auto& row : m_rows)
            for (std::size_t c = 0; c < n; ++c) width[c] = std::max(width[c], display_width(row[c]));
        std::vector<bool> right(n);
        for (std::size_t c = 0; c < n; ++c) right[c] = is_right(c);

        auto emit = [&](const std::vector<std::string>& cells) {
            std::string line;
            for (std::size_t c = 0; c < n; ++c) {
                const std::size_t pad = width[c] - display_width(cells[c]);
                if (c > 0) line += "  ";
                if (right[c]) line.append(pad, ' ');
                line += cells[c];
                if (!right[c]) line.append(pad, ' ');
            }
            while (!line.empty() && line.back() == ' ') line.pop_back();
            out << line << '\n';
        };
        emit(m_header);
        std::string rule;
        for (std::size_t c = 0; c < n; ++c) {
            if (c > 0) rule += "  ";
            rule.append(width[c], '-');
        }
        out << rule << '\n';
        for (const auto& row : m_rows) emit(row);
    }

    [[nodiscard]] std::string str() const {
        std::ostringstream s;
        write(s);
        return s.str();
    }

    friend std::ostream& operator<<(std::ostream& out, const table& t) {
        t.write(out);
        return out;
    }

private:
    // Counts code points, so UTF-8 cells ("µs", "█") line up.
    [[nodiscard]] static std::size_t display_width(const std::string& s) noexcept {
        std::size_t n = 0;
        for (unsigned char ch : s)
            if ((ch & 0xC0u) != 0x80u) ++n;
        return n;
    }
    [[nodiscard]] static bool looks_numeric(const std::string& s) noexcept {
        if (s.empty()) return false;
        char* end = nullptr;
        std::strtod(s.c_str(), &end);
        return end != s.c_str();
    }
    [[nodiscard]] bool is_right(std::size_t c) const {
        if (c < m_align.size() && m_align[c] >= 0) return m_align[c] == 1;
        if (m_rows.empty()) return false;
        return std::all_of(m_rows.begin(), m_rows.end(), [&](const auto& row) { return looks_numeric(row[c]); });
    }

    std::vector<std::string> m_header;
    std::vector<std::vector<std::string>> m_rows;
    std::vector<int> m_align;  // -1 automatic, 0 left, 1 right
};

}  // namespace tessera::report
