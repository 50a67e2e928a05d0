#pragma once
// token_windows: a map-style dataset of fixed windows of tokens cut from one split of a text corpus,
// for next-token training (the model reads T tokens, the labels are the same window shifted by one).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/data/byte_tokenizer.hpp"
#include "tessera/data/concepts.hpp"
#include "tessera/data/error.hpp"
#include "tessera/data/random.hpp"
#include "tessera/data/text_corpus.hpp"

namespace tessera::data {

/// Which documents of a corpus a dataset reads.
enum class text_part { train, held_out };

/// The split of a corpus into training and held-out documents, by document index alone (so it does
/// not move when other documents change). Document i (from 0, in the corpus's order) is held out iff
///   splitmix64(seed ^ i) % 100 < held_out_percent
/// where splitmix64(x) is the first output of the splitmix64 generator seeded with x (data::splitmix64),
/// every operation modulo 2^64:
///   z = x + 0x9E3779B97F4A7C15;  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
///   z = (z ^ (z >> 27)) * 0x94D049BB133111EB;  result = z ^ (z >> 31).
/// scripts/ngram_baseline.py computes the same. Defaults: seed 0, 10 % held out.
struct text_split {
    std::uint64_t seed = 0;
    std::uint32_t held_out_percent = 10;  ///< in [0, 100]

    /// Whether document `i` is held out.
    [[nodiscard]] constexpr bool held_out(std::size_t i) const noexcept {
        return splitmix64(seed ^ static_cast<std::uint64_t>(i)).next() % 100 < held_out_percent;
    }
    /// Whether document `i` belongs to `part`.
    [[nodiscard]] constexpr bool in(text_part part, std::size_t i) const noexcept {
        return held_out(i) == (part == text_part::held_out);
    }
};

/// How windows are cut: the split, and the tokens from one window's start to the next.
struct window_options {
    text_split split = {};
    std::size_t stride = 0;  ///< 0: the window's length, T + 1 (windows do not overlap); less overlaps them
};

/// Windows of T + 1 tokens from the tokens of one part of a corpus, a map-style Dataset of
/// std::uint16_t samples of shape 1 x 1 x (T + 1). The model reads tokens [0, T) of a window and its
/// labels are tokens [1, T + 1): position t predicts token t + 1. read() returns the last token (the
/// label of position T - 1) as the sample's label; num_classes() is the vocabulary size.
///
/// The tokens are those of the part's documents, encoded one document at a time and concatenated in
/// the corpus's order (a file-read document ends in '\n', which thus separates them). Window w is
/// tokens [w * stride, w * stride + T + 1); there are (n - T - 1) / stride + 1 of them for n tokens,
/// and the tokens after the last whole window are not read. Memory: the part's tokens, 2 bytes each
/// (the corpus may be destroyed after construction: no reference to it is kept).
/// @code
///   const data::text_corpus corpus(data::fortunes_default_path);
///   const data::token_windows train(corpus, data::text_part::train, 256);
///   data::data_loader loader(train, 32, {.shuffle = true, .seed = 1});   // batches of std::uint16_t
/// @endcode
template <Tokenizer Tok = byte_tokenizer>
class token_windows {
public:
    using value_type = token_id;

    /// Windows of `context` + 1 tokens of `part`. Throws shape_error when `context` is 0 or the part
    /// has fewer than `context` + 1 tokens (the message names both), dataset_error for a percentage
    /// above 100 or a vocabulary the ids cannot number, label_error for a token outside it.
    token_windows(const text_corpus& corpus, text_part part, std::size_t context, window_options options = {},
                  const Tok& tokenizer = {})
        : m_name(corpus.name() + (part == text_part::train ? " (training part)" : " (held-out part)")),
          m_context(context), m_stride(options.stride == 0 ? context + 1 : options.stride), m_split(options.split),
          m_vocabulary(static_cast<std::size_t>(tokenizer.vocabulary_size())) {
        if (m_split.held_out_percent > 100)
            throw dataset_error(m_name, m_split.held_out_percent,
                                "held_out_percent " + std::to_string(m_split.held_out_percent), "a percentage in [0, 100]");
        if (m_vocabulary == 0 || m_vocabulary > max_vocabulary_size)
            throw dataset_error(m_name, 0, "a vocabulary of " + std::to_string(m_vocabulary) + " tokens",
                                "1 to " + std::to_string(max_vocabulary_size) + " tokens (std::uint16_t ids)");
        if (m_context == 0) throw shape_error(m_name, 0, "a context of 0 tokens", "a context T >= 1");
        for (std::size_t i = 0; i < corpus.size(); ++i) {
            if (!m_split.in(part, i)) continue;
            const auto ids = tokenizer.encode(corpus.document(i));
            for (std::size_t k = 0; k < ids.size(); ++k)
                if (ids[k] >= m_vocabulary)
                    throw label_error(m_name, m_tokens.size() + k, "token " + std::to_string(ids[k]) + " in document " + std::to_string(i),
                                      "a token in [0, " + std::to_string(m_vocabulary) + ")");
            m_tokens.insert(m_tokens.end(), ids.begin(), ids.end());
            ++m_documents;
        }
        const std::size_t window = m_context + 1;
        if (m_tokens.size() < window)
            throw shape_error(m_name, 0,
                              std::to_string(m_tokens.size()) + " tokens in " + std::to_string(m_documents) + " documents",
                              "at least one window of " + std::to_string(window) + " tokens (context " +
                                  std::to_string(m_context) + " + 1)");
        m_windows = (m_tokens.size() - window) / m_stride + 1;
    }

    /// Number of windows.
    [[nodiscard]] std::size_t size() const noexcept { return m_windows; }
    /// 1 x 1 x (T + 1).
    [[nodiscard]] sample_shape shape() const noexcept { return {1, 1, m_context + 1}; }
    /// The vocabulary size.
    [[nodiscard]] std::size_t num_classes() const noexcept { return m_vocabulary; }
    /// T: the tokens the model reads per window.
    [[nodiscard]] std::size_t context() const noexcept { return m_context; }
    [[nodiscard]] std::size_t stride() const noexcept { return m_stride; }
    [[nodiscard]] const text_split& split() const noexcept { return m_split; }
    /// Documents of the part, and all of its tokens (the windows' source, tail included).
    [[nodiscard]] std::size_t documents() const noexcept { return m_documents; }
    [[nodiscard]] std::span<const token_id> tokens() const noexcept { return m_tokens; }
    [[nodiscard]] const std::string& name() const noexcept { return m_name; }

    /// Window i, without copying: T + 1 tokens.
    [[nodiscard]] std::span<const token_id> window(std::size_t i) const {
        if (i >= m_windows)
            throw std::out_of_range("tessera::data::token_windows: window " + std::to_string(i) + " >= size " +
                                    std::to_string(m_windows));
        return std::span<const token_id>(m_tokens).subspan(i * m_stride, m_context + 1);
    }

    /// Copies window i into `out` (T + 1 tokens) and returns its last token.
    label_t read(std::size_t i, std::span<token_id> out) const {
        const auto w = window(i);
        if (out.size() != w.size())
            throw shape_error(m_name, i, "a buffer of " + std::to_string(out.size()) + " tokens",
                              std::to_string(w.size()) + " tokens (context " + std::to_string(m_context) + " + 1)");
        std::copy(w.begin(), w.end(), out.begin());
        return static_cast<label_t>(w.back());
    }

private:
    std::string m_name;
    std::size_t m_context, m_stride;
    text_split m_split;
    std::size_t m_vocabulary;
    std::vector<token_id> m_tokens;
    std::size_t m_documents = 0, m_windows = 0;
};

static_assert(Dataset<token_windows<>>);

}  // namespace tessera::data
