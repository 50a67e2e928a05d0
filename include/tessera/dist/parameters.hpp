#pragma once
// Every rank starts from rank 0's weights.
#include <cstddef>
#include <span>
#include <string_view>

#include "tessera/dist/communicator.hpp"
#include "tessera/optim/parameters.hpp"

namespace tessera::dist {

/// Overwrites every parameter (and buffer, such as batch norm's running statistics) of `model`
/// with rank 0's: a model initialised from a rank's own generator starts equal on all ranks.
/// Collective: every rank calls it on a model of the same structure.
template <optim::ParameterSet S>
void broadcast_parameters(const communicator& comm, S& model) {
    const auto send = [&](std::string_view, auto values, auto&&...) { comm.broadcast(std::as_writable_bytes(values)); };
    model.visit_parameters(send);
    if constexpr (requires { model.visit_buffers(send); }) model.visit_buffers(send);
}

}  // namespace tessera::dist
