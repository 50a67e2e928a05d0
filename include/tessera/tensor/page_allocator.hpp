#pragma once
// The allocator of dense tensors: 64-byte aligned, and large buffers on the kernel's transparent huge
// pages where it offers them. A Winograd tile reads 6 rows of its image at once, a row apart in
// memory (16 channels on 28 × 28: 1,792 bytes), so a pass over a 1.6 MB activation crosses its 4 KiB
// pages back and forth, and a training step's tensors (65 MiB for ResNet-20 at batch 32) span more
// pages than a CPU's second-level TLB holds. On a 2-vCPU AMD EPYC (Zen 4), huge pages made the step
// 1.04x as fast on one thread and 1.09x on two (CHANGELOG.md, "large tensors on huge pages").
// Debian's kernel as installed makes them on request only (transparent_hugepage "[madvise]"): a
// buffer of at least huge_page_threshold bytes is rounded up to whole 2 MiB pages, aligned to them
// and asked for them (madvise MADV_HUGEPAGE, a hint: where it is refused, the buffer is an ordinary
// one). The values and the results are the same either way; only where the buffers lie changes.
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tessera::tensor {

/// Bytes of a transparent huge page (x86-64 and AArch64 Linux with 4 KiB base pages).
inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
/// Buffers from this size on are rounded up to whole huge pages: at 1 MiB, a buffer's rounding costs
/// at most as much memory as the buffer itself (ResNet-20's 16-channel 28 × 28 activations at batch
/// 32, 1.53 MiB, take one page each).
inline constexpr std::size_t huge_page_threshold = std::size_t{1} << 20;
/// The alignment of every buffer: a cache line, the widest SIMD vector.
inline constexpr std::size_t buffer_alignment = 64;

/// The bytes a buffer of `bytes` takes: whole huge pages from huge_page_threshold on, else whole
/// cache lines (std::aligned_alloc takes a multiple of the alignment).
[[nodiscard]] constexpr std::size_t buffer_bytes(std::size_t bytes) noexcept {
    const std::size_t unit = bytes >= huge_page_threshold ? huge_page_bytes : buffer_alignment;
    return (bytes + unit - 1) / unit * unit;
}

/// A standard allocator (std::allocator_traits) whose buffers lie as described above; stateless, so
/// all instances compare equal.
template <class T>
class page_allocator {
public:
    using value_type = T;

    page_allocator() noexcept = default;
    template <class U>
    page_allocator(const page_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor): rebinding

    [[nodiscard]] T* allocate(std::size_t n) {
        if (n > (std::numeric_limits<std::size_t>::max() - huge_page_bytes) / sizeof(T)) throw std::bad_array_new_length();
        const std::size_t bytes = buffer_bytes(n == 0 ? 1 : n * sizeof(T));  // a buffer of its own even when empty
        const bool huge = bytes >= huge_page_threshold;
        void* p = std::aligned_alloc(huge ? huge_page_bytes : buffer_alignment, bytes);
        if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (huge) (void)::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: refused, the pages stay small
#endif
        return static_cast<T*>(p);
    }
    void deallocate(T* p, std::size_t) noexcept { std::free(p); }
};
template <class T, class U>
[[nodiscard]] constexpr bool operator==(const page_allocator<T>&, const page_allocator<U>&) noexcept {
    return true;
}

}  // namespace tessera::tensor
