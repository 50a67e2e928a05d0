// Six pipeline schedules of the same model on the same 4 IPUs, priced by dry runs: GPipe, 1F1B and
// the zero-bubble ZB-H1 and ZB-H2 over 4 stages, and interleaved 1F1B and looped BFS with 2 model
// chunks per IPU (8 stages, stage s on IPU s mod 4). ResNet-50 at 16.16, micro-batch 8, G = 8; once with each stage
// recomputing its forward in its backward, once without; in lock-step pipeline cycles, as Poplar runs
// them, and (the last column) as asynchronous dataflow.
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
    const auto run = [&] {
        return exec::dry_run<c>(net, tessera::optim::sgd({.momentum = 0.9}), {1, 224, 224, 3}, {.micro_batch = 8},
                                /*images=*/8 * 8 * 100, settings, /*epochs=*/1, exec::over_budget::reported);
    };
    const auto e = run();
    settings.lock_step = false;
    const double dataflow = run().call_device_seconds;
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
    std::printf("%-16s %8.2f ms %7.1f %% %9.0f MiB %9.0f MiB %8.2f ms\n", name, 1e3 * e.call_device_seconds,
                100 * e.device_breakdown.bubble_fraction, double(fullest) / (1 << 20), sent / (1 << 20), 1e3 * dataflow);
}

int main() {
    for (const bool recompute : {true, false}) {
        std::printf("%s\n%-16s %11s %9s %13s %13s %11s\n", recompute ? "recomputing every stage" : "no recomputation",
                    "schedule", "step", "bubble", "fullest IPU", "IPU-to-IPU", "dataflow");
        price<cfg::pipelined<cfg::gpipe, 4>>("gpipe", recompute);
        price<cfg::pipelined<cfg::one_f_one_b, 4>>("1f1b", recompute);
        price<cfg::pipelined<cfg::interleaved<2>, 8>>("interleaved<2>", recompute);
        price<cfg::pipelined<cfg::looped_bfs<2>, 8>>("looped-bfs<2>", recompute);
        price<cfg::pipelined<cfg::zero_bubble_h1, 4>>("zero-bubble-h1", recompute);
        price<cfg::pipelined<cfg::zero_bubble_h2, 4>>("zero-bubble-h2", recompute);
    }
}
// recomputing every stage
// schedule                step    bubble   fullest IPU    IPU-to-IPU    dataflow
// gpipe               34.81 ms    53.8 %       668 MiB       196 MiB    32.85 ms
// 1f1b                35.64 ms    54.8 %       658 MiB       196 MiB    28.75 ms
// interleaved<2>      40.23 ms    51.0 %       535 MiB       564 MiB    34.18 ms
// looped-bfs<2>       38.40 ms    48.6 %       584 MiB       564 MiB    37.08 ms
// zero-bubble-h1      33.62 ms    52.1 %      1371 MiB       196 MiB    28.36 ms
// zero-bubble-h2      32.74 ms    50.8 %      1384 MiB       196 MiB    28.36 ms
// no recomputation
// schedule                step    bubble   fullest IPU    IPU-to-IPU    dataflow
// gpipe               30.04 ms    55.7 %      5552 MiB       196 MiB    28.52 ms
// 1f1b                29.98 ms    55.6 %      3101 MiB       196 MiB    25.47 ms
// interleaved<2>      35.31 ms    52.0 %      3629 MiB       564 MiB    31.33 ms
// looped-bfs<2>       34.21 ms    50.4 %      3952 MiB       564 MiB    33.46 ms
// zero-bubble-h1      26.73 ms    50.2 %      3200 MiB       196 MiB    24.81 ms
// zero-bubble-h2      27.07 ms    50.8 %      5045 MiB       196 MiB    24.58 ms
