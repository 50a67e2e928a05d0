#pragma once
// The emulator layer: device figures, IPUs (thread + memory arena + modelled clock), channels, collectives.
#include "tessera/emulator/all_reduce.hpp"
#include "tessera/emulator/channel.hpp"
#include "tessera/emulator/cluster.hpp"
#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/error.hpp"
#include "tessera/emulator/ipu.hpp"
#include "tessera/emulator/memory_arena.hpp"
#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/emulator/spsc_channel.hpp"
