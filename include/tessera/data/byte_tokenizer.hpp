#pragma once
// Tokens: what a tokenizer is (the Tokenizer concept), and the byte tokenizer (each byte one token).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/data/error.hpp"

namespace tessera::data {

/// A token id: up to 65,536 distinct ids, carried as they are from the dataset to the batch.
using token_id = std::uint16_t;

/// Largest vocabulary a token_id can number.
inline constexpr std::size_t max_vocabulary_size = 65536;

/// Turns text into token ids in [0, vocabulary_size()), vocabulary_size() <= max_vocabulary_size.
/// encode must be deterministic and const (the datasets encode once, at construction).
template <class T>
concept Tokenizer = requires(const T& t, std::string_view text) {
    { t.vocabulary_size() } -> std::convertible_to<std::size_t>;
    { t.encode(text) } -> std::same_as<std::vector<token_id>>;
};

/// Bytes as tokens: byte b is token b, so the vocabulary is 256 and decode(encode(s)) == s for any
/// bytes (UTF-8 text is split inside its multi-byte characters; nothing is unknown).
/// @code
///   data::byte_tokenizer tok;
///   auto ids = tok.encode("hi\n");     // {104, 105, 10}
///   std::string back = tok.decode(ids); // "hi\n"
/// @endcode
class byte_tokenizer {
public:
    /// 256: one token per byte value.
    [[nodiscard]] static constexpr std::size_t vocabulary_size() noexcept { return 256; }

    /// The bytes of `text`, one token each.
    [[nodiscard]] std::vector<token_id> encode(std::string_view text) const {
        std::vector<token_id> out;
        out.reserve(text.size());
        encode_into(text, out);
        return out;
    }
    /// Appends the tokens of `text` to `out` (no allocation when its capacity suffices).
    void encode_into(std::string_view text, std::vector<token_id>& out) const {
        for (const char c : text) out.push_back(static_cast<token_id>(static_cast<unsigned char>(c)));
    }
    /// The bytes of `tokens`; throws label_error naming the first id >= 256 and its position.
    [[nodiscard]] std::string decode(std::span<const token_id> tokens) const {
        std::string out(tokens.size(), '\0');
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] >= vocabulary_size())
                throw label_error("byte_tokenizer::decode", i, "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i),
                                  "a token in [0, 256)");
            out[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
        }
        return out;
    }
};

static_assert(Tokenizer<byte_tokenizer>);

}  // namespace tessera::data
