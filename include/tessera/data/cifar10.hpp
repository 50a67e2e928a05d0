#pragma once
// CIFAR-10, binary version: records of one label byte then 3,072 pixel bytes (R, G, B planes of 32x32).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/data/error.hpp"
#include "tessera/data/fashion_mnist.hpp"  // split
#include "tessera/data/gzip.hpp"
#include "tessera/data/in_memory.hpp"

namespace tessera::data {

/// The ten CIFAR-10 class names, by label.
inline constexpr std::array<std::string_view, 10> cifar10_classes{
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};

/// Bytes of one CIFAR-10 record: the label, then 3x32x32 pixels, channel-major (already CHW).
inline constexpr std::size_t cifar10_record_bytes = 1 + 3 * 32 * 32;

/// Reads CIFAR-10 binary files, in order, into one dataset (shape 3x32x32, uint8). Throws
/// missing_file_error, corrupt_data_error (a size that is not a whole number of records, with the
/// offset of the partial record) and label_error (a label byte above 9, with its offset).
/// Appends the records of one CIFAR-10 file's bytes to values and labels; `name` is used in messages.
inline void parse_cifar10_records(const std::vector<std::uint8_t>& bytes, const std::string& name,
                                  std::vector<std::uint8_t>& values, std::vector<label_t>& labels) {
    constexpr std::size_t pixels = cifar10_record_bytes - 1;
    const std::size_t records = bytes.size() / cifar10_record_bytes;
    if (bytes.size() == 0 || bytes.size() % cifar10_record_bytes != 0)
        throw corrupt_data_error(name, records * cifar10_record_bytes,
                                 "a file of " + std::to_string(bytes.size()) + " bytes (" +
                                     std::to_string(bytes.size() % cifar10_record_bytes) + " bytes of a partial record)",
                                 "a whole, non-zero number of " + std::to_string(cifar10_record_bytes) + "-byte records");
    values.reserve(values.size() + records * pixels);
    for (std::size_t r = 0; r < records; ++r) {
        const std::uint8_t* record = bytes.data() + r * cifar10_record_bytes;
        if (record[0] >= cifar10_classes.size())
            throw label_error(name, r * cifar10_record_bytes, "label " + std::to_string(record[0]) + " in record " + std::to_string(r),
                              "a label in [0, 10)");
        labels.push_back(record[0]);
        values.insert(values.end(), record + 1, record + cifar10_record_bytes);
    }
}

[[nodiscard]] inline in_memory_dataset<std::uint8_t> read_cifar10_files(const std::vector<std::string>& files) {
    std::vector<std::uint8_t> values;
    std::vector<label_t> labels;
    for (const auto& file : files) parse_cifar10_records(read_file(file), file, values, labels);
    const std::string name = files.empty() ? std::string("CIFAR-10 (no files)") : tessera::detail::parent_directory(files.front());
    return in_memory_dataset<std::uint8_t>({3, 32, 32}, cifar10_classes.size(), std::move(values), std::move(labels), name);
}

/// A CIFAR-10 split from `directory`: data_batch_1.bin ... data_batch_5.bin (train) or
/// test_batch.bin (test), as in the "CIFAR-10 binary version" archive.
[[nodiscard]] inline in_memory_dataset<std::uint8_t> cifar10(split which, const std::string& directory) {
    std::vector<std::string> files;
    if (which == split::train)
        for (int i = 1; i <= 5; ++i) files.push_back(tessera::detail::join_path(directory, "data_batch_" + std::to_string(i) + ".bin"));
    else
        files.push_back(tessera::detail::join_path(directory, "test_batch.bin"));
    return read_cifar10_files(files);
}

}  // namespace tessera::data
