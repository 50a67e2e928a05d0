#pragma once
// The executor's cross-process hook over MPI: each stage's gradients summed over the ranks in rank order.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/dist/communicator.hpp"
#include "tessera/dist/error.hpp"
#include "tessera/exec/cross_process.hpp"

namespace tessera::dist {

/// The reduction a session with instances > 1 needs (session_options::across): after the
/// in-process all-reduce of a stage, that process's sum is replaced by the sum over all ranks,
/// added in rank order (communicator::sum_in_rank_order), so every rank applies the same update
/// and a run's weights do not depend on timing. Each stage gets its own duplicate of `comm`:
/// stages on different IPU threads reduce at the same time without their messages mixing.
/// With the optimiser state sharded, each stage's communicator also gathers the updated weights
/// (communicator::all_gather_parts) and one more carries the overflow votes (sums in rank order).
/// Collective: every rank calls it with the same `stages`. The communicators live as long as
/// the returned value (and the sessions holding copies of it), within the dist::environment.
/// @code
///   exec::session_options settings{.across = dist::gradient_reduction(world, batching.stages)};
/// @endcode
[[nodiscard]] inline exec::cross_process_reduction gradient_reduction(const communicator& comm, std::size_t stages) {
    auto comms = std::make_shared<std::vector<communicator>>();
    comms->reserve(stages + 1);
    for (std::size_t s = 0; s <= stages; ++s) comms->push_back(comm.duplicate());  // the last: votes
    exec::cross_process_reduction r;
    r.processes = comm.size();
    r.rank = comm.rank();
    r.reduce = [comms](std::size_t stage, std::span<float> gradients) {
        if (stage + 1 >= comms->size())
            throw dist_error("tessera::dist::gradient_reduction: made for " + std::to_string(comms->size() - 1) +
                             " stages, asked to reduce stage " + std::to_string(stage) +
                             " (give the session's strategy's stage count)");
        (*comms)[stage].sum_in_rank_order(gradients);
    };
    r.gather = [comms](std::size_t stage, std::span<float> values, std::span<const std::size_t> bounds) {
        if (stage + 1 >= comms->size())
            throw dist_error("tessera::dist::gradient_reduction: made for " + std::to_string(comms->size() - 1) +
                             " stages, asked to gather stage " + std::to_string(stage));
        (*comms)[stage].all_gather_parts(values, bounds);
    };
    r.vote = [comms](std::span<float> flags) { comms->back().sum_in_rank_order(flags); };
    return r;
}

}  // namespace tessera::dist
