#pragma once
// A terminal progress bar in the manner of tqdm.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

namespace tessera::report {

/// When the bar redraws itself in place with '\r'.
enum class redraw_mode {
    automatic,  ///< in place when the stream is std::cout/std::cerr/std::clog attached to a terminal
    always,     ///< always in place
    never       ///< plain lines only (logs, files, pipes)
};

/// Options of a progress_bar; designated initialisers keep call sites readable.
struct progress_options {
    std::size_t bar_width = 20;                 ///< cells of the bar
    redraw_mode redraw = redraw_mode::automatic;
    std::size_t plain_lines = 1;                ///< lines printed when not redrawing: 1 = only at the end
};

/// "00:02", "01:02:03" — tqdm's elapsed/remaining format.
[[nodiscard]] inline std::string format_interval(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "?";
    auto total = static_cast<long long>(seconds + 0.5);
    const long long h = total / 3600, m = (total / 60) % 60, s = total % 60;
    char buffer[32];
    if (h > 0)
        std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", h, m, s);
    else
        std::snprintf(buffer, sizeof buffer, "%02lld:%02lld", m, s);
    return buffer;
}

/// The bar's cells: full blocks, one partial block in eighths, then spaces.
[[nodiscard]] inline std::string format_bar(double fraction, std::size_t width) {
    static constexpr std::string_view eighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    fraction = std::clamp(fraction, 0.0, 1.0);
    const auto total_eighths = static_cast<std::size_t>(fraction * static_cast<double>(width) * 8.0);
    const std::size_t full = std::min(total_eighths / 8, width);
    std::string bar;
    for (std::size_t i = 0; i < full; ++i) bar += "█";
    std::size_t cells = full;
    if (full < width) {
        const std::size_t partial = total_eighths % 8;
        if (partial > 0) { bar += eighths[partial]; ++cells; }
    }
    bar.append(width - cells, ' ');
    return bar;
}

/// One line of the meter: "desc: 100%|████| 100/100 [00:02<00:00, 49.8it/s, Loss=1.11]".
/// @code
///   format_meter("Graph compilation", 100, 100, 2.0, 4, {})
///   // "Graph compilation: 100%|████| 100/100 [00:02<00:00, 50.00it/s]"
/// @endcode
[[nodiscard]] inline std::string format_meter(std::string_view description, std::size_t n, std::size_t total,
                                              double elapsed_seconds, std::size_t bar_width,
                                              const std::vector<std::pair<std::string, std::string>>& postfix) {
    std::ostringstream out;
    if (!description.empty()) out << description << ": ";
    const double fraction = total == 0 ? 1.0 : static_cast<double>(n) / static_cast<double>(total);
    char percent[8];
    std::snprintf(percent, sizeof percent, "%3d%%", static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 100.0));
    const double rate = elapsed_seconds > 0 ? static_cast<double>(n) / elapsed_seconds : 0.0;
    const double remaining = (rate > 0 && total >= n) ? static_cast<double>(total - n) / rate
                             : (n >= total ? 0.0 : -1.0);
    out << percent << '|' << format_bar(fraction, bar_width) << "| " << n << '/' << total << " ["
        << format_interval(elapsed_seconds) << '<' << format_interval(remaining);
    if (rate > 0) {
        char r[32];
        if (rate >= 1.0)
            std::snprintf(r, sizeof r, "%.2fit/s", rate);
        else
            std::snprintf(r, sizeof r, "%.2fs/it", 1.0 / rate);
        out << ", " << r;
    }
    for (const auto& [key, value] : postfix) out << ", " << key << '=' << value;
    out << ']';
    return out.str();
}

namespace detail {
[[nodiscard]] inline bool is_terminal(const std::ostream& os) noexcept {
    if (&os == &std::cout) return ::isatty(STDOUT_FILENO) == 1;
    if (&os == &std::cerr || &os == &std::clog) return ::isatty(STDERR_FILENO) == 1;
    return false;
}
}  // namespace detail

/// A progress bar writing to a std::ostream. On a terminal it redraws in place with '\r';
/// elsewhere it prints plain lines (by default one, when it finishes), so logs stay readable.
/// @code
///   report::progress_bar bar(std::cout, "[Epoch 01]", 520);
///   for (...) { ...; bar.set_postfix("Loss", loss, 2); bar.update(); }
///   bar.close();   // also done by the destructor
/// @endcode
class progress_bar {
public:
    using clock = std::chrono::steady_clock;

    progress_bar(std::ostream& out, std::string description, std::size_t total, progress_options options = {})
        : m_out(&out), m_description(std::move(description)), m_total(total), m_options(options),
          m_in_place(options.redraw == redraw_mode::always ||
                     (options.redraw == redraw_mode::automatic && detail::is_terminal(out))),
          m_start(clock::now()) {
        if (m_in_place) draw(0.0);
    }
    progress_bar(const progress_bar&) = delete;
    progress_bar& operator=(const progress_bar&) = delete;
    ~progress_bar() { close(); }

    /// Advances by `steps` and redraws (on a terminal) or prints a line at each plain-line mark.
    void update(std::size_t steps = 1) {
        if (m_closed) return;
        const std::size_t before = m_n;
        m_n += steps;
        const double elapsed = seconds_since_start();
        if (m_in_place) {
            draw(elapsed);
        } else if (m_options.plain_lines > 1 && m_total > 0 && m_n < m_total) {
            const std::size_t every = std::max<std::size_t>(1, m_total / m_options.plain_lines);
            if (before / every != m_n / every) *m_out << line(elapsed) << '\n';
        }
    }

    /// Sets (or replaces) a "key=value" shown after the rate.
    void set_postfix(std::string key, std::string value) {
        for (auto& kv : m_postfix)
            if (kv.first == key) { kv.second = std::move(value); return; }
        m_postfix.emplace_back(std::move(key), std::move(value));
    }
    /// Numeric postfix with `digits` decimals: set_postfix("Loss", 1.108, 2) shows "Loss=1.11".
    void set_postfix(std::string key, double value, int digits) {
        char buffer[64];
        std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
        set_postfix(std::move(key), std::string(buffer));
    }

    /// Final draw and newline; idempotent.
    void close() {
        if (m_closed) return;
        m_closed = true;
        const double elapsed = seconds_since_start();
        if (m_in_place) {
            draw(elapsed);
            *m_out << '\n';
        } else {
            *m_out << line(elapsed) << '\n';
        }
        m_out->flush();
    }

    [[nodiscard]] std::size_t count() const noexcept { return m_n; }
    [[nodiscard]] std::size_t total() const noexcept { return m_total; }
    [[nodiscard]] bool in_place() const noexcept { return m_in_place; }

private:
    [[nodiscard]] double seconds_since_start() const {
        return std::chrono::duration<double>(clock::now() - m_start).count();
    }
    [[nodiscard]] std::string line(double elapsed) const {
        return format_meter(m_description, m_n, m_total, elapsed, m_options.bar_width, m_postfix);
    }
    void draw(double elapsed) {
        std::string text = line(elapsed);
        // Pad over a longer previous line so no stale characters remain.
        const std::size_t length = text.size();
        if (length < m_last_length) text.append(m_last_length - length, ' ');
        m_last_length = length;
        *m_out << '\r' << text;
        m_out->flush();
    }

    std::ostream* m_out;
    std::string m_description;
    std::size_t m_total;
    progress_options m_options;
    bool m_in_place;
    clock::time_point m_start;
    std::size_t m_n = 0;
    std::size_t m_last_length = 0;
    bool m_closed = false;
    std::vector<std::pair<std::string, std::string>> m_postfix;
};

}  // namespace tessera::report
