#pragma once
// The report layer: presentation only (progress bars, text tables, SVG, JSON, traces); depends on nothing in tessera.
#include "tessera/report/json.hpp"
#include "tessera/report/json_object.hpp"
#include "tessera/report/progress_bar.hpp"
#include "tessera/report/svg.hpp"
#include "tessera/report/table.hpp"
#include "tessera/report/trace_writer.hpp"
