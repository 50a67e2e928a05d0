#pragma once
// tessera-train's host processes: the MPI ranks of a run with --instances P (train_processes.cpp).
#include <memory>
#include <string>

#include "train_request.hpp"

namespace tessera::programs {

/// MPI for the lifetime of tessera-train's run: finalised when destroyed, or abort() ends every rank.
class processes {
public:
    virtual ~processes() = default;
    /// Ends every rank with `code` (after this one has printed why): a rank that failed must not
    /// leave the others waiting in a reduction it will never join.
    [[noreturn]] virtual void abort(int code) = 0;
};

/// True when mpirun started this process (its environment says so).
[[nodiscard]] bool launched_by_mpirun() noexcept;

/// Starts MPI and fills r.processes (a usage_error when this tessera-train was built without MPI).
[[nodiscard]] std::unique_ptr<processes> start_processes(train_request& r);

/// Checks that mpirun started --instances ranks and that every rank resolved the same configuration
/// (`line`, the Namespace line): a usage_error naming what differs. Separate from start_processes,
/// so that the caller reports the error before MPI ends the run.
void check_processes(const train_request& r, const std::string& line);

}  // namespace tessera::programs
