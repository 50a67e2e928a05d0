#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>

#include "tessera/emulator/pass_model.hpp"

namespace test_pass_model {

namespace emu = tessera::emulator;
namespace nn = tessera::nn;
using enum nn::pass_phase;

constexpr auto half = emu::partials_type::float16;

namespace {
// One tile, 4 exchange bytes and 64 fp16 MACs per cycle, no fixed overhead per pass: cycles by hand.
emu::device_spec one_tile() {
    emu::device_spec s;
    s.tiles = 1;
    s.clock_hz = 1e9;
    s.fp16_flops = 128e9;   // 64 MACs per cycle
    s.fp32_flops = 32e9;    // 16
    s.exchange_bandwidth = 4e9;
    s.memory_bandwidth = 24e9;
    s.pass_overhead_cycles = 0;
    return s;
}
}  // namespace

TEST_CASE("pass model: a contraction on one tile, cycle by cycle", "[emulator][cost]") {
    auto spec = one_tile();
    // Half partials. 6 rows of 16 × 16 channels, 1×1: one (output group, input group) step. The vertex's supervisor
    // overhead 109; weights into the conv units 16·16·2 B / 16 B per cycle = 32; each of 6 workers
    // takes its row: 20 set-up + 1 row × 4 cycles. Exchange: 6 rows × 16 halves, 192 bytes at 4 per
    // cycle (the weights stay on the tile); one sync of 90. Rearranging the activations between
    // layouts: the 6 rows in and out, 6 × (16 + 16) halves = 384 bytes at 4 per cycle.
    const auto c = emu::cycles_of(nn::pass::contraction(forward, 6, 16, 16), spec, 16, half);
    CHECK(c.compute == 109 + 32 + 6 * (20 + 4));
    CHECK(c.exchange == Approx(6 * 16 * 2 / 4.0));
    CHECK(c.sync == 90);
    CHECK(c.overhead == Approx(6 * 32 * 2 / 4.0));
    spec.pass_overhead_cycles = 100;  // a fixed cost per pass, added as it is
    CHECK(emu::cycles_of(nn::pass::contraction(forward, 6, 16, 16), spec, 16, half).overhead == Approx(96 + 100));
    spec.pass_overhead_cycles = 0;
    CHECK(c.tiles == 1);
    // Three input channels fill an AMP group of 16 no faster; 17 take two groups (two steps and
    // twice the weights) — the channel counts the AMP is built around.
    const auto three = emu::cycles_of(nn::pass::contraction(forward, 6, 16, 3), spec, 16, half);
    CHECK(three.compute == c.compute);
    const auto seventeen = emu::cycles_of(nn::pass::contraction(forward, 6, 16, 17), spec, 16, half);
    CHECK(seventeen.compute == 109 + 2 * (32 + 6 * (20 + 4)));
    // fp32: groups of 8 × 8 at 16 MACs per cycle, so 2 × 2 steps of 4 cycles per row, weights 8·8·4/16 = 16.
    const auto fp32 = emu::cycles_of(nn::pass::contraction(forward, 6, 16, 16), spec, 32);
    CHECK(fp32.compute == 109 + 4 * (16 + 6 * (20 + 4)));
}

TEST_CASE("pass model: rows spread over the tiles until each has one", "[emulator][cost]") {
    auto spec = one_tile();
    spec.tiles = 8;
    spec.fp16_flops = 8 * 128e9;
    spec.exchange_bandwidth = 8 * 4e9;
    // 48 rows over 8 tiles: 6 each, the one-tile figure per tile.
    const auto c = emu::cycles_of(nn::pass::contraction(forward, 48, 16, 16), spec, 16, half);
    CHECK(c.tiles == 8);
    CHECK(c.compute == 109 + 32 + 6 * (20 + 4));
    // 8 rows: one per tile on all 16 conv units (109 + 32 + 6 × (20 + 4) = 285 cycles, 8 bytes in),
    // or, as poplibs' planner also tries, 8 units: two output groups of 8 on 2 × 4 tiles, 2 rows
    // each, half the weights to load: 109 + 16 + 6 × (20 + 4) = 269 cycles, 16 bytes in. The
    // workers' set-up dominates, and the 8-unit plan is shorter.
    const auto few = emu::cycles_of(nn::pass::contraction(forward, 8, 16, 16), spec, 16, half);
    CHECK(few.compute == 109 + 16 + 6 * (20 + 4));
    CHECK(few.exchange == Approx(2 * 16 * 2 / 4.0));
    CHECK(few.tiles == 8);
}

TEST_CASE("pass model: products of two activations receive both operands, their groups split over the tiles",
          "[emulator][cost]") {
    auto spec = one_tile();
    // 3 groups of 6 rows × 16 → 16 on one tile: the vertex's overhead once, then per group the
    // weights' load (32) and the workers' rows (6 × (20 + 4)). The tile receives each group's rows
    // (6 × 16 halves) and, unlike weights, its second operand (16 × 16 halves).
    const auto c = emu::cycles_of(nn::pass::batched(forward, 3, 6, 16, 16), spec, 16, half);
    CHECK(c.compute == 109 + 3 * (32 + 6 * (20 + 4)));
    CHECK(c.exchange == Approx(3 * (6 * 16 + 16 * 16) * 2 / 4.0));
    CHECK(c.tile_bytes == Approx(3 * (6 * 16 + 16 * 16) * 2));
    CHECK(c.overhead == Approx(3 * 6 * 32 * 2 / 4.0));  // the rows rearranged, in and out, per group
    CHECK(nn::pass::batched(forward, 3, 6, 16, 16).macs() == 3 * 6 * 16 * 16);
    // The same product against weights: one group, the second operand not received.
    const auto w = emu::cycles_of(nn::pass::contraction(forward, 6, 16, 16), spec, 16, half);
    CHECK(w.exchange == Approx(6 * 16 * 2 / 4.0));
    // On 3 tiles each takes a group: the one-group figure, its own second operand received.
    spec.tiles = 3;
    spec.fp16_flops = 3 * 128e9;  // each tile's as before
    spec.exchange_bandwidth = 3 * 4e9;
    const auto spread = emu::cycles_of(nn::pass::batched(forward, 3, 6, 16, 16), spec, 16, half);
    CHECK(spread.tiles == 3);
    CHECK(spread.compute == 109 + 32 + 6 * (20 + 4));
    CHECK(spread.exchange == Approx((6 * 16 + 16 * 16) * 2 / 4.0));
}

TEST_CASE("pass model: an embedding's lookups and scatter-add, popops' multiSlice and multiUpdateAdd", "[emulator][cost]") {
    auto spec = one_tile();
    // 12 lookups of 8 halves in a table of 10 entries, on one tile: each of 6 workers takes 2 lookups,
    // 30 cycles a vertex and 19 + 4 vectors × 2 cycles each; the tile receives the 12 indices (4 bytes
    // each) and sends the 12 slices; the slices are rearranged for the next pass.
    const auto look = emu::cycles_of(nn::pass::gather(forward, 12, 8, 10), spec, 16);
    CHECK(look.compute == 6 * (30 + 2 * (19 + 4 * 2)));
    CHECK(look.exchange == Approx((12 * 4 + 12 * 8 * 2) / 4.0));
    CHECK(look.overhead == Approx(12 * 8 * 2 / 4.0));
    CHECK(look.tiles == 1);
    // The scatter-add: 3 + 30 + 4 cycles a vertex, 13 a lookup and 3 per further 4-byte atom (4 atoms
    // of 2 halves); in float 3 + 29 + 6, 11 and 3 per further atom (8 of 1 float).
    const auto add = emu::cycles_of(nn::pass::gather(backward, 12, 8, 10).of_weights(), spec, 16);
    CHECK(add.compute == 6 * (37 + 2 * (13 + 3 * 3)));
    CHECK(emu::cycles_of(nn::pass::gather(backward, 12, 8, 10).of_weights(), spec, 32).compute == 6 * (38 + 2 * (11 + 7 * 3)));
    // On 4 tiles the table is split: fewer lookups in range on each, a shorter pass.
    spec.tiles = 4;
    spec.exchange_bandwidth = 4 * 4e9;
    const auto split = emu::cycles_of(nn::pass::gather(forward, 12, 8, 10), spec, 16);
    CHECK(split.tiles > 1);
    CHECK(split.total() < look.total());
}

TEST_CASE("pass model: element-wise and reduction passes", "[emulator][cost]") {
    const emu::device_spec gc200{};
    // 4,800 halves over tiles holding a vector per worker at least: 200 tiles of 24. Per worker one
    // vector of each of 3 operands: 11 + 6 × (26 + 3) cycles.
    const auto add = emu::cycles_of(nn::pass::elementwise(forward, 4800, 3), gc200, 16);
    CHECK(add.tiles == 200);
    CHECK(add.compute == 11 + 6 * (26 + 3));
    CHECK(add.sync == 90);
    CHECK(add.exchange == 0);
    // Rearranged: 4,800 × 3 halves over the 200 tiles, 144 bytes each at the exchange's bytes per tile-cycle.
    CHECK(add.overhead == Approx(4800 * 3 * 2 / 200.0 / gc200.exchange_bytes_per_tile_cycle()));
    // The optimiser's step on tensors that keep their layout rearranges nothing.
    const auto step = emu::cycles_of(nn::pass::elementwise(backward, 4800, 3).kept_in_place(), gc200, 16);
    CHECK(step.overhead == 0);
    CHECK(step.compute == add.compute);
    // A reduction adds a second superstep: the partials are exchanged and added.
    const auto sum = emu::cycles_of(nn::pass::reduction(forward, 4800, 1, 2), gc200, 16);
    CHECK(sum.sync == 2 * 90);
    CHECK(sum.exchange > 0);
    CHECK(sum.compute > emu::cycles_of(nn::pass::elementwise(forward, 4800, 1), gc200, 16).compute);
    // seconds_of adds the passes' cycles at the clock.
    const std::vector<nn::pass> two{nn::pass::elementwise(forward, 4800, 3), nn::pass::elementwise(forward, 4800, 3)};
    CHECK(emu::seconds_of(two, gc200, 16) == Approx(2 * add.total() / gc200.clock_hz));
    REQUIRE_THROWS_AS(emu::cycles_of(two[0], gc200, 8), std::invalid_argument);
}

TEST_CASE("pass model: the GC200 runs large layers near its peak and small ones far below", "[emulator][cost]") {
    emu::device_spec gc200{};
    gc200.pass_overhead_cycles = 0;
    const auto efficiency = [&](const nn::pass& p) {
        return 2 * p.macs() / gc200.flops_per_second(16) / gc200.seconds(emu::cycles_of(p, gc200, 16, half).total());
    };
    // ResNet-50's 3×3 convolution of 64 channels at 56 × 56, micro-batch 18; a CIFAR ResNet's 1×1
    // of 1,024 to 256 channels at 2 × 2, micro-batch 32; the 7×7 stem on 3 input channels.
    const double big = efficiency(nn::pass::contraction(forward, 56 * 56 * 18, 64, 64, 9));
    const double small = efficiency(nn::pass::contraction(forward, 2 * 2 * 32, 256, 1024));
    const double stem = efficiency(nn::pass::contraction(forward, 112 * 112 * 18, 64, 3, 49));
    CHECK(big > 0.4);
    CHECK(big < 1.0);
    CHECK(small < 0.2);
    CHECK(stem < 0.3);  // 3 of 16 AMP input lanes
}

TEST_CASE("pass model: float partials of 16-bit data run on half the conv units", "[emulator][cost]") {
    const auto spec = one_tile();
    const auto pass = nn::pass::contraction(forward, 6, 16, 16);
    // poplibs: 4 pipeline stages × 2 floats stored per 64-bit cycle = 8 conv units store floats.
    CHECK(spec.amp_output_channels(16, emu::partials_type::float32) == 8);
    CHECK(spec.amp_output_channels(16, half) == 16);
    CHECK(spec.amp_output_channels(32, emu::partials_type::float32) == 8);
    // Float partials (the default): two output groups of 8, each 4 cycles per row, weights
    // 16·8·2 B / 16 B = 16 cycles: 109 + 2 × (16 + 6 × (20 + 4)), against 109 + 32 + 6 × (20 + 4).
    const auto f = emu::cycles_of(pass, spec, 16);
    CHECK(f.compute == 109 + 2 * (16 + 6 * (20 + 4)));
    CHECK(emu::cycles_of(pass, spec, 16, half).compute == 109 + 32 + 6 * (20 + 4));
    // The exchange and the rearrangement move 16-bit data either way.
    CHECK(f.exchange == emu::cycles_of(pass, spec, 16, half).exchange);
    // 32-bit data sums in float whatever the setting.
    CHECK(emu::cycles_of(pass, spec, 32, half).compute == emu::cycles_of(pass, spec, 32).compute);
    // On the GC200 a large layer's float-partials pass takes nearly twice the half-partials one.
    const emu::device_spec gc200{};
    const auto big = nn::pass::contraction(forward, 56 * 56 * 18, 64, 64, 9);
    const double ratio = emu::cycles_of(big, gc200, 16).total() / emu::cycles_of(big, gc200, 16, half).total();
    CHECK(ratio > 1.5);
    CHECK(ratio < 2.0);
}

TEST_CASE("pass model: a sum split over tiles exchanges partials of its type", "[emulator][cost]") {
    // Few rows and many input channels: the planner splits the input groups over the tiles, and
    // each tile adds the slices of its share; half partials move half the bytes.
    const emu::device_spec gc200{};
    const auto deep = nn::pass::contraction(forward, 4, 64, 4096);
    const auto f = emu::cycles_of(deep, gc200, 16), h = emu::cycles_of(deep, gc200, 16, half);
    REQUIRE(f.sync == 2 * gc200.sync_cycles);  // the second superstep adds the slices
    REQUIRE(h.sync == 2 * gc200.sync_cycles);
    // Both read the same 16-bit inputs; the float slices add more bytes to the exchange.
    CHECK(f.exchange > h.exchange);
}

TEST_CASE("pass model: a plan's temporaries on its busiest tile, within the available memory proportion",
          "[emulator][cost][memory]") {
    auto spec = one_tile();
    spec.tiles = 8;
    spec.fp16_flops = 8 * 128e9;
    spec.exchange_bandwidth = 8 * 4e9;
    // 48 rows over 8 tiles, half partials: each tile receives its 6 rows of 16 halves and sums into
    // the results (nothing kept apart).
    CHECK(emu::cycles_of(nn::pass::contraction(forward, 48, 16, 16), spec, 16, half).tile_bytes == 6 * 16 * 2);
    // Float partials of 16-bit data keep the float sums beside the output until the cast.
    const auto as_float = emu::cycles_of(nn::pass::contraction(forward, 48, 16, 16), spec, 16);
    CHECK(as_float.tile_bytes > 6 * 16 * 2);
    // Element-wise passes work on what the tile holds; a reduction receives float partial results.
    CHECK(emu::cycles_of(nn::pass::elementwise(forward, 4096, 2), spec, 16).tile_bytes == 0);
    CHECK(emu::cycles_of(nn::pass::reduction(forward, 4096, 1, 16), spec, 16).tile_bytes > 0);

    // On a GC200: ResNet-50's large layers, planned with all of each tile (1.0), with a bound half the
    // fastest plan's temporaries, and with 0 (the least temporaries, as poplibs plans when nothing fits).
    const emu::device_spec gc200{};
    std::size_t bound_binds = 0;
    for (const auto& p : {nn::pass::contraction(forward, 112 * 112 * 20, 64, 3, 49),
                          nn::pass::contraction(backward, 512 * 9, 512, 7 * 7 * 20).of_weights(),
                          nn::pass::contraction(backward, 64 * 9, 64, 56 * 56 * 20).of_weights(),
                          nn::pass::contraction(forward, 28 * 28 * 20, 512, 128)}) {
        const auto free = emu::cycles_of(p, gc200, 16, half, 1.0);
        const double share = free.tile_bytes / double(gc200.memory_per_tile) / 2;
        const auto bounded = emu::cycles_of(p, gc200, 16, half, share);
        const auto least = emu::cycles_of(p, gc200, 16, half, 0.0);
        INFO("rows " << p.rows << ", temporaries " << free.tile_bytes << " / " << bounded.tile_bytes << " / "
                     << least.tile_bytes << " bytes");
        CHECK(least.tile_bytes <= bounded.tile_bytes);
        CHECK(bounded.tile_bytes <= free.tile_bytes);
        CHECK(bounded.total() >= free.total());  // the bound can only cost cycles
        if (bounded.tile_bytes <= share * double(gc200.memory_per_tile)) {
            ++bound_binds;
            CHECK(bounded.tile_bytes < free.tile_bytes);
        } else {
            CHECK(bounded.tile_bytes == least.tile_bytes);  // nothing fits: the least temporaries
        }
        // poplibs' default, 0.6 of 624 KiB, holds each of these layers' fastest plan.
        CHECK(emu::cycles_of(p, gc200, 16, half).total() == free.total());
    }
    CHECK(bound_binds > 0);
    for (const double bad : {-0.1, 1.5, std::nan("")})
        CHECK_THROWS_WITH(emu::cycles_of(nn::pass::contraction(forward, 48, 16, 16), spec, 16, half, bad),
                          Catch::Contains("available memory proportion"));
}

}  // namespace test_pass_model
