#pragma once
// A picture of the modelled clock: one row per IPU, forward/backward/update/idle coloured.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/report/json.hpp"
#include "tessera/report/svg.hpp"

namespace tessera::exec {

/// The colour of each activity in the timeline.
[[nodiscard]] constexpr const char* timeline_colour(emulator::activity a) noexcept {
    switch (a) {
        case emulator::activity::forward: return "#4c72b0";
        case emulator::activity::backward: return "#dd8452";
        case emulator::activity::weight_gradient: return "#ccb974";
        case emulator::activity::recompute: return "#8172b3";
        case emulator::activity::update: return "#55a868";
        case emulator::activity::all_reduce: return "#c44e52";
        case emulator::activity::transfer: return "#937860";
        case emulator::activity::sync: return "#64b5cd";
        case emulator::activity::host_io: return "#da8bc3";
        case emulator::activity::streaming: return "#8c8c8c";
        case emulator::activity::idle: return "#eeeeee";
    }
    return "#000000";
}

struct timeline_options {
    double width = 1000;       ///< pixels for the time axis
    double row_height = 24;
    double label_width = 70;
    std::string title = "Modelled IPU timeline";
};

/// SVG of the clocks' traces: one row per IPU over a common time axis, each interval a rectangle
/// (hover: its instruction and times), a legend and a time scale.
[[nodiscard]] inline std::string timeline_svg(const std::vector<emulator::modelled_clock>& clocks,
                                              const timeline_options& o = {}) {
    double end = 0;
    for (const auto& c : clocks) end = std::max(end, c.now());
    if (end <= 0) end = 1;
    const double top = 40, rows = double(clocks.size());
    const double height = top + rows * (o.row_height + 6) + 60;
    report::svg_canvas svg(o.label_width + o.width + 20, height);
    svg.text(o.label_width, 20, o.title, 14);
    const double scale = o.width / end;
    for (std::size_t i = 0; i < clocks.size(); ++i) {
        const double y = top + double(i) * (o.row_height + 6);
        svg.text(o.label_width - 8, y + o.row_height * 0.7, "IPU " + std::to_string(i), 12, "end");
        svg.rect(o.label_width, y, o.width, o.row_height, "#ffffff", {}, "#cccccc");
        for (const auto& e : clocks[i].trace()) {
            char times[96];
            std::snprintf(times, sizeof times, " [%.3g s, %.3g s]", e.start, e.end);
            svg.rect(o.label_width + e.start * scale, y, std::max((e.end - e.start) * scale, 0.0), o.row_height,
                     timeline_colour(e.kind), (e.label.empty() ? std::string(to_string(e.kind)) : e.label) + times);
        }
    }
    const double axis = top + rows * (o.row_height + 6) + 4;
    svg.line(o.label_width, axis, o.label_width + o.width, axis, "#333333");
    for (int k = 0; k <= 4; ++k) {
        const double t = end * k / 4, x = o.label_width + t * scale;
        char text[32];
        std::snprintf(text, sizeof text, "%.3g s", t);
        svg.line(x, axis, x, axis + 4, "#333333");
        svg.text(x, axis + 16, text, 10, k == 0 ? "start" : (k == 4 ? "end" : "middle"));
    }
    double x = o.label_width;
    for (auto a : {emulator::activity::forward, emulator::activity::backward, emulator::activity::weight_gradient,
                   emulator::activity::recompute,
                   emulator::activity::update, emulator::activity::all_reduce, emulator::activity::transfer, emulator::activity::sync,
                   emulator::activity::host_io, emulator::activity::streaming, emulator::activity::idle}) {
        svg.rect(x, axis + 28, 10, 10, timeline_colour(a), {}, "#999999");
        svg.text(x + 14, axis + 37, to_string(a), 10);
        x += 95;
    }
    return svg.str();
}

/// {"ipus":[{"ipu":0,"end":t,"busy":b,"events":[{"kind":"forward","start":..,"end":..,"label":".."}]}]}
inline void write_json(report::json_writer& j, const std::vector<emulator::modelled_clock>& clocks) {
    j.begin_object().key("ipus").begin_array();
    for (std::size_t i = 0; i < clocks.size(); ++i) {
        double busy = 0;
        for (const auto& e : clocks[i].trace())
            if (e.kind != emulator::activity::idle) busy += e.end - e.start;
        j.begin_object().member("ipu", i).member("end", clocks[i].now()).member("busy", busy);
        j.key("events").begin_array();
        for (const auto& e : clocks[i].trace())
            j.begin_object()
                .member("kind", to_string(e.kind))
                .member("start", e.start)
                .member("end", e.end)
                .member("label", e.label)
                .end_object();
        j.end_array().end_object();
    }
    j.end_array().end_object();
}

[[nodiscard]] inline std::string timeline_json(const std::vector<emulator::modelled_clock>& clocks) {
    std::ostringstream out;
    report::json_writer j(out);
    write_json(j, clocks);
    return out.str();
}

}  // namespace tessera::exec
