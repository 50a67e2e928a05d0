#pragma once
// The memory plan per IPU as a text table and as JSON.
#include <cstddef>
#include <cstdio>
#include <sstream>
#include <string>

#include "tessera/emulator/error.hpp"
#include "tessera/emulator/memory_arena.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/report/json.hpp"
#include "tessera/report/table.hpp"

namespace tessera::exec {

/// One table per IPU: item, kind, where, bytes; then on-chip use against the budget.
[[nodiscard]] inline std::string memory_text(const memory_plan& plan) {
    std::ostringstream out;
    for (const auto& ipu : plan.ipus) {
        char used[128];
        std::snprintf(used, sizeof used, "%.1f%%", ipu.budget ? 100.0 * double(ipu.on_chip()) / double(ipu.budget) : 0.0);
        out << "IPU " << ipu.ipu << ": " << emulator::format_bytes(double(ipu.on_chip())) << " on chip of "
            << emulator::format_bytes(double(ipu.budget)) << " (" << used << "), "
            << emulator::format_bytes(double(ipu.off_chip())) << " in Streaming Memory\n";
        report::table t({"item", "kind", "location", "bytes"});
        for (const auto& item : ipu.items)
            t.add_row({item.name, emulator::to_string(item.kind),
                       item.where == location::on_chip ? "on chip" : "streaming", std::to_string(item.bytes)});
        t.write(out);
    }
    return out.str();
}

/// An IPU's items as a JSON array: [{"name":..,"kind":..,"location":"on_chip"|"streaming_memory","bytes":..}].
inline void write_json_items(report::json_writer& j, const ipu_memory_plan& ipu) {
    j.begin_array();
    for (const auto& item : ipu.items)
        j.begin_object()
            .member("name", item.name)
            .member("kind", emulator::to_string(item.kind))
            .member("location", item.where == location::on_chip ? "on_chip" : "streaming_memory")
            .member("bytes", item.bytes)
            .end_object();
    j.end_array();
}

/// {"ipus":[{"ipu":0,"budget":b,"on_chip":n,"off_chip":n,"items":[{"name":..,"kind":..,"location":..,"bytes":..}]}]}
inline void write_json(report::json_writer& j, const memory_plan& plan) {
    j.begin_object().key("ipus").begin_array();
    for (const auto& ipu : plan.ipus) {
        j.begin_object()
            .member("ipu", ipu.ipu)
            .member("budget", ipu.budget)
            .member("on_chip", ipu.on_chip())
            .member("off_chip", ipu.off_chip());
        j.key("items");
        write_json_items(j, ipu);
        j.end_object();
    }
    j.end_array().end_object();
}

[[nodiscard]] inline std::string memory_json(const memory_plan& plan) {
    std::ostringstream out;
    report::json_writer j(out);
    write_json(j, plan);
    return out.str();
}

}  // namespace tessera::exec
