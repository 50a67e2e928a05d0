// tensor::page_allocator: every buffer on a cache line, large ones on whole huge pages and advised
// for them (read back from the kernel's own account of the mapping, /proc/self/smaps, where the
// kernel makes huge pages on request), and dense tensors' buffers from it.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tessera/tensor/dense.hpp"
#include "tessera/tensor/page_allocator.hpp"

namespace test_page_allocator {

namespace {

namespace tt = tessera::tensor;

[[nodiscard]] std::uintptr_t address(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // used only where no sanitizer maps the memory
/// The "THPeligible" value of the mapping that holds p in /proc/self/smaps: "1" where the kernel may
/// back it with huge pages; empty where the kernel does not report it.
std::string huge_page_eligible(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        std::uintptr_t begin = 0, end = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> begin >> dash >> end && dash == '-') {
            inside = begin <= address(p) && address(p) < end;
            continue;
        }
        if (inside && line.rfind("THPeligible:", 0) == 0) {
            std::istringstream value(line.substr(12));
            std::string v;
            value >> v;
            return v;
        }
    }
    return {};
}

/// Whether the kernel makes transparent huge pages on request ("always" or "madvise").
bool huge_pages_on_request() {
    std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(enabled, modes);
    return modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
}
#endif

}  // namespace

TEST_CASE("page_allocator rounds small buffers to cache lines and large ones to huge pages", "[tensor]") {
    CHECK(tt::buffer_bytes(1) == 64);
    CHECK(tt::buffer_bytes(64) == 64);
    CHECK(tt::buffer_bytes(65) == 128);
    CHECK(tt::buffer_bytes(tt::huge_page_threshold - 1) == tt::huge_page_threshold);
    CHECK(tt::buffer_bytes(tt::huge_page_threshold) == tt::huge_page_bytes);
    CHECK(tt::buffer_bytes(tt::huge_page_bytes) == tt::huge_page_bytes);
    CHECK(tt::buffer_bytes(tt::huge_page_bytes + 1) == 2 * tt::huge_page_bytes);
}

TEST_CASE("page_allocator's buffers are aligned, usable to their last element, and advised for huge pages", "[tensor]") {
    tt::page_allocator<float> alloc;
    for (const std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{1000}, tt::huge_page_threshold / sizeof(float),
                                std::size_t{401408} /* 32 × 28 × 28 × 16 */}) {
        float* p = alloc.allocate(n);
        const bool huge = n * sizeof(float) >= tt::huge_page_threshold;
        CHECK(address(p) % tt::buffer_alignment == 0);
        CHECK((!huge || address(p) % tt::huge_page_bytes == 0));
        for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(i);
        CHECK(p[n - 1] == static_cast<float>(n - 1));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // the sanitizers' allocators map their own way
        if (huge && huge_pages_on_request()) {
            const std::string eligible = huge_page_eligible(p);
            if (!eligible.empty()) CHECK(eligible == "1");
        }
#endif
        alloc.deallocate(p, n);
    }
    float* empty = alloc.allocate(0);  // a buffer of its own: std::allocator's contract allows 0
    CHECK(empty != nullptr);
    alloc.deallocate(empty, 0);
    CHECK_THROWS_AS(alloc.allocate(std::size_t(-1) / 2), std::bad_array_new_length);
    CHECK(tt::page_allocator<float>{} == tt::page_allocator<double>{});
}

TEST_CASE("dense tensors take their buffers from page_allocator", "[tensor]") {
    tt::dense<float, 4> large = tt::dense<float, 4>::from_shape({32, 28, 28, 16});
    tt::dense<float, 2> small = tt::dense<float, 2>::from_shape({3, 5});
    CHECK(address(large.data()) % tt::huge_page_bytes == 0);
    CHECK(address(small.data()) % tt::buffer_alignment == 0);
    large.fill(2.0f);
    CHECK(large(31, 27, 27, 15) == 2.0f);
}

}  // namespace test_page_allocator
