// What a System-mode budget reads from the kernel: a node's MemTotal and MemFree
// (/sys/devices/system/node/nodeN/meminfo), the free pages waiting on its per-CPU lists
// (/proc/zoneinfo, which MemFree does not count) and the cgroup v2 memory limit of the process
// (memory.max, memory.current and memory.stat's inactive_file of the cgroup named in
// /proc/self/cgroup, the tightest limit on the way up to the root). Everything is read
// through a SystemReader, so tests feed fixture content and the parsers below are pure
// functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena::budget_internal {

struct NodeMemory {
  std::uint64_t total = 0;  // bytes
  std::uint64_t free = 0;   // bytes
  std::uint64_t inactive_file = 0;  // bytes of Inactive(file); 0 when the file has no line
};

// A node meminfo file ("Node 0 MemTotal:  16333412 kB" lines) through parse::ParseNodeMeminfo,
// the one parser of it. DataLoss naming `display_path` and the parser's problem when the file
// is malformed (a line not "Node <id> <Key>: <value> [kB]", MemTotal or MemFree missing,
// free > total), or when Inactive(file) is larger than MemTotal - MemFree.
[[nodiscard]] StatusOr<NodeMemory> ParseNodeMeminfo(std::string_view text,
                                                    const std::string& display_path);

// Reads and parses /sys/devices/system/node/node<node>/meminfo.
[[nodiscard]] StatusOr<NodeMemory> ReadNodeMemory(const SystemReader& reader, int node);

// Free memory on the per-CPU page lists of each node of `node_ids`, in bytes, in the same
// order (pages of `page_bytes`). A missing /proc/zoneinfo gives zeros (a kernel or fixture
// without it: MemFree alone is then the free memory); a malformed one DataLoss naming the
// file and line.
[[nodiscard]] StatusOr<std::vector<std::uint64_t>> ReadPerCpuFreeBytes(
    const SystemReader& reader, const std::vector<int>& node_ids, std::uint64_t page_bytes);

struct CgroupMemory {
  std::optional<std::uint64_t> limit;    // tightest memory.max on the path; nullopt: "max"
  std::optional<std::uint64_t> current;  // memory.current of the cgroup that sets `limit`
  // inactive_file of that cgroup's memory.stat: the part of `current` that is page cache the
  // kernel reclaims first. nullopt when the file or its line is absent.
  std::optional<std::uint64_t> inactive_file;
  std::string cgroup;                    // the process's cgroup ("/" when at the root)
};

// The "inactive_file <bytes>" line of a cgroup v2 memory.stat ("<key> <value>" lines, other
// keys ignored): nullopt when there is none; DataLoss naming `display_path` when its value is
// not a byte count or the line appears twice.
[[nodiscard]] StatusOr<std::optional<std::uint64_t>> ParseCgroupInactiveFile(
    std::string_view text, const std::string& display_path);

// The process's cgroup v2 memory limit. Absent files (no cgroup v2, root cgroup, no
// memory controller) give an empty CgroupMemory, not an error; malformed ones DataLoss.
[[nodiscard]] StatusOr<CgroupMemory> ReadCgroupMemory(const SystemReader& reader);

}  // namespace numarena::budget_internal
