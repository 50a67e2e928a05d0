// tessera-train's host processes over tessera::dist (MPI), where the build found MPI; without it,
// --instances > 1 is refused with the reason.
#include "train_processes.hpp"

#include <cstdlib>
#include <span>
#include <string>

#if TESSERA_TRAIN_MPI
#include <tessera/dist.hpp>
#endif

namespace tessera::programs {

bool launched_by_mpirun() noexcept {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(name) != nullptr) return true;
    return false;
}

#if TESSERA_TRAIN_MPI

namespace {

class mpi_processes final : public processes {
public:
    mpi_processes() : world(environment.world()) {}
    [[noreturn]] void abort(int code) override { environment.abort(code); }

    dist::environment environment;  // first made, last destroyed
    dist::communicator world;
};

}  // namespace

std::unique_ptr<processes> start_processes(train_request& r) {
    auto p = std::make_unique<mpi_processes>();
    const dist::communicator* world = &p->world;
    r.processes.rank = world->rank();
    r.processes.size = world->size();
    r.processes.gradient_reduction = [world](std::size_t stages) { return dist::gradient_reduction(*world, stages); };
    r.processes.sum = [world](std::span<double> values) { world->sum_in_rank_order(values); };
    r.processes.broadcast = [world](std::span<std::byte> bytes) { world->broadcast(bytes); };
    r.processes.check_same = [world](const std::string& what, const std::string& text) { world->check_same(what, text); };
    return p;
}

void check_processes(const train_request& r, const std::string& line) {
    if (r.processes.size != r.instances) {
        const std::string n = std::to_string(r.instances);
        throw usage_error("--instances " + n + " needs " + n + " processes, and " + std::to_string(r.processes.size) +
                          (r.processes.size == 1 ? " was" : " were") + " started: run mpirun -np " + n +
                          " tessera-train --instances " + n + " ...");
    }
    try {
        r.processes.check_same("configuration", line);
    } catch (const dist::dist_error& e) {
        throw usage_error(e.what());
    }
}

#else

std::unique_ptr<processes> start_processes(train_request& r) {
    throw usage_error("--instances " + std::to_string(r.instances) +
                      " runs one process per instance over MPI, and this tessera-train was built without MPI "
                      "(install libopenmpi-dev and openmpi-bin, rebuild, and start it with mpirun -np P)");
}

void check_processes(const train_request&, const std::string&) {}

#endif

}  // namespace tessera::programs
