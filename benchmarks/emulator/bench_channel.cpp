// Bounded channel throughput between two threads: messages per second at several capacities.
#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include "tessera/emulator/channel.hpp"

namespace emu = tessera::emulator;

static void BM_channel_handoff(benchmark::State& state) {
    const auto capacity = static_cast<std::size_t>(state.range(0));
    constexpr int messages = 20000;
    for (auto _ : state) {
        emu::channel<std::vector<float>> ch(capacity);
        std::jthread producer([&] {
            for (int i = 0; i < messages; ++i) ch.send(std::vector<float>{});
            ch.close();
        });
        int received = 0;
        while (ch.receive()) ++received;
        benchmark::DoNotOptimize(received);
    }
    state.SetItemsProcessed(state.iterations() * messages);
}
BENCHMARK(BM_channel_handoff)->Arg(1)->Arg(4)->Arg(64)->UseRealTime();
