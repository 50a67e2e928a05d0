#pragma once
// Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017): 70,000 28x28 grey images of 10 kinds of clothing.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/data/error.hpp"
#include "tessera/data/idx.hpp"
#include "tessera/data/in_memory.hpp"

namespace tessera::data {

/// Which part of a dataset: the training or the test split.
enum class split { train, test };

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr std::string_view fashion_mnist_default_path = "/usr/share/datasets/fashion-mnist";

/// The ten Fashion-MNIST class names, by label.
inline constexpr std::array<std::string_view, 10> fashion_mnist_classes{
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

/// Reads a Fashion-MNIST split (train: 60,000 images, test: 10,000; shape 1x28x28, uint8) from
/// `directory`/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz. Throws the data layer's typed
/// errors for a missing file, a wrong magic number, a bad gzip stream, a count mismatch, a label
/// out of range or an image size other than 28x28.
/// @code
///   auto train = data::fashion_mnist(data::split::train);
///   train.size();   // 60000
/// @endcode
[[nodiscard]] inline in_memory_dataset<std::uint8_t> fashion_mnist(
    split which = split::train, const std::string& directory = std::string(fashion_mnist_default_path)) {
    const char* prefix = which == split::train ? "train" : "t10k";
    const auto images = tessera::detail::join_path(directory, std::string(prefix) + "-images-idx3-ubyte.gz");
    const auto labels = tessera::detail::join_path(directory, std::string(prefix) + "-labels-idx1-ubyte.gz");
    auto ds = read_idx_dataset(images, labels, fashion_mnist_classes.size());
    constexpr sample_shape expected{1, 28, 28};
    if (ds.shape() != expected)
        throw shape_error(images, 8, "images of " + to_string(ds.shape()), "Fashion-MNIST's " + to_string(expected));
    return ds;
}

}  // namespace tessera::data
