// Shows how the IPU batching counts compose: for the configurations of the PopTorch tutorials,
// the IPUs needed, the combined batch one host call consumes, the samples per weight update and
// the iterations of one Fashion-MNIST epoch (60,000 images, drop_last; each instance reads its shard). A broken rule is reported
// with its values. Prints a table, then the error.
#include <tessera/tessera.hpp>

#include <cstdio>

namespace cfg = tessera::config;

template <class C>
void row(const char* name, std::size_t micro_batch) {
    const auto b = cfg::make_batching<C>({.micro_batch = micro_batch});
    const std::size_t per_update = b.training ? b.samples_per_update() : 0;  // inference: no updates
    std::printf("%-28s %5zu %4s %5zu %9zu %10zu %12zu\n", name, C::ipus_needed, C::precision::name.data(),
                b.micro_batch, b.combined_batch(), per_update, 60'000 / (b.combined_batch() * b.instances));
}

int main() {
    std::printf("%-28s %5s %4s %5s %9s %10s %12s\n", "configuration", "IPUs", "prec", "mb", "combined",
                "per update", "iterations");
    row<cfg::config<cfg::half, cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<3>>>("pipelined(2) G3", 32);
    row<cfg::config<cfg::half, cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<8>>>("pipelined(2) G8", 32);
    row<cfg::config<cfg::half, cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<8>,
                    cfg::device_iterations<4>>>("pipelined(2) G8 D4", 32);
    row<cfg::config<cfg::half, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<8>,
                    cfg::device_iterations<4>, cfg::replication<4>>>("1F1B(2) G8 D4 R4", 32);
    row<cfg::config<cfg::mixed, cfg::replication<4>, cfg::instances<2>, cfg::eight_bit_io>>("R4 over 2 instances, 8-bit", 64);
    using inference = cfg::config<cfg::half, cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<8>,
                                  cfg::device_iterations<4>>::for_inference;
    row<inference>("the same, for inference", 32);

    // G chosen at run time: the rule is checked when the batching is made, with the values named.
    using swept = cfg::config<cfg::pipelined<cfg::gpipe, 4>, cfg::gradient_accumulation<cfg::dynamic>>;
    try {
        (void)cfg::make_batching<swept>({.micro_batch = 32, .gradient_accumulation = 4});
    } catch (const cfg::config_error& e) {
        std::printf("\n%s\n", e.what());
    }
}
// configuration                 IPUs prec    mb  combined per update   iterations
// pipelined(2) G3                  2 16.16    32        96         96          625
// pipelined(2) G8                  2 16.16    32       256        256          234
// pipelined(2) G8 D4               2 16.16    32      1024        256           58
// 1F1B(2) G8 D4 R4                 8 16.16    32      4096       1024           14
// R4 over 2 instances, 8-bit       4 16.32    64       128        256          468
// the same, for inference          2 16.16    32       128          0          468
//
// tessera::config: pipelined training with 4 stages needs gradient_accumulation >= 2*4 - 1 = 7, got 4 (...)
