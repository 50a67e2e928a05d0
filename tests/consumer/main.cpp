// Built against an installed tessera: the umbrella header compiles and its policies work.
#include <tessera/tessera.hpp>

#include <cstdio>

int main() {
    const tessera::half h = 0.1f;
    if (h.bits() != 0x2E66) {
        std::printf("unexpected half bits %#x\n", h.bits());
        return 1;
    }
    std::printf("tessera consumer: half(0.1) = %.10f\n", static_cast<float>(h));
    return 0;
}
