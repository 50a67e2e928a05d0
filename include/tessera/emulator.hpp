#pragma once
// The emulator layer: device and host figures, the pass model, IPUs (thread + memory arena + modelled
// clock), the host's clock, channels, collectives.
#include "tessera/emulator/available_memory.hpp"
#include "tessera/emulator/collective_group.hpp"
#include "tessera/emulator/channel.hpp"
#include "tessera/emulator/cluster.hpp"
#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/error.hpp"
#include "tessera/emulator/host_clock.hpp"
#include "tessera/emulator/host_presets.hpp"
#include "tessera/emulator/host_spec.hpp"
#include "tessera/emulator/host_spec_json.hpp"
#include "tessera/emulator/ipu.hpp"
#include "tessera/emulator/memory_arena.hpp"
#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/emulator/partials.hpp"
#include "tessera/emulator/pass_model.hpp"
#include "tessera/emulator/spsc_channel.hpp"
