#pragma once
// The channels, collectives and per-IPU value tables of one executor call.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "tessera/emulator/collective_group.hpp"
#include "tessera/optim/shard.hpp"
#include "tessera/emulator/channel.hpp"
#include "tessera/emulator/spsc_channel.hpp"
#include "tessera/exec/cross_process.hpp"
#include "tessera/exec/detail/slots.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/exec/schedule.hpp"

namespace tessera::exec::detail {

/// A value crossing a channel, stamped with its modelled arrival time and what it is.
template <class T>
struct message {
    T payload;
    double ready_at;
    std::uint32_t stage, micro_batch, iteration;
    [[nodiscard]] std::size_t payload_bytes() const noexcept { return emulator::payload_bytes(payload); }
};

/// What the last stage produces for one micro-batch, and what the outfeed carries to the host.
template <class Tensor>
struct outcome {
    float loss = 0.0f;
    top1_score hits{};
    std::optional<Tensor> output{};
};
template <class Tensor>
struct out_message {
    std::size_t iteration, micro_batch;
    float loss;
    top1_score hits;
    std::optional<Tensor> output;
};

template <class Tensor, class Label, class Stash, class Input = Tensor>
struct wiring {
    /// The values one IPU holds between the instructions of its program, kept across calls.
    struct program_state {
        program_state(std::size_t stages, std::size_t micro_batches)
            : inputs(stages, micro_batches), grads(stages, micro_batches), stashes(stages, micro_batches),
              kept_inputs(stages, micro_batches), labels(1, micro_batches), results(1, micro_batches) {}
        slots<Tensor> inputs;       // (stage, mb): the stage's input
        slots<Tensor> grads;        // (stage, mb): gradient of the stage's output
        slots<Stash> stashes;
        slots<Tensor> kept_inputs;  // recomputing stages keep their input instead
        slots<Label> labels;
        slots<outcome<Tensor>> results;
        outcome<Tensor> sum{};      // output mode `sum`: the call's total so far
    };
    template <class T>
    using channel = emulator::spsc_channel<message<T>>;

    std::vector<std::unique_ptr<channel<Input>>> infeed;
    std::vector<std::unique_ptr<channel<Label>>> labels;
    std::vector<std::unique_ptr<emulator::spsc_channel<out_message<Tensor>>>> outfeed;
    std::map<std::tuple<std::size_t, std::size_t, std::size_t, bool>, std::unique_ptr<channel<Tensor>>>
        links;                                                                   // replica, from, to, gradient
    std::vector<std::unique_ptr<emulator::collective_group<float>>> reduce;  // per stage
    std::vector<std::unique_ptr<emulator::collective_group<float>>> gather;  // per stage: sharded optimiser state
    /// Per replica, over its IPUs; sharded optimiser state: one, over every replica's IPUs.
    std::vector<std::unique_ptr<emulator::collective_group<float>>> votes;
    /// For each (replica × IPU) program, the channel each send/receive uses (looked up once).
    std::vector<std::vector<channel<Tensor>*>> link_of;
    std::vector<std::unique_ptr<program_state>> state;  ///< per (replica × IPU)
};

/// Builds the wiring of `replicas` copies of `sched` for calls of `iterations` device iterations.
template <class Tensor, class Label, class Stash, class Input = Tensor>
[[nodiscard]] std::unique_ptr<wiring<Tensor, Label, Stash, Input>> make_wiring(const schedule& sched, std::size_t replicas,
                                                                              std::size_t iterations, std::size_t link_depth,
                                                                              const cross_process_reduction& across) {
    using w_t = wiring<Tensor, Label, Stash, Input>;
    using link_t = typename w_t::template channel<Tensor>;
    const std::size_t R = replicas, I = sched.ipus, M_ = sched.request.micro_batches;
    // Host-facing channels buffer whole calls: their waits are rare (the first micro-batch of a
    // call, waiting for the feeder to start) and short, so they stay runnable for 200 µs rather than
    // pay a wake-up (tens of microseconds on a virtual machine). IPU links spin, then yield, for up
    // to 5 ms before sleeping — longer than a typical stage pass, so a pipeline's hand-offs never
    // pay for a wake-up, and even with more IPU threads than cores a yield hands the core over more
    // cheaply than a sleep (measured with bench_pipeline_speedup and bench_scheduler: 500 µs gave
    // 1.6-1.7x on 2 stages and 5.6x oneTBB's time on 4; 5 ms gives 1.7-1.8x and 1.1-1.2x). Fast
    // streams of messages (stages with little work) pass in batches of a quarter of the link: see
    // spin_policy (measured with bench_scheduler: 64-message links in batches of 16 gave 0.45-0.62x
    // oneTBB's time, 256 in batches of 64 0.38-0.52x, fewer hand-offs when IPU threads share cores).
    const std::size_t link_batch = std::max<std::size_t>(1, link_depth / 4);
    const auto host = emulator::spin_policy{.spin = std::chrono::microseconds{200}};
    const auto link = emulator::spin_policy{.spin = std::chrono::microseconds{5000}, .batch = link_batch};
    auto owned = std::make_unique<w_t>();
    w_t& w = *owned;
    for (std::size_t r = 0; r < R; ++r) {
        w.infeed.push_back(std::make_unique<typename w_t::template channel<Input>>(M_, host));
        w.labels.push_back(std::make_unique<typename w_t::template channel<Label>>(M_, host));
        w.outfeed.push_back(std::make_unique<emulator::spsc_channel<out_message<Tensor>>>(iterations * M_, host));
        for (std::size_t i = 0; i < I; ++i)
            for (const auto& in : sched.programs[i])
                if (in.op == opcode::send_act || in.op == opcode::send_grad) {
                    auto& ch = w.links[{r, i, in.peer, in.op == opcode::send_grad}];
                    if (!ch) ch = std::make_unique<link_t>(link_depth, link);
                }
    }
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t i = 0; i < I; ++i) {
            auto& row = w.link_of.emplace_back();
            for (const auto& in : sched.programs[i]) {
                link_t* ch = nullptr;
                if (in.op == opcode::send_act || in.op == opcode::send_grad)
                    ch = w.links.at({r, i, in.peer, in.op == opcode::send_grad}).get();
                if (in.op == opcode::recv_act || in.op == opcode::recv_grad)
                    ch = w.links.at({r, in.peer, i, in.op == opcode::recv_grad}).get();
                row.push_back(ch);
            }
        }
    for (std::size_t s = 0; s < sched.stages; ++s) {
        std::function<void(std::span<float>)> combine;
        if (across.reduce) combine = [&across, s](std::span<float> g) { across.reduce(s, g); };
        w.reduce.push_back(std::make_unique<emulator::collective_group<float>>(R, std::move(combine)));
    }
    const bool sharded = sched.optimizer_sharded();
    if (sharded) {
        // Process p's replicas own shards p·R to (p + 1)·R − 1: its part of the weights is one range.
        const std::size_t P = across.processes;
        for (std::size_t s = 0; s < sched.stages; ++s) {
            std::function<void(std::span<float>)> combine;
            if (across.gather)
                combine = [&across, s, R, P](std::span<float> v) {
                    std::vector<std::size_t> bounds;
                    for (std::size_t p = 0; p < P; ++p) bounds.push_back(optim::shard_of(v.size(), p * R, P * R).begin);
                    bounds.push_back(v.size());
                    across.gather(s, v, bounds);
                };
            w.gather.push_back(std::make_unique<emulator::collective_group<float>>(R, std::move(combine)));
        }
        std::function<void(std::span<float>)> vote;
        if (across.vote) vote = [&across](std::span<float> flags) { across.vote(flags); };
        w.votes.push_back(std::make_unique<emulator::collective_group<float>>(R * I, std::move(vote)));
    } else {
        for (std::size_t r = 0; r < R; ++r) w.votes.push_back(std::make_unique<emulator::collective_group<float>>(I));
    }
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t i = 0; i < I; ++i)
            w.state.push_back(std::make_unique<typename w_t::program_state>(sched.stages, M_));
    return owned;
}

}  // namespace tessera::exec::detail
