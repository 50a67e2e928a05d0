// Loads Fashion-MNIST and feeds it as PopTorch's DataLoader would: the combined batch of a config,
// 8-bit I/O, async workers, a seeded shuffle; then PopTorch's rebatching example and a masked tail.
// Prints what each loader yields.
#include <tessera/config.hpp>
#include <tessera/data.hpp>

#include <cstdint>
#include <cstdio>

int main() {
    namespace cfg = tessera::config;
    namespace data = tessera::data;

    const auto train = data::fashion_mnist(data::split::train);  // /usr/share/datasets/fashion-mnist
    std::printf("train: %zu images of %s\n", train.size(), data::to_string(train.shape()).c_str());

    // 2 replicas, G = 4, D = 2, 8-bit I/O: one host call takes 16 x 2 x 4 x 2 = 256 uint8 images.
    using c = cfg::config<cfg::mixed, cfg::replication<2>, cfg::gradient_accumulation<4>,
                          cfg::device_iterations<2>, cfg::eight_bit_io>;
    auto loader = data::make_data_loader<c>(train, {.micro_batch = 16},
                                            {.shuffle = true, .seed = 42, .num_workers = 2,
                                             .mode = data::loader_mode::async,
                                             .normalize = {.mean = {0.286f}, .stddev = {0.353f}},
                                             .augment = data::random_crop{2} | data::horizontal_flip{}});
    std::size_t batches = 0, samples = 0, bytes = 0;
    for (auto& batch : loader) {
        ++batches;
        samples += batch.valid();
        bytes += batch.images().size_bytes();
    }
    std::printf("8-bit epoch: %zu batches of %zu, %zu samples, %.1f MB over the host link (float: %.1f MB)\n",
                batches, loader.combined_batch(), samples, bytes / 1e6, 4 * bytes / 1e6);

    // PopTorch's example: 100 samples streamed by 7 workers in batches of 4.
    const auto hundred = train.subset(0, 100);
    data::iterable_view stream(hundred);
    for (auto mode : {data::loader_mode::async, data::loader_mode::async_rebatched}) {
        data::data_loader<decltype(stream), std::uint8_t> l(stream, 4, {.num_workers = 7, .mode = mode});
        std::size_t used = 0;
        for (auto& batch : l) used += batch.valid();
        std::printf("%-16s uses %zu of 100 samples\n",
                    mode == data::loader_mode::async ? "async" : "async_rebatched", used);
    }

    // drop_last = false: the tail is padded and masked instead of lost.
    data::data_loader<decltype(hundred)> tail(hundred, 32, {.drop_last = false});
    for (auto& batch : tail)
        std::printf("batch %zu: %zu real samples, mask[3] = %d, mask[4] = %d\n", batch.number(), batch.valid(),
                    batch.mask()[3], batch.mask()[4]);
}
// train: 60000 images of 1x28x28
// 8-bit epoch: 234 batches of 256, 59904 samples, 47.0 MB over the host link (float: 187.9 MB)
// async            uses 80 of 100 samples
// async_rebatched  uses 100 of 100 samples
// batch 0: 32 real samples, mask[3] = 1, mask[4] = 1
// batch 1: 32 real samples, mask[3] = 1, mask[4] = 1
// batch 2: 32 real samples, mask[3] = 1, mask[4] = 1
// batch 3: 4 real samples, mask[3] = 1, mask[4] = 0
