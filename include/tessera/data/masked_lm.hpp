#pragma once
// BERT's masked-LM corruption of a window of tokens, drawn from a counter-based stream keyed by the
// sample alone: every rank, replica, strategy and loader layout masks a sample alike.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "tessera/tensor/stochastic_rounding.hpp"

namespace tessera::data {

/// Each position is chosen with probability `probability` (15 %); a chosen position is labelled with
/// its token, and its input becomes `mask_token` 80 % of the time, a token drawn uniformly from
/// [0, vocabulary) 10 %, and stays itself 10 % (Devlin et al. 2019; Hugging Face's
/// DataCollatorForLanguageModeling). Positions not chosen are labelled `ignore` (-100: the per-token
/// loss skips them). Position t of the sample with dataset index i in epoch e draws
///   bits = tensor::counter_bits(seed, tensor::mix64(e) ^ i, t)
/// and is chosen iff (bits >> 40) < ⌊probability · 2^24⌋; then r = (bits >> 8) & 0xFFFF picks the mask
/// (r < 52,429: 80 % of 2^16), a random token (r < 58,982: token ((mix64(bits) >> 32) · vocabulary)
/// >> 32, Lemire's range reduction), or the token itself.
/// @code
///   const data::masked_lm masking{.seed = 7, .mask_token = 256, .vocabulary = 256};
///   masking.apply(window, labels, batch.indices()[i], batch.epoch());
/// @endcode
struct masked_lm {
    std::uint64_t seed = 0;
    double probability = 0.15;
    std::uint32_t mask_token = 0;   ///< the [MASK] token's id
    std::uint32_t vocabulary = 0;   ///< random replacements are drawn from [0, vocabulary)
    static constexpr std::int32_t ignore = -100;

    /// Throws std::invalid_argument naming the bad field: a probability outside (0, 1], an empty
    /// vocabulary for the random replacements.
    void check() const {
        if (!(probability > 0.0 && probability <= 1.0))
            throw std::invalid_argument("tessera::data::masked_lm: the probability of choosing a position must be in (0, 1], got " +
                                        std::to_string(probability));
        if (vocabulary == 0)
            throw std::invalid_argument("tessera::data::masked_lm: random replacements need a vocabulary of at least 1 token");
    }

    /// Masks `tokens` (sample `index` of the dataset, in `epoch`) in place and writes its labels:
    /// the original token where a position was chosen, `ignore` elsewhere.
    template <class Id>
    void apply(std::span<Id> tokens, std::span<std::int32_t> labels, std::size_t index, std::uint64_t epoch = 0) const {
        check();
        if (labels.size() != tokens.size())
            throw std::invalid_argument("tessera::data::masked_lm: " + std::to_string(labels.size()) + " labels for " +
                                        std::to_string(tokens.size()) + " tokens");
        if (mask_token > std::numeric_limits<Id>::max() || vocabulary - 1 > std::numeric_limits<Id>::max())
            throw std::invalid_argument("tessera::data::masked_lm: the mask token " + std::to_string(mask_token) +
                                        " or a token below " + std::to_string(vocabulary) + " does not fit the ids' type");
        const std::uint64_t base = tensor::counter_base(seed, tensor::mix64(epoch) ^ static_cast<std::uint64_t>(index));
        const auto threshold = static_cast<std::uint64_t>(probability * 16777216.0);  // of 2^24
        for (std::size_t t = 0; t < tokens.size(); ++t) {
            const std::uint64_t bits = tensor::counter_bits_at(base, t);
            if ((bits >> 40) >= threshold) {
                labels[t] = ignore;
                continue;
            }
            labels[t] = static_cast<std::int32_t>(tokens[t]);
            const std::uint64_t r = (bits >> 8) & 0xFFFF;
            if (r < mask_share)
                tokens[t] = static_cast<Id>(mask_token);
            else if (r < mask_share + random_share)
                tokens[t] = static_cast<Id>(random_token(bits));
        }
    }

private:
    static constexpr std::uint64_t mask_share = 52429;    // 80 % of 2^16
    static constexpr std::uint64_t random_share = 6553;   // 10 % of 2^16
    // A token in [0, vocabulary) from 32 bits mixed out of the position's: multiply-shift, not a modulo.
    [[nodiscard]] std::uint32_t random_token(std::uint64_t bits) const noexcept {
        const std::uint64_t u = tensor::mix64(bits) >> 32;
        return static_cast<std::uint32_t>((u * vocabulary) >> 32);
    }
};

}  // namespace tessera::data
