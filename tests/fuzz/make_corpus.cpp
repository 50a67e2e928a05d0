// Writes the fuzz targets' seed corpora: a valid file of each format (run once; the files are committed).
//   make_corpus <tests/fuzz/corpus>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "tessera/optim/checkpoint.hpp"
#include "tessera/optim/sgd.hpp"
#include "small_model.hpp"

namespace {
void write(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes) {
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}
std::vector<std::uint8_t> idx(std::uint32_t magic, std::vector<std::uint32_t> dims) {
    std::vector<std::uint8_t> out;
    const auto be = [&](std::uint32_t v) {
        for (int s = 24; s >= 0; s -= 8) out.push_back(std::uint8_t(v >> s));
    };
    be(magic);
    std::size_t n = 1;
    for (auto d : dims) be(d), n *= d;
    for (std::size_t i = 0; i < n; ++i) out.push_back(std::uint8_t(i * 37));
    return out;
}
std::vector<std::uint8_t> gzip(const std::vector<std::uint8_t>& in) {
    z_stream s{};
    deflateInit2(&s, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    std::vector<std::uint8_t> out(deflateBound(&s, uLong(in.size())) + 32);
    s.next_in = const_cast<Bytef*>(in.data());
    s.avail_in = uInt(in.size());
    s.next_out = out.data();
    s.avail_out = uInt(out.size());
    deflate(&s, Z_FINISH);
    out.resize(s.total_out);
    deflateEnd(&s);
    return out;
}
}  // namespace

int main(int argc, char** argv) {
    const std::filesystem::path dir = argc > 1 ? argv[1] : "corpus";
    write(dir / "idx" / "images.idx", idx(0x0803, {2, 3, 3}));
    write(dir / "idx" / "labels.idx.gz", gzip(idx(0x0801, {5})));
    std::vector<std::uint8_t> record(3073, 7);
    record[0] = 3;
    write(dir / "cifar10" / "one_record.bin", record);
    tessera_fuzz::small_model m(0.25f, 2.0f, 3.0f);
    tessera::optim::sgd sgd({.momentum = 0.9});
    sgd.prepare(m);
    std::filesystem::create_directories(dir / "checkpoint");
    tessera::optim::save_checkpoint(dir / "checkpoint" / "small.ckpt", m, sgd, {{"epoch", 2.0}});
}
