#pragma once
// What a tile's code takes: the figures of the code-memory estimate (emulator/code_memory.hpp).

namespace tessera::emulator {

/// The figures behind the code a tile holds, always live beside its data: vertex code (the
/// codelets its passes run), exchange code (the instructions that send and receive each message of
/// an exchange, compiled per tile), and control code with vertex state (per compute set: the calls,
/// syncs and each vertex's fields and work lists). Sources: [poplibs] github.com/graphcore/poplibs;
/// [count] instruction lines of its assembly codelets — lines that are not blank, comments, labels
/// or directives, before macro expansion — in the files named (C++ codelets are not counted, so
/// vertex code is a lower bound). What has no public source says "a guess".
struct code_spec {
    /// Bytes per instruction: 4, as poplibs' own planner counts exchange code
    /// (lib/popops/DynamicSlice.cpp: exchangeCodeBytes = 4 × exchange instructions) [poplibs].
    double instruction_bytes = 4;
    /// Exchange instructions per message a tile receives: one to receive it here and one to send it
    /// on its source tile, which sends about as much as it receives (a guess: Poplar's exchange
    /// compiler is not public).
    double exchange_instructions_per_message = 2;
    /// Control code and vertex state per compute set a pass runs on a tile: 8 instructions to sync,
    /// start the exchange and call the vertices, and 64 bytes of vertex fields and work lists (a guess).
    double control_bytes_per_superstep = 8 * 4 + 64;
    /// Vertex code of a contraction on the AMP: the nx1 and 1x1 supervisors and their 16-bit worker
    /// loops, the zeroing of outputs and the reduction of partials (conv_partial_nx1_supervisor.S 601,
    /// conv_partial_nx1_half_float_8_and_half_half_16.S 245, conv_partial_1x1_supervisor.S 238,
    /// conv_partial_1x1_half_float_8_and_half_half_h16.S 298, conv_partial_nx1_zero_output.S 27,
    /// ReduceAdd.S 299 in lib/poplin/codelets/asm) [count].
    double contraction_instructions = 1708;
    /// Vertex code of a reduction (lib/popops/codelets/asm: ReductionSpecial01Acc.S 659,
    /// ReductionSpecial01NoAcc.S 285, ReductionSpecial2.S 80, ReductionSpecial3.S 371,
    /// ContinuousReductionAcc.S 171, ContinuousReductionNoAcc.S 147) [count].
    double reduction_instructions = 1713;
    /// Vertex code of element-wise passes: binary and unary operations, scaled adds, per-channel
    /// broadcasts, non-linearity gradients, pooling, variance conversion (lib/popops/codelets/asm:
    /// binaryOps1D.S 281, binaryOps2D.S 305, unaryOps1D.S 53, unaryOps2D.S 46, ScaledAddSupervisor_fp.S
    /// 559, ScaledAdd2D_half.S 147, vectorInnerAdd_half.S 285, vectorInnerMul_half.S 229,
    /// vectorOuterOps1D.S 144, VarianceConversion1D.S 105; lib/popnn/codelets/asm:
    /// NonLinearityGrad1D.S 125, Pooling.S 310) [count].
    double elementwise_instructions = 2589;
    /// Vertex code of an embedding's lookups and scatter-adds (lib/popops/codelets/asm: MultiSlice.S
    /// 159, MultiUpdateOp.S 367, MultiSliceUpdateCommon.h.S 11) [count].
    double gather_instructions = 537;
};

}  // namespace tessera::emulator
