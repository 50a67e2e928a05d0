#pragma once
// MPI for the lifetime of a scope: initialised with the thread level the emulator needs, finalised
// (or, when an exception leaves the scope, aborted, so no rank waits for one that has failed).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "tessera/dist/communicator.hpp"
#include "tessera/dist/error.hpp"

namespace tessera::dist {

/// Makes MPI ready (MPI_Init_thread with MPI_THREAD_MULTIPLE: the emulator's IPU threads reduce
/// each stage's gradients on their own communicator at the same time) and finalises it at the end
/// of its scope. One per process, created first and destroyed last. If the scope is left by an
/// exception, the destructor calls MPI_Abort instead of MPI_Finalize: the other ranks may be
/// waiting in a collective this rank will never join, and MPI_Abort ends them (mpirun reports it)
/// instead of leaving them to hang. abort() does the same after a caller has reported an error.
/// @code
///   int main(int argc, char** argv) {
///       tessera::dist::environment env(&argc, &argv);
///       auto world = env.world();   // rank(), size(), sums, broadcasts
///   }
/// @endcode
class environment {
public:
    environment(int* argc = nullptr, char*** argv = nullptr) : m_exceptions(std::uncaught_exceptions()) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) throw dist_error("tessera::dist::environment: MPI is already initialised (one environment per process)");
        int provided = 0;
        detail::check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
        if (provided < MPI_THREAD_MULTIPLE) {
            MPI_Finalize();
            throw dist_error("tessera::dist::environment: this MPI provides thread level " + std::to_string(provided) +
                             ", the emulator needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
                             "): its IPU threads reduce gradients concurrently");
        }
    }
    environment(const environment&) = delete;
    environment& operator=(const environment&) = delete;
    ~environment() {
        if (std::uncaught_exceptions() > m_exceptions) abort(1);
        MPI_Finalize();
    }

    [[nodiscard]] communicator world() const { return communicator::world(); }

    /// Ends every rank of the run with `code` (after the caller has said why): never returns.
    [[noreturn]] void abort(int code) const noexcept {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
        std::_Exit(code);  // MPI_Abort does not return; should it, this process still ends
    }

private:
    int m_exceptions;
};

}  // namespace tessera::dist
