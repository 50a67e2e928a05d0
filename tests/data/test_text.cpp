// Text data: fortune files parsed into documents, the byte tokenizer, the held-out split, windows of
// tokens, their errors, the real corpus, and scripts/ngram_baseline.py's counts against the library's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "helpers.hpp"
#include "tessera/data.hpp"

namespace test_text {

namespace data = tessera::data;
using tessera_test::temp_dir;

namespace {

void write_text(const std::filesystem::path& p, std::string_view text) {
    tessera_test::write_bytes(p, std::vector<std::uint8_t>(text.begin(), text.end()));
}

template <class E, class F>
E require_throws(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e;
    }
    FAIL("the expected exception was not thrown");
    throw std::logic_error("unreachable");
}

std::vector<std::string> documents_of(const data::text_corpus& c) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < c.size(); ++i) out.emplace_back(c.document(i));
    return out;
}

/// SplitMix64's first output for seed x, written out from the published constants (not data::splitmix64).
std::uint64_t first_splitmix64(std::uint64_t x) {
    std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/// A corpus of `n` documents, document i being "doc <i>\n" repeated (i % 3 + 1) times.
data::text_corpus numbered_corpus(std::size_t n) {
    std::vector<std::string> docs;
    for (std::size_t i = 0; i < n; ++i) {
        std::string d;
        for (std::size_t r = 0; r <= i % 3; ++r) d += "doc " + std::to_string(i) + "\n";
        docs.push_back(d);
    }
    return data::text_corpus(docs, "numbered");
}

/// Runs `command` and returns what it printed on stdout, or std::nullopt if it failed.
std::optional<std::string> run(const std::string& command) {
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> pipe(::popen(command.c_str(), "r"), &::pclose);
    if (!pipe) return std::nullopt;
    std::string out;
    char buffer[4096];
    while (const std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe.get())) out.append(buffer, got);
    return out;
}

}  // namespace

TEST_CASE("text_corpus: fortune files split into documents at % lines, CRLF, trailing entries, empty entries",
          "[data][text]") {
    const temp_dir dir;
    // Names sort b_crlf < c_tail < z_empty; a.dat and a NUL file are skipped, a subdirectory is not entered.
    write_text(dir / "c_tail", "first of c\n%\n  indented\n\n second line  \t\n%\nno percent after me");
    write_text(dir / "b_crlf", "one\r\ntwo\r\n%\r\nthree\r\n%\r\n");
    write_text(dir / "z_empty", "%\n%\n   \n\t\n%\nlast\n%\n");
    write_text(dir / "a.dat", "fake index\n%\nnot a document\n");
    write_text(dir / "b_crlf.u8", "linked twin\n%\n");
    write_text(dir / ".hidden", "hidden\n%\n");
    constexpr char binary[] = "text\n%\nwith a \0 byte\n";  // 21 bytes, one of them NUL
    write_text(dir / "binary", std::string_view(binary, sizeof binary - 1));
    std::filesystem::create_directory(dir / "off");
    write_text(dir / "off" / "nested", "never read\n%\n");

    const data::text_corpus corpus(dir.path());
    const std::vector<std::string> expected = {"one\ntwo\n", "three\n", "first of c\n", "  indented\n\n second line\n",
                                               "no percent after me\n", "last\n"};
    CHECK(documents_of(corpus) == expected);
    std::size_t bytes = 0;
    for (const auto& d : expected) bytes += d.size();
    CHECK(corpus.bytes() == bytes);
    REQUIRE(corpus.files().size() == 3);
    CHECK(std::filesystem::path(corpus.files()[0]).filename() == "b_crlf");
    CHECK(std::filesystem::path(corpus.files()[1]).filename() == "c_tail");
    CHECK(std::filesystem::path(corpus.files()[2]).filename() == "z_empty");
    std::vector<std::string> skipped;
    for (const auto& s : corpus.skipped()) skipped.push_back(std::filesystem::path(s).filename().string());
    std::sort(skipped.begin(), skipped.end());
    CHECK(skipped == std::vector<std::string>{".hidden", "a.dat", "b_crlf.u8", "binary", "off"});

    // One file given directly is read whatever its name; the same bytes as from the directory.
    const data::text_corpus one(dir / "b_crlf");
    CHECK(documents_of(one) == std::vector<std::string>{"one\ntwo\n", "three\n"});
    // In-memory documents are kept as given.
    const data::text_corpus memory(std::vector<std::string>{"a", "", "b\n\n"});
    CHECK(documents_of(memory) == std::vector<std::string>{"a", "", "b\n\n"});
    CHECK(memory.bytes() == 4);
}

TEST_CASE("text_corpus: a missing path, an unreadable file and a corpus without documents are typed errors",
          "[data][text][errors]") {
    const temp_dir dir;
    const auto missing = require_throws<data::missing_file_error>([&] { (void)data::text_corpus(dir / "nowhere"); });
    CHECK(missing.file() == (dir / "nowhere").string());
    CHECK(std::string(missing.what()).find("nowhere") != std::string::npos);
    CHECK(std::string(missing.what()).find("no such file") != std::string::npos);

    std::filesystem::create_directory(dir / "empty");
    write_text(dir / "empty" / "blank", "%\n  \n%\n");
    write_text(dir / "empty" / "x.dat", "index");
    const auto empty = require_throws<data::empty_dataset_error>([&] { (void)data::text_corpus(dir / "empty"); });
    CHECK(std::string(empty.what()).find("no document in 1 text file(s) (1 skipped)") != std::string::npos);
    CHECK(std::string(empty.what()).find("at least one non-empty") != std::string::npos);
    CHECK_THROWS_AS(data::text_corpus(std::vector<std::string>{}), data::empty_dataset_error);

    if (std::filesystem::exists("/dev/null")) {  // opens, but is no regular file: a file that cannot be read
        const auto device = require_throws<data::missing_file_error>([&] { (void)data::text_corpus("/dev/null"); });
        CHECK(std::string(device.what()).find("/dev/null") != std::string::npos);
        CHECK(std::string(device.what()).find("not a regular file") != std::string::npos);
    }
    write_text(dir / "locked", "secret\n%\n");
    std::filesystem::permissions(dir / "locked", std::filesystem::perms::none);
    if (std::FILE* f = std::fopen((dir / "locked").string().c_str(), "rb")) {  // root reads it anyway
        std::fclose(f);
        WARN("running as a user who can read a file without permissions: the unreadable-file case is skipped");
    } else {
        const auto locked = require_throws<data::missing_file_error>([&] { (void)data::text_corpus(dir / "locked"); });
        CHECK(std::string(locked.what()).find("locked") != std::string::npos);
        CHECK(std::string(locked.what()).find("cannot be opened") != std::string::npos);
    }
}

TEST_CASE("byte_tokenizer: bytes are tokens, decode inverts encode, ids above 255 are refused", "[data][text]") {
    const data::byte_tokenizer tok;
    CHECK(tok.vocabulary_size() == 256);
    const std::string text("A\xff\x00\n\xc3\xa9", 6);
    const auto ids = tok.encode(text);
    CHECK(ids == std::vector<data::token_id>{65, 255, 0, 10, 0xc3, 0xa9});
    CHECK(tok.decode(ids) == text);
    const std::vector<data::token_id> bad = {1, 2, 256};
    const auto e = require_throws<data::label_error>([&] { (void)tok.decode(bad); });
    CHECK(std::string(e.what()).find("token 256 at position 2") != std::string::npos);
}

TEST_CASE("text_split: document i is held out iff splitmix64(seed ^ i) % 100 < percent", "[data][text][split]") {
    for (const std::uint64_t seed : {0ull, 1ull, 0xDEADBEEFull})
        for (const std::uint32_t percent : {0u, 10u, 37u, 100u}) {
            const data::text_split split{.seed = seed, .held_out_percent = percent};
            std::size_t held = 0;
            for (std::size_t i = 0; i < 5000; ++i) {
                const bool naive = first_splitmix64(seed ^ i) % 100 < percent;
                REQUIRE(split.held_out(i) == naive);
                REQUIRE(split.in(data::text_part::held_out, i) == naive);
                REQUIRE(split.in(data::text_part::train, i) == !naive);
                held += naive ? 1 : 0;
            }
            INFO("seed " << seed << " percent " << percent);
            CHECK(held >= 5000 * percent / 100 - (percent % 100 ? 150 : 0));  // about the percentage
            CHECK(held <= 5000 * percent / 100 + (percent % 100 ? 150 : 0));
        }
    // The published first output of SplitMix64 seeded 0 (as test_datasets.cpp checks data::splitmix64).
    CHECK(first_splitmix64(0) == 0xE220A8397B1DCDAFull);
    CHECK(data::text_split{.seed = 0}.held_out(0) == (0xE220A8397B1DCDAFull % 100 < 10));
}

TEST_CASE("token_windows: T + 1 tokens of one part, labels the next T, against a naive slice", "[data][text][windows]") {
    const auto corpus = numbered_corpus(300);
    for (const std::uint64_t seed : {0ull, 5ull})
        for (const auto part : {data::text_part::train, data::text_part::held_out})
            for (const std::size_t stride : {0u, 3u, 20u}) {
                const std::size_t T = 7;
                const data::window_options options{.split = {.seed = seed, .held_out_percent = 25}, .stride = stride};
                const data::token_windows<> windows(corpus, part, T, options);
                INFO("seed " << seed << " held-out " << (part == data::text_part::held_out) << " stride " << stride);
                // The naive stream: the part's documents concatenated, byte by byte.
                std::string stream;
                std::size_t docs = 0;
                for (std::size_t i = 0; i < corpus.size(); ++i)
                    if ((first_splitmix64(seed ^ i) % 100 < 25) == (part == data::text_part::held_out)) {
                        stream += corpus.document(i);
                        ++docs;
                    }
                CHECK(windows.documents() == docs);
                REQUIRE(windows.tokens().size() == stream.size());
                const std::size_t step = stride == 0 ? T + 1 : stride;
                CHECK(windows.size() == (stream.size() - (T + 1)) / step + 1);
                CHECK(windows.stride() == step);
                CHECK(windows.shape() == data::sample_shape{1, 1, T + 1});
                CHECK(windows.num_classes() == 256);
                std::vector<data::token_id> out(T + 1);
                for (std::size_t w = 0; w < windows.size(); ++w) {
                    const data::label_t y = windows.read(w, out);
                    const std::string_view expected = std::string_view(stream).substr(w * step, T + 1);
                    for (std::size_t t = 0; t < T; ++t) {
                        REQUIRE(out[t] == static_cast<unsigned char>(expected[t]));          // what the model reads
                        REQUIRE(out[t + 1] == static_cast<unsigned char>(expected[t + 1]));  // its label
                    }
                    REQUIRE(y == static_cast<unsigned char>(expected[T]));
                }
                // Nothing past the end: the last window ends inside the stream.
                CHECK((windows.size() - 1) * step + T + 1 <= stream.size());
                CHECK_THROWS_AS(windows.read(windows.size(), out), std::out_of_range);
            }
}

TEST_CASE("token_windows: a window longer than the part, context 0, a bad percentage or buffer are errors naming the values",
          "[data][text][windows][errors]") {
    const data::text_corpus corpus(std::vector<std::string>{"abcdefghij", "klmno"});  // 15 bytes
    const data::window_options all_train{.split = {.held_out_percent = 0}};
    const auto longer = require_throws<data::shape_error>([&] { (void)data::token_windows<>(corpus, data::text_part::train, 15, all_train); });
    CHECK(std::string(longer.what()).find("15 tokens in 2 documents") != std::string::npos);
    CHECK(std::string(longer.what()).find("window of 16 tokens") != std::string::npos);
    const data::token_windows<> exact(corpus, data::text_part::train, 14, all_train);  // 15 tokens: one window
    CHECK(exact.size() == 1);
    // Nothing held out with 0 %: the held-out part is empty.
    const auto none = require_throws<data::shape_error>([&] { (void)data::token_windows<>(corpus, data::text_part::held_out, 3, all_train); });
    CHECK(std::string(none.what()).find("0 tokens in 0 documents") != std::string::npos);
    const auto zero = require_throws<data::shape_error>([&] { (void)data::token_windows<>(corpus, data::text_part::train, 0, all_train); });
    CHECK(std::string(zero.what()).find("context of 0") != std::string::npos);
    const auto percent = require_throws<data::dataset_error>(
        [&] { (void)data::token_windows<>(corpus, data::text_part::train, 3, {.split = {.held_out_percent = 101}}); });
    CHECK(std::string(percent.what()).find("held_out_percent 101") != std::string::npos);
    std::vector<data::token_id> small(3);
    const auto buffer = require_throws<data::shape_error>([&] { (void)exact.read(0, small); });
    CHECK(std::string(buffer.what()).find("a buffer of 3 tokens") != std::string::npos);
}

TEST_CASE("text corpus: the real fortune files (Debian's fortunes package)", "[data][text][fortunes]") {
    if (!std::filesystem::exists(data::fortunes_default_path)) {
        WARN(std::string(data::fortunes_default_path) + " does not exist (install Debian's fortunes package): skipped");
        return;
    }
    const data::text_corpus corpus(data::fortunes_default_path);
    CHECK(corpus.size() > 1000);
    CHECK(corpus.bytes() > 1'000'000);
    for (const auto& f : corpus.files()) {
        CHECK(!f.ends_with(".dat"));
        CHECK(!f.ends_with(".u8"));
    }
    for (std::size_t i = 0; i < corpus.size(); ++i) {
        const auto d = corpus.document(i);
        REQUIRE(d.size() >= 2);
        REQUIRE(d.back() == '\n');
        REQUIRE(d[d.size() - 2] != '\n');
        REQUIRE(d.find('\0') == std::string_view::npos);
        REQUIRE(d != "%\n");
    }
    const data::token_windows<> train(corpus, data::text_part::train, 256), held(corpus, data::text_part::held_out, 256);
    CHECK(train.documents() + held.documents() == corpus.size());
    CHECK(train.tokens().size() + held.tokens().size() == corpus.bytes());
    CHECK(held.tokens().size() * 100 > corpus.bytes() * 8);  // about 10 % of the bytes
    CHECK(held.tokens().size() * 100 < corpus.bytes() * 12);
}

TEST_CASE("scripts/ngram_baseline.py --counts agrees with text_corpus and token_windows on the held-out documents",
          "[data][text][script]") {
#if !defined(TESSERA_PYTHON3) || !defined(TESSERA_NGRAM_SCRIPT)
    WARN("python3 was not found at configure time: scripts/ngram_baseline.py is not compared");
#else
    const temp_dir dir;
    // Many small documents, so the held-out part of each seed is a different, non-trivial subset.
    std::string a, b;
    for (int i = 0; i < 150; ++i) a += "entry " + std::to_string(i) + (i % 7 == 0 ? "\r\n\r\n" : "\n") + "%\n";
    for (int i = 0; i < 90; ++i) b += std::string(static_cast<std::size_t>(i % 11), ' ') + "b" + std::to_string(i * i) + "\n%\n%\n";
    write_text(dir / "a", a);
    write_text(dir / "b", b + "tail without percent");
    write_text(dir / "a.dat", "x");
    std::vector<std::pair<std::string, std::string>> corpora = {{dir.path().string(), "temporary"}};
    if (std::filesystem::exists(data::fortunes_default_path)) corpora.emplace_back(data::fortunes_default_path, "fortunes");
    for (const auto& [path, what] : corpora)
        for (const std::uint64_t seed : {0ull, 3ull})
            for (const std::uint32_t percent : {10u, 30u}) {
                INFO(what << " seed " << seed << " percent " << percent);
                const auto out = run(std::string(TESSERA_PYTHON3) + " " + TESSERA_NGRAM_SCRIPT + " '" + path + "' --counts --seed " +
                                     std::to_string(seed) + " --held-out-percent " + std::to_string(percent));
                REQUIRE(out.has_value());
                INFO("the script printed: " << *out);
                std::istringstream in(*out);
                std::string k1, k2, k3, k4;
                std::size_t documents = 0, bytes = 0, held_documents = 0, held_bytes = 0;
                in >> k1 >> documents >> k2 >> bytes >> k3 >> held_documents >> k4 >> held_bytes;
                REQUIRE(k4 == "held_out_bytes");
                const data::text_corpus corpus(path);
                const data::token_windows<> held(corpus, data::text_part::held_out, 1,
                                                 {.split = {.seed = seed, .held_out_percent = percent}});
                CHECK(documents == corpus.size());
                CHECK(bytes == corpus.bytes());
                CHECK(held_documents == held.documents());
                CHECK(held_bytes == held.tokens().size());
                CHECK(held_documents > 0);
                CHECK(held_documents < documents);
            }
#endif
}

TEST_CASE("masked_lm: 15 % of positions chosen, 80/10/10 masked, random and kept, keyed by sample, epoch and seed",
          "[data][text][masked_lm]") {
    const data::masked_lm masking{.seed = 11, .mask_token = 256, .vocabulary = 256};
    constexpr std::size_t T = 512, samples = 200;
    std::size_t chosen = 0, masked = 0, kept = 0, replaced = 0;
    for (std::size_t i = 0; i < samples; ++i) {
        std::vector<std::uint16_t> tokens(T), original;
        for (std::size_t t = 0; t < T; ++t) tokens[t] = static_cast<std::uint16_t>((i * 31 + t * 7) % 256);
        original = tokens;
        std::vector<std::int32_t> labels(T);
        masking.apply(std::span<std::uint16_t>(tokens), std::span<std::int32_t>(labels), i, 2);
        // The same draws again for the same sample and epoch; others for another epoch or seed.
        auto again = original, other_epoch = original, other_seed = original;
        std::vector<std::int32_t> l2(T), l3(T), l4(T);
        masking.apply(std::span<std::uint16_t>(again), std::span<std::int32_t>(l2), i, 2);
        masking.apply(std::span<std::uint16_t>(other_epoch), std::span<std::int32_t>(l3), i, 3);
        data::masked_lm reseeded = masking;
        reseeded.seed = 12;
        reseeded.apply(std::span<std::uint16_t>(other_seed), std::span<std::int32_t>(l4), i, 2);
        REQUIRE(again == tokens);
        REQUIRE(l2 == labels);
        CHECK(l3 != labels);
        CHECK(l4 != labels);
        for (std::size_t t = 0; t < T; ++t) {
            if (labels[t] == data::masked_lm::ignore) {
                REQUIRE(tokens[t] == original[t]);
                continue;
            }
            REQUIRE(labels[t] == original[t]);
            ++chosen;
            if (tokens[t] == 256) ++masked;
            else if (tokens[t] == original[t]) ++kept;  // a random draw of the same token counts here too
            else {
                ++replaced;
                REQUIRE(tokens[t] < 256);
            }
        }
    }
    const double n = double(samples * T), c = double(chosen);
    // Binomial standard deviations: 0.15 of 102,400 positions ± 0.11 %; shares of ~15,360 ± 0.3 %.
    CHECK(c / n == Approx(0.15).margin(0.005));
    CHECK(masked / c == Approx(0.80).margin(0.015));
    CHECK(replaced / c == Approx(0.10 * 255.0 / 256.0).margin(0.01));
    CHECK(kept / c == Approx(0.10 + 0.10 / 256.0).margin(0.01));
    std::vector<std::uint16_t> few(3);
    std::vector<std::int32_t> two(2);
    CHECK_THROWS_WITH(masking.apply(std::span<std::uint16_t>(few), std::span<std::int32_t>(two), 0),
                      Catch::Contains("2 labels for 3 tokens"));
    CHECK_THROWS_WITH((data::masked_lm{.probability = 0.0, .vocabulary = 4}.check()), Catch::Contains("got 0.0"));
    CHECK_THROWS_WITH((data::masked_lm{.mask_token = 1}.check()), Catch::Contains("a vocabulary of at least 1 token"));
}

}  // namespace test_text
