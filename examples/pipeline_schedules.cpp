// Six pipeline schedules of the same model on the same 4 IPUs, priced by dry runs: GPipe, 1F1B and
// the zero-bubble ZB-H1 and ZB-H2 over 4 stages, and interleaved 1F1B and looped BFS with 2 model
// chunks per IPU (8 stages, stage s on IPU s mod 4). ResNet-50 at 16.16, micro-batch 8, G = 8; once with each stage
// recomputing its forward in its backward, once without.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cstdio>

namespace cfg = tessera::config;
namespace exec = tessera::exec;

template <class Strategy>
void price(const char* name, bool recompute) {
    using c = cfg::config<cfg::half, Strategy, cfg::gradient_accumulation<8>, cfg::device_iterations<1>>;
    const tessera::nn::resnet50<cfg::half> net(/*in_channels=*/3, /*classes=*/1000);
    exec::session_options settings{.host = tessera::emulator::native_host()};
    settings.recompute.assign(Strategy::stages, recompute);
    const auto e = exec::dry_run<c>(net, tessera::optim::sgd({.momentum = 0.9}), {1, 224, 224, 3}, {.micro_batch = 8},
                                    /*images=*/8 * 8 * 100, settings, /*epochs=*/1, exec::over_budget::reported);
    // What crosses between IPUs in one step: activations forward, their gradients back.
    double sent = 0;
    for (const auto& program : e.plan.program.programs)
        for (const auto& in : program) {
            const auto& stage = e.plan.costs.stages[in.stage];
            if (in.op == exec::opcode::send_act) sent += double(stage.output_bytes);
            if (in.op == exec::opcode::send_grad) sent += double(stage.input_bytes);
        }
    std::size_t fullest = 0;
    for (const auto& ipu : e.memory.ipus) fullest = std::max(fullest, ipu.on_chip());
    std::printf("%-16s %8.2f ms %7.1f %% %9.0f MiB %9.0f MiB\n", name, 1e3 * e.call_device_seconds,
                100 * e.device_breakdown.bubble_fraction, double(fullest) / (1 << 20), sent / (1 << 20));
}

int main() {
    for (const bool recompute : {true, false}) {
        std::printf("%s\n%-16s %11s %9s %13s %13s\n", recompute ? "recomputing every stage" : "no recomputation",
                    "schedule", "step", "bubble", "fullest IPU", "IPU-to-IPU");
        price<cfg::pipelined<cfg::gpipe, 4>>("gpipe", recompute);
        price<cfg::pipelined<cfg::one_f_one_b, 4>>("1f1b", recompute);
        price<cfg::pipelined<cfg::interleaved<2>, 8>>("interleaved<2>", recompute);
        price<cfg::pipelined<cfg::looped_bfs<2>, 8>>("looped-bfs<2>", recompute);
        price<cfg::pipelined<cfg::zero_bubble_h1, 4>>("zero-bubble-h1", recompute);
        price<cfg::pipelined<cfg::zero_bubble_h2, 4>>("zero-bubble-h2", recompute);
    }
}
// recomputing every stage
// schedule                step    bubble   fullest IPU    IPU-to-IPU
// gpipe               31.59 ms    49.4 %       649 MiB       196 MiB
// 1f1b                27.64 ms    42.2 %       640 MiB       196 MiB
// interleaved<2>      33.22 ms    40.9 %       517 MiB       564 MiB
// looped-bfs<2>       36.30 ms    46.0 %       566 MiB       564 MiB
// zero-bubble-h1      26.86 ms    40.5 %      1352 MiB       196 MiB
// zero-bubble-h2      26.53 ms    39.8 %      1373 MiB       196 MiB
// no recomputation
// schedule                step    bubble   fullest IPU    IPU-to-IPU
// gpipe               27.73 ms    52.9 %      5534 MiB       196 MiB
// 1f1b                24.49 ms    46.6 %      3082 MiB       196 MiB
// interleaved<2>      30.44 ms    45.1 %      3611 MiB       564 MiB
// looped-bfs<2>       32.60 ms    48.8 %      3934 MiB       564 MiB
// zero-bubble-h1      23.71 ms    44.9 %      3182 MiB       196 MiB
// zero-bubble-h2      23.37 ms    44.1 %      5021 MiB       196 MiB
