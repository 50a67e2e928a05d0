// Token ids through data_loader: std::uint16_t batches arrive bit for bit in every mode, shuffled,
// sharded, padded or not, and the options that would change them (augmentation, normalisation) are refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/data.hpp"

namespace test_token_loader {

namespace data = tessera::data;

namespace {

/// Byte b is token b * 257 + 1 (b < 255) or 65535 (b = 255): ids across the whole uint16 range, most
/// of them above 2048 (where half would round them) and above 255 (where a byte would cut them).
struct wide_tokenizer {
    [[nodiscard]] static constexpr std::size_t vocabulary_size() noexcept { return 65536; }
    [[nodiscard]] std::vector<data::token_id> encode(std::string_view text) const {
        std::vector<data::token_id> out;
        for (const char c : text) {
            const auto b = static_cast<unsigned char>(c);
            out.push_back(static_cast<data::token_id>(b == 255 ? 65535 : b * 257 + 1));
        }
        return out;
    }
};
static_assert(data::Tokenizer<wide_tokenizer>);

/// 120 documents of varied bytes (all 256 values occur).
data::text_corpus varied_corpus() {
    std::vector<std::string> docs;
    for (std::size_t i = 0; i < 120; ++i) {
        std::string d;
        for (std::size_t k = 0; k < 5 + i % 13; ++k) d.push_back(static_cast<char>((i * 31 + k * 17) % 256));
        docs.push_back(d);
    }
    return data::text_corpus(docs, "varied");
}

constexpr data::loader_mode all_modes[] = {data::loader_mode::sync, data::loader_mode::async,
                                           data::loader_mode::async_rebatched};

}  // namespace

TEST_CASE("data_loader: std::uint16_t token windows arrive bit for bit in every mode, shuffled and sharded",
          "[data][loader][text]") {
    const auto corpus = varied_corpus();
    const data::token_windows<wide_tokenizer> windows(corpus, data::text_part::train, 9);
    using loader_type = decltype(data::data_loader(windows, 4));
    static_assert(std::is_same_v<loader_type::value_type, std::uint16_t>);  // the default for token ids
    REQUIRE(windows.size() >= 40);
    REQUIRE(std::any_of(windows.tokens().begin(), windows.tokens().end(), [](auto t) { return t == 65535; }));
    const std::size_t n = windows.size(), T1 = windows.context() + 1;

    for (const bool drop_last : {true, false})
        for (const std::size_t ranks : {1u, 2u})
            for (const auto mode : all_modes)
                for (const std::size_t workers : {0u, 1u, 3u}) {
                    INFO("drop_last " << drop_last << " ranks " << ranks << " mode " << static_cast<int>(mode) << " workers " << workers);
                    std::vector<std::size_t> seen;
                    std::vector<std::size_t> first_batch;
                    for (std::size_t r = 0; r < ranks; ++r) {
                        data::data_loader<data::token_windows<wide_tokenizer>, std::uint16_t> loader(
                            windows, 4, {.shuffle = true, .seed = 21, .drop_last = drop_last, .num_workers = workers, .mode = mode,
                                         .rank = r, .size = ranks});
                        for (auto& batch : loader) {
                            REQUIRE(batch.shape() == data::sample_shape{1, 1, T1});
                            for (std::size_t j = 0; j < batch.size(); ++j) {
                                const auto got = batch.image(j);
                                if (batch.mask()[j] == 0) {
                                    REQUIRE(std::all_of(got.begin(), got.end(), [](auto t) { return t == 0; }));
                                    continue;
                                }
                                const std::size_t index = batch.indices()[j];
                                const auto want = windows.window(index);
                                REQUIRE(std::equal(got.begin(), got.end(), want.begin(), want.end()));  // bit for bit
                                REQUIRE(batch.labels()[j] == static_cast<data::label_t>(want.back()));
                                seen.push_back(index);
                                if (r == 0 && batch.number() == 0) first_batch.push_back(index);
                            }
                        }
                    }
                    auto sorted = seen;
                    std::sort(sorted.begin(), sorted.end());
                    REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // no window twice
                    if (!drop_last) REQUIRE(sorted.size() == n);                               // and all of them
                    REQUIRE(sorted.size() >= n - 4 * ranks + 1);
                    // Shuffled: the first batch is not windows 0..3.
                    REQUIRE(first_batch.size() == 4);
                    CHECK(first_batch != std::vector<std::size_t>{0, 1, 2, 3});
                }

    // The same windows through an iterable view, batched by the async_rebatched workers.
    const data::iterable_view view(windows);
    data::data_loader<data::iterable_view<data::token_windows<wide_tokenizer>>> stream(
        view, 4, {.drop_last = false, .num_workers = 3, .mode = data::loader_mode::async_rebatched});
    std::vector<std::vector<data::token_id>> streamed, expected;
    for (auto& batch : stream)
        for (std::size_t j = 0; j < batch.valid(); ++j) {
            const auto got = batch.image(j);
            streamed.emplace_back(got.begin(), got.end());
        }
    for (std::size_t w = 0; w < n; ++w) expected.emplace_back(windows.window(w).begin(), windows.window(w).end());
    std::sort(streamed.begin(), streamed.end());  // the workers' parts interleave: compare as multisets
    std::sort(expected.begin(), expected.end());
    CHECK(streamed == expected);
}

TEST_CASE("data_loader: augmentation and normalisation of token ids are refused", "[data][loader][text][errors]") {
    const auto corpus = varied_corpus();
    const data::token_windows<> windows(corpus, data::text_part::train, 5);
    CHECK_THROWS_WITH(data::data_loader(windows, 2, {.augment = data::horizontal_flip{}}),
                      Catch::Contains("augmentation of token ids"));
    CHECK_THROWS_WITH(data::data_loader(windows, 2, {.normalize = {.mean = {0.5f}}}),
                      Catch::Contains("normalization of token ids"));
    CHECK_THROWS_WITH(data::data_loader(windows, 2, {.normalize = {.scale = 1.0f}}),
                      Catch::Contains("normalization of token ids"));
    CHECK_NOTHROW(data::data_loader(windows, 2, {.shuffle = true}));
}

}  // namespace test_token_loader
