#pragma once
// The modelled IPU of tessera-train's and tessera-plan's --ipu and --device.
#include <stdexcept>
#include <string>

#include "tessera/emulator/device_presets.hpp"
#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/device_spec_json.hpp"
#include "train_request.hpp"

namespace tessera::programs {

/// The modelled IPU: --device's file when given, else --ipu's preset.
[[nodiscard]] inline emulator::device_spec device_of(const train_request& r) {
    if (!r.device.empty()) {
        try {
            return emulator::read_device_spec(r.device);
        } catch (const emulator::device_spec_error& e) {
            throw usage_error(std::string("--device: ") + e.what());
        }
    }
    try {
        return emulator::ipu_named(r.ipu);
    } catch (const std::invalid_argument& e) {
        throw usage_error(std::string("--ipu: ") + e.what());
    }
}

}  // namespace tessera::programs
