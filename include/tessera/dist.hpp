#pragma once
// tessera::dist: data parallelism over host processes (MPI ranks), PopRun/PopDist's instances.
// The top layer; needs MPI (link tessera::dist). tessera.hpp does not include it.
#include "tessera/dist/communicator.hpp"
#include "tessera/dist/environment.hpp"
#include "tessera/dist/error.hpp"
#include "tessera/dist/gradient_reduction.hpp"
#include "tessera/dist/parameters.hpp"
