// The machine as numarena sees it: NUMA nodes, their CPUs, memory and distances, HMAT
// access attributes, the PCI devices inference cares about (GPUs, NICs) and the part of
// all this the calling process may use (affinity, cpuset).
//
// Discovery reads sysfs and procfs through a `SystemReader`, which tests replace with a
// fixture tree (tests/fixtures/<machine>/{sys,proc}) or an in-memory map, so every rule
// below is unit-tested without a NUMA machine. Node ids may be sparse (0, 1, 4). A device
// whose `numa_node` is -1 has an *unknown* node: it is reported with a warning and never
// read as node 0.
//
//   auto topo = numarena::Topology::discover();
//   if (!topo.ok()) { std::cerr << topo.status() << "\n"; return 2; }
//   for (const auto& node : topo->nodes()) use(node.id, node.cpus, node.mem_total_bytes);
//   std::vector<int> fallback = topo->nodes_by_distance(0);  // 0 first, then nearest
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/status.hpp"

namespace numarena {

// Reads the kernel's files. Paths are absolute as on a real machine ("/sys/...",
// "/proc/..."); an implementation may map them elsewhere.
class SystemReader {
 public:
  virtual ~SystemReader() = default;
  // Whole file contents. NotFound when absent (message names the path).
  [[nodiscard]] virtual StatusOr<std::string> Read(const std::string& path) const = 0;
  // Entry names of a directory. NotFound when absent.
  [[nodiscard]] virtual StatusOr<std::vector<std::string>> List(const std::string& path) const = 0;
  // True when this reader sees the live system of the calling process, so process-level
  // facts (sched_getaffinity, getcpu) may be asked of the kernel directly.
  virtual bool is_live_system() const { return false; }
  // The CPUs the process may run on when this reader sees the live system: the union of its
  // threads' sched_getaffinity masks (taskset, numactl and container runtimes set them all),
  // not the calling thread's, so a worker, or the main thread, pinned to one node does not
  // shrink the process's view. Readers of fixtures return Unimplemented, and
  // discovery then takes Cpus_allowed_list from <proc>/self/status (or every CPU when that
  // is absent).
  [[nodiscard]] virtual StatusOr<std::vector<int>> CpuAffinity() const {
    return absl::UnimplementedError("this reader does not see a live process");
  }
  // How error messages name `path`: the file actually read (a fixture tree maps
  // "/sys/x" to "<root>/x"), so a user can open it.
  virtual std::string DisplayPath(const std::string& path) const { return path; }
};

// A reader over a directory tree: "/sys/x" is read from `sysfs_root + "/x"` and "/proc/x"
// from `procfs_root + "/x"`; other paths are InvalidArgument. With the defaults ("/sys",
// "/proc") it is the live system (is_live_system(), CpuAffinity() from the kernel). A
// procfs root that does not exist simply has no files: discovery then gives the process
// everything in the fixture.
//
//   auto reader = numarena::MakeRootedReader("tests/fixtures/xeon-2s/sys",
//                                            "tests/fixtures/xeon-2s/proc");
//   auto topo = numarena::Topology::discover(*reader);
std::unique_ptr<SystemReader> MakeRootedReader(std::string sysfs_root = "/sys",
                                               std::string procfs_root = "/proc");

// HMAT "access0" attributes of a memory node as seen from its best initiators
// (/sys/devices/system/node/nodeN/access0/initiators/). Units are the kernel's: MB/s, ns.
struct AccessAttributes {
  std::uint64_t read_bandwidth_mbps = 0;
  std::uint64_t write_bandwidth_mbps = 0;
  std::uint64_t read_latency_ns = 0;
  std::uint64_t write_latency_ns = 0;
  std::vector<int> initiators;  // nodes listed under initiators/ (nodeN links)
};

// One node's pool of hugetlbfs pages of one size
// (/sys/devices/system/node/nodeN/hugepages/hugepages-<kB>kB/). A mapping bound to a node draws
// its huge pages from that node's pool, not from the machine's: a pool that is empty here is
// an empty pool, however many pages other nodes hold.
struct HugePagePool {
  std::size_t page_bytes = 0;  // 2 MiB, 1 GiB, ...
  std::uint64_t total = 0;     // nr_hugepages: reserved on this node
  std::uint64_t free = 0;      // free_hugepages: not yet faulted in by anyone
  std::uint64_t surplus = 0;   // surplus_hugepages: overcommitted beyond nr_hugepages
};

// The sysfs file `file` ("nr_hugepages", "free_hugepages", ...) of node `node`'s pool of
// `page_bytes` pages, e.g. "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/
// nr_hugepages". Writing a count to nr_hugepages (as root) reserves pages on that node.
std::string NodeHugePagePoolFile(int node, std::size_t page_bytes, std::string_view file);

struct NodeInfo {
  int id = -1;
  std::vector<int> cpus;  // ascending; empty for memory-only nodes (CXL expanders)
  std::uint64_t mem_total_bytes = 0;
  std::uint64_t mem_free_bytes = 0;
  std::uint64_t mem_used_bytes = 0;
  std::optional<AccessAttributes> access;  // present when the kernel exposes HMAT
  std::vector<HugePagePool> huge_pages;    // ascending by page size; empty without hugetlbfs

  bool memory_only() const { return cpus.empty(); }
};

// The PCI devices discovery reports, by 24-bit class code (base class, subclass, prog-if):
//   kGpu         0x0300xx VGA, 0x0302xx 3D controller, 0x0380xx other display controller
//                (AMD Instinct accelerators report the latter), 0x1200xx processing
//                accelerator (e.g. Intel Gaudi)
//   kNic         0x0200xx Ethernet
//   kInfiniband  0x0207xx InfiniBand
// Every other class is ignored.
enum class DeviceKind { kGpu, kNic, kInfiniband };
// "gpu", "nic", "infiniband".
const char* DeviceKindName(DeviceKind kind);
// The kind of a device of this class, or nullopt when numarena does not report it.
std::optional<DeviceKind> DeviceKindOfClass(std::uint32_t class_code);

struct PciDevice {
  std::string bus_id;        // "0000:41:00.0"
  std::uint16_t vendor = 0;  // 0x10de
  std::uint16_t device = 0;
  std::uint32_t class_code = 0;  // 24-bit PCI class, e.g. 0x030200 (3D controller)
  DeviceKind kind = DeviceKind::kGpu;
  std::optional<int> node;  // nullopt: the kernel reports -1 (unknown)
};

// What the calling process may use.
struct ProcessScope {
  std::vector<int> allowed_cpus;       // sched_getaffinity ∩ cgroup cpuset.cpus.effective
  std::vector<int> allowed_mem_nodes;  // Mems_allowed_list ∩ cgroup cpuset.mems.effective
  std::optional<std::vector<int>> cgroup_cpus;  // cpuset.cpus.effective when found
  std::optional<std::vector<int>> cgroup_mems;  // cpuset.mems.effective when found
  std::optional<std::string> cgroup;            // the process's cgroup ("/system.slice/x.service")
};

class Topology {
 public:
  // Discovers the live machine (/sys, /proc, sched_getaffinity).
  [[nodiscard]] static StatusOr<Topology> discover();
  // Discovers through `reader` (fixture trees, tests).
  //
  // Required: /sys/devices/system/node/online and, for each online node N, nodeN/cpulist,
  // nodeN/meminfo and nodeN/distance (one entry per online node, in online order). A
  // missing one is NotFound, a malformed one DataLoss; the message names the file as the
  // reader displays it. Optional (skipped when absent, DataLoss when malformed): HMAT
  // nodeN/access0/initiators/*, the huge page pools nodeN/hugepages/hugepages-<kB>kB/*,
  // /sys/bus/pci/devices/*, /proc/self/status, /proc/self/cgroup and the cgroup's cpuset files. The
  // cgroup v2 files (cpuset.{cpus,mems}.effective) are looked up from the process's cgroup towards
  // the root, since a cgroup without the cpuset controller inherits its parent's; on a cgroup v1
  // host the cpuset hierarchy's cpuset.effective_{cpus,mems} is used instead.
  [[nodiscard]] static StatusOr<Topology> discover(const SystemReader& reader);

  // The live machine's topology, discovered once per process and shared (thread-safe).
  // Arenas and policies validate against it.
  [[nodiscard]] static StatusOr<const Topology*> system();

  // Online nodes, ascending by id.
  const std::vector<NodeInfo>& nodes() const { return nodes_; }
  std::vector<int> node_ids() const;
  // The node with this id, or nullptr.
  const NodeInfo* node(int id) const;
  bool has_node(int id) const { return node(id) != nullptr; }

  // SLIT distance (10 = local); -1 when either node is unknown.
  int distance(int from, int to) const;
  // `from` first, then the other online nodes by ascending distance (ties by id). This is
  // the fallback order for `Preferred`. Empty when `from` is not online.
  std::vector<int> nodes_by_distance(int from) const;

  // The node a CPU belongs to. NotFound when no online node lists it.
  [[nodiscard]] StatusOr<int> node_of_cpu(int cpu) const;
  // CPUs of a node (empty for memory-only or unknown nodes).
  const std::vector<int>& cpus_of_node(int node) const;

  const std::vector<PciDevice>& devices() const { return devices_; }
  // Node of the device at `bus_id` ("0000:41:00.0", or the short "41:00.0").
  // NotFound for an unknown bus id; FailedPrecondition when the kernel does not know its
  // node (numa_node -1).
  [[nodiscard]] StatusOr<int> node_of_pci(std::string_view bus_id) const;

  const ProcessScope& process() const { return process_; }
  // True when `node` is online and the process may allocate on it.
  bool memory_allowed(int node) const;
  // The online nodes owning any of `cpus`, ascending (CPUs of no node are ignored).
  std::vector<int> nodes_of_cpus(std::span<const int> cpus) const;

  // Human-readable warnings found during discovery (unknown device node, affinity that
  // spans nodes, cpuset limits, ...).
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Node the calling thread runs on now (getcpu); -1 if the kernel does not say.
  static int current_node();

 private:
  friend class TopologyBuilder;
  std::vector<NodeInfo> nodes_;
  std::vector<std::vector<int>> distances_;  // indexed like nodes_
  std::vector<PciDevice> devices_;
  ProcessScope process_;
  std::vector<std::string> warnings_;
};

// The kernel's own placement machinery that acts on the same memory numarena places, as
// ReadKernelMemorySettings finds it. Everything is optional: older kernels lack the files.
struct NodeInterleaveWeight {
  int node = -1;
  unsigned weight = 1;  // 1..255; the kernel uses 1 where it holds 0, and so does this
  friend bool operator==(const NodeInterleaveWeight&, const NodeInterleaveWeight&) = default;
};
struct MemoryTier {
  int id = -1;             // memory_tier<id>: a lower id is a faster tier
  std::vector<int> nodes;  // its nodelist, ascending
};
struct KernelMemorySettings {
  // /sys/kernel/mm/mempolicy/weighted_interleave/nodeN (Linux 6.9+): the weights
  // MPOL_WEIGHTED_INTERLEAVE gives each node, system-wide, ascending by node. Empty when the
  // kernel has no weighted interleave. Only root changes them (numarena never does).
  std::vector<NodeInterleaveWeight> interleave_weights;
  // .../weighted_interleave/auto (Linux 6.16+): true while the kernel derives the weights
  // from the firmware's bandwidth figures (HMAT/CDAT); nullopt when absent.
  std::optional<bool> interleave_weights_auto;
  // /sys/devices/virtual/memory_tiering/memory_tier*/nodelist (Linux 5.19+), ascending id
  // (the first is the fastest). Empty when the kernel has no memory tiers.
  std::vector<MemoryTier> memory_tiers;
  // /sys/kernel/mm/numa/demotion_enabled: reclaim moves cold pages to a lower tier instead
  // of dropping them; nullopt when absent.
  std::optional<bool> demotion_enabled;

  bool has_weighted_interleave() const { return !interleave_weights.empty(); }
  // The kernel's weight for `node`; 0 when it has none for it.
  unsigned interleave_weight(int node) const;
  // The id of the tier holding `node`; -1 when no tier lists it.
  int tier_of(int node) const;
};

// Reads the settings above through `reader` (fixture trees, tests) or from the live system.
// Absent files are simply absent; a file that is present but malformed is DataLoss naming
// it (the message says what was expected), a read error is returned with the path.
[[nodiscard]] StatusOr<KernelMemorySettings> ReadKernelMemorySettings(const SystemReader& reader);
[[nodiscard]] StatusOr<KernelMemorySettings> ReadKernelMemorySettings();

}  // namespace numarena
