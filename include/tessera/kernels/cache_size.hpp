#pragma once
// The CPU's cache sizes as the C library reports them, for kernels that block their loops to the
// caches of the machine they run on rather than to constants tuned on one machine.
#include <cstddef>

#include <unistd.h>

namespace tessera::kernels {

/// Bytes of the level-1 data cache of the core running the caller, as sysconf reports it (glibc asks
/// the CPU); 32 KiB where it reports nothing. Only blocking depends on it, never a result.
[[nodiscard]] inline std::size_t l1_data_bytes() noexcept {
#if defined(_SC_LEVEL1_DCACHE_SIZE)
    const long bytes = ::sysconf(_SC_LEVEL1_DCACHE_SIZE);
    if (bytes > 0) return static_cast<std::size_t>(bytes);
#endif
    return std::size_t{32} << 10;
}

}  // namespace tessera::kernels
