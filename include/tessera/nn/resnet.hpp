#pragma once
// resnet<Block, Stem, Layers...>: the ResNet family, with its blocks exposed for cutting into stages.
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/detail/function_ref.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/pooling.hpp"
#include "tessera/nn/residual.hpp"

namespace tessera::nn {

/// A residual block type: a Layer built from (in channels, width, stride) whose output has
/// width × expansion channels. Its whole backward reads its output gradient only while it runs
/// (resnet then hands that buffer to a block whose backward runs later: gradient_recycler).
template <class B>
concept Block = Layer<B> && std::constructible_from<B, std::size_t, std::size_t, std::size_t> &&
                requires { { B::expansion } -> std::convertible_to<std::size_t>; };

/// Whether a block runs chained with the blocks around it (residual::backward_chained): its ReLU's
/// backward folded into the next block's first convolution.
template <class B>
concept ChainedBlock = Block<B> && requires { { B::chains } -> std::convertible_to<bool>; } && B::chains;

/// A stem: a Layer built from the number of input channels; `width` is the first stage's width.
template <class S>
concept Stem = Layer<S> && std::constructible_from<S, std::size_t> &&
               requires { { S::width } -> std::convertible_to<std::size_t>; };

/// ImageNet stem: 7×7/2 convolution to 64 channels, batch norm, ReLU, 3×3/2 max pooling.
template <Numeric P>
class imagenet_stem : public sequential<conv2d<P>, batch_norm_relu<P>, max_pool<P>> {
    using base = sequential<conv2d<P>, batch_norm_relu<P>, max_pool<P>>;

public:
    static constexpr std::size_t width = 64;
    explicit imagenet_stem(std::size_t in_channels) : imagenet_stem(in_channels, true) {}
    /// The weights left zero until initialize(rng) (see defer_initialization_t).
    imagenet_stem(std::size_t in_channels, defer_initialization_t) : imagenet_stem(in_channels, false) {}

private:
    imagenet_stem(std::size_t in_channels, bool draw)
        : base(detail::make_conv2d<P>(in_channels, width, {7, 7, 2, 3}, draw), batch_norm_relu<P>(width),
               max_pool<P>({3, 3, 2, 1})) {
        this->named({"conv1", "bn1", "maxpool"});  // bn1 and its ReLU in one layer
    }
};

/// CIFAR stem (He et al. 2016, §4.2): 3×3 convolution to 16 channels, batch norm, ReLU.
template <Numeric P>
class cifar_stem : public sequential<conv2d<P>, batch_norm_relu<P>> {
    using base = sequential<conv2d<P>, batch_norm_relu<P>>;

public:
    static constexpr std::size_t width = 16;
    explicit cifar_stem(std::size_t in_channels) : cifar_stem(in_channels, true) {}
    /// The weights left zero until initialize(rng) (see defer_initialization_t).
    cifar_stem(std::size_t in_channels, defer_initialization_t) : cifar_stem(in_channels, false) {}

private:
    cifar_stem(std::size_t in_channels, bool draw)
        : base(detail::make_conv2d<P>(in_channels, width, {3, 3, 1, 1}, draw), batch_norm_relu<P>(width)) {
        this->named({"conv1", "bn1"});  // bn1 and its ReLU in one layer
    }
};

/// Global average pooling and the classifier.
template <Numeric P>
class classifier_head : public sequential<global_avg_pool<P>, linear<P>> {
    using base = sequential<global_avg_pool<P>, linear<P>>;

public:
    classifier_head(std::size_t features, std::size_t classes) : base(global_avg_pool<P>(), linear<P>(features, classes)) {
        this->named({"avgpool", "fc"});
    }
    /// The weights left zero until initialize(rng) (see defer_initialization_t).
    classifier_head(std::size_t features, std::size_t classes, defer_initialization_t)
        : base(global_avg_pool<P>(), linear<P>(features, classes, defer_initialization)) {
        this->named({"avgpool", "fc"});
    }
};

/// A ResNet whose block counts are chosen at run time: stem, then one stage per entry of `blocks`
/// (blocks[i] blocks of width Stem::width·2^i, the first block of every stage but the first with
/// stride 2), then pooling and a linear classifier. resnet<Block, Stem, Layers...> fixes the counts
/// in the type (resnet20, resnet50, ...); this form serves programs that choose the depth at run
/// time with one type per block kind (tessera-train). The model is a list of units — "stem",
/// "layer1[0]", ..., "head" — so a strategy can cut it into stages: forward_units / backward_units
/// run any contiguous range, and unit_index("layer3[8]") finds one.
/// @code
///   nn::resnet_family<nn::bottleneck<cfg::half>, nn::imagenet_stem<cfg::half>> net(3, 10, {3, 4, 23, 3});  // ResNet-101
/// @endcode
template <Block B, Stem S>
class resnet_family {
    static_assert(std::is_same_v<typename B::precision, typename S::precision>,
                  "tessera::nn::resnet: Block and Stem must use the same precision policy");

public:
    using precision = typename B::precision;
    using P = precision;
    using block_type = B;
    using stem_type = S;

    struct state {
        typename S::state stem;
        std::vector<typename B::state> blocks;
        typename classifier_head<P>::state head;
        const activation<P>* input = nullptr;
    };

    /// `blocks[i]` blocks in stage i (each at least 1).
    resnet_family(std::size_t in_channels, std::size_t classes, std::vector<std::size_t> blocks)
        : m_in_channels(in_channels), m_classes(classes), m_blocks_per_stage(check_counts(std::move(blocks))),
          m_stem(detail::construct_deferred<S>(in_channels)),
          m_head(S::width * (std::size_t{1} << (m_blocks_per_stage.size() - 1)) * B::expansion, classes,
                 defer_initialization) {
        // Every layer is built without drawing its weights where it can be (defer_initialization_t),
        // then all are drawn once from the network's generator.
        std::size_t channels = S::width, stage = 0;
        std::size_t total = 0;
        for (const std::size_t count : m_blocks_per_stage) total += count;
        m_blocks.reserve(total);
        for (const std::size_t count : m_blocks_per_stage) {
            const std::size_t width = S::width << stage;
            for (std::size_t i = 0; i < count; ++i) {
                m_blocks.push_back(detail::construct_deferred<B>(channels, width, std::size_t{(i == 0 && stage > 0) ? 2u : 1u}));
                m_names.push_back("layer" + std::to_string(stage + 1) + "[" + std::to_string(i) + "]");
                m_param_names.push_back("layer" + std::to_string(stage + 1) + "." + std::to_string(i));
                channels = width * B::expansion;
            }
            ++stage;
        }
        std::mt19937_64 rng(0x7e55e7a);
        initialize(rng);
    }

    /// Blocks in each stage.
    [[nodiscard]] const std::vector<std::size_t>& blocks_per_stage() const noexcept { return m_blocks_per_stage; }

    /// Units: 0 is the stem, 1..blocks() the residual blocks, blocks()+1 the head.
    [[nodiscard]] std::size_t units() const noexcept { return m_blocks.size() + 2; }
    [[nodiscard]] std::size_t blocks() const noexcept { return m_blocks.size(); }
    [[nodiscard]] std::string unit_name(std::size_t u) const {
        check_unit(u);
        return u == 0 ? "stem" : u == units() - 1 ? "head" : m_names[u - 1];
    }
    /// The unit called `name` ("stem", "layer3[8]", "head"; a block also by its PyTorch module name,
    /// "layer3.8", as an ONNX export names it); throws config::config_error if none is.
    [[nodiscard]] std::size_t unit_index(std::string_view name) const {
        for (std::size_t u = 0; u < units(); ++u)
            if (unit_name(u) == name || (u > 0 && u + 1 < units() && m_param_names[u - 1] == name)) return u;
        throw config::config_error("tessera::nn::resnet: no unit named '" + std::string(name) + "' (units are stem, " +
                                   m_names.front() + " ... " + m_names.back() + ", head)");
    }
    [[nodiscard]] B& block(std::size_t i) { return m_blocks.at(i); }

    [[nodiscard]] std::size_t in_channels() const noexcept { return m_in_channels; }
    [[nodiscard]] std::size_t classes() const noexcept { return m_classes; }

    /// Shape entering unit u for a model input of shape s.
    [[nodiscard]] tensor::shape unit_input_shape(std::size_t u, const tensor::shape& s) const {
        check_unit(u);
        return detail::shape_after_units(*this, u, s);
    }
    [[nodiscard]] tensor::shape unit_output_shape(std::size_t u, const tensor::shape& in) const {
        check_unit(u);
        if (u == 0) return m_stem.output_shape(in);
        if (u == units() - 1) return m_head.output_shape(in);
        return m_blocks[u - 1].output_shape(in);
    }
    /// Cost of unit u when its input has shape `in`.
    [[nodiscard]] nn::cost unit_cost(std::size_t u, const tensor::shape& in) const {
        check_unit(u);
        if (u == 0) return m_stem.cost(in);
        if (u == units() - 1) return m_head.cost(in);
        return m_blocks[u - 1].cost(in);
    }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        return unit_output_shape(units() - 1, unit_input_shape(units() - 1, s));
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        nn::cost total;
        tensor::shape cur = s;
        for (std::size_t u = 0; u < units(); ++u) {
            total += unit_cost(u, cur);
            cur = unit_output_shape(u, cur);
        }
        return total;
    }

    /// Runs units [first, last) on x (the input of unit `first`); returns the output of unit last-1.
    const activation<P>& forward_units(std::size_t first, std::size_t last, const activation<P>& x, state& st,
                                       const context& ctx) {
        check_range(first, last);
        if (st.blocks.size() != m_blocks.size()) st.blocks.resize(m_blocks.size());
        const activation<P>* cur = &x;
        for (std::size_t u = first; u < last; ++u) {
            if (u == 0)
                cur = &m_stem.forward(*cur, st.stem, ctx.child(u));
            else if (u == units() - 1)
                cur = &m_head.forward(*cur, st.head, ctx.child(u));
            else
                cur = &m_blocks[u - 1].forward(*cur, st.blocks[u - 1], ctx.child(u));
        }
        return *cur;
    }

    /// Backward through units [first, last) given the gradient of unit last-1's output; returns the
    /// gradient of unit first's input (computed only when want_dx).
    const activation<P>& backward_units(std::size_t first, std::size_t last, const activation<P>& dy, state& st,
                                        const context& ctx, bool want_dx) {
        return backward_units_pass<false>(first, last, dy, st, ctx, want_dx);
    }

    /// The input-gradient half of backward_units (convolutions and the head keep their weight
    /// gradients for backward_units_weights).
    const activation<P>& backward_units_input(std::size_t first, std::size_t last, const activation<P>& dy, state& st,
                                              const context& ctx, bool want_dx) {
        return backward_units_pass<true>(first, last, dy, st, ctx, want_dx);
    }
    /// The weight-gradient half of backward_units, after backward_units_input on the same state.
    void backward_units_weights(std::size_t first, std::size_t last, state& st, const context& ctx) {
        check_range(first, last);
        for (std::size_t u = last; u-- > first;) {
            if (u == 0)
                nn::backward_weights(m_stem, st.stem, ctx.child(u));
            else if (u == units() - 1)
                nn::backward_weights(m_head, st.head, ctx.child(u));
            else
                nn::backward_weights(m_blocks[u - 1], st.blocks[u - 1], ctx.child(u));
        }
    }

    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        return forward_units(0, units(), x, st, ctx);
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_units(0, units(), dy, st, ctx, want_dx);
    }
    const activation<P>& backward_input(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_units_input(0, units(), dy, st, ctx, want_dx);
    }
    void backward_weights(state& st, const context& ctx) { backward_units_weights(0, units(), st, ctx); }

    /// Parameters of units [first, last) with torchvision's names ("conv1.weight", "layer3.8.bn2.bias", "fc.weight").
    /// f(name, values, gradients). Every visitor goes through one function_ref, so the walk over the
    /// layers is compiled once per network type, not once per visitor.
    template <class F>
    void visit_unit_parameters(std::size_t first, std::size_t last, F&& f, std::string_view prefix = {}) {
        walk_parameters(first, last, parameter_visitor(f), prefix);
    }
    /// Buffers (batch-norm running statistics) of units [first, last): f(name, values).
    template <class F>
    void visit_unit_buffers(std::size_t first, std::size_t last, F&& f, std::string_view prefix = {}) {
        walk_buffers(first, last, buffer_visitor(f), prefix);
    }
    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        visit_unit_parameters(0, units(), f, prefix);
    }
    template <class F>
    void visit_buffers(F&& f, std::string_view prefix = {}) {
        visit_unit_buffers(0, units(), f, prefix);
    }
    void initialize(std::mt19937_64& rng) {
        m_stem.initialize(rng);
        for (auto& b : m_blocks) b.initialize(rng);
        m_head.initialize(rng);
    }

    /// Number of trainable parameters (weights, biases, batch-norm scales and shifts).
    [[nodiscard]] std::size_t parameter_count() {
        std::size_t n = 0;
        visit_parameters([&](std::string_view, auto value, auto) { n += value.size(); });
        return n;
    }

private:
    using parameter_visitor = tessera::detail::function_ref<void(std::string_view, std::span<typename P::weight_type>,
                                                                 std::span<typename P::accumulate_type>)>;
    using buffer_visitor = tessera::detail::function_ref<void(std::string_view, std::span<typename P::accumulate_type>)>;

    void walk_parameters(std::size_t first, std::size_t last, parameter_visitor f, std::string_view prefix) {
        check_range(first, last);
        for (std::size_t u = first; u < last; ++u) {
            if (u == 0)
                m_stem.visit_parameters(f, prefix);
            else if (u == units() - 1)
                m_head.visit_parameters(f, prefix);
            else
                m_blocks[u - 1].visit_parameters(f, detail::join(prefix, m_param_names[u - 1]));
        }
    }
    void walk_buffers(std::size_t first, std::size_t last, buffer_visitor f, std::string_view prefix) {
        check_range(first, last);
        for (std::size_t u = first; u < last; ++u) {
            if (u == 0)
                m_stem.visit_buffers(f, prefix);
            else if (u == units() - 1)
                m_head.visit_buffers(f, prefix);
            else
                m_blocks[u - 1].visit_buffers(f, detail::join(prefix, m_param_names[u - 1]));
        }
    }

    static std::vector<std::size_t> check_counts(std::vector<std::size_t> blocks) {
        if (blocks.empty() || blocks.size() > 8)
            throw config::config_error("tessera::nn::resnet: needs 1 to 8 stages of blocks, got " + std::to_string(blocks.size()));
        for (const std::size_t count : blocks)
            if (count == 0) throw config::config_error("tessera::nn::resnet: every stage needs at least one block");
        return blocks;
    }
    void check_unit(std::size_t u) const {
        if (u >= units())
            throw config::config_error("tessera::nn::resnet: unit " + std::to_string(u) + " does not exist (the model has " +
                                       std::to_string(units()) + " units)");
    }
    // Backward through units [first, last): each unit whole, or only its input-gradient half (InputOnly).
    // A block whose input is the output of a block before it in the range hands that block the gradient
    // of its sum (residual::backward_chained: its input gradient masked by its input, the ReLU's output),
    // and that block skips its ReLU's backward; the range's first unit returns its input gradient.
    template <bool InputOnly>
    const activation<P>& backward_units_pass(std::size_t first, std::size_t last, const activation<P>& dy, state& st,
                                             const context& ctx, bool want_dx) {
        check_range(first, last);
        const activation<P>* cur = &dy;
        bool sum_gradient = false;  // cur is the gradient of the sum of the block it goes to (already masked)
        // Whole backward: each block writes its gradients into the buffers the blocks after it wrote
        // and the call has consumed, still in cache (gradient_recycler). Not in the split backward,
        // whose layers keep their output gradients for the weight half.
        [[maybe_unused]] gradient_recycler<activation<P>> recycler;
        for (std::size_t u = last; u-- > first;) {
            const bool dx = u > first || want_dx;
            if (u == 0) {
                cur = &nn::backward_part<InputOnly>(m_stem, *cur, st.stem, ctx.child(u), dx);
                continue;
            }
            if (u == units() - 1) {
                cur = &nn::backward_part<InputOnly>(m_head, *cur, st.head, ctx.child(u), dx);
                continue;
            }
            auto& block_state = st.blocks[u - 1];
            if constexpr (!InputOnly) recycler.refresh(block_state);
            if constexpr (ChainedBlock<B>) {
                const bool mask = u > first && u >= 2;  // its input is block u - 2's output, in the range
                if constexpr (InputOnly)
                    cur = &m_blocks[u - 1].backward_input_chained(*cur, block_state, ctx.child(u), dx, sum_gradient, mask);
                else
                    cur = &m_blocks[u - 1].backward_chained(*cur, block_state, ctx.child(u), dx, sum_gradient, mask);
                sum_gradient = mask;
            } else {
                cur = &nn::backward_part<InputOnly>(m_blocks[u - 1], *cur, block_state, ctx.child(u), dx);
            }
            if constexpr (!InputOnly) recycler.retire(block_state, cur);
        }
        return *cur;
    }
    void check_range(std::size_t first, std::size_t last) const {
        if (first >= last || last > units())
            throw config::config_error("tessera::nn::resnet: unit range [" + std::to_string(first) + ", " +
                                       std::to_string(last) + ") is empty or past the " + std::to_string(units()) + " units");
    }

    std::size_t m_in_channels, m_classes;
    std::vector<std::size_t> m_blocks_per_stage;
    S m_stem;
    std::vector<B> m_blocks;
    classifier_head<P> m_head;
    std::vector<std::string> m_names, m_param_names;
};

/// A ResNet with its block counts in the type: Layers[i] blocks in stage i (see resnet_family).
/// @code
///   nn::resnet20<config::fp32> model(/*in_channels=*/1, /*classes=*/10);
///   auto stage2 = model.unit_index("layer3[2]");
/// @endcode
template <Block B, Stem S, std::size_t... Layers>
class resnet : public resnet_family<B, S> {
    static_assert(sizeof...(Layers) > 0 && ((Layers > 0) && ...),
                  "tessera::nn::resnet: every stage needs at least one block");

public:
    static constexpr std::size_t stages = sizeof...(Layers);
    resnet(std::size_t in_channels, std::size_t classes) : resnet_family<B, S>(in_channels, classes, {Layers...}) {}
};

/// ImageNet ResNets (torchvision's definitions; option B shortcuts).
template <Numeric P = config::fp32>
using resnet18 = resnet<basic_block<P>, imagenet_stem<P>, 2, 2, 2, 2>;
template <Numeric P = config::fp32>
using resnet34 = resnet<basic_block<P>, imagenet_stem<P>, 3, 4, 6, 3>;
template <Numeric P = config::fp32>
using resnet50 = resnet<bottleneck<P>, imagenet_stem<P>, 3, 4, 6, 3>;
template <Numeric P = config::fp32>
using resnet101 = resnet<bottleneck<P>, imagenet_stem<P>, 3, 4, 23, 3>;
template <Numeric P = config::fp32>
using resnet152 = resnet<bottleneck<P>, imagenet_stem<P>, 3, 8, 36, 3>;

/// CIFAR ResNets of He et al. 2016 §4.2 (6n+2 layers, widths 16/32/64), option A (zero-padding)
/// shortcuts as in the paper. Use resnet<basic_block<P, projection_shortcut>, cifar_stem<P>, n, n, n>
/// for option B.
template <Numeric P = config::fp32>
using resnet20 = resnet<basic_block<P, padding_shortcut>, cifar_stem<P>, 3, 3, 3>;
template <Numeric P = config::fp32>
using resnet32 = resnet<basic_block<P, padding_shortcut>, cifar_stem<P>, 5, 5, 5>;
template <Numeric P = config::fp32>
using resnet44 = resnet<basic_block<P, padding_shortcut>, cifar_stem<P>, 7, 7, 7>;
template <Numeric P = config::fp32>
using resnet56 = resnet<basic_block<P, padding_shortcut>, cifar_stem<P>, 9, 9, 9>;
template <Numeric P = config::fp32>
using resnet110 = resnet<basic_block<P, padding_shortcut>, cifar_stem<P>, 18, 18, 18>;

}  // namespace tessera::nn
