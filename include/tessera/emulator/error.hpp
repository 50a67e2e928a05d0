#pragma once
// The emulator's exceptions: device memory exhausted, a closed channel, an aborted collective.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tessera::emulator {

/// "1.50 MiB", "900.00 MiB", "512 B".
[[nodiscard]] inline std::string format_bytes(double bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) { bytes /= 1024.0; ++u; }
    char buffer[32];
    if (u == 0)
        std::snprintf(buffer, sizeof buffer, "%.0f B", bytes);
    else
        std::snprintf(buffer, sizeof buffer, "%.2f %s", bytes, units[u]);
    return buffer;
}

/// An allocation, or a planned one, that does not fit an IPU's memory budget.
/// what(): "IPU 1 is out of device memory: 'stage 1 activations' needs 2.00 MiB, 7.50 MiB of the
/// 8.00 MiB budget are in use; largest items: stage 1 weights (6.00 MiB), ..."
class out_of_device_memory : public std::runtime_error {
public:
    struct item {
        std::string name;
        std::size_t bytes;
    };

    out_of_device_memory(std::size_t ipu, std::size_t budget, std::size_t in_use, item request,
                         std::vector<item> largest)
        : std::runtime_error(message(ipu, budget, in_use, request, largest)), m_ipu(ipu), m_budget(budget),
          m_in_use(in_use), m_request(std::move(request)), m_largest(std::move(largest)) {}

    [[nodiscard]] std::size_t ipu() const noexcept { return m_ipu; }
    [[nodiscard]] std::size_t budget() const noexcept { return m_budget; }
    [[nodiscard]] std::size_t in_use() const noexcept { return m_in_use; }
    [[nodiscard]] const item& request() const noexcept { return m_request; }
    /// The largest items (the request included), largest first.
    [[nodiscard]] const std::vector<item>& largest() const noexcept { return m_largest; }

private:
    static std::string message(std::size_t ipu, std::size_t budget, std::size_t in_use, const item& request,
                               const std::vector<item>& largest) {
        std::string s = "IPU " + std::to_string(ipu) + " is out of device memory: '" + request.name + "' needs " +
                        format_bytes(static_cast<double>(request.bytes)) + ", " +
                        format_bytes(static_cast<double>(in_use)) + " of the " +
                        format_bytes(static_cast<double>(budget)) + " budget are in use; largest items: ";
        for (std::size_t i = 0; i < largest.size(); ++i) {
            if (i > 0) s += ", ";
            s += largest[i].name + " (" + format_bytes(static_cast<double>(largest[i].bytes)) + ")";
        }
        return s;
    }

    std::size_t m_ipu, m_budget, m_in_use;
    item m_request;
    std::vector<item> m_largest;
};

/// send() on a closed channel (the other side has shut down or a worker failed).
class channel_closed : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A collective (all-reduce) was aborted because a participant failed.
class collective_aborted : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace tessera::emulator
