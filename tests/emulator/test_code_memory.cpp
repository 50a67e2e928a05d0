#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "tessera/emulator/code_memory.hpp"

namespace test_code_memory {

namespace emu = tessera::emulator;
namespace nn = tessera::nn;
using enum nn::pass_phase;

TEST_CASE("code memory: a deep reduction's messages in poplibs' stages", "[emulator][memory]") {
    // poplibs (ConvReducePlan.cpp): one stage below depth 16, two from 16, three from 125; each stage
    // reduces depth^(1/stages) messages, so a tile receives stages × that many.
    CHECK(emu::detail::reduction_messages(1) == 0);
    CHECK(emu::detail::reduction_messages(8) == 8);
    CHECK(emu::detail::reduction_messages(15) == 15);
    CHECK(emu::detail::reduction_messages(16) == 2 * 4);
    CHECK(emu::detail::reduction_messages(100) == 2 * 10);
    CHECK(emu::detail::reduction_messages(125) == 3 * 5);
    CHECK(emu::detail::reduction_messages(1472) == 3 * 12);  // 1472^(1/3) = 11.4
    // Against the naive count, a message from each of the depth tiles: fewer from depth 16 on.
    for (double depth = 16; depth <= 1472; depth += 1) CHECK(emu::detail::reduction_messages(depth) < depth);
}

TEST_CASE("code memory: passes of one shape share their code, whatever their phase", "[emulator][memory]") {
    const std::vector<nn::pass> passes{
        nn::pass::contraction(forward, 64, 16, 16, 9), nn::pass::elementwise(forward, 1024, 2),
        nn::pass::contraction(backward, 64, 16, 16, 9), nn::pass::contraction(forward, 64, 16, 16, 9),
        nn::pass::contraction(forward, 64, 32, 16, 9), nn::pass::elementwise(forward, 1024, 2).kept_in_place(),
        nn::pass::elementwise(backward, 1024, 2)};
    const auto distinct = emu::distinct_passes(passes);
    // the 64×16×16 contraction (three times), the 64×32×16 one, the element-wise pass, and it in place
    REQUIRE(distinct.size() == 4);
    CHECK(emu::distinct_passes(distinct).size() == 4);
    std::vector<nn::pass> reversed(passes.rbegin(), passes.rend());
    CHECK(emu::distinct_passes(reversed).size() == 4);
}

TEST_CASE("code memory: vertex code per kind, exchange code per message, control per compute set, by hand",
          "[emulator][memory]") {
    const emu::code_spec spec{};
    const std::vector<nn::pass> passes{nn::pass::contraction(forward, 64, 16, 16), nn::pass::elementwise(forward, 64, 2)};
    std::vector<emu::pass_cycles> cycles(2);
    cycles[0].messages = 10, cycles[0].supersteps = 3;
    cycles[1].messages = 1, cycles[1].supersteps = 2;
    const auto code = emu::code_of(passes, cycles, spec);
    // 4 bytes per instruction; the contraction's and the element-wise codelets, no reduction's
    CHECK(code.vertex == (1708 + 2589) * 4.0);
    CHECK(code.exchange == (10 + 1) * 2 * 4.0);    // a receive here and a send on the source, per message
    CHECK(code.control == (3 + 2) * (8 * 4 + 64.0));
    CHECK(code.total() == code.vertex + code.exchange + code.control);
    // Nothing to run, no code.
    CHECK(emu::code_of({}, {}, spec).total() == 0);
    // Each figure is the user's to change.
    emu::code_spec bigger = spec;
    bigger.control_bytes_per_superstep = 200;
    CHECK(emu::code_of(passes, cycles, bigger).control == 5 * 200.0);
    CHECK_THROWS_AS(emu::code_of(passes, std::vector<emu::pass_cycles>(1), spec), std::invalid_argument);
}

TEST_CASE("code memory: what a pass's busiest tile receives, in messages", "[emulator][memory]") {
    emu::device_spec spec;
    spec.tiles = 8;
    // An element-wise pass over tensors that keep their layout receives nothing; out of place, its
    // rearranged share (one message, one more compute set).
    const auto kept = emu::cycles_of(nn::pass::elementwise(forward, 4096, 2).kept_in_place(), spec, 16);
    CHECK(kept.messages == 0);
    CHECK(kept.supersteps == 1);
    const auto moved = emu::cycles_of(nn::pass::elementwise(forward, 4096, 2), spec, 16);
    CHECK(moved.messages == 1);
    CHECK(moved.supersteps == 2);
    // A reduction on all 8 tiles gathers a partial from each (8 < 16: one stage), then rearranges.
    const auto stats = emu::cycles_of(nn::pass::reduction(forward, 4096, 1, 16), spec, 16);
    REQUIRE(stats.tiles == 8);
    CHECK(stats.messages == 8 + 1);
    CHECK(stats.supersteps == 3);
    // A contraction on one tile holds its whole input: one message (its share is all of it), then
    // the rearrangement's.
    spec.tiles = 1;
    const auto one = emu::cycles_of(nn::pass::contraction(forward, 6, 16, 16), spec, 16);
    CHECK(one.messages == 1 + 1);
    CHECK(one.supersteps == 2);
}

}  // namespace test_code_memory
