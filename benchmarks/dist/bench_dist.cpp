// When do more host processes help on this machine? The same training (ResNet-20, 2 replicas in
// all, a host-heavy loader: float I/O, normalisation and augmentation on the host) as 1 process ×
// 2 replicas and as 2 processes × 1 replica (dist_worker under mpirun), alternated in every
// iteration; the counters are images/s of each and their ratio, measured in the same run.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace {

double images_per_second(int processes) {
    const std::string command = std::string(TESSERA_MPIRUN) + " -np " + std::to_string(processes) + " " +
                                TESSERA_DIST_WORKER + " 8 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) throw std::runtime_error("cannot run " + command);
    char line[512];
    double rate = 0;
    std::string output;
    while (std::fgets(line, sizeof line, pipe)) {
        output += line;
        std::sscanf(line, "images_per_second %lf", &rate);
    }
    if (pclose(pipe) != 0 || rate <= 0) throw std::runtime_error(command + " failed:\n" + output);
    return rate;
}

void BM_two_processes_over_one(benchmark::State& state) {
    double one = 0, two = 0;
    for (auto _ : state) {
        one += images_per_second(1);
        two += images_per_second(2);
    }
    const double n = static_cast<double>(state.iterations());
    state.counters["one_process_images_per_s"] = one / n;
    state.counters["two_processes_images_per_s"] = two / n;
    state.counters["two_over_one"] = two / one;
}
BENCHMARK(BM_two_processes_over_one)->Iterations(3)->Unit(benchmark::kSecond);

}  // namespace
