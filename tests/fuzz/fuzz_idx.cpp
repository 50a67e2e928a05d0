// libFuzzer target: the IDX reader behind Fashion-MNIST, gzip-compressed or plain, as rank 1 and 3.
// Any input must either parse into a consistent array or throw the data layer's typed error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tessera/data/gzip.hpp"
#include "tessera/data/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace d = tessera::data;
    std::vector<std::uint8_t> bytes(data, data + size);
    for (const std::size_t rank : {std::size_t{1}, std::size_t{3}}) {
        try {
            auto plain = d::is_gzip(bytes) ? d::gunzip(bytes, "fuzz.gz", std::size_t{16} << 20) : bytes;
            const auto a = d::parse_idx(std::move(plain), "fuzz", rank);
            std::size_t count = 1;
            for (const auto dim : a.dims) count *= dim;
            if (a.dims.size() != rank || a.values.size() != count) std::abort();  // what it returns is consistent
        } catch (const d::dataset_error&) {
        }
    }
    return 0;
}
