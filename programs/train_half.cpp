// tessera-train's configurations at precision half (one file per precision: they compile in parallel).
#include "train_runner.hpp"

namespace tessera::programs {
int train_half(const train_request& r) { return train_with<tessera::config::half>(r); }
}  // namespace tessera::programs
