// Text renderers of the operations commands, shared so `numarena report` shows each part
// exactly as its own command does (defined in doctor.cpp, advise.cpp and stat.cpp).
#pragma once

#include <map>
#include <string>

#include "numarena/ops/advise.hpp"
#include "numarena/ops/doctor.hpp"
#include "numarena/ops/json.hpp"
#include "numarena/ops/stat.hpp"

namespace numarena::cli {

// "N problems, M notes, K checks passed" and each finding with explanation and fix.
std::string FormatDoctorReport(const DoctorReport& report);
// The "healthy", "problems" and "findings" members of a doctor report, in the object `json`
// is writing; `with_explanation` adds each finding's explanation (report leaves it out).
void WriteDoctorFindingsJson(JsonWriter& json, const DoctorReport& report, bool with_explanation);
// The numactl / taskset / docker / kubernetes / code blocks of one advice.
std::string FormatAdvice(const Advice& advice);
// The numastat -p style table of a process.
std::string FormatProcessStat(const ProcessNumaStat& stat);
// The per-node numastat counters table (empty when there are none).
std::string FormatNodeCounters(const std::map<int, NodeNumaCounters>& counters);
// The kernel's weighted interleave weights, memory tiers and demotion switch, as lines
// (defined in topo.cpp); `settings` not ok gives one line saying why they are unknown.
std::string FormatKernelMemory(const StatusOr<KernelMemorySettings>& settings);
// "kernel_memory": null | {"interleave_weights": [{"node": int, "weight": int}] | null
// (null: no MPOL_WEIGHTED_INTERLEAVE), "interleave_weights_auto": bool | null,
// "memory_tiers": [{"id": int, "nodes": [int]}], "demotion_enabled": bool | null}.
void WriteKernelMemoryJson(JsonWriter& json, const StatusOr<KernelMemorySettings>& settings);

}  // namespace numarena::cli
