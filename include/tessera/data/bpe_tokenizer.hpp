#pragma once
// A byte-pair-encoding tokenizer (Sennrich et al. 2016, over bytes as GPT-2's), trained on texts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/data/byte_tokenizer.hpp"
#include "tessera/data/error.hpp"

namespace tessera::data {

/// Byte-pair encoding: tokens 0-255 are the bytes; token 256 + m is merge m, the concatenation of
/// two earlier tokens. decode(encode(s)) == s for any bytes.
///
/// Text is first cut into pieces, and no token spans two of them (GPT-2's rule, by byte classes):
/// a piece is one optional ' ' followed by a run of letters (A-Z, a-z and every byte >= 0x80, so
/// UTF-8 characters stay whole), or by a run of digits, or by a run of other non-space bytes; or a run
/// of whitespace (' ', '\t', '\n', '\r', '\v', '\f') whose last ' ' is left to the piece after it.
///
/// Training (`bpe_tokenizer(texts, vocabulary)`) counts each piece's occurrences in the texts, then
/// repeatedly merges the adjacent pair of tokens that occurs most often over all pieces (ties: the
/// smaller first token, then the smaller second), until the vocabulary has `vocabulary` tokens or no
/// pair occurs twice. Integer counts only: the merges do not depend on the platform or the order of
/// the texts. Encoding applies, within each piece, the earliest-learnt merge present until none is
/// (the same tokens as applying the merges in their order).
/// @code
///   std::vector<std::string_view> texts{"the cat", "the hat"};
///   data::bpe_tokenizer tok(texts, 260);   // 4 merges, e.g. "t"+"h", "th"+"e", ...
///   auto ids = tok.encode("the bat");
///   assert(tok.decode(ids) == "the bat");
/// @endcode
class bpe_tokenizer {
public:
    /// One merge: tokens `first` and `second` make token 256 + its index.
    struct merge {
        token_id first, second;
        friend bool operator==(const merge&, const merge&) = default;
    };

    /// Learns merges from `texts` until the vocabulary reaches `vocabulary` tokens (256 to 65,536)
    /// or no pair of tokens occurs twice. Throws dataset_error for a vocabulary outside that range.
    template <class Texts>
    bpe_tokenizer(const Texts& texts, std::size_t vocabulary) {
        if (vocabulary < 256 || vocabulary > max_vocabulary_size)
            throw dataset_error("bpe_tokenizer", 0, "a vocabulary of " + std::to_string(vocabulary) + " tokens",
                                "256 to " + std::to_string(max_vocabulary_size) + " tokens (the bytes, then merges)");
        learn(texts, vocabulary - 256);
    }

    /// Applies merges learnt elsewhere; throws dataset_error naming a merge whose tokens do not exist yet.
    explicit bpe_tokenizer(std::vector<merge> merges) {
        if (merges.size() > max_vocabulary_size - 256)
            throw dataset_error("bpe_tokenizer", 0, std::to_string(merges.size()) + " merges",
                                "at most " + std::to_string(max_vocabulary_size - 256));
        for (std::size_t m = 0; m < merges.size(); ++m)
            if (merges[m].first >= 256 + m || merges[m].second >= 256 + m)
                throw dataset_error("bpe_tokenizer", m,
                                    "merge " + std::to_string(m) + " of tokens " + std::to_string(merges[m].first) + " and " +
                                        std::to_string(merges[m].second),
                                    "tokens below " + std::to_string(256 + m) + " (the bytes and earlier merges)");
        init_bytes();
        for (const merge& m : merges) add(m);
    }

    /// 256 + the merges learnt.
    [[nodiscard]] std::size_t vocabulary_size() const noexcept { return m_bytes.size(); }
    [[nodiscard]] const std::vector<merge>& merges() const noexcept { return m_merges; }
    /// The bytes token `id` stands for; throws label_error for an id outside the vocabulary.
    [[nodiscard]] std::string_view bytes_of(token_id id) const {
        if (id >= m_bytes.size())
            throw label_error("bpe_tokenizer::bytes_of", id, "token " + std::to_string(id),
                              "a token in [0, " + std::to_string(m_bytes.size()) + ")");
        return m_bytes[id];
    }

    /// The tokens of `text`.
    [[nodiscard]] std::vector<token_id> encode(std::string_view text) const {
        std::vector<token_id> out;
        out.reserve(text.size() / 2 + 1);
        std::vector<token_id> piece;
        for_each_piece(text, [&](std::string_view p) {
            encode_piece(p, piece);
            out.insert(out.end(), piece.begin(), piece.end());
        });
        return out;
    }

    /// The bytes of `tokens`; throws label_error naming the first id outside the vocabulary.
    [[nodiscard]] std::string decode(std::span<const token_id> tokens) const {
        std::string out;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] >= m_bytes.size())
                throw label_error("bpe_tokenizer::decode", i, "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i),
                                  "a token in [0, " + std::to_string(m_bytes.size()) + ")");
            out += m_bytes[tokens[i]];
        }
        return out;
    }

    /// Calls f(piece) for each piece of `text` in order (the rule above); the pieces concatenate to `text`.
    template <class F>
    static void for_each_piece(std::string_view text, F&& f) {
        std::size_t i = 0;
        const std::size_t n = text.size();
        while (i < n) {
            const std::size_t start = i;
            const char c = text[i];
            if (is_space(c) && !(c == ' ' && i + 1 < n && !is_space(text[i + 1]))) {
                // A run of whitespace; a ' ' right before a non-space is left to the next piece.
                while (i < n && is_space(text[i]) && !(text[i] == ' ' && i + 1 < n && !is_space(text[i + 1]))) ++i;
                f(text.substr(start, i - start));
                continue;
            }
            if (c == ' ') ++i;  // the piece's one leading space
            const int kind = class_of(text[i]);
            while (i < n && !is_space(text[i]) && class_of(text[i]) == kind) ++i;
            f(text.substr(start, i - start));
        }
    }

private:
    [[nodiscard]] static constexpr bool is_space(char c) noexcept {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    }
    /// 0 letters (and bytes >= 0x80), 1 digits, 2 other non-space bytes.
    [[nodiscard]] static constexpr int class_of(char c) noexcept {
        const auto u = static_cast<unsigned char>(c);
        if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || u >= 0x80) return 0;
        if (u >= '0' && u <= '9') return 1;
        return 2;
    }
    [[nodiscard]] static constexpr std::uint32_t key(token_id a, token_id b) noexcept {
        return (std::uint32_t{a} << 16) | b;
    }

    void init_bytes() {
        m_bytes.clear();
        for (int b = 0; b < 256; ++b) m_bytes.emplace_back(1, static_cast<char>(b));
    }
    void add(const merge& m) {
        m_rank.emplace(key(m.first, m.second), static_cast<token_id>(256 + m_merges.size()));
        m_bytes.push_back(m_bytes[m.first] + m_bytes[m.second]);
        m_merges.push_back(m);
    }

    /// Merges pair (a, b) into `to` wherever it occurs in `w`, left to right.
    static void apply(std::vector<token_id>& w, token_id a, token_id b, token_id to) {
        std::size_t out = 0;
        for (std::size_t i = 0; i < w.size(); ++i) {
            if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
                w[out++] = to;
                ++i;
            } else {
                w[out++] = w[i];
            }
        }
        w.resize(out);
    }

    void encode_piece(std::string_view p, std::vector<token_id>& w) const {
        w.assign(p.size(), 0);
        for (std::size_t i = 0; i < p.size(); ++i) w[i] = static_cast<unsigned char>(p[i]);
        while (w.size() > 1) {
            token_id best = 0;
            std::size_t best_at = w.size();
            for (std::size_t i = 0; i + 1 < w.size(); ++i)
                if (const auto it = m_rank.find(key(w[i], w[i + 1])); it != m_rank.end() && (best_at == w.size() || it->second < best)) {
                    best = it->second;
                    best_at = i;
                }
            if (best_at == w.size()) break;
            apply(w, w[best_at], w[best_at + 1], best);
        }
    }

    template <class Texts>
    void learn(const Texts& texts, std::size_t merges) {
        init_bytes();
        std::unordered_map<std::string_view, std::int64_t> counts;
        for (const auto& t : texts) for_each_piece(std::string_view(t), [&](std::string_view p) { ++counts[p]; });
        std::vector<std::vector<token_id>> words;
        std::vector<std::int64_t> freq;
        words.reserve(counts.size());
        for (const auto& [piece, n] : counts) {
            if (piece.size() < 2) continue;
            auto& w = words.emplace_back(piece.size());
            for (std::size_t i = 0; i < piece.size(); ++i) w[i] = static_cast<unsigned char>(piece[i]);
            freq.push_back(n);
        }
        std::unordered_map<std::uint32_t, std::int64_t> pairs;
        const auto count = [&](const std::vector<token_id>& w, std::int64_t n) {
            for (std::size_t i = 0; i + 1 < w.size(); ++i) pairs[key(w[i], w[i + 1])] += n;
        };
        for (std::size_t i = 0; i < words.size(); ++i) count(words[i], freq[i]);
        for (std::size_t m = 0; m < merges; ++m) {
            std::uint32_t best = 0;
            std::int64_t best_n = 1;  // a pair must occur at least twice
            for (const auto& [k, n] : pairs)
                if (n > best_n || (n == best_n && n > 1 && k < best)) best = k, best_n = n;
            if (best_n < 2) break;
            const merge mg{static_cast<token_id>(best >> 16), static_cast<token_id>(best & 0xFFFFu)};
            const auto to = static_cast<token_id>(256 + m_merges.size());
            for (std::size_t i = 0; i < words.size(); ++i) {
                auto& w = words[i];
                bool has = false;
                for (std::size_t j = 0; j + 1 < w.size() && !has; ++j) has = w[j] == mg.first && w[j + 1] == mg.second;
                if (!has) continue;
                count(w, -freq[i]);
                apply(w, mg.first, mg.second, to);
                count(w, freq[i]);
            }
            std::erase_if(pairs, [](const auto& kv) { return kv.second == 0; });
            add(mg);
        }
    }

    std::vector<merge> m_merges;
    std::vector<std::string> m_bytes;                      ///< each token's bytes
    std::unordered_map<std::uint32_t, token_id> m_rank;    ///< pair -> the token it merges into
};

static_assert(Tokenizer<bpe_tokenizer>);

}  // namespace tessera::data
