#pragma once
// The activation a staged network passes between stages: its values and, for sequences, the
// micro-batch's mask (segments and token types), which travels with it to every stage.
#include <cstddef>
#include <memory>
#include <utility>

#include "tessera/nn/layer.hpp"
#include "tessera/nn/sequence_mask.hpp"

namespace tessera::exec {

/// An nn::activation (it is one: every layer reads it as such) with the sequence mask of its
/// micro-batch, shared between the stages that hold the micro-batch (null: no mask, as for images).
/// A stage's output carries its input's mask; payload_bytes() counts the mask's bytes with the
/// values', as both cross the link.
template <nn::Numeric P>
class staged_activation : public nn::activation<P> {
public:
    using values_type = nn::activation<P>;

    staged_activation() = default;
    /// Values with no mask (implicit: a stage's output or a gradient is an activation).
    staged_activation(values_type values) noexcept : values_type(std::move(values)) {}  // NOLINT(google-explicit-constructor)
    staged_activation(values_type values, std::shared_ptr<const nn::sequence_mask> mask) noexcept
        : values_type(std::move(values)), m_mask(std::move(mask)) {}

    [[nodiscard]] const std::shared_ptr<const nn::sequence_mask>& mask() const noexcept { return m_mask; }
    /// Points `ctx` at the mask's tables (nothing when there is none).
    void use_mask(nn::context& ctx) const noexcept {
        if (m_mask) m_mask->use(ctx);
    }
    [[nodiscard]] std::size_t payload_bytes() const noexcept {
        return this->size() * sizeof(typename P::data_type) + (m_mask ? m_mask->bytes() : 0);
    }

private:
    std::shared_ptr<const nn::sequence_mask> m_mask;
};

}  // namespace tessera::exec
