// data_loader: combined batches, seeded shuffling, sharding, drop_last and masks, the three modes,
// rebatching, leases, 8-bit I/O, augmentation, and errors from worker threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tessera/data.hpp"

namespace test_loader {

namespace data = tessera::data;

namespace {

/// Sample i holds {i, label}: the pixels themselves tell which sample arrived.
data::in_memory_dataset<float> indexed_dataset(std::size_t n, std::size_t classes = 5) {
    std::vector<float> values;
    std::vector<data::label_t> labels;
    for (std::size_t i = 0; i < n; ++i) {
        const auto y = static_cast<data::label_t>((i * 7 + 3) % classes);
        values.push_back(static_cast<float>(i));
        values.push_back(static_cast<float>(y));
        labels.push_back(y);
    }
    return data::in_memory_dataset<float>({1, 1, 2}, classes, std::move(values), std::move(labels), "indexed");
}

/// What one rank saw in one epoch: the sample ids, batch by batch (padding excluded), after
/// checking every batch's internal consistency.
using epoch_trace = std::vector<std::vector<std::size_t>>;

template <class Loader>
epoch_trace trace_epoch(const Loader& loader, std::size_t epoch, bool map_style) {
    epoch_trace trace;
    auto range = loader.epoch(epoch);
    while (auto batch = range.next()) {
        REQUIRE(batch->size() == loader.combined_batch());
        std::vector<std::size_t> ids;
        for (std::size_t j = 0; j < batch->size(); ++j) {
            const auto px = batch->image(j);
            if (j < batch->valid()) {
                REQUIRE(batch->mask()[j] == 1);
                REQUIRE(static_cast<float>(batch->labels()[j]) == px[1]);
                const auto id = static_cast<std::size_t>(px[0]);
                if (map_style) REQUIRE(batch->indices()[j] == id);
                ids.push_back(id);
            } else {  // padding: masked, zero, never a real index
                REQUIRE(batch->mask()[j] == 0);
                REQUIRE(batch->indices()[j] == data::padding_index);
                REQUIRE(px[0] == 0.0f);
                REQUIRE(batch->labels()[j] == 0);
            }
        }
        REQUIRE(batch->number() == trace.size());
        REQUIRE(batch->epoch() == epoch);
        trace.push_back(std::move(ids));
    }
    return trace;
}

std::vector<std::size_t> flatten(const epoch_trace& t) {
    std::vector<std::size_t> out;
    for (const auto& b : t) out.insert(out.end(), b.begin(), b.end());
    return out;
}

const char* mode_name(data::loader_mode m) {
    return m == data::loader_mode::sync ? "sync" : m == data::loader_mode::async ? "async" : "async_rebatched";
}

/// A stand-in for config::batching: anything with combined_batch() is accepted.
struct batching {
    std::size_t micro_batch = 1, device_iterations = 1, gradient_accumulation = 1, local_replicas = 1;
    [[nodiscard]] std::size_t combined_batch() const noexcept {
        return micro_batch * device_iterations * gradient_accumulation * local_replicas;
    }
};

/// A dataset whose read() throws at one index (optionally after a delay, to catch workers mid-flight).
struct throwing_dataset {
    using value_type = float;
    data::in_memory_dataset<float> inner;
    std::size_t bad;
    [[nodiscard]] std::size_t size() const { return inner.size(); }
    [[nodiscard]] data::sample_shape shape() const { return inner.shape(); }
    [[nodiscard]] std::size_t num_classes() const { return inner.num_classes(); }
    data::label_t read(std::size_t i, std::span<float> out) const {
        if (i == bad) throw std::runtime_error("bad sample " + std::to_string(i));
        return inner.read(i, out);
    }
};
static_assert(data::Dataset<throwing_dataset>);

/// A dataset whose labels lie outside its class count.
struct lying_dataset {
    using value_type = std::uint8_t;
    [[nodiscard]] std::size_t size() const { return 40; }
    [[nodiscard]] data::sample_shape shape() const { return {1, 2, 2}; }
    [[nodiscard]] std::size_t num_classes() const { return 3; }
    data::label_t read(std::size_t i, std::span<std::uint8_t> out) const {
        std::fill(out.begin(), out.end(), std::uint8_t{1});
        return i == 17 ? 3 : 0;
    }
};

/// A map-style dataset that takes a little time per sample, so workers are busy when stopped.
struct slow_dataset {
    using value_type = std::uint8_t;
    [[nodiscard]] std::size_t size() const { return 200; }
    [[nodiscard]] data::sample_shape shape() const { return {1, 1, 1}; }
    [[nodiscard]] std::size_t num_classes() const { return 1; }
    data::label_t read(std::size_t i, std::span<std::uint8_t> out) const {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        out[0] = static_cast<std::uint8_t>(i);
        reads->fetch_add(1);
        return 0;
    }
    std::shared_ptr<std::atomic<std::size_t>> reads = std::make_shared<std::atomic<std::size_t>>(0);
};

constexpr data::loader_mode all_modes[] = {data::loader_mode::sync, data::loader_mode::async,
                                           data::loader_mode::async_rebatched};

}  // namespace

TEST_CASE("data_loader: the combined batch comes from the batching, and PopTorch's iteration counts", "[data][loader]") {
    data::synthetic_images cifar_sized(50000, {1, 1, 1}, 10, 0);  // 50,000 samples as CIFAR-10's train split
    struct row {
        batching b;
        std::size_t iterations;
    };
    // The seeds' figures (drop_last): b32 G3 -> 520, b32 G8 -> 195, ... b64 G8 D4 -> 24.
    const row rows[] = {{{32, 1, 3, 1}, 520}, {{32, 1, 8, 1}, 195}, {{32, 4, 8, 1}, 48}, {{32, 4, 8, 4}, 12},
                        {{64, 1, 3, 1}, 260}, {{64, 1, 8, 1}, 97},  {{64, 4, 8, 1}, 24}};
    for (const auto& r : rows) {
        data::data_loader loader(cifar_sized, r.b);
        CHECK(loader.combined_batch() == r.b.combined_batch());
        CHECK(loader.batches_per_epoch() == r.iterations);
    }
    // And the loop yields exactly that many batches of that size.
    data::data_loader<data::synthetic_images, std::uint8_t> loader(cifar_sized, batching{64, 4, 8, 1});
    std::size_t n = 0;
    for (auto& batch : loader) {
        CHECK(batch.size() == 2048);
        ++n;
    }
    CHECK(n == 24);
}

TEST_CASE("data_loader: settings that cannot work are rejected before any thread starts", "[data][loader][errors]") {
    const auto ds = indexed_dataset(10);
    CHECK_THROWS_AS(data::data_loader(ds, 0), data::loader_error);
    CHECK_THROWS_WITH(data::data_loader(ds, 4, {.size = 3}), Catch::Contains("needs at least 12 samples") && Catch::Contains("has 10"));
    CHECK_NOTHROW(data::data_loader(ds, 4, {.drop_last = false, .size = 3}));
    CHECK_THROWS_AS(data::data_loader(ds, 2, {.rank = 2, .size = 2}), data::loader_error);
    CHECK_THROWS_AS(data::data_loader(ds, 2, {.mode = data::loader_mode::async, .prefetch_depth = 0}), data::loader_error);
    const auto e = [&] {
        try {
            data::data_loader loader(ds, 2, {.expected_shape = data::sample_shape{1, 28, 28}});
        } catch (const data::shape_error& err) {
            return std::string(err.what());
        }
        return std::string("no error");
    }();
    CHECK_THAT(e, Catch::Contains("1x1x2") && Catch::Contains("1x28x28"));
    data::iterable_view view(ds);
    CHECK_THROWS_WITH(data::data_loader(view, 2, {.shuffle = true}), Catch::Contains("shuffle needs a map-style dataset"));
    CHECK_THROWS_AS(data::data_loader(ds, 2, {.normalize = {.mean = {0.1f, 0.2f}}}), data::loader_error);
}

TEST_CASE("data_loader: map-style property — every mode, worker count and shard layout gives the same "
          "reproducible permutation", "[data][loader][property]") {
    for (std::size_t n : {37u, 64u})
        for (std::size_t batch : {1u, 4u, 6u})
            for (std::size_t ranks : {1u, 2u, 3u})
                for (bool drop_last : {true, false})
                    for (bool shuffle : {false, true}) {
                        const auto ds = indexed_dataset(n);
                        const std::size_t epoch = 3;
                        if (drop_last && batch * ranks > n) continue;
                        // The reference: sync, no workers.
                        std::vector<epoch_trace> reference;
                        for (std::size_t r = 0; r < ranks; ++r) {
                            data::data_loader loader(ds, batch, {.shuffle = shuffle, .seed = 11, .drop_last = drop_last, .rank = r, .size = ranks});
                            reference.push_back(trace_epoch(loader, epoch, true));
                        }
                        INFO("n " << n << " batch " << batch << " ranks " << ranks << " drop_last " << drop_last << " shuffle " << shuffle);
                        // Every rank has the same number of batches.
                        for (const auto& t : reference) REQUIRE(t.size() == reference[0].size());
                        // The union over ranks: no sample twice; all of them without drop_last, PopTorch's block with it.
                        std::vector<std::size_t> all;
                        for (const auto& t : reference) {
                            const auto f = flatten(t);
                            all.insert(all.end(), f.begin(), f.end());
                        }
                        const auto order = data::epoch_order(n, shuffle, 11, epoch);
                        if (drop_last) {
                            const std::size_t per_proc = batch * (n / (batch * ranks));
                            REQUIRE(all == std::vector<std::size_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(per_proc * ranks)));
                        } else {
                            REQUIRE(all == order);
                        }
                        auto sorted = all;
                        std::sort(sorted.begin(), sorted.end());
                        REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
                        if (!shuffle) REQUIRE(std::is_sorted(all.begin(), all.end()));

                        for (auto mode : all_modes)
                            for (std::size_t workers : {1u, 2u, 4u})
                                for (std::size_t depth : {1u, 3u}) {
                                    INFO(mode_name(mode) << " workers " << workers << " depth " << depth);
                                    for (std::size_t r = 0; r < ranks; ++r) {
                                        data::data_loader loader(ds, batch, {.shuffle = shuffle, .seed = 11, .drop_last = drop_last,
                                                                             .num_workers = workers, .mode = mode,
                                                                             .prefetch_depth = depth, .rank = r, .size = ranks});
                                        REQUIRE(trace_epoch(loader, epoch, true) == reference[r]);
                                    }
                                }
                    }
}

TEST_CASE("data_loader: shuffling is seeded, differs per epoch and is the same on every run", "[data][loader]") {
    const auto ds = indexed_dataset(50);
    data::data_loader a(ds, 5, {.shuffle = true, .seed = 1}), b(ds, 5, {.shuffle = true, .seed = 1}), c(ds, 5, {.shuffle = true, .seed = 2});
    const auto a0 = flatten(trace_epoch(a, 0, true)), a1 = flatten(trace_epoch(a, 1, true));
    CHECK(a0 != a1);
    CHECK(flatten(trace_epoch(b, 0, true)) == a0);
    CHECK(flatten(trace_epoch(c, 0, true)) != a0);
    // The loop form walks epochs 0, 1, 2, ...
    std::vector<std::size_t> first, second;
    for (auto& batch : a)
        for (auto i : batch.indices()) first.push_back(i);
    for (auto& batch : a)
        for (auto i : batch.indices()) second.push_back(i);
    CHECK(first == a0);
    CHECK(second == a1);
    // The order is a function of (seed, epoch) alone, fixed by splitmix64: pinned here for every machine.
    const auto order = data::epoch_order(10, true, 1, 0);
    std::vector<std::size_t> expected(10);
    std::iota(expected.begin(), expected.end(), 0);
    data::shuffle(std::span(expected), data::mix_seed(1, 0));
    CHECK(order == expected);
    // Regression pins: these literals must never change, on any machine or standard library (the
    // order is integer arithmetic on splitmix64); a change here silently reorders every user's epochs.
    CHECK(order == std::vector<std::size_t>{0, 3, 6, 1, 8, 4, 5, 2, 9, 7});
    CHECK(data::epoch_order(10, true, 1, 1) == std::vector<std::size_t>{5, 0, 3, 9, 2, 1, 6, 4, 8, 7});
    std::vector<std::uint8_t> pixels(8);
    (void)data::synthetic_images(100, {1, 2, 4}, 10, 42).read(5, pixels);
    CHECK(pixels == std::vector<std::uint8_t>{0, 0, 200, 231, 255, 95, 188, 24});
}

TEST_CASE("data_loader: drop_last = false pads the last batch and masks it", "[data][loader]") {
    const auto ds = indexed_dataset(10);
    for (auto mode : all_modes) {
        INFO(mode_name(mode));
        data::data_loader loader(ds, 4, {.drop_last = false, .num_workers = 2, .mode = mode});
        CHECK(loader.batches_per_epoch() == 3);
        auto epoch = loader.epoch(0);
        std::vector<std::size_t> valid;
        std::optional<data::batch_lease<float>> last;
        while (auto batch = epoch.next()) {
            valid.push_back(batch->valid());
            last = std::move(batch);
        }
        CHECK(valid == std::vector<std::size_t>{4, 4, 2});
        REQUIRE(last);
        CHECK(std::vector<std::uint8_t>(last->mask().begin(), last->mask().end()) == std::vector<std::uint8_t>{1, 1, 0, 0});
        CHECK(last->indices()[1] == 9);
        CHECK(last->indices()[2] == data::padding_index);
    }
    // drop_last (the default) loses the tail instead.
    data::data_loader dropping(ds, 4);
    CHECK(flatten(trace_epoch(dropping, 0, true)).size() == 8);
}

TEST_CASE("data_loader: PopTorch's rebatching example — 100 samples, 7 workers, batch 4", "[data][loader][rebatched]") {
    const auto ds = indexed_dataset(100);
    data::iterable_view stream(ds);
    auto used = [&](data::loader_mode mode, bool drop_last) {
        data::data_loader loader(stream, 4, {.drop_last = drop_last, .num_workers = 7, .mode = mode});
        const auto ids = flatten(trace_epoch(loader, 0, false));
        std::set<std::size_t> unique(ids.begin(), ids.end());
        REQUIRE(unique.size() == ids.size());
        return ids.size();
    };
    // Naive split: ceil(100/7) = 15 per worker, each worker drops its own tail: 6 x 12 + 8 = 80.
    CHECK(used(data::loader_mode::async, true) == 80);
    // Rebatched: floor(100 / 4) x 4 = 100.
    CHECK(used(data::loader_mode::async_rebatched, true) == 100);
    CHECK(used(data::loader_mode::sync, true) == 100);
    // Without drop_last nothing is lost either way (the naive split pads each worker's tail).
    CHECK(used(data::loader_mode::async, false) == 100);
    CHECK(used(data::loader_mode::async_rebatched, false) == 100);
}

TEST_CASE("data_loader: iterable-style property — no sample lost or duplicated beyond what the mode "
          "drops, reproducible", "[data][loader][property]") {
    for (std::size_t n : {29u, 50u})
        for (std::size_t batch : {1u, 3u, 4u})
            for (std::size_t ranks : {1u, 2u})
                for (bool drop_last : {true, false})
                    for (auto mode : all_modes)
                        for (std::size_t workers : {1u, 2u, 3u, 7u}) {
                            if (mode == data::loader_mode::sync && workers > 1) continue;
                            INFO(mode_name(mode) << " n " << n << " batch " << batch << " ranks " << ranks << " workers "
                                                 << workers << " drop_last " << drop_last);
                            const auto ds = indexed_dataset(n);
                            data::iterable_view stream(ds);
                            std::vector<std::size_t> all;
                            std::size_t expected = 0;
                            const std::size_t parts = ranks * (mode == data::loader_mode::sync ? 1 : workers);
                            const std::size_t per_part = (n + parts - 1) / parts;
                            auto part_size = [&](std::size_t p) { return std::min(n, (p + 1) * per_part) - std::min(n, p * per_part); };
                            for (std::size_t r = 0; r < ranks; ++r) {
                                data::data_loader loader(stream, batch, {.drop_last = drop_last, .num_workers = workers, .mode = mode,
                                                                         .prefetch_depth = 2, .rank = r, .size = ranks});
                                const auto first = trace_epoch(loader, 0, false);
                                REQUIRE(trace_epoch(loader, 0, false) == first);  // reproducible
                                const auto f = flatten(first);
                                all.insert(all.end(), f.begin(), f.end());
                                // What each mode is documented to use.
                                const std::size_t w = mode == data::loader_mode::sync ? 1 : workers;
                                std::size_t rank_samples = 0, naive = 0;
                                for (std::size_t k = 0; k < w; ++k) {
                                    const std::size_t s = part_size(r * w + k);
                                    rank_samples += s;
                                    naive += drop_last ? s / batch * batch : s;
                                }
                                if (mode == data::loader_mode::async)
                                    expected += naive;
                                else
                                    expected += drop_last ? rank_samples / batch * batch : rank_samples;
                            }
                            std::set<std::size_t> unique(all.begin(), all.end());
                            REQUIRE(unique.size() == all.size());
                            REQUIRE(all.size() == expected);
                            if (!drop_last) REQUIRE(all.size() == n);
                        }
}

TEST_CASE("data_loader: batches are leases — a held batch is never overwritten", "[data][loader][lease]") {
    const auto ds = indexed_dataset(60);
    for (auto mode : all_modes) {
        INFO(mode_name(mode));
        data::data_loader loader(ds, 4, {.shuffle = true, .seed = 3, .num_workers = 3, .mode = mode, .prefetch_depth = 2});
        std::vector<data::batch_lease<float>> kept;
        for (auto& batch : loader) kept.push_back(std::move(batch));
        REQUIRE(kept.size() == 15);
        // Every kept batch still holds exactly the samples it was handed out with.
        std::set<std::size_t> seen;
        for (const auto& b : kept)
            for (std::size_t j = 0; j < b.size(); ++j) {
                CHECK(static_cast<std::size_t>(b.image(j)[0]) == b.indices()[j]);
                seen.insert(b.indices()[j]);
            }
        CHECK(seen.size() == 60);
        CHECK(loader.buffers_allocated() >= 15);
        kept.clear();  // back to the pool: the next epoch reuses them
        for (auto& batch : loader) (void)batch;
        // Async workers that live across epochs may have prepared the next epoch's first batches
        // (up to the ring's depth, 2) while all 15 were held: new buffers for those, none after.
        CHECK(loader.buffers_allocated() <= 15 + 2);
    }
    // Dropping each batch before the next keeps the pool at the ring's size.
    data::data_loader loader(ds, 4, {.num_workers = 2, .mode = data::loader_mode::async, .prefetch_depth = 2});
    for (int e = 0; e < 3; ++e)
        for (auto& batch : loader) (void)batch;
    CHECK(loader.buffers_allocated() <= 2 + 2 + 1);  // ring + workers in flight + the caller's
    // A lease may outlive its loader.
    std::optional<data::batch_lease<float>> survivor;
    {
        data::data_loader short_lived(ds, 4, {.mode = data::loader_mode::async});
        survivor = short_lived.epoch(0).next();
    }
    CHECK(survivor->valid() == 4);
    CHECK(survivor->image(1)[0] == 1.0f);
}

TEST_CASE("data_loader: 8-bit I/O sends bytes; the device-side normalisation equals the host's", "[data][loader][io]") {
    const data::synthetic_images ds(96, {3, 8, 8}, 10, 5);
    const data::loader_options options{.shuffle = true, .seed = 9, .num_workers = 2, .mode = data::loader_mode::async,
                                       .normalize = {.mean = {0.49f, 0.48f, 0.45f}, .stddev = {0.25f, 0.24f, 0.26f}},
                                       .augment = data::random_crop{2} | data::horizontal_flip{}};
    data::data_loader<data::synthetic_images, std::uint8_t> bytes(ds, 16, options);
    data::data_loader<data::synthetic_images, float> floats(ds, 16, options);
    auto eb = bytes.epoch(1);
    auto ef = floats.epoch(1);
    std::size_t batches = 0;
    while (auto b = eb.next()) {
        auto f = ef.next();
        REQUIRE(f);
        CHECK(b->images().size_bytes() * 4 == f->images().size_bytes());
        CHECK(std::equal(b->labels().begin(), b->labels().end(), f->labels().begin()));
        std::vector<float> device(b->images().size());
        data::normalize<std::uint8_t, float>(b->images(), ds.shape(), options.normalize, device);
        CHECK(std::equal(device.begin(), device.end(), f->images().begin()));  // bit for bit
        std::vector<tessera::half> device_half(b->images().size());
        data::normalize<std::uint8_t, tessera::half>(b->images(), ds.shape(), options.normalize, device_half);
        for (std::size_t k = 0; k < device.size(); k += 37) CHECK(device_half[k].bits() == tessera::half(device[k]).bits());
        ++batches;
    }
    CHECK(!ef.next());
    CHECK(batches == 6);
}

TEST_CASE("data_loader: augmentation is seeded per sample — the same for every mode and worker count", "[data][loader][augment]") {
    const data::synthetic_images ds(40, {1, 6, 6}, 4, 2);
    const auto run = [&](data::loader_mode mode, std::size_t workers, std::size_t epoch) {
        data::data_loader<data::synthetic_images, std::uint8_t> loader(
            ds, 5, {.seed = 21, .num_workers = workers, .mode = mode, .augment = data::random_crop{2} | data::horizontal_flip{}});
        std::vector<std::uint8_t> pixels;
        auto range = loader.epoch(epoch);
        while (auto b = range.next()) pixels.insert(pixels.end(), b->images().begin(), b->images().end());
        return pixels;
    };
    const auto reference = run(data::loader_mode::sync, 0, 0);
    CHECK(run(data::loader_mode::async, 3, 0) == reference);
    CHECK(run(data::loader_mode::async_rebatched, 2, 0) == reference);
    CHECK(run(data::loader_mode::sync, 0, 1) != reference);  // another epoch, other crops and flips
    // And it really changed the images: without augmentation they are the dataset's bytes.
    data::data_loader<data::synthetic_images, std::uint8_t> plain(ds, 5);
    std::vector<std::uint8_t> raw;
    for (auto& b : plain) raw.insert(raw.end(), b.images().begin(), b.images().end());
    CHECK(raw != reference);
    std::vector<std::uint8_t> sample(36);
    (void)ds.read(7, sample);
    CHECK(std::equal(sample.begin(), sample.end(), raw.begin() + 7 * 36));
}

TEST_CASE("data_loader: an exception in a worker reaches the caller; nothing hangs", "[data][loader][errors]") {
    const throwing_dataset ds{indexed_dataset(60), 13};
    for (auto mode : all_modes)
        for (std::size_t workers : {1u, 3u})
            for (bool shuffle : {false, true}) {
                INFO(mode_name(mode) << " workers " << workers);
                data::data_loader loader(ds, 4, {.shuffle = shuffle, .num_workers = workers, .mode = mode, .prefetch_depth = 2});
                const auto drain = [&] {
                    for (auto& batch : loader) (void)batch;
                };
                CHECK_THROWS_WITH(drain(), "bad sample 13");
                CHECK_THROWS_WITH(drain(), "bad sample 13");  // the next epoch fails the same way
            }
    // Iterable datasets: the worker streams, the assembler and the caller all stop.
    data::iterable_view stream(ds);
    for (auto mode : all_modes) {
        INFO(mode_name(mode));
        data::data_loader loader(stream, 4, {.num_workers = 3, .mode = mode, .prefetch_depth = 1});
        CHECK_THROWS_WITH([&] { for (auto& batch : loader) (void)batch; }(), "bad sample 13");
    }
    // A label outside the dataset's classes is caught by the loader, with its sample.
    const lying_dataset liar;
    data::data_loader<lying_dataset, std::uint8_t> loader(liar, 4, {.num_workers = 2, .mode = data::loader_mode::async});
    CHECK_THROWS_AS([&] { for (auto& batch : loader) (void)batch; }(), data::label_error);
    CHECK_THROWS_WITH([&] { for (auto& batch : loader) (void)batch; }(), Catch::Contains("label 3 of sample 17"));
}

TEST_CASE("data_loader: abandoning an epoch midway stops its workers", "[data][loader]") {
    const slow_dataset ds;
    for (auto mode : all_modes) {
        data::data_loader<slow_dataset, std::uint8_t> loader(ds, 5, {.num_workers = 4, .mode = mode, .prefetch_depth = 2});
        for (int e = 0; e < 3; ++e) {
            const std::size_t before = ds.reads->load();
            {
                auto range = loader.epoch(static_cast<std::size_t>(e));
                auto first = range.next();
                REQUIRE(first);
                CHECK(first->image(4)[0] == 4);
            }  // the range dies with workers busy and the ring full
            // Its workers are stopped (joined): nothing reads the dataset any more. (200 samples at
            // 200 µs would take 40 ms; a worker still running would read on during the wait.)
            const std::size_t after = ds.reads->load();
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            CHECK(ds.reads->load() == after);
            CHECK(after - before < 200);  // the epoch was abandoned, not read to its end
        }
        data::iterable_view stream(ds);
        data::data_loader<data::iterable_view<slow_dataset>, std::uint8_t> streaming(stream, 5, {.num_workers = 3, .mode = mode});
        auto range = streaming.epoch(0);
        CHECK(range.next());
    }
}

TEST_CASE("make_data_loader<Config>: batch, shards and element type from the configuration", "[data][loader][config]") {
    namespace config = tessera::config;
    const data::synthetic_images ds(1000, {1, 4, 4}, 10, 3);
    using cfg = config::config<config::replication<4>, config::instances<2>, config::gradient_accumulation<config::dynamic>,
                               config::device_iterations<3>, config::eight_bit_io>;
    auto loader = data::make_data_loader<cfg>(ds, {.micro_batch = 2, .gradient_accumulation = 5}, {.rank = 1});
    STATIC_REQUIRE(std::is_same_v<decltype(loader), data::data_loader<data::synthetic_images, std::uint8_t>>);
    CHECK(loader.combined_batch() == 2 * 3 * 5 * (4 / 2));  // micro_batch x D x G x R_local
    CHECK(loader.options().size == 2);                       // one shard per instance
    CHECK(loader.batches_per_epoch() == 1000 / (60 * 2));
    // Inference drops G from the combined batch.
    auto inference = data::make_data_loader<cfg::for_inference>(ds, {.micro_batch = 2});
    CHECK(inference.combined_batch() == 2 * 3 * 2);
    // A dataset that cannot give each instance one combined batch is the config's batch_error.
    const data::synthetic_images tiny(100, {1, 4, 4}, 10, 3);
    CHECK_THROWS_AS(data::make_data_loader<cfg>(tiny, {.micro_batch = 2, .gradient_accumulation = 5}), config::batch_error);
    CHECK_THROWS_AS(data::make_data_loader<cfg>(ds, {.micro_batch = 2}), config::config_error);  // G is dynamic: required
    CHECK_THROWS_AS(data::make_data_loader<cfg>(ds, {.micro_batch = 2, .gradient_accumulation = 5}, {.size = 3}), data::loader_error);

    // Half I/O: the host normalises into half, equal to rounding the float batch.
    using half_cfg = config::config<config::io<tessera::half>>;
    const data::normalization norm{.mean = {0.5f}, .stddev = {0.2f}};
    auto halves = data::make_data_loader<half_cfg>(ds, {.micro_batch = 8}, {.normalize = norm});
    auto floats = data::make_data_loader<config::config<>>(ds, {.micro_batch = 8}, {.normalize = norm});
    STATIC_REQUIRE(std::is_same_v<decltype(halves)::value_type, tessera::half>);
    auto h = halves.epoch(0).next();
    auto f = floats.epoch(0).next();
    REQUIRE(h->images().size() == f->images().size());
    for (std::size_t k = 0; k < f->images().size(); ++k) REQUIRE(h->images()[k].bits() == tessera::half(f->images()[k]).bits());
}

TEST_CASE("micro_batch: a combined batch splits [iteration][input group][micro-batch], masks included", "[data][loader][config]") {
    namespace config = tessera::config;
    const auto ds = indexed_dataset(100);
    using cfg = config::config<config::replication<2>, config::gradient_accumulation<3>, config::device_iterations<2>>;
    const auto b = config::make_batching<cfg>({.micro_batch = 2});
    REQUIRE(b.combined_batch() == 24);
    data::data_loader loader(ds, b, {.drop_last = false});
    auto epoch = loader.epoch(0);
    std::vector<data::batch_lease<float>> batches;
    while (auto batch = epoch.next()) batches.push_back(std::move(*batch));
    REQUIRE(batches.size() == 5);  // 100 = 4 x 24 + 4
    // Sample k of the combined batch is micro-batch k / 2: (d, g, m) = ((k/2) / 6, (k/2) / 3 % 2, (k/2) % 3).
    for (std::size_t d = 0; d < 2; ++d)
        for (std::size_t g = 0; g < 2; ++g)
            for (std::size_t m = 0; m < 3; ++m) {
                const auto mb = data::micro_batch(batches[1], b, d, g, m);
                const std::size_t first = 24 + ((d * 2 + g) * 3 + m) * 2;
                REQUIRE(mb.images.size() == 4);
                CHECK(mb.images[0] == static_cast<float>(first));
                CHECK(mb.images[2] == static_cast<float>(first + 1));
                CHECK(mb.labels[1] == ds.labels()[first + 1]);
                CHECK(mb.valid == 2);
            }
    // The padded tail: 4 real samples fill micro-batches 0 and 1 of (d 0, g 0); the rest is masked out.
    CHECK(data::micro_batch(batches[4], b, 0, 0, 0).valid == 2);
    CHECK(data::micro_batch(batches[4], b, 0, 0, 1).valid == 2);
    CHECK(data::micro_batch(batches[4], b, 0, 0, 2).valid == 0);
    CHECK(data::micro_batch(batches[4], b, 1, 1, 2).valid == 0);
    CHECK_THROWS_AS(data::micro_batch(batches[0], b, 2, 0, 0), config::batch_error);
    const auto other = config::make_batching<cfg>({.micro_batch = 3});
    CHECK_THROWS_AS(data::micro_batch(batches[0], other, 0, 0, 0), config::batch_error);
}

TEST_CASE("data_loader: async workers live across the epochs of a loop, and prefetch the next one's first batches",
          "[data][loader][threads]") {
    const slow_dataset ds;  // 200 samples, 40 batches of 5
    data::data_loader<slow_dataset, std::uint8_t> loader(ds, 5, {.shuffle = true, .seed = 9, .num_workers = 2,
                                                                 .mode = data::loader_mode::async, .prefetch_depth = 3});
    std::vector<std::vector<std::uint8_t>> seen(2);
    for (std::size_t e = 0; e < 2; ++e) {
        for (auto& batch : loader)
            for (std::size_t i = 0; i < batch.size(); ++i) seen[e].push_back(batch.image(i)[0]);
        if (e == 0) {
            // Between the epochs, before the loop asks for epoch 1: its first 3 batches (15 samples) are
            // read by the workers that served epoch 0 (a bounded wait, never a fixed sleep).
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            while (ds.reads->load() < 200 + 15 && std::chrono::steady_clock::now() < until)
                std::this_thread::yield();
            CHECK(ds.reads->load() == 200 + 15);
        }
    }
    // Each epoch is the same as an explicit epoch(e): the order depends on the seed and e only.
    for (std::size_t e = 0; e < 2; ++e) {
        std::vector<std::uint8_t> explicit_order;
        auto range = loader.epoch(e);
        while (auto b = range.next())
            for (std::size_t i = 0; i < b->size(); ++i) explicit_order.push_back(b->image(i)[0]);
        CHECK(seen[e] == explicit_order);
    }
    CHECK(seen[0] != seen[1]);
}

}  // namespace test_loader
