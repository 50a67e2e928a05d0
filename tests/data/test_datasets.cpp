// Datasets: the Fashion-MNIST IDX reader on the real files, CIFAR-10 on files written here, the
// synthetic and in-memory datasets, every bad-input case, and the helpers (random, normalize, augment).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <set>
#include <vector>

#include "helpers.hpp"
#include "tessera/data.hpp"

namespace test_datasets {

namespace data = tessera::data;
using tessera_test::temp_dir;

namespace {

/// The real files, read once per test binary (std::nullopt when the package is not installed).
const std::optional<std::pair<data::in_memory_dataset<std::uint8_t>, data::in_memory_dataset<std::uint8_t>>>& fashion() {
    static const auto sets = []() -> std::optional<std::pair<data::in_memory_dataset<std::uint8_t>,
                                                             data::in_memory_dataset<std::uint8_t>>> {
        if (!std::filesystem::exists(std::filesystem::path(data::fashion_mnist_default_path) / "train-images-idx3-ubyte.gz"))
            return std::nullopt;
        return std::pair{data::fashion_mnist(data::split::train), data::fashion_mnist(data::split::test)};
    }();
    return sets;
}

/// Decompresses with zlib's gzFile API: an independent path from the reader's inflate loop.
std::vector<std::uint8_t> gzread_all(const std::filesystem::path& p) {
    gzFile f = gzopen(p.string().c_str(), "rb");
    REQUIRE(f != nullptr);
    std::vector<std::uint8_t> out;
    std::array<std::uint8_t, 65536> chunk{};
    int got = 0;
    while ((got = gzread(f, chunk.data(), chunk.size())) > 0) out.insert(out.end(), chunk.begin(), chunk.begin() + got);
    gzclose(f);
    return out;
}

/// A small valid IDX pair (images N x H x W, labels N) in `dir`, gzip-compressed.
void write_idx_pair(const temp_dir& dir, std::uint32_t n, std::uint32_t h, std::uint32_t w, std::uint8_t classes) {
    std::vector<std::uint8_t> pixels(n * h * w), labels(n);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7 % 256);
    for (std::uint32_t i = 0; i < n; ++i) labels[i] = static_cast<std::uint8_t>(i % classes);
    tessera_test::write_gzip(dir / "train-images-idx3-ubyte.gz", tessera_test::idx_bytes(0x803, {n, h, w}, pixels));
    tessera_test::write_gzip(dir / "train-labels-idx1-ubyte.gz", tessera_test::idx_bytes(0x801, {n}, labels));
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

}  // namespace

TEST_CASE("Fashion-MNIST: the real files have the documented counts, shape and class balance", "[data][fashion]") {
    // A declared dependency (scripts/install-deps.sh installs dataset-fashion-mnist): missing is a failure.
    INFO("dataset-fashion-mnist must be installed in " << data::fashion_mnist_default_path);
    REQUIRE(fashion().has_value());
    const auto& [train, test] = *fashion();
    CHECK(train.size() == 60000);
    CHECK(test.size() == 10000);
    CHECK(train.shape() == data::sample_shape{1, 28, 28});
    CHECK(test.shape() == data::sample_shape{1, 28, 28});
    CHECK(train.num_classes() == 10);

    std::array<std::size_t, 10> train_histogram{}, test_histogram{};
    for (auto y : train.labels()) ++train_histogram[static_cast<std::size_t>(y)];
    for (auto y : test.labels()) ++test_histogram[static_cast<std::size_t>(y)];
    for (std::size_t c = 0; c < 10; ++c) {
        CHECK(train_histogram[c] == 6000);
        CHECK(test_histogram[c] == 1000);
    }
    // The first training and test images are ankle boots (label 9), as published.
    CHECK(train.labels()[0] == 9);
    CHECK(test.labels()[0] == 9);
    CHECK(data::fashion_mnist_classes[9] == "Ankle boot");

    // Every byte of the test split agrees with zlib's gzread of the same files.
    const auto dir = std::filesystem::path(data::fashion_mnist_default_path);
    const auto images = gzread_all(dir / "t10k-images-idx3-ubyte.gz");
    const auto labels = gzread_all(dir / "t10k-labels-idx1-ubyte.gz");
    REQUIRE(images.size() == 16 + 10000 * 784);
    REQUIRE(labels.size() == 8 + 10000);
    CHECK(std::equal(test.values().begin(), test.values().end(), images.begin() + 16));
    CHECK(std::equal(test.labels().begin(), test.labels().end(), labels.begin() + 8,
                     [](data::label_t a, std::uint8_t b) { return a == b; }));
    std::vector<std::uint8_t> sample(784);
    CHECK(test.read(1234, sample) == labels[8 + 1234]);
    CHECK(std::equal(sample.begin(), sample.end(), images.begin() + 16 + 1234 * 784));
}

TEST_CASE("IDX reader: gzip and plain files, and the directory parameter", "[data][idx]") {
    temp_dir dir;
    write_idx_pair(dir, 20, 28, 28, 10);
    const auto ds = data::fashion_mnist(data::split::train, dir.path());
    REQUIRE(ds.size() == 20);
    CHECK(ds.labels()[13] == 3);
    CHECK(ds.sample(2)[5] == static_cast<std::uint8_t>((2 * 784 + 5) * 7 % 256));

    // The same content uncompressed reads the same (detected by magic number, not by name).
    const auto plain = tessera_test::idx_bytes(0x801, {3}, {1, 2, 3});
    tessera_test::write_bytes(dir / "plain-labels", plain);
    const auto arr = data::read_idx(dir / "plain-labels", 1);
    CHECK(arr.dims == std::vector<std::size_t>{3});
    CHECK(arr.values == std::vector<std::uint8_t>{1, 2, 3});
}

TEST_CASE("IDX reader: every bad input is a typed error naming file, offset and expectation", "[data][idx][errors]") {
    temp_dir dir;

    SECTION("missing file") {
        const auto e = require_throws<data::missing_file_error>([&] { (void)data::fashion_mnist(data::split::test, dir.path()); });
        CHECK(e.file() == (dir / "t10k-images-idx3-ubyte.gz").string());
        CHECK_THAT(e.what(), Catch::Contains("t10k-images-idx3-ubyte.gz") && Catch::Contains("no such file"));
    }
    SECTION("wrong magic number: a label file where images are expected") {
        write_idx_pair(dir, 4, 28, 28, 10);
        std::filesystem::copy_file(dir / "train-labels-idx1-ubyte.gz", dir / "train-images-idx3-ubyte.gz",
                                   std::filesystem::copy_options::overwrite_existing);
        const auto e = require_throws<data::bad_magic_error>([&] { (void)data::fashion_mnist(data::split::train, dir.path()); });
        CHECK(e.offset() == 0);
        CHECK(e.found() == "magic number 0x00000801");
        CHECK_THAT(e.expected(), Catch::StartsWith("0x00000803"));
    }
    SECTION("truncated gzip stream") {
        write_idx_pair(dir, 50, 28, 28, 10);
        auto bytes = tessera_test::read_bytes(dir / "train-images-idx3-ubyte.gz");
        const std::size_t keep = bytes.size() / 2;
        bytes.resize(keep);
        tessera_test::write_bytes(dir / "train-images-idx3-ubyte.gz", bytes);
        const auto e = require_throws<data::corrupt_data_error>([&] { (void)data::fashion_mnist(data::split::train, dir.path()); });
        CHECK_THAT(e.found(), Catch::Contains("truncated"));
        CHECK(e.offset() == keep);  // zlib consumed every byte there was
        CHECK(e.file() == (dir / "train-images-idx3-ubyte.gz").string());
    }
    SECTION("corrupted gzip stream") {
        write_idx_pair(dir, 50, 28, 28, 10);
        auto bytes = tessera_test::read_bytes(dir / "train-images-idx3-ubyte.gz");
        for (std::size_t i = 20; i < 60; ++i) bytes[i] ^= 0x5A;
        tessera_test::write_bytes(dir / "train-images-idx3-ubyte.gz", bytes);
        const auto e = require_throws<data::corrupt_data_error>([&] { (void)data::fashion_mnist(data::split::train, dir.path()); });
        CHECK_THAT(e.found(), Catch::Contains("gzip"));
        CHECK(e.expected() == "a valid gzip stream");
    }
    SECTION("bad gzip trailer (CRC)") {
        write_idx_pair(dir, 5, 28, 28, 10);
        auto bytes = tessera_test::read_bytes(dir / "train-labels-idx1-ubyte.gz");
        bytes[bytes.size() - 6] ^= 0xFF;  // inside the CRC-32 of the trailer
        tessera_test::write_bytes(dir / "train-labels-idx1-ubyte.gz", bytes);
        const auto e = require_throws<data::corrupt_data_error>([&] { (void)data::fashion_mnist(data::split::train, dir.path()); });
        CHECK_THAT(e.found(), Catch::Contains("incorrect data check"));
    }
    SECTION("count mismatch between images and labels") {
        write_idx_pair(dir, 5, 28, 28, 10);
        tessera_test::write_gzip(dir / "train-labels-idx1-ubyte.gz", tessera_test::idx_bytes(0x801, {4}, {0, 1, 2, 3}));
        const auto e = require_throws<data::count_mismatch_error>([&] { (void)data::fashion_mnist(data::split::train, dir.path()); });
        CHECK(e.found() == "4 labels");
        CHECK_THAT(e.expected(), Catch::StartsWith("5 labels"));
    }
    SECTION("header count vs payload mismatch") {
        tessera_test::write_gzip(dir / "train-images-idx3-ubyte.gz",
                                 tessera_test::idx_bytes(0x803, {3, 28, 28}, std::vector<std::uint8_t>(2 * 784)));
        const auto e = require_throws<data::count_mismatch_error>([&] { (void)data::fashion_mnist(data::split::train, dir.path()); });
        CHECK(e.offset() == 16);
        CHECK(e.found() == "1568 bytes of values");
        CHECK_THAT(e.expected(), Catch::Contains("2352") && Catch::Contains("3x28x28"));
    }
    SECTION("label out of range") {
        write_idx_pair(dir, 5, 28, 28, 10);
        tessera_test::write_gzip(dir / "train-labels-idx1-ubyte.gz", tessera_test::idx_bytes(0x801, {5}, {0, 1, 2, 10, 4}));
        const auto e = require_throws<data::label_error>([&] { (void)data::fashion_mnist(data::split::train, dir.path()); });
        CHECK(e.offset() == 8 + 3);
        CHECK(e.found() == "label 10");
        CHECK(e.expected() == "a label in [0, 10)");
    }
    SECTION("image size Fashion-MNIST does not have") {
        write_idx_pair(dir, 5, 32, 32, 10);
        const auto e = require_throws<data::shape_error>([&] { (void)data::fashion_mnist(data::split::train, dir.path()); });
        CHECK(e.found() == "images of 1x32x32");
        CHECK_THAT(e.expected(), Catch::Contains("1x28x28"));
    }
    SECTION("every error is a dataset_error and a std::runtime_error") {
        CHECK_THROWS_AS(data::fashion_mnist(data::split::test, dir.path()), data::dataset_error);
        CHECK_THROWS_AS(data::fashion_mnist(data::split::test, dir.path()), std::runtime_error);
    }
}

namespace {

/// Writes CIFAR-10 binary records: label byte, then R, G and B planes of 32x32.
std::vector<std::uint8_t> cifar_records(std::size_t n, std::size_t first_id) {
    std::vector<std::uint8_t> out;
    for (std::size_t r = 0; r < n; ++r) {
        const std::size_t id = first_id + r;
        out.push_back(static_cast<std::uint8_t>(id % 10));
        for (std::size_t c = 0; c < 3; ++c)
            for (std::size_t k = 0; k < 1024; ++k) out.push_back(static_cast<std::uint8_t>((id * 31 + c * 85 + k) % 251));
    }
    return out;
}

}  // namespace

TEST_CASE("CIFAR-10 binary reader on files in the published format", "[data][cifar]") {
    temp_dir dir;
    for (int b = 1; b <= 5; ++b)
        tessera_test::write_bytes(dir / ("data_batch_" + std::to_string(b) + ".bin"), cifar_records(7, (b - 1) * 7));
    tessera_test::write_bytes(dir / "test_batch.bin", cifar_records(4, 1000));

    const auto train = data::cifar10(data::split::train, dir.path());
    const auto test = data::cifar10(data::split::test, dir.path());
    REQUIRE(train.size() == 35);
    REQUIRE(test.size() == 4);
    CHECK(train.shape() == data::sample_shape{3, 32, 32});
    CHECK(train.num_classes() == 10);
    for (std::size_t i = 0; i < train.size(); ++i) CHECK(train.labels()[i] == static_cast<data::label_t>(i % 10));
    std::vector<std::uint8_t> px(3072);
    CHECK(test.read(2, px) == 2);  // id 1002
    // Channel planes stay in file order (R, G, B): pixel k of channel c.
    CHECK(px[0] == (1002 * 31) % 251);
    CHECK(px[1024 + 5] == (1002 * 31 + 85 + 5) % 251);
    CHECK(px[2048 + 1023] == (1002 * 31 + 170 + 1023) % 251);
    CHECK(train.sample(20)[1024 + 7] == (20 * 31 + 85 + 7) % 251);
}

TEST_CASE("CIFAR-10 reader: bad files are typed errors", "[data][cifar][errors]") {
    temp_dir dir;
    for (int b = 1; b <= 5; ++b)
        tessera_test::write_bytes(dir / ("data_batch_" + std::to_string(b) + ".bin"), cifar_records(3, 0));

    SECTION("missing file") {
        std::filesystem::remove(dir / "data_batch_3.bin");
        const auto e = require_throws<data::missing_file_error>([&] { (void)data::cifar10(data::split::train, dir.path()); });
        CHECK(e.file() == (dir / "data_batch_3.bin").string());
    }
    SECTION("partial record") {
        auto bytes = cifar_records(3, 0);
        bytes.resize(bytes.size() - 100);
        tessera_test::write_bytes(dir / "data_batch_2.bin", bytes);
        const auto e = require_throws<data::corrupt_data_error>([&] { (void)data::cifar10(data::split::train, dir.path()); });
        CHECK(e.file() == (dir / "data_batch_2.bin").string());
        CHECK(e.offset() == 2 * 3073);  // where the partial record starts
        CHECK_THAT(e.found(), Catch::Contains("9119 bytes") && Catch::Contains("2973 bytes of a partial record"));
    }
    SECTION("label out of range") {
        auto bytes = cifar_records(3, 0);
        bytes[2 * 3073] = 10;
        tessera_test::write_bytes(dir / "data_batch_4.bin", bytes);
        const auto e = require_throws<data::label_error>([&] { (void)data::cifar10(data::split::train, dir.path()); });
        CHECK(e.offset() == 2 * 3073);
        CHECK_THAT(e.found(), Catch::StartsWith("label 10 in record 2"));
    }
}

TEST_CASE("in_memory_dataset checks its contents and reads samples", "[data][memory]") {
    data::in_memory_dataset<float> ds({1, 2, 2}, 3, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 0, 1});
    STATIC_REQUIRE(data::Dataset<data::in_memory_dataset<float>>);
    std::vector<float> out(4);
    CHECK(ds.read(1, out) == 0);
    CHECK(out == std::vector<float>{4, 5, 6, 7});
    const auto sub = ds.subset(1, 2);
    CHECK(sub.size() == 2);
    CHECK(sub.labels()[1] == 1);
    CHECK(sub.sample(1)[0] == 8.0f);

    CHECK_THROWS_AS(data::in_memory_dataset<float>({1, 2, 2}, 3, std::vector<float>(11), {0, 1, 2}), data::count_mismatch_error);
    const auto e = require_throws<data::label_error>(
        [] { data::in_memory_dataset<float>({1, 2, 2}, 3, std::vector<float>(12), {0, 3, 1}); });
    CHECK(e.offset() == 1);
    CHECK(e.found() == "label 3 of sample 1");
    std::vector<float> small(3);
    CHECK_THROWS_AS(ds.read(0, small), data::shape_error);
    CHECK_THROWS_AS(ds.read(3, out), std::out_of_range);
}

TEST_CASE("synthetic_images: deterministic, balanced and learnable", "[data][synthetic]") {
    const data::sample_shape shape{1, 8, 8};
    data::synthetic_images a(1000, shape, 10, 42), b(1000, shape, 10, 42), c(1000, shape, 10, 43);
    std::vector<std::uint8_t> x(64), y(64), z(64);
    CHECK(a.read(123, x) == b.read(123, y));
    CHECK(x == y);
    (void)c.read(123, z);
    CHECK(x != z);

    std::array<int, 10> histogram{};
    for (std::size_t i = 0; i < a.size(); ++i) ++histogram[static_cast<std::size_t>(a.label(i))];
    for (int h : histogram) CHECK(h == 100);

    // Class means from the first half classify the second half by nearest mean far above chance (10%).
    std::vector<double> means(10 * 64, 0.0);
    for (std::size_t i = 0; i < 500; ++i) {
        const auto label = static_cast<std::size_t>(a.read(i, x));
        for (std::size_t k = 0; k < 64; ++k) means[label * 64 + k] += x[k] / 50.0;
    }
    int correct = 0;
    for (std::size_t i = 500; i < 1000; ++i) {
        const auto label = a.read(i, x);
        double best = 1e300;
        int best_class = -1;
        for (int cls = 0; cls < 10; ++cls) {
            double d = 0;
            for (std::size_t k = 0; k < 64; ++k) d += std::pow(x[k] - means[static_cast<std::size_t>(cls) * 64 + k], 2);
            if (d < best) best = d, best_class = cls;
        }
        correct += best_class == label;
    }
    CHECK(correct >= 475);  // > 95 %
}

TEST_CASE("iterable_view splits a dataset into contiguous parts that cover it", "[data][iterable]") {
    data::synthetic_images ds(100, {1, 1, 1}, 10, 1);
    data::iterable_view view(ds);
    STATIC_REQUIRE(data::IterableDataset<data::iterable_view<data::synthetic_images>>);
    STATIC_REQUIRE(!data::IterableDataset<data::synthetic_images>);
    std::vector<std::size_t> sizes;
    std::size_t total = 0;
    std::uint8_t px = 0;
    for (std::size_t part = 0; part < 7; ++part) {
        view.reset(part, 7);
        std::size_t n = 0;
        while (auto y = view.next(std::span(&px, 1))) {
            CHECK(*y == static_cast<data::label_t>((part * 15 + n) % 10));
            ++n;
        }
        sizes.push_back(n);
        total += n;
    }
    CHECK(sizes == std::vector<std::size_t>{15, 15, 15, 15, 15, 15, 10});  // ceil(100 / 7) each, as PyTorch splits
    CHECK(total == 100);
    CHECK_THROWS_AS(view.reset(7, 7), std::invalid_argument);
}

TEST_CASE("splitmix64 matches the reference outputs and shuffles into permutations", "[data][random]") {
    data::splitmix64 g(1234567);  // reference values of Vigna's splitmix64.c
    CHECK(g.next() == 6457827717110365317ull);
    CHECK(g.next() == 3203168211198807973ull);
    CHECK(g.next() == 9817491932198370423ull);
    CHECK(g.next() == 4593380528125082431ull);
    CHECK(g.next() == 16408922859458223821ull);
    data::splitmix64 zero(0);
    CHECK(zero.next() == 0xE220A8397B1DCDAFull);

    std::array<int, 6> counts{};
    data::splitmix64 h(9);
    for (int i = 0; i < 60000; ++i) ++counts[h.below(6)];
    for (int c : counts) CHECK(std::abs(c - 10000) < 400);  // ~4.4 sigma

    std::vector<std::size_t> v(1000);
    std::iota(v.begin(), v.end(), 0);
    auto w = v;
    data::shuffle(std::span(w), 5);
    CHECK(w != v);
    auto sorted = w;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == v);
    auto again = v;
    data::shuffle(std::span(again), 5);
    CHECK(again == w);
    // The first moves of a Fisher-Yates shuffle driven by the same generator, recomputed by hand.
    data::splitmix64 ref(5);
    std::vector<std::size_t> hand(v);
    for (std::size_t i = hand.size(); i > 1; --i) std::swap(hand[i - 1], hand[ref.below(i)]);
    CHECK(hand == w);
}

TEST_CASE("normalize: per-channel mean/std into float and half", "[data][normalize]") {
    const data::sample_shape shape{3, 1, 2};
    const std::vector<std::uint8_t> in{0, 255, 128, 64, 10, 200, /* second sample */ 1, 2, 3, 4, 5, 6};
    const data::normalization n{.mean = {0.5f, 0.25f, 0.125f}, .stddev = {0.5f, 0.25f, 2.0f}};
    std::vector<float> out(in.size());
    data::normalize<std::uint8_t, float>(in, shape, n, out);
    for (std::size_t i = 0; i < in.size(); ++i) {
        const std::size_t c = (i % 6) / 2;
        const double expected = (in[i] / 255.0 - n.mean[c]) / n.stddev[c];
        CHECK(out[i] == Approx(expected).margin(1e-6));
    }
    std::vector<tessera::half> halves(in.size());
    data::normalize<std::uint8_t, tessera::half>(in, shape, n, halves);
    for (std::size_t i = 0; i < in.size(); ++i) CHECK(static_cast<float>(halves[i]) == static_cast<float>(tessera::half(out[i])));

    const std::vector<float> f{0.5f, 1.0f};
    std::vector<float> g(2);
    data::normalize<float, float>(f, {1, 1, 2}, {.mean = {0.5f}, .stddev = {0.5f}}, g);  // float input: scale 1
    CHECK(g == std::vector<float>{0.0f, 1.0f});

    CHECK_THROWS_AS((data::normalize<std::uint8_t, float>(in, shape, {.mean = {0.1f, 0.2f}}, out)), data::loader_error);
    CHECK_THROWS_AS((data::normalize<std::uint8_t, float>(in, shape, {.stddev = {0.0f}}, out)), data::loader_error);
    std::vector<float> wrong(5);
    CHECK_THROWS_AS((data::normalize<std::uint8_t, float>(in, shape, n, wrong)), data::shape_error);
}

TEST_CASE("augmentation: random crop with padding and horizontal flip, seeded", "[data][augment]") {
    const data::sample_shape shape{2, 5, 6};
    std::vector<float> original(shape.size());
    std::iota(original.begin(), original.end(), 1.0f);
    std::vector<float> scratch(shape.size());

    SECTION("flip with probability 1 mirrors every row of every channel") {
        auto x = original;
        data::splitmix64 g(1);
        data::augmentation(data::horizontal_flip{1.0f})(std::span(x), shape, g, std::span(scratch));
        for (std::size_t c = 0; c < 2; ++c)
            for (std::size_t r = 0; r < 5; ++r)
                for (std::size_t k = 0; k < 6; ++k) CHECK(x[(c * 5 + r) * 6 + k] == original[(c * 5 + r) * 6 + 5 - k]);
    }
    SECTION("crop is a shift by (dy, dx) in [-p, p] with zeros coming in") {
        std::set<std::pair<int, int>> shifts;
        for (std::uint64_t seed = 0; seed < 200; ++seed) {
            auto x = original;
            data::splitmix64 g(seed);
            data::augmentation(data::random_crop{2})(std::span(x), shape, g, std::span(scratch));
            // Recover the shift from where value original[c=0,y=2,x=3] (=16) went, or from the generator.
            data::splitmix64 replay(seed);
            const int dy = static_cast<int>(replay.below(5)) - 2, dx = static_cast<int>(replay.below(5)) - 2;
            shifts.insert({dy, dx});
            for (int c = 0; c < 2; ++c)
                for (int y = 0; y < 5; ++y)
                    for (int xx = 0; xx < 6; ++xx) {
                        const int sy = y + dy, sx = xx + dx;
                        const float expected = (sy >= 0 && sy < 5 && sx >= 0 && sx < 6) ? original[static_cast<std::size_t>((c * 5 + sy) * 6 + sx)] : 0.0f;
                        REQUIRE(x[static_cast<std::size_t>((c * 5 + y) * 6 + xx)] == expected);
                    }
        }
        CHECK(shifts.size() == 25);  // every offset in [-2, 2]^2 occurs
    }
    SECTION("composition applies steps in order; same seed, same result") {
        const data::augmentation aug = data::random_crop{1} | data::horizontal_flip{};
        CHECK(aug.steps().size() == 2);
        auto x = original, y = original;
        data::splitmix64 g1(77), g2(77);
        aug(std::span(x), shape, g1, std::span(scratch));
        aug(std::span(y), shape, g2, std::span(scratch));
        CHECK(x == y);
        // In order: the crop, then the flip, each drawing from the same generator in turn ...
        const data::augmentation crop = data::random_crop{1}, flip = data::horizontal_flip{};
        bool order_shows = false;
        for (std::uint64_t seed = 0; seed < 64; ++seed) {
            auto composed = original, by_hand = original, reversed = original;
            data::splitmix64 ga(seed), gb(seed), gc(seed);
            aug(std::span(composed), shape, ga, std::span(scratch));
            crop(std::span(by_hand), shape, gb, std::span(scratch));
            flip(std::span(by_hand), shape, gb, std::span(scratch));
            REQUIRE(composed == by_hand);
            // ... which is not the flip, then the crop (for some seeds the two differ).
            (data::horizontal_flip{} | data::random_crop{1})(std::span(reversed), shape, gc, std::span(scratch));
            order_shows = order_shows || reversed != composed;
        }
        CHECK(order_shows);
        int flipped = 0;
        for (std::uint64_t s = 0; s < 1000; ++s) {
            data::splitmix64 g(s);
            (void)g.below(3);
            (void)g.below(3);
            flipped += g.unit_float() < 0.5f;
        }
        CHECK(std::abs(flipped - 500) < 70);
    }
}

TEST_CASE("IDX reader: headers are not trusted (overflowing dimensions, rank 0)", "[data][idx][errors]") {
    temp_dir dir;
    // {65536, 2^24, 2^24} with an empty payload: the product overflows 64 bits and must not pass.
    tessera_test::write_bytes(dir / "huge.idx", tessera_test::idx_bytes(0x0803, {65536, 1u << 24, 1u << 24}, {}));
    const auto e = require_throws<data::count_mismatch_error>([&] { (void)data::read_idx(dir / "huge.idx", 3); });
    CHECK_THAT(e.what(), Catch::Contains("more bytes than memory can address") && Catch::Contains("65536x16777216x16777216"));
    // A product that fits but disagrees with the payload.
    tessera_test::write_bytes(dir / "short.idx", tessera_test::idx_bytes(0x0803, {2, 1u << 20, 1u << 20}, {1, 2, 3}));
    (void)require_throws<data::count_mismatch_error>([&] { (void)data::read_idx(dir / "short.idx", 3); });
    REQUIRE_THROWS_WITH(data::read_idx(dir / "short.idx", 0), Catch::Contains("rank must be 1 to 8, got 0"));
}

TEST_CASE("IDX reader: a gzip file inflates no further than its header declares", "[data][idx][gzip][errors]") {
    temp_dir dir;
    // Two 28 x 28 images declared, then 200 MB of zeros: about 200 KB compressed, written in pieces.
    const auto header = tessera_test::idx_bytes(0x0803, {2, 28, 28}, {});
    {
        gzFile f = gzopen((dir / "bomb-images.gz").string().c_str(), "wb9");
        REQUIRE(f != nullptr);
        gzwrite(f, header.data(), static_cast<unsigned>(header.size()));
        const std::vector<std::uint8_t> zeros(1u << 20, 0);
        for (int i = 0; i < 200; ++i) gzwrite(f, zeros.data(), static_cast<unsigned>(zeros.size()));
        gzclose(f);
    }
    const auto compressed = tessera_test::read_bytes(dir / "bomb-images.gz");
    CHECK(compressed.size() < 400'000);
    // gunzip_prefix stops where it is told: the header and the declared values and one byte, no more.
    const auto prefix = data::gunzip_prefix(compressed, "bomb-images.gz", 16 + 2 * 784 + 1);
    CHECK(prefix.size() == 16 + 2 * 784 + 1);
    CHECK(std::vector<std::uint8_t>(prefix.begin(), prefix.begin() + 16) == header);
    const auto e = require_throws<data::count_mismatch_error>([&] { (void)data::read_idx(dir / "bomb-images.gz", 3); });
    CHECK(e.offset() == 16);
    CHECK(e.found() == "more than 1568 bytes of values");
    CHECK_THAT(e.expected(), Catch::Contains("1568 bytes") && Catch::Contains("2x28x28"));
    // A prefix longer than the stream is the whole stream, checked to its end (CRC and length).
    tessera_test::write_gzip(dir / "small.gz", tessera_test::idx_bytes(0x0801, {3}, {1, 2, 3}));
    const auto small = tessera_test::read_bytes(dir / "small.gz");
    CHECK(data::gunzip_prefix(small, "small.gz", 1000) == tessera_test::idx_bytes(0x0801, {3}, {1, 2, 3}));
    auto bad_crc = small;
    bad_crc[bad_crc.size() - 6] ^= 0xFF;
    CHECK_THROWS_AS(data::gunzip_prefix(bad_crc, "small.gz", 1000), data::corrupt_data_error);
    // A header cut short inside the gzip stream is reported as such, at the offset where the data ends.
    tessera_test::write_gzip(dir / "cut.gz", {0, 0, 8, 3, 0, 0});
    const auto cut = require_throws<data::corrupt_data_error>([&] { (void)data::read_idx(dir / "cut.gz", 3); });
    CHECK(cut.offset() == 6);
    CHECK_THAT(cut.found(), Catch::Contains("inside the header"));
}

TEST_CASE("IDX reader: a gzip header that declares more than the file can hold is refused before inflating",
          "[data][idx][gzip][errors]") {
    temp_dir dir;
    // The file: 2^24 x 256 x 256 bytes (2^40) declared over 16 MiB of deflated zeros (about 16 KB).
    // Refused before inflating: by the limit (2^40 + 16 > 4 GiB); before the fix it inflated all 16 MiB.
    const auto header = tessera_test::idx_bytes(0x0803, {1u << 24, 256, 256}, {});
    {
        gzFile f = gzopen((dir / "terabyte-images.gz").string().c_str(), "wb9");
        REQUIRE(f != nullptr);
        gzwrite(f, header.data(), static_cast<unsigned>(header.size()));
        const std::vector<std::uint8_t> zeros(1u << 20, 0);
        for (int i = 0; i < 16; ++i) gzwrite(f, zeros.data(), static_cast<unsigned>(zeros.size()));
        gzclose(f);
    }
    const auto terabyte = require_throws<data::corrupt_data_error>([&] { (void)data::read_idx(dir / "terabyte-images.gz", 3); });
    CHECK(terabyte.offset() == 16);
    CHECK(terabyte.found() == "a file of 1099511627792 bytes, as the header declares 16777216x256x256");
    CHECK(terabyte.expected() == "at most 4294967296 bytes inflated (data::default_inflate_limit)");
    // Under the limit but more than deflate's largest ratio allows: 1000 x 256 x 256 bytes (65 MB) declared
    // in a file of a few dozen bytes, which can inflate to at most 1032 times its size.
    tessera_test::write_gzip(dir / "small-images.gz", tessera_test::idx_bytes(0x0803, {1000, 256, 256}, {1, 2, 3}));
    const auto size = tessera_test::read_bytes(dir / "small-images.gz").size();
    REQUIRE(size * data::deflate_max_ratio < 1000u * 256 * 256);
    const auto ratio = require_throws<data::count_mismatch_error>([&] { (void)data::read_idx(dir / "small-images.gz", 3); });
    CHECK(ratio.offset() == 16);
    CHECK(ratio.found() == std::to_string(size) + " bytes of gzip data, which inflate to at most " +
                               std::to_string(size * 1032) + " bytes (deflate's largest ratio, 1032:1)");
    CHECK(ratio.expected() == "65536016 bytes, as the header declares 1000x256x256");
    // The bounds saturate rather than wrap, and a file that deflate could have made is read as before.
    CHECK(data::max_inflated_size(SIZE_MAX / 1000) == SIZE_MAX);
    CHECK(data::max_inflated_size(10) == 10320);
    tessera_test::write_gzip(dir / "zeros-images.gz", tessera_test::idx_bytes(0x0803, {64, 256, 256}, std::vector<std::uint8_t>(64u << 16, 0)));
    CHECK(data::read_idx(dir / "zeros-images.gz", 3).values.size() == 64u << 16);
}

TEST_CASE("gzip reader: bounded output, concatenated members, no trailing garbage", "[data][gzip][errors]") {
    temp_dir dir;
    // A "bomb": 64 MiB of zeros compresses to ~64 KiB; a 1 MiB limit stops it with a clear error.
    std::vector<std::uint8_t> zeros(64u << 20, 0);
    tessera_test::write_gzip(dir / "bomb.gz", zeros);
    const auto compressed = tessera_test::read_bytes(dir / "bomb.gz");
    CHECK(compressed.size() < zeros.size() / 100);
    const auto e = require_throws<data::corrupt_data_error>([&] { (void)data::gunzip(compressed, "bomb.gz", 1u << 20); });
    CHECK_THAT(e.what(), Catch::Contains("inflates to more than 1048576 bytes"));
    CHECK(data::gunzip(compressed, "bomb.gz").size() == zeros.size());  // under the default limit
    CHECK(data::gunzip(compressed, "bomb.gz", SIZE_MAX).size() == zeros.size());  // no limit: no wrap to 0
    // Two members, as `cat a.gz b.gz` makes: both are read, in order.
    tessera_test::write_gzip(dir / "a.gz", {1, 2, 3});
    tessera_test::write_gzip(dir / "b.gz", {4, 5});
    auto both = tessera_test::read_bytes(dir / "a.gz");
    const auto b = tessera_test::read_bytes(dir / "b.gz");
    both.insert(both.end(), b.begin(), b.end());
    CHECK(data::gunzip(both, "ab.gz") == std::vector<std::uint8_t>{1, 2, 3, 4, 5});
    // Garbage after the stream is an error naming where it starts.
    auto trailing = tessera_test::read_bytes(dir / "a.gz");
    const auto end = trailing.size();
    trailing.insert(trailing.end(), {'j', 'u', 'n', 'k'});
    const auto t = require_throws<data::corrupt_data_error>([&] { (void)data::gunzip(trailing, "a.gz"); });
    CHECK(t.offset() == end);
    CHECK_THAT(t.what(), Catch::Contains("4 trailing bytes after the gzip stream"));
}

}  // namespace test_datasets
