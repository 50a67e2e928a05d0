#pragma once
// The exec layer: graph compilation and execution on the emulated IPUs.
//
// What is where:
//   schedule.hpp         static instruction lists per IPU for single/sharded/pipelined<gpipe|1f1b|interleaved>/phased;
//                        pass_order.hpp: the pipelines' orders of forward and backward passes
//   cost.hpp, timing.hpp what each instruction costs on the modelled clock (passes through
//                        emulator::pass_model); simulate() = one call without threads
//   compile.hpp          graph compilation without threads: the schedule and costs a config makes
//   dry_run.hpp          whole epochs on the modelled clock, host included, computing nothing;
//                        breakdown.hpp: where a call's modelled time goes (compute, exchange, links, idle...)
//   host_work.hpp        what a host call asks of the host; host_input.hpp: values or 8-bit pixels
//   memory_plan.hpp      per-IPU memory plan (stash sized by the schedule, tensor locations, recomputation);
//                        out_of_device_memory at compilation
//   partition.hpp        balance_stages: contiguous stages minimising the bottleneck
//   executor.hpp         runs a schedule on one thread per IPU: replicas, fixed-order all-reduce,
//                        device iterations, output modes; failures reach the caller
//   session.hpp          training_model<Config>(staged model) / inference_model<Config>(...);
//                        basic_session.hpp: what a session does once compiled, one type per model
//   staged_network.hpp   a unit network (nn::resnet, nn::transformer) + optimizer + loss as a staged model;
//                        staged_loss.hpp: its losses (a class per sample, a token per position);
//                        activation_rounding.hpp: the streams stochastic rounding draws per micro-batch
//   network_session.hpp  training_model<Config>(net, optimizer, sample shape, options)
//   batch_feed.hpp       the data loader's combined batches as micro-batches with masks;
//                        token_feed.hpp: batches of token windows as ids and next-token labels
//   schedule_report.hpp, timeline.hpp, memory_report.hpp   text, SVG and JSON reports;
//                        call_trace.hpp: calls as a Trace Event Format timeline (Perfetto, speedscope)
#include "tessera/exec/activation_rounding.hpp"
#include "tessera/exec/basic_session.hpp"
#include "tessera/exec/batch_feed.hpp"
#include "tessera/exec/breakdown.hpp"
#include "tessera/exec/call_trace.hpp"
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/compile.hpp"
#include "tessera/exec/cross_process.hpp"
#include "tessera/exec/dry_run.hpp"
#include "tessera/exec/evaluate.hpp"
#include "tessera/exec/executor.hpp"
#include "tessera/exec/host_input.hpp"
#include "tessera/exec/host_work.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/memory_report.hpp"
#include "tessera/exec/network_session.hpp"
#include "tessera/exec/non_finite_loss.hpp"
#include "tessera/exec/partition.hpp"
#include "tessera/exec/pass_order.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/schedule_report.hpp"
#include "tessera/exec/session.hpp"
#include "tessera/exec/session_checkpoint.hpp"
#include "tessera/exec/session_options.hpp"
#include "tessera/exec/staged_loss.hpp"
#include "tessera/exec/staged_network.hpp"
#include "tessera/exec/timeline.hpp"
#include "tessera/exec/timing.hpp"
#include "tessera/exec/token_feed.hpp"
