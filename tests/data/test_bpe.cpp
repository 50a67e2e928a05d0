// bpe_tokenizer: its pieces against hand-cut examples, its merges against a naive trainer written
// here (every pair recounted from scratch each merge), encode against the merges applied in order,
// decode against encode, and its errors.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/data/bpe_tokenizer.hpp"
#include "tessera/data/text_corpus.hpp"

namespace test_bpe {

namespace data = tessera::data;
using data::token_id;

namespace {

std::vector<std::string> pieces_of(std::string_view text) {
    std::vector<std::string> out;
    data::bpe_tokenizer::for_each_piece(text, [&](std::string_view p) { out.emplace_back(p); });
    return out;
}

// The merges a naive trainer learns: each merge recounts every adjacent pair of every piece
// occurrence, takes the most frequent (ties: smaller first token, then smaller second), applies it
// left to right everywhere.
std::vector<data::bpe_tokenizer::merge> naive_merges(const std::vector<std::string>& texts, std::size_t merges) {
    std::vector<std::vector<int>> words;  // one per piece occurrence
    for (const auto& t : texts)
        for (const auto& p : pieces_of(t)) {
            std::vector<int> w;
            for (const char c : p) w.push_back(static_cast<unsigned char>(c));
            words.push_back(w);
        }
    std::vector<data::bpe_tokenizer::merge> out;
    for (std::size_t m = 0; m < merges; ++m) {
        std::map<std::pair<int, int>, long> counts;  // ordered: the first maximum is the smallest pair
        for (const auto& w : words)
            for (std::size_t i = 0; i + 1 < w.size(); ++i) ++counts[{w[i], w[i + 1]}];
        std::pair<int, int> best{};
        long best_n = 1;
        for (const auto& [pair, n] : counts)
            if (n > best_n) best = pair, best_n = n;
        if (best_n < 2) break;
        const int to = 256 + static_cast<int>(m);
        for (auto& w : words) {
            std::vector<int> merged;
            for (std::size_t i = 0; i < w.size(); ++i)
                if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) merged.push_back(to), ++i;
                else merged.push_back(w[i]);
            w = merged;
        }
        out.push_back({static_cast<token_id>(best.first), static_cast<token_id>(best.second)});
    }
    return out;
}

// The tokens of `text` with the merges applied to each piece in their order.
std::vector<token_id> naive_encode(const std::vector<data::bpe_tokenizer::merge>& merges, std::string_view text) {
    std::vector<token_id> out;
    for (const auto& p : pieces_of(text)) {
        std::vector<token_id> w;
        for (const char c : p) w.push_back(static_cast<unsigned char>(c));
        for (std::size_t m = 0; m < merges.size(); ++m) {
            std::vector<token_id> merged;
            for (std::size_t i = 0; i < w.size(); ++i)
                if (i + 1 < w.size() && w[i] == merges[m].first && w[i + 1] == merges[m].second)
                    merged.push_back(static_cast<token_id>(256 + m)), ++i;
                else merged.push_back(w[i]);
            w = merged;
        }
        out.insert(out.end(), w.begin(), w.end());
    }
    return out;
}

const std::vector<std::string> sample_texts = {
    "The cat sat on the mat.\nThe hat sat on the cat!\n",
    "  Indented, and then: the 1999 catalogue; the 2000 one...\n\n\tTabs\r\nthe end  \n",
    "Beware the Jabberwock, my son! The jaws that bite, the claws that catch!\n",
    "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 -- the the the thethethe 12 123 1234\n",
};

}  // namespace

TEST_CASE("bpe_tokenizer: pieces split at byte classes, one leading space, whitespace runs", "[data][text][bpe]") {
    CHECK(pieces_of("Hello, world  42x\n\nok") ==
          std::vector<std::string>{"Hello", ",", " world", " ", " 42", "x", "\n\n", "ok"});
    CHECK(pieces_of(" a  b\t c ") == std::vector<std::string>{" a", " ", " b", "\t", " c", " "});
    CHECK(pieces_of("caf\xc3\xa9!") == std::vector<std::string>{"caf\xc3\xa9", "!"});  // UTF-8 stays whole
    CHECK(pieces_of("...--") == std::vector<std::string>{"...--"});
    CHECK(pieces_of("").empty());
    std::mt19937 rng(7);
    std::string noise(2000, '\0');
    for (auto& c : noise) c = static_cast<char>(rng() % 256);
    std::string joined;
    for (const auto& p : pieces_of(noise)) {
        CHECK(!p.empty());
        joined += p;
    }
    CHECK(joined == noise);
}

TEST_CASE("bpe_tokenizer: merges equal a naive trainer's; encode equals the merges applied in order", "[data][text][bpe]") {
    for (const std::size_t merges : {0u, 1u, 7u, 40u, 200u}) {
        const data::bpe_tokenizer tok(sample_texts, 256 + merges);
        const auto expected = naive_merges(sample_texts, merges);
        REQUIRE(tok.merges() == expected);
        CHECK(tok.vocabulary_size() == 256 + expected.size());
        for (const auto& t : sample_texts) {
            const auto ids = tok.encode(t);
            CHECK(ids == naive_encode(expected, t));
            CHECK(tok.decode(ids) == t);
        }
        CHECK(tok.encode("the catalogue the hat") == naive_encode(expected, "the catalogue the hat"));
    }
    // The texts' order does not change the merges (integer counts, fixed ties).
    const std::vector<std::string> reversed(sample_texts.rbegin(), sample_texts.rend());
    CHECK(data::bpe_tokenizer(reversed, 300).merges() == data::bpe_tokenizer(sample_texts, 300).merges());
    // Merges learnt elsewhere tokenize alike.
    const data::bpe_tokenizer learnt(sample_texts, 300);
    const data::bpe_tokenizer given(learnt.merges());
    CHECK(given.encode(sample_texts[2]) == learnt.encode(sample_texts[2]));
    CHECK(learnt.bytes_of(static_cast<token_id>(256)).size() == 2);
}

TEST_CASE("bpe_tokenizer: decode inverts encode on any bytes; bad vocabularies, merges and ids are errors", "[data][text][bpe]") {
    const data::bpe_tokenizer tok(sample_texts, 320);  // the texts hold fewer pairs that occur twice
    CHECK(tok.vocabulary_size() < 320);
    std::mt19937 rng(3);
    for (int round = 0; round < 20; ++round) {
        std::string s(rng() % 300, '\0');
        for (auto& c : s) c = static_cast<char>(rng() % 256);
        CHECK(tok.decode(tok.encode(s)) == s);
    }
    CHECK_THROWS_WITH(data::bpe_tokenizer(sample_texts, 100), Catch::Contains("a vocabulary of 100 tokens"));
    CHECK_THROWS_WITH(data::bpe_tokenizer(sample_texts, 70000), Catch::Contains("a vocabulary of 70000 tokens"));
    CHECK_THROWS_WITH(data::bpe_tokenizer(std::vector<data::bpe_tokenizer::merge>{{97, 98}, {257, 1}}),
                      Catch::Contains("merge 1 of tokens 257 and 1"));
    const std::vector<token_id> bad{104, static_cast<token_id>(tok.vocabulary_size())};
    CHECK_THROWS_WITH(tok.decode(bad), Catch::Contains("token " + std::to_string(bad[1]) + " at position 1"));
    CHECK_THROWS_AS(tok.bytes_of(static_cast<token_id>(5000)), data::label_error);
}

TEST_CASE("bpe_tokenizer: on the real fortune files, 1,024 tokens hold over 2 bytes each", "[data][text][bpe][fortunes]") {
    if (!std::filesystem::exists(data::fortunes_default_path)) {
        WARN("skipped: " << data::fortunes_default_path << " is not installed (Debian's fortunes package)");
        return;
    }
    const data::text_corpus corpus(data::fortunes_default_path);
    std::vector<std::string_view> texts;
    std::size_t bytes = 0, tokens = 0;
    for (std::size_t i = 0; i < corpus.size(); i += 4) texts.push_back(corpus.document(i)), bytes += corpus.document(i).size();
    const data::bpe_tokenizer tok(texts, 1024);
    CHECK(tok.vocabulary_size() == 1024);
    for (const auto t : texts) {
        const auto ids = tok.encode(t);
        tokens += ids.size();
        REQUIRE(tok.decode(ids) == t);
    }
    CHECK(double(bytes) / double(tokens) > 2.0);
}

}  // namespace test_bpe
