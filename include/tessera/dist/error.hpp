#pragma once
// The error of a multi-process run: an MPI call that failed, ranks that disagree, a bad rank count.
#include <stdexcept>

namespace tessera::dist {

/// Thrown by tessera::dist for what only a multi-process run can get wrong: MPI failing or missing
/// a thread level, ranks started with different configurations, more ranks than instances.
struct dist_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace tessera::dist
