// What a System-mode budget reads from the kernel: a node's MemTotal and MemFree
// (/sys/devices/system/node/nodeN/meminfo) and the cgroup v2 memory limit of the process
// (memory.max and memory.current of the cgroup named in /proc/self/cgroup, the tightest
// limit on the way up to the root). Everything is read through a SystemReader, so tests
// feed fixture content and the parsers below are pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena::budget_internal {

struct NodeMemory {
  std::uint64_t total = 0;  // bytes
  std::uint64_t free = 0;   // bytes
};

// Parses a node meminfo file ("Node 0 MemTotal:  16333412 kB" lines). DataLoss naming
// `display_path` when MemTotal or MemFree is missing or malformed, or free > total.
[[nodiscard]] StatusOr<NodeMemory> ParseNodeMeminfo(std::string_view text,
                                                    const std::string& display_path);

// Reads and parses /sys/devices/system/node/node<node>/meminfo.
[[nodiscard]] StatusOr<NodeMemory> ReadNodeMemory(const SystemReader& reader, int node);

struct CgroupMemory {
  std::optional<std::uint64_t> limit;    // tightest memory.max on the path; nullopt: "max"
  std::optional<std::uint64_t> current;  // memory.current of the cgroup that sets `limit`
  std::string cgroup;                    // the process's cgroup ("/" when at the root)
};

// The process's cgroup v2 memory limit. Absent files (no cgroup v2, root cgroup, no
// memory controller) give an empty CgroupMemory, not an error; malformed ones DataLoss.
[[nodiscard]] StatusOr<CgroupMemory> ReadCgroupMemory(const SystemReader& reader);

}  // namespace numarena::budget_internal
