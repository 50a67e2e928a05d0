// Built against an installed tessera with MPI: tessera::dist links (run it under mpirun to see the ranks).
#include <tessera/dist.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    tessera::dist::environment env(&argc, &argv);
    const auto world = env.world();
    std::printf("tessera dist consumer: rank %zu of %zu\n", world.rank(), world.size());
    return 0;
}
