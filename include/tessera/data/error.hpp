#pragma once
// Typed errors of the data layer: bad files, bad values, bad loader settings.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace tessera::data {

/// A dataset file or value is not what the reader expected. what() names the file, the byte offset
/// (or the value) and what was expected; the pieces are also kept for programs that react to them.
/// @code
///   try { auto train = fashion_mnist(split::train, "/nowhere"); }
///   catch (const data::missing_file_error& e) { std::cerr << e.file() << '\n'; }
/// @endcode
class dataset_error : public std::runtime_error {
public:
    dataset_error(std::string file, std::uint64_t offset, std::string found, std::string expected)
        : std::runtime_error(format(file, offset, found, expected)),
          m_file(std::move(file)), m_offset(offset), m_found(std::move(found)), m_expected(std::move(expected)) {}

    /// The file (or dataset name) the problem is in.
    [[nodiscard]] const std::string& file() const noexcept { return m_file; }
    /// Byte offset in the (decompressed) file, or the sample index where no file is involved.
    [[nodiscard]] std::uint64_t offset() const noexcept { return m_offset; }
    /// What was found there, as text.
    [[nodiscard]] const std::string& found() const noexcept { return m_found; }
    /// What the reader expected instead.
    [[nodiscard]] const std::string& expected() const noexcept { return m_expected; }

private:
    static std::string format(const std::string& file, std::uint64_t offset, const std::string& found,
                              const std::string& expected) {
        return "tessera::data: " + file + " at offset " + std::to_string(offset) + ": found " + found +
               ", expected " + expected;
    }

    std::string m_file;
    std::uint64_t m_offset;
    std::string m_found;
    std::string m_expected;
};

/// The file does not exist or cannot be opened.
struct missing_file_error : dataset_error {
    using dataset_error::dataset_error;
};
/// The file starts with the wrong magic number (not the format the reader was asked for).
struct bad_magic_error : dataset_error {
    using dataset_error::dataset_error;
};
/// The bytes end early or do not decode (truncated file, corrupted gzip stream, partial record).
struct corrupt_data_error : dataset_error {
    using dataset_error::dataset_error;
};
/// Two counts that must agree do not (images vs labels, header vs payload).
struct count_mismatch_error : dataset_error {
    using dataset_error::dataset_error;
};
/// A label outside [0, classes).
struct label_error : dataset_error {
    using dataset_error::dataset_error;
};
/// A sample shape that the consumer (a model, a loader option) does not accept.
struct shape_error : dataset_error {
    using dataset_error::dataset_error;
};
/// A dataset with nothing in it: a text corpus without a single document.
struct empty_dataset_error : dataset_error {
    using dataset_error::dataset_error;
};

/// A loader setting that cannot work with this dataset (batch larger than the shard, rank >= size,
/// shuffle on an iterable dataset, ...). Thrown at construction, before any thread starts.
class loader_error : public std::invalid_argument {
public:
    explicit loader_error(const std::string& message) : std::invalid_argument("tessera::data::data_loader: " + message) {}
};

}  // namespace tessera::data
