#pragma once
// The error a training step raises when its loss is not finite.
#include <stdexcept>

namespace tessera::exec {

/// A loss that is not finite (NaN or infinite) where nothing would skip its step.
class non_finite_loss : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace tessera::exec
