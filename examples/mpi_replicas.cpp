// Several processes, as PopRun starts them: each MPI rank drives R / P replicas, reads its own shard
// of every epoch, and the ranks' gradients are summed in rank order after each process's own
// all-reduce, so the weights are the same bits on every rank (and the same as one process with all
// the replicas, tests/dist). Built where MPI is found (tessera::dist).
// Usage: mpirun -np 2 mpi_replicas
#include <tessera/dist/environment.hpp>
#include <tessera/dist/gradient_reduction.hpp>
#include <tessera/dist/parameters.hpp>
#include <tessera/tessera.hpp>

#include <cstdint>
#include <cstdio>

int main(int argc, char** argv) {
    namespace cfg = tessera::config;
    namespace data = tessera::data;
    namespace exec = tessera::exec;
    tessera::dist::environment env(&argc, &argv);  // an exception leaving this scope aborts every rank
    const auto world = env.world();
    using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>, cfg::eight_bit_io,
                          cfg::replication<cfg::dynamic>, cfg::instances<cfg::dynamic>>;
    const cfg::options counts{.micro_batch = 16, .replicas = 2 * world.size(), .instances = world.size()};

    tessera::nn::resnet20<cfg::fp32> net(1, 10);
    tessera::dist::broadcast_parameters(world, net);  // every rank starts from rank 0's weights
    auto session = exec::training_model<c>(net, tessera::optim::sgd({.learning_rate = 0.05, .momentum = 0.9}),
                                           {1, 28, 28, 1}, counts,
                                           {.across = tessera::dist::gradient_reduction(world, 2)});
    const data::synthetic_images images(4096, {1, 28, 28}, /*classes=*/10, /*seed=*/5);
    const data::normalization norm{.mean = {0.5f}, .stddev = {0.25f}};
    auto loader = data::make_data_loader<c>(images, counts, {.shuffle = true, .seed = 9, .rank = world.rank()});
    double loss = 0;
    std::size_t calls = 0;
    for (auto& batch : loader) {
        const auto result = session(exec::batch_feed<cfg::fp32, std::uint8_t>(batch, session.batching(), norm));
        loss += result.losses[0].back();
        ++calls;
    }
    std::printf("rank %zu of %zu: %zu calls, mean loss of its first replica %.3f\n", world.rank(), world.size(), calls,
                loss / double(calls));
}
// $ mpirun -np 2 mpi_replicas
// rank 0 of 2: 16 calls, mean loss of its first replica 1.513
// rank 1 of 2: 16 calls, mean loss of its first replica 1.512
