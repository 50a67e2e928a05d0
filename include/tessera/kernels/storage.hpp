#pragma once
// Load/store paths between storage types (float, double, half, bfloat16) and the computation type.
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "tessera/tensor/bfloat16.hpp"
#include "tessera/tensor/convert.hpp"
#include "tessera/tensor/half.hpp"
#include "tessera/tensor/stochastic_rounding.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/thread_pool.hpp"

namespace tessera::kernels {

/// A 64-byte aligned buffer: packed panels, im2col columns, converted rows.
template <class C>
using aligned_vector = std::vector<C, xsimd::aligned_allocator<C, 64>>;

/// Element types a kernel may store tensors in.
template <class T>
concept Storage = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, tensor::half> ||
                  std::is_same_v<T, tensor::bfloat16>;

/// Element types a kernel may compute (accumulate) in.
template <class C>
concept Compute = std::is_same_v<C, float> || std::is_same_v<C, double>;

/// Copies n elements converting between storage types (F16C for float <-> half).
template <Storage From, Storage To>
void convert_n(const From* from, To* to, std::size_t n) {
    if constexpr (std::is_same_v<From, To>) {
        std::copy(from, from + n, to);
    } else if constexpr (std::is_same_v<From, float> &&
                         (std::is_same_v<To, tensor::half> || std::is_same_v<To, tensor::bfloat16>)) {
        tensor::convert(std::span<const float>(from, n), std::span<To>(to, n));
    } else if constexpr (std::is_same_v<To, float> &&
                         (std::is_same_v<From, tensor::half> || std::is_same_v<From, tensor::bfloat16>)) {
        tensor::convert(std::span<const From>(from, n), std::span<float>(to, n));
    } else if constexpr (std::is_arithmetic_v<From> && std::is_arithmetic_v<To>) {
        for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<To>(from[i]);
    } else if constexpr (std::is_arithmetic_v<To>) {
        for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<To>(static_cast<float>(from[i]));
    } else {
        for (std::size_t i = 0; i < n; ++i) to[i] = To(static_cast<float>(from[i]));
    }
}

/// Elements per thread below which a conversion between storage and computation types stays on one thread.
inline constexpr std::size_t conversion_grain = std::size_t{1} << 16;

/// The n elements at p in the computation type C: p itself when T is C, else a converted copy in
/// scratch (split between threads for large tensors).
template <Compute C, Storage T>
[[nodiscard]] const C* load_compute(const T* p, std::size_t n, aligned_vector<C>& scratch, parallelism par = {}) {
    if constexpr (std::is_same_v<C, T>) {
        return p;
    } else {
        if (scratch.size() < n) scratch.resize(n);
        C* out = scratch.data();
        detail::parallel_ranges(par, n, conversion_grain, [&](std::size_t b, std::size_t e, std::size_t) {
            convert_n(p + b, out + b, e - b);
        });
        return out;
    }
}

/// Whether values computed in C and stored as T with `r` round stochastically (16-bit halves only;
/// a kernel then computes into a C buffer rather than writing halves from its registers).
template <Compute C, Storage T>
[[nodiscard]] constexpr bool rounds_stochastically(const tensor::rounding& r) noexcept {
    return std::is_same_v<T, tensor::half> && std::is_same_v<C, float> && r.stochastic;
}

namespace detail {

/// to[i] = from[i] + addend[i] (addend not null), kept only where mask[i] > 0 (mask not null; else
/// 0), for n elements computed in C, converted to T (to nearest, or stochastically with element
/// index0 + i drawing the bits of element index0 + i): what store_compute's commit does, from any C
/// buffer. When T is C, from is to and gets the addend and the mask in place; when T is another type
/// from is left in any state. The mask zeroes in C, before the conversion, which rounds 0 to 0: the
/// bits of a ReLU's backward after the commit.
template <Compute C, Storage T>
void commit_into(C* from, T* to, std::size_t index0, std::size_t n, parallelism par, const tensor::rounding& rounding,
                 const T* addend, const T* mask = nullptr) {
    const bool stochastic = rounds_stochastically<C, T>(rounding);
    if (addend != nullptr || mask != nullptr) {
        // The add, the mask and the conversion to nearest in one pass over each range; before a
        // stochastic conversion, the add and the mask in place in C.
        parallel_ranges(par, n, conversion_grain, [&](std::size_t b, std::size_t e, std::size_t) {
            const T* x = addend == nullptr ? nullptr : addend + b;
            const T* m = mask == nullptr ? nullptr : mask + b;
            if (stochastic)
                simd::add_mask_store<C>(from + b, x, m, from + b, e - b);
            else
                simd::add_mask_store<C>(from + b, x, m, to + b, e - b);
        });
        if (!stochastic) return;
    }
    if constexpr (!std::is_same_v<C, T>) {
        if (stochastic) {
            if constexpr (std::is_same_v<T, tensor::half> && std::is_same_v<C, float>)
                parallel_ranges(par, n, conversion_grain, [&](std::size_t b, std::size_t e, std::size_t) {
                    tensor::convert_stochastic(from + b, to + b, e - b, rounding, index0 + b);
                });
            return;
        }
        parallel_ranges(par, n, conversion_grain, [&](std::size_t b, std::size_t e, std::size_t) {
            convert_n(from + b, to + b, e - b);
        });
    }
}

}  // namespace detail

/// Where store_compute keeps what a kernel computes in C for a T destination (T not C): one buffer
/// of the whole destination (target()), or, `parts`, buffers of the kernel's own that it commits
/// part by part (commit_part only: there is no whole buffer; a chunk's part stays in cache, where a
/// whole buffer is written cold).
enum class staging { whole, parts };

/// A destination for n elements of type T computed in C: writes go to `target()`, `commit()` converts
/// them into dst when T is not C (a no-op otherwise), split between threads for large tensors; to a
/// half, stochastically when `rounding` says so (element i of dst draws the bits of element i). With
/// an addend (n elements of T), commit adds it to what was computed first, in C: dst = computed +
/// addend, rounded once (a residual block's shortcut gradient added to a convolution's input
/// gradient part by part, while each part is in cache); with a mask (mask_by), masked by a ReLU's
/// output after the add.
template <Compute C, Storage T>
class store_compute {
public:
    store_compute(T* dst, std::size_t n, aligned_vector<C>& scratch, parallelism par = {},
                  const tensor::rounding& rounding = {}, const T* addend = nullptr, staging where = staging::whole)
        : m_dst(dst), m_n(n), m_scratch(scratch), m_par(par), m_rounding(rounding), m_addend(addend) {
        if constexpr (!std::is_same_v<C, T>)
            if (where == staging::whole && m_scratch.size() < n) m_scratch.resize(n);
    }
    [[nodiscard]] C* target() noexcept {
        if constexpr (std::is_same_v<C, T>)
            return m_dst;
        else
            return m_scratch.data();
    }
    /// Converts every element into dst.
    void commit() { commit(0, m_n, m_par); }
    /// Converts elements [begin, end) into dst on par's threads (the calling thread by default), each
    /// as commit() converts it: a kernel commits a part (a chunk's whole images) as soon as it is
    /// final, while it is in cache. The parts must cover the output; commit() is then not called.
    void commit(std::size_t begin, std::size_t end, parallelism par = {}) {
        detail::commit_into(target() + begin, m_dst + begin, begin, end - begin, par, m_rounding,
                            m_addend == nullptr ? nullptr : m_addend + begin, m_mask == nullptr ? nullptr : m_mask + begin);
    }
    /// Commits elements [begin, end) from `part` (their values in C, left in any state after):
    /// a buffer of the kernel's own (staging::parts), or target() + begin, which makes it
    /// commit(begin, end).
    void commit_part(C* part, std::size_t begin, std::size_t end, parallelism par = {}) {
        detail::commit_into(part, m_dst + begin, begin, end - begin, par, m_rounding,
                            m_addend == nullptr ? nullptr : m_addend + begin, m_mask == nullptr ? nullptr : m_mask + begin);
    }
    /// Commits keep an element (after the addend) only where mask (n elements, a ReLU's output) is
    /// positive, else 0: the gradient through that ReLU, with no pass of its own. Null: every element.
    void mask_by(const T* mask) noexcept { m_mask = mask; }

private:
    T* m_dst;
    std::size_t m_n;
    aligned_vector<C>& m_scratch;
    parallelism m_par;
    tensor::rounding m_rounding;
    const T* m_addend;
    const T* m_mask = nullptr;
};

/// Packing buffers a caller may keep between GEMM calls (single-threaded calls only), so that
/// repeated calls do not allocate and fault in fresh pages every time.
struct gemm_buffers {
    aligned_vector<float> a32, b32;
    aligned_vector<double> a64, b64;
    template <class C>
    [[nodiscard]] std::pair<C*, C*> get(std::size_t a, std::size_t b) {
        auto& va = pick_a<C>();
        auto& vb = pick_b<C>();
        if (va.size() < a) va.resize(a);
        if (vb.size() < b) vb.resize(b);
        return {va.data(), vb.data()};
    }

private:
    template <class C>
    aligned_vector<C>& pick_a() {
        if constexpr (std::is_same_v<C, float>) return a32; else return a64;
    }
    template <class C>
    aligned_vector<C>& pick_b() {
        if constexpr (std::is_same_v<C, float>) return b32; else return b64;
    }
};

/// Reusable scratch memory of one kernel caller: a layer's own, or the scratch its thread of
/// execution shares (kernels::scratch). It holds nothing from one kernel call to the next.
template <Compute C>
struct workspace {
    aligned_vector<C> col, a, b, c, partial;
    aligned_vector<C> mask;  ///< a ReLU's output converted for a fused batch-norm backward
    std::vector<aligned_vector<C>> cols;  ///< im2col columns (Winograd: transformed inputs), one buffer per thread
    std::vector<aligned_vector<C>> tiles; ///< Winograd: transformed outputs or output gradients, one buffer per thread
    aligned_vector<C> filters;            ///< Winograd: transformed weights or their gradient
    std::vector<aligned_vector<C>> parts; ///< a chunk's input gradient in C, one per thread, where dx is stored in another type
    std::vector<gemm_buffers> packs;      ///< GEMM packing buffers, one per thread
};

/// A workspace per computation type, for the layers that one thread of execution runs one after
/// another (an IPU's stages) to share: one set of buffers, sized for the largest layer, that stays in
/// cache from layer to layer, where a workspace per layer (about 30 MB for a ResNet-20 step at batch
/// 32) comes back from memory at every call. Never used by two threads at once.
class scratch {
public:
    template <Compute C>
    [[nodiscard]] workspace<C>& get() noexcept {
        if constexpr (std::is_same_v<C, float>)
            return m_float;
        else
            return m_double;
    }

private:
    workspace<float> m_float;
    workspace<double> m_double;
};

}  // namespace tessera::kernels
