// The budget view of the `numarena` tool: capacity, usage and state of every node as a
// memory budget sees them (include/numarena/budget.hpp), as a text table or JSON.
//
// `numarena budget` prints it for a System-mode budget with the default thresholds, and
// `numarena topo` can append it to its own output:
//
//   auto snapshot = numarena::cli::SystemBudgetSnapshot(topology, *reader);
//   if (snapshot.ok()) numarena::cli::PrintBudgetView(std::cout, *snapshot);
//   // or, inside topo's JSON object:
//   json.Key("budget");
//   numarena::cli::WriteBudgetJson(json, *snapshot);
#pragma once

#include <ostream>

#include "numarena/budget.hpp"
#include "numarena/ops/json.hpp"
#include "numarena/topology.hpp"

namespace numarena::cli {

// A System-mode budget with default thresholds over `topology`'s nodes, read once through
// `reader` (no refresh thread), and its snapshot. Errors name the unreadable file.
[[nodiscard]] StatusOr<BudgetSnapshot> SystemBudgetSnapshot(const Topology& topology,
                                                            const SystemReader& reader);

// A text table, one row per node:
//   budget (system mode: capacity = node MemTotal, or cgroup memory.max when lower)
//   thresholds: warn 80.0 %, admission closes 85.0 %, trip 90.0 %, hysteresis 5.0 %
//   node  capacity   used       used %   state             warn at    closes at  trips at
//   0     256.0 GiB  60.7 GiB   23.7 %   normal            204.8 GiB  217.6 GiB  230.4 GiB
// followed, when any is non-zero, by numarena's own charges per priority, refusals,
// fallbacks and reclaim figures, and the reclaim hooks.
void PrintBudgetView(std::ostream& out, const BudgetSnapshot& snapshot);

// One JSON object (schema "numarena.budget/1"):
//   {"schema": "numarena.budget/1", "mode": "system" | "quota",
//    "thresholds": {"warn", "admission_closed", "trip", "hysteresis", "gentle_reclaim"},
//    "weights": {"high", "normal", "low"},                       fractions of capacity
//    "cgroup": null | {"limit_bytes": int, "usage_bytes": int | null,
//                      "inactive_file_bytes": int | null},
//    "refresh": {"interval_ms", "refreshes", "failures", "last_error": str | null},
//    "nodes": [{"id", "state": "normal" | "warn" | "admission-closed" | "tripped",
//               "capacity_bytes", "usage_bytes", "usage_fraction", "peak_bytes",
//               "warn_bytes", "admission_bytes", "trip_bytes",
//               "mem_total_bytes", "mem_free_bytes", "system_used_bytes",
//               "numarena_bytes": {"high", "normal", "low"},
//               "refusals", "fallbacks_out", "fallbacks_in", "transitions",
//               "reclaim": {"runs", "asked_bytes", "freed_bytes", "hook_failures",
//                           "skipped"}}],
//    "hooks": [{"name", "priority", "calls", "freed_bytes", "failures"}],
//    "events", "listener_failures", "events_dropped"}
// New members may be added; existing ones keep their meaning while "schema" stays.
void WriteBudgetJson(JsonWriter& json, const BudgetSnapshot& snapshot);

}  // namespace numarena::cli
