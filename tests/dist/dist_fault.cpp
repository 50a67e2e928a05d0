// A rank that fails in the middle of a multi-process run, for the CTest that checks every rank ends:
//   mpirun -np 2 dist_fault throw   rank 1's feed throws at its 3rd call (while rank 0 waits for its gradients)
//   mpirun -np 2 dist_fault die     rank 1 is killed (SIGKILL) at its 3rd call
// Rank 1 reports the exception and leaves the dist::environment's scope by it: the environment
// aborts the run, so rank 0 does not wait for ever in the reduction rank 1 will never join.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/config.hpp"
#include "tessera/data.hpp"
#include "tessera/dist.hpp"
#include "tessera/exec.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"

using namespace tessera;
namespace cfg = tessera::config;

namespace {

void run(const dist::communicator& world, const std::string& mode) {
    using net_t = nn::resnet<nn::basic_block<cfg::fp32, nn::padding_shortcut>, nn::cifar_stem<cfg::fp32>, 1, 1, 1>;
    using c = cfg::dispatched_config<cfg::fp32, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::float_io>;
    const config::options counts{.micro_batch = 4, .gradient_accumulation = 4, .device_iterations = 1,
                                 .replicas = world.size(), .instances = world.size(), .input_group = 1};
    const exec::session_options settings{.record_trace = false, .across = dist::gradient_reduction(world, 2)};
    auto session = exec::training_model<c>(net_t(1, 4), optim::sgd({.learning_rate = 0.05}), {1, 8, 8, 1}, counts, settings);
    const std::size_t n = 16 * world.size() * 10;
    std::vector<std::uint8_t> values(n * 64);
    std::vector<data::label_t> labels(n);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint8_t>(i * 31 % 251);
    for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<data::label_t>(i % 4);
    const data::in_memory_dataset<std::uint8_t> dataset({1, 8, 8}, 4, std::move(values), std::move(labels), "fault");
    auto loader = data::make_data_loader<c>(dataset, counts, {.rank = world.rank()});
    std::size_t call = 0;
    for (auto& batch : loader) {
        ++call;
        const exec::batch_feed<cfg::fp32, float> feed(batch, session.batching());
        const auto failing = [&](std::size_t group, std::size_t d, std::size_t m) {
            if (world.rank() == 1 && call == 3 && m == 2) {
                if (mode == "die") std::raise(SIGKILL);
                throw std::runtime_error("rank 1 fails on purpose at call 3");
            }
            return feed(group, d, m);
        };
        (void)session(failing);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "throw";
    try {
        dist::environment env(&argc, &argv);
        const auto world = env.world();
        try {
            run(world, mode);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "dist_fault: rank %zu: %s\n", world.rank(), e.what());
            throw;  // leaves the environment's scope by an exception: it aborts every rank
        }
    } catch (const std::exception&) {
        return 1;  // not reached under mpirun: MPI_Abort ended the run
    }
    std::puts("dist_fault: no rank failed");
    return 0;
}
