#pragma once
// The schedule as text (one column per IPU) and as JSON.
#include <algorithm>
#include <cstddef>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/exec/schedule.hpp"
#include "tessera/report/json.hpp"
#include "tessera/report/table.hpp"

namespace tessera::exec {

/// The instruction lists side by side, one column per IPU, one row per step of the global order
/// in which some IPU acts (empty cells: that IPU is not involved in the step).
/// @code
///   std::cout << exec::schedule_text(exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(4));
/// @endcode
[[nodiscard]] inline std::string schedule_text(const schedule& sched) {
    std::vector<std::string> header{"step"};
    for (std::size_t i = 0; i < sched.ipus; ++i) header.push_back("IPU " + std::to_string(i));
    report::table t(header);
    t.set_align(0, report::align::right);
    std::vector<std::size_t> pc(sched.ipus, 0);
    std::size_t step = 0;
    for (;;) {
        // The next instruction in the global order, whichever IPU holds it.
        std::size_t who = sched.ipus;
        std::uint32_t best = 0xFFFFFFFFu;
        for (std::size_t i = 0; i < sched.ipus; ++i)
            if (pc[i] < sched.programs[i].size() && sched.programs[i][pc[i]].seq < best) {
                best = sched.programs[i][pc[i]].seq;
                who = i;
            }
        if (who == sched.ipus) break;
        std::vector<std::string> row(sched.ipus + 1);
        row[0] = std::to_string(step++);
        row[who + 1] = to_string(sched.programs[who][pc[who]++]);
        t.add_row(std::move(row));
    }
    std::ostringstream out;
    out << sched.description() << '\n';
    out << "stash per stage:";
    for (auto s : sched.stash) out << ' ' << s;
    out << ", channel capacity " << sched.channel_capacity << ", " << sched.instructions() << " instructions\n";
    t.write(out);
    return out.str();
}

/// {"description":..., "stages":S, "ipus":I, "micro_batches":M, "training":b, "replicas":R,
///  "stash":[...], "channel_capacity":c, "programs":[[{"op":"fwd","stage":0,"micro_batch":1,"peer":null,"seq":5},...],...]}
inline void write_json(report::json_writer& j, const schedule& sched) {
    j.begin_object();
    j.member("description", sched.description());
    j.member("stages", sched.stages).member("ipus", sched.ipus);
    j.member("micro_batches", sched.request.micro_batches).member("training", sched.request.training);
    j.member("replicas", sched.request.replicas);
    j.key("stash").begin_array();
    for (auto s : sched.stash) j.value(s);
    j.end_array();
    j.member("channel_capacity", sched.channel_capacity);
    j.key("programs").begin_array();
    for (const auto& program : sched.programs) {
        j.begin_array();
        for (const auto& in : program) {
            j.begin_object().member("op", std::string(to_string(in.op))).member("stage", in.stage);
            j.key("micro_batch");
            if (in.micro_batch == no_micro_batch) j.null(); else j.value(in.micro_batch);
            j.key("peer");
            if (in.peer == no_peer) j.null(); else j.value(in.peer);
            j.member("seq", in.seq).end_object();
        }
        j.end_array();
    }
    j.end_array();
    j.end_object();
}

[[nodiscard]] inline std::string schedule_json(const schedule& sched) {
    std::ostringstream out;
    report::json_writer j(out);
    write_json(j, sched);
    return out.str();
}

}  // namespace tessera::exec
