#pragma once
// What a layer costs: FLOPs and bytes, and the passes an accelerator runs for it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::nn {

/// The shape of the work in one pass of a layer, in the terms a device's cost model needs
/// (emulator::pass_model turns it into IPU cycles): a contraction (convolution or matrix product),
/// an element-wise pass, or a reduction per channel.
enum class pass_kind : std::uint8_t {
    contraction,  ///< `rows` × `outputs` results, each a sum of `inputs` × `window` products (× `groups`)
    elementwise,  ///< reads and writes `operands` tensors of `elements` values (ReLU, add, scale, pooling)
    reduction,    ///< reduces `operands` tensors of `elements` values to `outputs` values (batch-norm statistics)
    /// `rows` lookups of `outputs` values each in a table of `inputs` entries (an embedding's forward);
    /// as a weight gradient, the backward's add of `rows` slices into that table (scatter-add)
    gather,
};

/// Which pass of training a pass belongs to (the recomputation of a stage repeats its forward ones).
enum class pass_phase : std::uint8_t { forward, backward };

/// One pass of a layer over a micro-batch. A contraction's first operand (`inputs`, the summed
/// dimension) and its results (`outputs`) are the channel counts the accelerator's matrix units
/// are built around; `rows` are the independent positions (batch × height × width).
/// @code
///   // a 3×3 convolution of 64 to 128 channels over 32 × 16 × 16 output positions
///   auto p = nn::pass::contraction(nn::pass_phase::forward, 32 * 16 * 16, 128, 64, 9);
///   p.macs();   // 75,497,472 multiply-accumulates
/// @endcode
struct pass {
    pass_kind kind = pass_kind::elementwise;
    pass_phase phase = pass_phase::forward;
    double rows = 0;      ///< contraction: independent result positions
    double outputs = 0;   ///< contraction: result channels; reduction: values it produces
    double inputs = 0;    ///< contraction: channels summed over
    double window = 1;    ///< contraction: kernel positions summed over per input channel
    double elements = 0;  ///< element-wise and reduction: values of each operand
    double operands = 1;  ///< element-wise and reduction: tensors of `elements` values read or written
    /// A backward pass that computes parameter gradients only (a layer's weight gradient): what a
    /// split backward runs as W (nn::SplitBackwardLayer), after the input gradient B.
    bool weight_gradient = false;
    /// A pass over tensors that keep their layout (the optimiser step on its weights, gradients and
    /// state): nothing is rearranged between layouts before or after it.
    bool in_place = false;
    /// contraction: 0 for a product against weights, which stay on the tiles the graph gave them;
    /// else the independent products of two activations it runs (attention's samples × heads), each
    /// `rows` × `outputs` from its own second operand of `inputs` × `outputs`, which the plan
    /// exchanges to the tiles as it does the first (poplin::matMulGrouped: a 1×1 convolution of
    /// `groups` convolution groups).
    double groups = 0;

    [[nodiscard]] static constexpr pass contraction(pass_phase ph, double rows, double outputs, double inputs,
                                                    double window = 1) noexcept {
        return {pass_kind::contraction, ph, rows, outputs, inputs, window, 0, 1, false, false, 0};
    }
    /// `lookups` slices of `width` values from a table of `entries` (its scatter-add: .of_weights()).
    [[nodiscard]] static constexpr pass gather(pass_phase ph, double lookups, double width, double entries) noexcept {
        return {pass_kind::gather, ph, lookups, width, entries, 1, 0, 1, false, false, 0};
    }
    /// `groups` products of two activations, each (rows × inputs) · (inputs × outputs).
    [[nodiscard]] static constexpr pass batched(pass_phase ph, double groups, double rows, double outputs,
                                                double inputs) noexcept {
        return {pass_kind::contraction, ph, rows, outputs, inputs, 1, 0, 1, false, false, groups};
    }
    [[nodiscard]] static constexpr pass elementwise(pass_phase ph, double elements, double operands) noexcept {
        return {pass_kind::elementwise, ph, 0, 0, 0, 1, elements, operands, false, false, 0};
    }
    [[nodiscard]] static constexpr pass reduction(pass_phase ph, double elements, double operands,
                                                  double outputs) noexcept {
        return {pass_kind::reduction, ph, 0, outputs, 0, 1, elements, operands, false, false, 0};
    }
    /// This pass marked as one over tensors that keep their layout (pass::in_place).
    [[nodiscard]] constexpr pass kept_in_place() const noexcept {
        pass p = *this;
        p.in_place = true;
        return p;
    }
    /// This pass marked as a weight-gradient pass.
    [[nodiscard]] constexpr pass of_weights() const noexcept {
        pass p = *this;
        p.weight_gradient = true;
        return p;
    }
    /// Multiply-accumulates of a contraction (0 for the other kinds).
    [[nodiscard]] constexpr double macs() const noexcept {
        return kind == pass_kind::contraction ? std::max(groups, 1.0) * rows * outputs * inputs * window : 0.0;
    }
    friend constexpr bool operator==(const pass&, const pass&) = default;
};

/// Work of one forward and one backward pass over a micro-batch: FLOPs, the bytes they move
/// (activations read and written plus parameters read, in their storage types), parameters, the
/// passes themselves for a device model (each layer's forward and backward passes; a cost model
/// sums them, so their order does not matter), and the activations the forward keeps for the
/// backward.
struct cost {
    double forward_flops = 0, backward_flops = 0, forward_bytes = 0, backward_bytes = 0;
    std::size_t parameters = 0;
    std::vector<pass> passes{};
    /// Bytes of activations the forward writes and keeps until the backward has used them (the
    /// layer's outputs, and what else its state holds, such as max pooling's argmax), what training
    /// stashes for the layer. Its inputs are the previous layer's outputs, counted there; its
    /// parameters are the weights'. Negative: not given (a user's layer may leave it), and
    /// forward_bytes, all the forward reads and writes, stands in as an upper bound.
    double kept_bytes = -1;
    /// The most bytes of activations an inference forward through the layer holds at once, its input
    /// excluded (the caller's) and its output included, each buffer freed when its last reader is
    /// done: for a chain of layers, the largest of each layer's input beside its own peak. Negative:
    /// not given, and stash_bytes() (all the layer keeps) stands in; a sum of costs (+=) does not
    /// know the order of its parts, so composite layers set it after summing.
    double peak_bytes = -1;

    /// kept_bytes, or forward_bytes where it is not given.
    [[nodiscard]] double stash_bytes() const noexcept { return kept_bytes >= 0 ? kept_bytes : forward_bytes; }
    /// peak_bytes, or stash_bytes() where it is not given.
    [[nodiscard]] double inference_peak_bytes() const noexcept { return peak_bytes >= 0 ? peak_bytes : stash_bytes(); }

    cost& operator+=(const cost& o) {
        kept_bytes = stash_bytes() + o.stash_bytes();
        peak_bytes = -1;
        forward_flops += o.forward_flops, backward_flops += o.backward_flops;
        forward_bytes += o.forward_bytes, backward_bytes += o.backward_bytes, parameters += o.parameters;
        passes.insert(passes.end(), o.passes.begin(), o.passes.end());
        return *this;
    }
    [[nodiscard]] double flops() const noexcept { return forward_flops + backward_flops; }
    [[nodiscard]] double bytes() const noexcept { return forward_bytes + backward_bytes; }
    /// This cost followed by layer cost `next`, whose input is this one's output of `output_bytes`:
    /// the sums, and the chain's inference peak (`next`'s peak beside its input, or this one's).
    [[nodiscard]] cost then(const cost& next, double output_bytes) const {
        cost c = *this;
        c += next;
        c.peak_bytes = std::max(inference_peak_bytes(), output_bytes + next.inference_peak_bytes());
        return c;
    }
    /// The passes of one phase, in order.
    [[nodiscard]] std::vector<pass> passes_of(pass_phase ph) const {
        std::vector<pass> out;
        for (const auto& p : passes)
            if (p.phase == ph) out.push_back(p);
        return out;
    }
};

}  // namespace tessera::nn
