// tessera-train's configurations at precision mixed (one file per precision: they compile in parallel).
#include "train_runner.hpp"

namespace tessera::programs {
int train_mixed(const train_request& r) { return train_with<tessera::config::mixed>(r); }
}  // namespace tessera::programs
