// libFuzzer target: the CIFAR-10 binary reader. Any input parses into whole records with labels
// below 10, or throws the data layer's typed error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tessera/data/cifar10.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace d = tessera::data;
    std::vector<std::uint8_t> values;
    std::vector<d::label_t> labels;
    try {
        d::parse_cifar10_records(std::vector<std::uint8_t>(data, data + size), "fuzz.bin", values, labels);
        if (values.size() != labels.size() * (d::cifar10_record_bytes - 1)) std::abort();
        for (const auto y : labels)
            if (y < 0 || y > 9) std::abort();
        const d::in_memory_dataset<std::uint8_t> ds({3, 32, 32}, 10, std::move(values), std::move(labels), "fuzz");
        std::vector<std::uint8_t> sample(3 * 32 * 32);
        if (ds.size() > 0) (void)ds.read(ds.size() - 1, sample);
    } catch (const d::dataset_error&) {
    }
    return 0;
}
