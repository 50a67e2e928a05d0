#pragma once
// TESSERA_INLINE_LAMBDA, written after a lambda's parameters: GCC's [[gnu::always_inline]] there, as
// the kernels were measured with; nothing under Clang, which ignores the attribute in that place and
// warns. (GCC's __attribute__((always_inline)) in its place, which Clang accepts, changed GCC's
// inlining of the GEMM and Winograd kernels: 19 KB more code in tessera_step_worker and its 16.16
// step 0.97x, 8 pairs, quartiles 0.96-1.02, on a 2-vCPU AMD EPYC, Zen 4; not kept.)
#if defined(__clang__)
#define TESSERA_INLINE_LAMBDA
#else
#define TESSERA_INLINE_LAMBDA [[gnu::always_inline]]
#endif
