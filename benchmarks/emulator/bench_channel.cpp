// Channel hand-off between two threads: messages per second at several capacities, for the
// mutex-based channel and the lock-free single-producer single-consumer one, in the same run.
#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include "tessera/emulator/channel.hpp"
#include "tessera/emulator/spsc_channel.hpp"

namespace emu = tessera::emulator;

template <class Channel>
static void BM_handoff(benchmark::State& state) {
    const auto capacity = static_cast<std::size_t>(state.range(0));
    constexpr int messages = 20000;
    for (auto _ : state) {
        Channel ch(capacity);
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
BENCHMARK_TEMPLATE(BM_handoff, emu::channel<std::vector<float>>)->Arg(1)->Arg(4)->Arg(64)->UseRealTime();
BENCHMARK_TEMPLATE(BM_handoff, emu::spsc_channel<std::vector<float>>)->Arg(1)->Arg(4)->Arg(64)->UseRealTime();
