// Where a process's memory is, per NUMA node, by the kernel's own account.
//
// `StatProcess` reads /proc/PID/numa_maps (like `numastat -p`), the CPUs the process may
// use and the CPU each of its threads last ran on, and says how much of its memory sits on
// the nodes it runs on (the local fraction). `ReadNodeCounters` reads the kernel's per-node
// allocation counters (nodeN/numastat: hit, miss, foreign, interleave, local, other) that
// `numastat` prints. Both read through a SystemReader, so fixture trees test them and the
// live system ("/proc") serves `numarena stat PID`, the doctor and the metrics.
//
// Memory is split as numa_maps classifies mappings: private memory (anonymous mappings,
// heap, stack, hugetlb) is what the process allocated and what placement is about; file
// pages (libraries, page cache mappings) are shared with other processes and shown apart.
// Hugetlb pages are counted in bytes of their own size.
//
//   auto reader = numarena::MakeRootedReader();
//   auto topo = numarena::Topology::discover(*reader);
//   auto stat = numarena::StatProcess(*reader, *topo, "4242");
//   if (stat.ok()) std::cout << stat->private_bytes_on(1) << " bytes on node 1\n";
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena {

// The counters of /sys/devices/system/node/nodeN/numastat (units: pages allocated).
struct NodeNumaCounters {
  std::uint64_t numa_hit = 0;        // allocated here, as intended
  std::uint64_t numa_miss = 0;       // allocated here although another node was preferred
  std::uint64_t numa_foreign = 0;    // intended for here, allocated elsewhere
  std::uint64_t interleave_hit = 0;  // interleave policy pages that landed here as intended
  std::uint64_t local_node = 0;      // allocated here by a task running on this node
  std::uint64_t other_node = 0;      // allocated here by a task running on another node
};

// Counters of every online node of `topology`, by node id. A node whose numastat file is
// absent is left out; a malformed file is DataLoss naming it.
[[nodiscard]] StatusOr<std::map<int, NodeNumaCounters>> ReadNodeCounters(const SystemReader& reader,
                                                                         const Topology& topology);

// Bytes of one process on one node.
struct NodeMemoryUsage {
  std::uint64_t anonymous_bytes = 0;  // anonymous mappings, heap and stack
  std::uint64_t hugetlb_bytes = 0;    // hugetlbfs mappings
  std::uint64_t file_bytes = 0;       // file-backed pages (shared with others)
  std::uint64_t private_bytes() const { return anonymous_bytes + hugetlb_bytes; }
};

struct ProcessNumaStat {
  std::string pid;                         // as asked: "self" or a number
  std::string command;                     // /proc/PID/comm, empty when unreadable
  std::map<int, NodeMemoryUsage> by_node;  // every online node, plus any other numa_maps names
  std::uint64_t private_bytes = 0;         // sum of private bytes over nodes
  std::uint64_t file_bytes = 0;
  std::size_t mapping_count = 0;
  std::vector<int> allowed_cpus;       // Cpus_allowed_list (empty when not readable)
  std::vector<int> allowed_mem_nodes;  // Mems_allowed_list (empty when not readable)
  std::vector<int> running_cpus;       // the CPU each thread last ran on, ascending, unique
  std::vector<int> running_nodes;      // nodes of running_cpus (of allowed_cpus if none known)
  // Private bytes on running_nodes / private_bytes; 1 when the process has none.
  double local_fraction = 1.0;

  std::uint64_t private_bytes_on(int node) const;
};

// Reads /proc/<pid>/{numa_maps,status,comm,task/*/stat}. `pid` is "self" or a positive
// number (InvalidArgument otherwise). NotFound when the process does not exist (or its
// numa_maps is absent: a kernel without NUMA); DataLoss naming the file when a file is
// malformed. A process that exits while being read gives NotFound.
[[nodiscard]] StatusOr<ProcessNumaStat> StatProcess(const SystemReader& reader,
                                                    const Topology& topology,
                                                    const std::string& pid);

// The process ids of every descendant of `pid` ("self" or a number): its children, theirs,
// and so on, from the parent id in each /proc/N/stat; ascending. Empty when `pid` has none
// or /proc cannot be listed. A process that exits while being read is left out.
[[nodiscard]] std::vector<std::string> ProcessDescendants(const SystemReader& reader,
                                                          const std::string& pid);

}  // namespace numarena
