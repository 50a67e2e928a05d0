#pragma once
// tessera-train's datasets: their shapes (all a dry run needs) and, to train, their images.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "train_request.hpp"

namespace tessera::programs {

/// What a dataset is by shape: enough for the modelled clock, nothing read.
struct dataset_shape {
    std::size_t channels = 1, height = 28, width = 28;
    std::size_t images = 0, test_images = 0, classes = 10;
    bool text = false;  ///< sequences of `width` tokens (a sample 1 × 1 × width × 1), not images
    /// Text: sequences a sample holds on average (packed: several short sequences in one sample of
    /// `width` tokens, Krell et al. 2021); `images` counts samples.
    double sequences_per_sample = 1;
    [[nodiscard]] tessera::tensor::shape sample() const noexcept { return {1, height, width, channels}; }
    /// What a sample is called: "images" or "sequences".
    [[nodiscard]] const char* samples_noun() const noexcept { return text ? "sequences" : "images"; }
};

/// The shape of --dataset: fashion-mnist, cifar10, imagenet (ILSVRC-2012's training set at 224 × 224)
/// or synthetic (3 × 32 × 32, --images of them).
[[nodiscard]] inline dataset_shape shape_of_dataset(const train_request& r) {
    if (r.dataset == "fashion-mnist") return {1, 28, 28, 60'000, 10'000, 10};
    if (r.dataset == "cifar10") return {3, 32, 32, 50'000, 10'000, 10};
    if (r.dataset == "imagenet") return {3, 224, 224, 1'281'167, 50'000, 1000};
    if (r.dataset == "synthetic") {
        const std::size_t n = r.images ? r.images : 8192;
        return {3, 32, 32, n, std::max<std::size_t>(n / 4, 1), 10};
    }
    throw usage_error("--dataset '" + r.dataset + "' is not one of fashion-mnist, cifar10, imagenet, synthetic");
}

/// The images an epoch of the request trains on: the dataset's, or --images of them.
[[nodiscard]] inline std::size_t epoch_images(const train_request& r, const dataset_shape& shape) noexcept {
    return r.images ? std::min(r.images, shape.images) : shape.images;
}

/// A dataset's images in memory, 8-bit, with the normalisation of its channels.
struct dataset_pair {
    data::in_memory_dataset<std::uint8_t> train, test;
    data::normalization norm;
};

inline data::in_memory_dataset<std::uint8_t> materialise(const data::synthetic_images& s, std::string name) {
    std::vector<std::uint8_t> values(s.size() * s.shape().size());
    std::vector<data::label_t> labels(s.size());
    for (std::size_t i = 0; i < s.size(); ++i)
        labels[i] = s.read(i, std::span<std::uint8_t>(values).subspan(i * s.shape().size(), s.shape().size()));
    return {s.shape(), s.num_classes(), std::move(values), std::move(labels), std::move(name)};
}

/// Reads --dataset to train on it; a dataset tessera has no files for is a usage_error naming what is missing.
[[nodiscard]] inline dataset_pair load_dataset(const train_request& r) {
    if (r.dataset == "fashion-mnist") {
        const std::string dir = r.data_dir.empty() ? std::string(data::fashion_mnist_default_path) : r.data_dir;
        return {data::fashion_mnist(data::split::train, dir), data::fashion_mnist(data::split::test, dir),
                {.mean = {0.2860f}, .stddev = {0.3530f}}};
    }
    if (r.dataset == "cifar10") {
        if (r.data_dir.empty())
            throw usage_error("--dataset cifar10 needs the directory of its binary files (--dataset cifar10 DIR); "
                              "--dry-run models it without them");
        return {data::cifar10(data::split::train, r.data_dir), data::cifar10(data::split::test, r.data_dir),
                {.mean = {0.4914f, 0.4822f, 0.4465f}, .stddev = {0.2470f, 0.2435f, 0.2616f}}};
    }
    if (r.dataset == "imagenet")
        throw usage_error("--dataset imagenet has no reader in tessera (its 1,281,167 JPEG images are not read); "
                          "--dry-run models it by its shape (3 x 224 x 224, 1,000 classes)");
    if (r.dataset == "synthetic") {
        const dataset_shape s = shape_of_dataset(r);
        return {materialise(data::synthetic_images(s.images, {3, 32, 32}, 10, r.seed), "synthetic"),
                materialise(data::synthetic_images(s.test_images, {3, 32, 32}, 10, r.seed + 1), "synthetic test"),
                {}};
    }
    (void)shape_of_dataset(r);  // throws, naming the allowed values
    throw usage_error("--dataset '" + r.dataset + "' has no reader");
}

}  // namespace tessera::programs
