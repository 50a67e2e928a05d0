#pragma once
// What one executor call returns, and how it selects its outputs (PopTorch's output modes).
#include <cstddef>
#include <vector>

#include "tessera/config/output_mode.hpp"
#include "tessera/emulator/host_clock.hpp"
#include "tessera/emulator/modelled_clock.hpp"

namespace tessera::exec {

/// How one call selects its outputs (config::final, all, sum, every_n<N> at run time).
struct output_selection {
    config::output_kind kind = config::output_kind::final;
    std::size_t period = 0;  ///< every_n only

    template <config::OutputMode O>
    [[nodiscard]] static constexpr output_selection of() noexcept {
        return {O::kind, O::period};
    }
    /// Whether the device sends micro-batch k's output to the host: the selected ones; `sum` adds
    /// them on the device and sends the total once, with the call's last micro-batch.
    [[nodiscard]] constexpr bool sends(std::size_t k, std::size_t count) const noexcept {
        return kind == config::output_kind::sum ? k + 1 == count : selects(k, count);
    }
    /// Whether micro-batch k (0-based over the call's D × M micro-batches of one replica) is returned.
    [[nodiscard]] constexpr bool selects(std::size_t k, std::size_t count) const noexcept {
        switch (kind) {
            case config::output_kind::final: return k + 1 == count;
            case config::output_kind::all: return true;
            case config::output_kind::sum: return true;
            case config::output_kind::every_n: return period > 0 && (k + 1) % period == 0;
        }
        return false;
    }
};

/// Top-1 hits over a micro-batch's real samples (padding counts in neither number).
struct top1_score {
    std::size_t correct = 0, samples = 0;
    [[nodiscard]] double accuracy() const noexcept {
        return samples == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(samples);
    }
    top1_score& operator+=(const top1_score& other) noexcept {
        correct += other.correct;
        samples += other.samples;
        return *this;
    }
    friend bool operator==(const top1_score&, const top1_score&) = default;
};

/// What one call returns.
template <class Tensor>
struct run_result {
    std::vector<std::vector<float>> losses;         ///< per replica, by the output mode (training); sum: one value
    std::vector<std::vector<top1_score>> scores;         ///< beside losses, for models that score (ScoredModel); sum: the total
    std::vector<std::vector<Tensor>> outputs;       ///< per replica, by the output mode (inference)
    std::vector<std::vector<std::size_t>> selected; ///< per replica: which micro-batches (d × M + m) were returned
    double modelled_seconds = 0;                    ///< the modelled clock: latest IPU (this call's device time)
    /// Sessions: this call on the modelled clock with its host (session_options::host and loading):
    /// when its batch was ready, when the IPUs started and finished it, and what they waited for the
    /// host. host.end of an epoch's last call minus that of the previous epoch's is the modelled epoch.
    emulator::call_timing host{};
    double wall_seconds = 0;                        ///< the real clock
    std::vector<emulator::modelled_clock> clocks;   ///< every IPU's modelled clock (replica-major)
    /// When the call started on the steady clock (seconds since its epoch), and, when the executor
    /// measures them (measure_wall_spans), every instruction's wall-clock span on each IPU's thread,
    /// replica-major as `clocks`; empty otherwise.
    double wall_start = 0;
    std::vector<std::vector<emulator::instruction_span>> wall_spans;
};

}  // namespace tessera::exec
