// The NUMA health audit behind `numarena doctor`: kernel settings, device nodes, NIC
// interrupt placement and whether a process runs and allocates next to its GPU.
//
// Operators of inference servers usually check these by hand (sysctl, cat /sys/...,
// numastat, a script over /proc/irq). `RunDoctor` does it as a library call, read-only,
// through a `SystemReader`, so the same audit runs on the live machine, in a start-up
// health check and on fixture trees in tests. Every problem is a `Finding` that says what
// was observed, what was expected, why it matters and the command that fixes it.
//
// What is checked, and the expected values (the usual NUMA tuning list for inference servers):
//   numa_balancing          kernel.numa_balancing = 0: automatic NUMA balancing unmaps
//                           pages to sample accesses and migrates them behind the
//                           allocator's back; a bound inference server gains nothing.
//   zone_reclaim_mode       vm.zone_reclaim_mode = 0: reclaiming the local node instead of
//                           allocating on a neighbour stalls allocations.
//   thp_enabled             transparent_hugepage/enabled is always or madvise: numarena
//                           asks for huge pages with MADV_HUGEPAGE; `never` ignores it.
//   thp_defrag              transparent_hugepage/defrag is defer+madvise or madvise:
//                           `always` makes every fault compact memory synchronously
//                           (latency spikes); defer and never are notes.
//   min_free_kbytes         vm.min_free_kbytes >= min(2 GiB, 1% of memory) (a note):
//                           a larger reserve keeps allocations out of direct reclaim.
//   watermark_scale_factor  vm.watermark_scale_factor >= 300 (a note): kswapd wakes earlier.
//   device_node_unknown     every GPU/NIC has a node (numa_node != -1); a warning on
//                           multi-node machines, a note on one-node machines.
//   nic_irq_remote          every IRQ of a NIC may only run on CPUs of the NIC's node
//                           (/proc/irq/N/smp_affinity_list).
//   process_*               with a GPU given: the process (`pid`) may run only on CPUs of
//                           the GPU's node (process_cpus_remote: none there, critical;
//                           process_cpus_unbound: also elsewhere, warning), its cpuset
//                           allows the GPU's node (process_mems_exclude), and at least
//                           90% of its private resident memory (anonymous, heap, stack,
//                           hugetlb; shared file pages are not counted) is on the GPU's
//                           node (process_memory_remote).
//   placement_calls         (live system only) mbind, get_mempolicy, set_mempolicy and
//                           move_pages work for this process: each is tried once on a page of
//                           its own (os::ProbePlacementCalls); a refusal is critical and names
//                           the cause from /proc/thread-self/status: a seccomp filter (Seccomp: 2;
//                           Docker's and containerd's default profiles allow the memory
//                           policy calls only with CAP_SYS_NICE), or, without one, a missing
//                           CAP_SYS_NICE or a security module.
//   cpuset_mems_narrow      with a policy given: every node it names is in the process's
//                           cpuset.mems (Mems_allowed_list); strict policies then fail,
//                           advisory ones fall back (critical / warning).
//   numa_balancing          (above) in tiering mode (kernel.numa_balancing = 2 or 3) the kernel
//                           also promotes pages from slow tiers to fast ones, a separate
//                           explanation.
//   demotion_enabled        /sys/kernel/mm/numa/demotion_enabled = false: reclaim moves pages
//                           to a lower tier behind numarena's back (a warning with two tiers
//                           or more, a note with one).
//   memory_tiers            a note listing the kernel's memory tiers and their nodes when there
//                           are two or more; with the KV pool's tiers given, kv_cold_tier warns
//                           when a cold node is not in a lower kernel tier than every home
//                           node (the kernel would then promote or demote against numarena).
// A check whose files are absent (kernel built without NUMA balancing, no THP) is
// recorded in `skipped` and is not a problem.
//
//   auto reader = numarena::MakeRootedReader();
//   auto topo = numarena::Topology::discover(*reader);
//   numarena::DoctorOptions options;
//   options.gpu_bus_id = "0000:41:00.0";
//   auto report = numarena::RunDoctor(*reader, *topo, options);
//   if (report.ok() && !report->healthy()) for (auto& f : report->findings) log(f.fix);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena {

// kInfo is advice; kWarning and kCritical are problems (`healthy()` is false, `doctor
// --check` exits 1).
enum class Severity : unsigned char { kInfo, kWarning, kCritical };
// "info", "warning", "critical".
const char* SeverityName(Severity severity);

struct Finding {
  std::string id;  // the check, e.g. "numa_balancing" (stable, for scripts)
  Severity severity = Severity::kWarning;
  std::string subject;   // what the finding is about: "kernel.numa_balancing", a bus id, "pid 42"
  std::string observed;  // what the system says now
  std::string expected;  // what it should say
  std::string explanation;  // why it matters for an inference server
  std::string fix;          // a command (or commands) that fixes it; may be empty
};

struct DoctorOptions {
  // The GPU the process serves; enables the process_* checks. Its PCI address, or its index
  // "N" / "cuda:N" among the GPUs in PCI address order (CUDA_DEVICE_ORDER=PCI_BUS_ID). A
  // device that is not a GPU (class 0x03xxxx or 0x12xxxx) is InvalidArgument.
  std::optional<std::string> gpu_bus_id;
  // The process the process_* checks look at: "self" or a pid.
  std::string pid = "self";
  // The placement policy the server uses, in numarena's syntax ("interleave(0-3)",
  // "bind(1)/advisory"); enables cpuset_mems_narrow. A policy that does not parse is
  // InvalidArgument.
  std::optional<std::string> policy;
  // The KV pool's home (hot) nodes and cold-tier nodes; enables kv_cold_tier. Both or neither.
  std::vector<int> kv_home_nodes;
  std::vector<int> kv_cold_nodes;
};

struct DoctorReport {
  std::vector<Finding> findings;     // in check order
  std::vector<std::string> passed;   // ids of checks that found nothing
  std::vector<std::string> skipped;  // "thp_enabled: <path> not found", ...

  // No finding of severity warning or worse.
  bool healthy() const;
  // Findings of severity warning or worse.
  std::size_t problem_count() const;
};

// Runs every check. Errors only for bad options or unreadable required input: NotFound for
// an unknown --gpu bus id or a missing /proc/<pid>; InvalidArgument for a malformed pid;
// DataLoss naming the file for a malformed kernel file.
[[nodiscard]] StatusOr<DoctorReport> RunDoctor(const SystemReader& reader, const Topology& topology,
                                               const DoctorOptions& options = {});

}  // namespace numarena
