#pragma once
// The exec layer: static schedules, their cost and memory plans, the threaded executor, sessions, reports.
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/executor.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/memory_report.hpp"
#include "tessera/exec/partition.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/schedule_report.hpp"
#include "tessera/exec/staged_network.hpp"
#include "tessera/exec/session.hpp"
#include "tessera/exec/timeline.hpp"
#include "tessera/exec/timing.hpp"
