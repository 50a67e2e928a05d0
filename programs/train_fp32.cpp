// tessera-train's configurations at precision fp32 (one file per precision: they compile in parallel).
#include "train_runner.hpp"

namespace tessera::programs {
int train_fp32(const train_request& r) { return train_with<tessera::config::fp32>(r); }
}  // namespace tessera::programs
