// `numarena topo`: the machine as numarena sees it.
//
// The text output starts with what `numactl --hardware` prints (available nodes; per node
// its CPUs, size and free memory in MB; the distance table), so the two can be compared
// line by line, then adds HMAT access attributes, per-node huge page pools, where each memory
// target (Policy::Target) resolves, the GPUs/NICs with their node, what this
// process may use (affinity, cgroup cpuset) and discovery's warnings.
//
//   numarena topo [--json] [--sysfs-root DIR] [--procfs-root DIR]
//
// --sysfs-root reads a recorded sys tree (tests/fixtures/<machine>/sys); without
// --procfs-root the proc tree beside it (DIR/../proc) is used, and when that does not
// exist the process may use everything in the fixture. Exit status: 0, or 2 with one line
// on stderr naming the file that is missing or malformed.
//
// --json prints one JSON object (compact, one line):
//   {
//     "schema": "numarena.topo/1",
//     "source": {"sysfs_root": str, "procfs_root": str},
//     "nodes": [{"id": int,                 ascending by id; ids may be sparse
//                "cpus": [int],             ascending; [] for memory-only nodes
//                "memory_only": bool,
//                "mem_total_bytes": int, "mem_free_bytes": int, "mem_used_bytes": int,
//                "access": null | {         HMAT access0 attributes (kernel units)
//                  "read_bandwidth_mbps": int, "write_bandwidth_mbps": int,
//                  "read_latency_ns": int, "write_latency_ns": int,
//                  "initiators": [int]},
//                "huge_pages": [{"page_bytes": int, "total": int, "free": int,
//                                "surplus": int}]}],   per-node hugetlbfs pools
//     "memory_targets": [{"attribute": "bandwidth" | "latency" | "capacity",
//                         "from": int | "any", "best": [int], "ranked": [int],
//                         "basis": "hmat" | "distance", "explanation": str}],
//     "distances": [[int]],                 SLIT distances; rows and columns in "nodes" order
//     "devices": [{"bus_id": "0000:41:00.0",
//                  "kind": "gpu" | "nic" | "infiniband",
//                  "vendor": "0x10de", "device": "0x2330", "class": "0x030200",
//                  "vendor_name": str | null,
//                  "node": int | null}],    null: the kernel does not know (numa_node -1)
//     "process": {"allowed_cpus": [int], "allowed_mem_nodes": [int],
//                 "cgroup": str | null,     the process's cgroup path
//                 "cgroup_cpus": [int] | null, "cgroup_mems": [int] | null},
//     "warnings": [str],
//     "kernel_memory": null | {...}         the kernel's weighted interleave weights, memory
//                                           tiers and demotion switch (ops_format.hpp)
//     "budget": null | {...}                what a System-mode budget with the default
//                                           thresholds makes of each node now (schema
//                                           numarena.budget/1, budget_view.hpp)
//   }
// New members may be added; existing ones keep their meaning while "schema" stays the same.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include <CLI/CLI.hpp>

#include "budget_view.hpp"
#include "ops_format.hpp"
#include "cli_options.hpp"
#include "command.hpp"
#include "numarena/format.hpp"
#include "numarena/memory_target.hpp"
#include "numarena/ops/json.hpp"
#include "numarena/topology.hpp"

namespace numarena::cli {
namespace {

struct TopoOptions {
  bool json = false;
  MachineRoots roots;
};

const char* VendorName(std::uint16_t vendor) {
  switch (vendor) {
    case 0x10de:
      return "NVIDIA";
    case 0x1002:
      return "AMD";
    case 0x8086:
      return "Intel";
    case 0x15b3:
      return "Mellanox";
    case 0x14e4:
      return "Broadcom";
    case 0x1af4:
      return "virtio";
    case 0x1d0f:
      return "Amazon";
    default:
      return nullptr;
  }
}

std::string HexId(std::uint32_t value, int digits) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(digits) << std::setfill('0') << value;
  return out.str();
}

std::uint64_t Megabytes(std::uint64_t bytes) { return bytes >> 20; }

// ---- text -----------------------------------------------------------------------------

// The part `numactl --hardware` prints, in its format.
void PrintHardware(std::ostream& out, const Topology& topo) {
  std::vector<int> ids = topo.node_ids();
  out << "available: " << ids.size() << " nodes (" << FormatIdList(ids) << ")\n";
  for (const NodeInfo& node : topo.nodes()) {
    out << "node " << node.id << " cpus:";
    for (int cpu : node.cpus) out << ' ' << cpu;
    out << "\nnode " << node.id << " size: " << Megabytes(node.mem_total_bytes) << " MB\n";
    out << "node " << node.id << " free: " << Megabytes(node.mem_free_bytes) << " MB\n";
  }
  out << "node distances:\nnode ";
  for (int id : ids) out << std::setw(3) << id << ' ';
  out << '\n';
  for (int from : ids) {
    out << std::setw(3) << from << ": ";
    for (int to : ids) out << std::setw(3) << topo.distance(from, to) << ' ';
    out << '\n';
  }
}

void PrintAccess(std::ostream& out, const Topology& topo) {
  bool any = false;
  for (const NodeInfo& node : topo.nodes()) any |= node.access.has_value();
  if (!any) return;
  out << "HMAT access attributes (access0: from the nearest initiators):\n";
  for (const NodeInfo& node : topo.nodes()) {
    if (!node.access) continue;
    const AccessAttributes& a = *node.access;
    out << "  node " << node.id << ": read " << a.read_bandwidth_mbps << " MB/s, write "
        << a.write_bandwidth_mbps << " MB/s, read latency " << a.read_latency_ns
        << " ns, write latency " << a.write_latency_ns << " ns; initiators: "
        << (a.initiators.empty() ? "none" : FormatIdList(a.initiators))
        << (node.memory_only() ? " (memory-only node)" : "") << '\n';
  }
}

void PrintHugePages(std::ostream& out, const Topology& topo) {
  bool any = false;
  for (const NodeInfo& node : topo.nodes()) any |= !node.huge_pages.empty();
  if (!any) return;
  out << "huge pages per node (hugetlbfs; memory bound to a node uses only that node's pool):\n";
  std::size_t example = 0;
  for (const NodeInfo& node : topo.nodes()) {
    out << "  node " << node.id << ':';
    const char* separator = " ";
    for (const HugePagePool& pool : node.huge_pages) {
      out << separator << (pool.page_bytes >> 10) << " kB: " << pool.total << " reserved, "
          << pool.free << " free";
      if (pool.surplus != 0) out << ", " << pool.surplus << " surplus";
      separator = "; ";
      if (example == 0) example = pool.page_bytes;
    }
    if (node.huge_pages.empty()) out << " none";
    out << '\n';
  }
  int first = topo.nodes().front().id;
  out << "  reserve on a node (root): echo COUNT > "
      << NodeHugePagePoolFile(first, example, "nr_hugepages") << '\n';
}

// Where each memory target (Policy::Target, "target(ATTRIBUTE@FROM)") resolves on this
// machine, from each node with CPUs and from any node.
// Every node with CPUs, then "any": where `topo` shows each memory target resolved from.
std::vector<int> TargetOrigins(const Topology& topo) {
  std::vector<int> froms;
  for (const NodeInfo& node : topo.nodes()) {
    if (!node.memory_only()) froms.push_back(node.id);
  }
  froms.push_back(MemoryTarget::kAnyInitiator);
  return froms;
}

void PrintMemoryTargets(std::ostream& out, const Topology& topo) {
  const std::vector<int> froms = TargetOrigins(topo);
  std::optional<TargetBasis> basis;
  out << "memory targets (policy target(ATTRIBUTE@NODE); best nodes):\n";
  for (MemoryAttribute attribute :
       {MemoryAttribute::kBandwidth, MemoryAttribute::kLatency, MemoryAttribute::kCapacity}) {
    out << "  " << std::left << std::setw(10) << MemoryAttributeName(attribute) << std::right;
    const char* separator = "";
    for (int from : froms) {
      auto choice = ResolveMemoryTarget(topo, {attribute, from}, -1);
      out << separator
          << (from == MemoryTarget::kAnyInitiator ? std::string("any") : absl::StrCat("@", from))
          << " -> ";
      out << (choice.ok() ? FormatIdList(choice->best) : std::string("none"));
      if (choice.ok() && attribute == MemoryAttribute::kBandwidth) basis = choice->basis;
      separator = ", ";
    }
    out << '\n';
  }
  if (basis == TargetBasis::kDistance) {
    out << "  (no usable HMAT: chosen by SLIT distance, memory-only nodes last)\n";
  }
}

void PrintDevices(std::ostream& out, const Topology& topo) {
  if (topo.devices().empty()) {
    out << "devices: none (no GPU, NIC or InfiniBand device found)\n";
    return;
  }
  out << "devices:\n";
  for (const PciDevice& d : topo.devices()) {
    const char* vendor = VendorName(d.vendor);
    out << "  " << std::left << std::setw(11) << DeviceKindName(d.kind) << std::setw(14) << d.bus_id
        << HexId(d.vendor, 4).substr(2) << ':' << HexId(d.device, 4).substr(2) << "  "
        << std::setw(10) << (vendor ? vendor : "") << std::right << "node "
        << (d.node ? std::to_string(*d.node) : std::string("unknown")) << '\n';
  }
}

void PrintProcess(std::ostream& out, const Topology& topo) {
  const ProcessScope& p = topo.process();
  out << "process:\n";
  if (p.cgroup) out << "  cgroup: " << *p.cgroup << '\n';
  out << "  allowed cpus: " << FormatIdList(p.allowed_cpus) << " (nodes "
      << FormatIdList(topo.nodes_of_cpus(p.allowed_cpus)) << ")\n";
  out << "  allowed memory nodes: " << FormatIdList(p.allowed_mem_nodes) << '\n';
  if (p.cgroup_cpus) out << "  cgroup cpuset cpus: " << FormatIdList(*p.cgroup_cpus) << '\n';
  if (p.cgroup_mems) out << "  cgroup cpuset mems: " << FormatIdList(*p.cgroup_mems) << '\n';
}

void PrintWarnings(std::ostream& out, const Topology& topo) {
  if (topo.warnings().empty()) return;
  out << "warnings:\n";
  for (const std::string& w : topo.warnings()) out << "  - " << w << '\n';
}

}  // namespace

std::string FormatKernelMemory(const StatusOr<KernelMemorySettings>& settings) {
  if (!settings.ok()) {
    return absl::StrCat("kernel memory policy settings: unknown: ", settings.status().message(),
                        "\n");
  }
  std::string out = "kernel weighted interleave (MPOL_WEIGHTED_INTERLEAVE, system-wide weights):";
  if (!settings->has_weighted_interleave()) {
    out += " none (Linux before 6.9); numarena's weighted policies bind chunks itself\n";
  } else {
    const char* separator = " ";
    for (const NodeInterleaveWeight& w : settings->interleave_weights) {
      absl::StrAppend(&out, separator, "node ", w.node, ": ", w.weight);
      separator = ", ";
    }
    if (settings->interleave_weights_auto) {
      absl::StrAppend(&out, *settings->interleave_weights_auto
                                ? " (auto: from the firmware's bandwidth)"
                                : " (set by an operator)");
    }
    out += "\n  a weighted policy with these proportions (or weighted(auto)) is placed by the "
           "kernel, others by numarena's chunks; `numarena advise --policy` prints the command "
           "that sets them\n";
  }
  if (!settings->memory_tiers.empty()) {
    out += "memory tiers (a lower id is faster):";
    const char* separator = " ";
    for (const MemoryTier& tier : settings->memory_tiers) {
      absl::StrAppend(&out, separator, "tier ", tier.id, ": node", tier.nodes.size() == 1 ? " " : "s ",
                      FormatIdList(tier.nodes));
      separator = "; ";
    }
    out += "\n";
  }
  if (settings->demotion_enabled) {
    absl::StrAppend(&out, "demotion to lower tiers on reclaim: ",
                    *settings->demotion_enabled ? "on" : "off", "\n");
  }
  return out;
}

namespace {
void OptionalBoolJson(JsonWriter& json, const char* key, const std::optional<bool>& value) {
  json.Key(key);
  if (value) {
    json.Bool(*value);
  } else {
    json.Null();
  }
}
}  // namespace

void WriteKernelMemoryJson(JsonWriter& json, const StatusOr<KernelMemorySettings>& settings) {
  json.Key("kernel_memory");
  if (!settings.ok()) {
    json.Null();
    return;
  }
  json.BeginObject();
  json.Key("interleave_weights");
  if (settings->has_weighted_interleave()) {
    json.BeginArray();
    for (const NodeInterleaveWeight& w : settings->interleave_weights) {
      json.BeginObject();
      json.Key("node").Int(w.node);
      json.Key("weight").Uint(w.weight);
      json.EndObject();
    }
    json.EndArray();
  } else {
    json.Null();
  }
  OptionalBoolJson(json, "interleave_weights_auto", settings->interleave_weights_auto);
  json.Key("memory_tiers").BeginArray();
  for (const MemoryTier& tier : settings->memory_tiers) {
    json.BeginObject();
    json.Key("id").Int(tier.id);
    json.Key("nodes").IntArray(tier.nodes);
    json.EndObject();
  }
  json.EndArray();
  OptionalBoolJson(json, "demotion_enabled", settings->demotion_enabled);
  json.EndObject();
}

namespace {

void PrintTopologyText(std::ostream& out, const Topology& topo) {
  PrintHardware(out, topo);
  PrintAccess(out, topo);
  PrintHugePages(out, topo);
  PrintMemoryTargets(out, topo);
  PrintDevices(out, topo);
  PrintProcess(out, topo);
  PrintWarnings(out, topo);
}

// ---- JSON -----------------------------------------------------------------------------

void WriteNodesJson(JsonWriter& json, const Topology& topo) {
  json.Key("nodes").BeginArray();
  for (const NodeInfo& node : topo.nodes()) {
    json.BeginObject();
    json.Key("id").Int(node.id);
    json.Key("cpus").IntArray(node.cpus);
    json.Key("memory_only").Bool(node.memory_only());
    json.Key("mem_total_bytes").Uint(node.mem_total_bytes);
    json.Key("mem_free_bytes").Uint(node.mem_free_bytes);
    json.Key("mem_used_bytes").Uint(node.mem_used_bytes);
    json.Key("access");
    if (node.access) {
      const AccessAttributes& a = *node.access;
      json.BeginObject();
      json.Key("read_bandwidth_mbps").Uint(a.read_bandwidth_mbps);
      json.Key("write_bandwidth_mbps").Uint(a.write_bandwidth_mbps);
      json.Key("read_latency_ns").Uint(a.read_latency_ns);
      json.Key("write_latency_ns").Uint(a.write_latency_ns);
      json.Key("initiators").IntArray(a.initiators);
      json.EndObject();
    } else {
      json.Null();
    }
    json.Key("huge_pages").BeginArray();
    for (const HugePagePool& pool : node.huge_pages) {
      json.BeginObject();
      json.Key("page_bytes").Uint(pool.page_bytes);
      json.Key("total").Uint(pool.total);
      json.Key("free").Uint(pool.free);
      json.Key("surplus").Uint(pool.surplus);
      json.EndObject();
    }
    json.EndArray();
    json.EndObject();
  }
  json.EndArray();
  json.Key("distances").BeginArray();
  for (int from : topo.node_ids()) {
    json.BeginArray();
    for (int to : topo.node_ids()) json.Int(topo.distance(from, to));
    json.EndArray();
  }
  json.EndArray();
}

void WriteDevicesJson(JsonWriter& json, const Topology& topo) {
  json.Key("devices").BeginArray();
  for (const PciDevice& d : topo.devices()) {
    json.BeginObject();
    json.Key("bus_id").String(d.bus_id);
    json.Key("kind").String(DeviceKindName(d.kind));
    json.Key("vendor").String(HexId(d.vendor, 4));
    json.Key("device").String(HexId(d.device, 4));
    json.Key("class").String(HexId(d.class_code, 6));
    json.Key("vendor_name");
    if (const char* name = VendorName(d.vendor)) {
      json.String(name);
    } else {
      json.Null();
    }
    json.Key("node");
    if (d.node) {
      json.Int(*d.node);
    } else {
      json.Null();
    }
    json.EndObject();
  }
  json.EndArray();
}

void WriteMemoryTargetsJson(JsonWriter& json, const Topology& topo) {
  json.Key("memory_targets").BeginArray();
  for (MemoryAttribute attribute :
       {MemoryAttribute::kBandwidth, MemoryAttribute::kLatency, MemoryAttribute::kCapacity}) {
    for (int from : TargetOrigins(topo)) {
      auto choice = ResolveMemoryTarget(topo, {attribute, from}, -1);
      if (!choice.ok()) continue;
      json.BeginObject();
      json.Key("attribute").String(MemoryAttributeName(attribute));
      json.Key("from");
      if (from == MemoryTarget::kAnyInitiator) {
        json.String("any");
      } else {
        json.Int(from);
      }
      json.Key("best").IntArray(choice->best);
      json.Key("ranked").IntArray(choice->ranked);
      json.Key("basis").String(TargetBasisName(choice->basis));
      json.Key("explanation").String(choice->explanation);
      json.EndObject();
    }
  }
  json.EndArray();
}

void WriteProcessJson(JsonWriter& json, const Topology& topo) {
  const ProcessScope& p = topo.process();
  json.Key("process").BeginObject();
  json.Key("allowed_cpus").IntArray(p.allowed_cpus);
  json.Key("allowed_mem_nodes").IntArray(p.allowed_mem_nodes);
  json.Key("cgroup");
  if (p.cgroup) {
    json.String(*p.cgroup);
  } else {
    json.Null();
  }
  json.Key("cgroup_cpus");
  if (p.cgroup_cpus) {
    json.IntArray(*p.cgroup_cpus);
  } else {
    json.Null();
  }
  json.Key("cgroup_mems");
  if (p.cgroup_mems) {
    json.IntArray(*p.cgroup_mems);
  } else {
    json.Null();
  }
  json.EndObject();
}

// The members of the top-level object; a view that adds members writes them after these.
void WriteTopologyJsonMembers(JsonWriter& json, const Topology& topo, const TopoOptions& options) {
  json.Key("schema").String("numarena.topo/1");
  json.Key("source").BeginObject();
  json.Key("sysfs_root").String(options.roots.sysfs_root());
  json.Key("procfs_root").String(options.roots.procfs_root());
  json.EndObject();
  WriteNodesJson(json, topo);
  WriteMemoryTargetsJson(json, topo);
  WriteDevicesJson(json, topo);
  WriteProcessJson(json, topo);
  json.Key("warnings").BeginArray();
  for (const std::string& w : topo.warnings()) json.String(w);
  json.EndArray();
}

int RunTopo(const TopoOptions& options) {
  std::unique_ptr<SystemReader> reader = options.roots.reader();
  auto topo = Topology::discover(*reader);
  if (!topo.ok()) return Fail("topo", std::string(topo.status().message()));
  // The budget view (issue: "topo gains a budget view"): capacity, usage and state per node
  // under the default thresholds. A node whose meminfo cannot be read leaves the topology
  // output intact and says why instead.
  auto budget = SystemBudgetSnapshot(*topo, *reader);
  if (options.json) {
    JsonWriter json(std::cout);
    json.BeginObject();
    WriteTopologyJsonMembers(json, *topo, options);
    WriteKernelMemoryJson(json, ReadKernelMemorySettings(*reader));
    json.Key("budget");
    if (budget.ok()) {
      WriteBudgetJson(json, *budget);
    } else {
      json.Null();
    }
    json.EndObject();
    std::cout << '\n';
  } else {
    PrintTopologyText(std::cout, *topo);
    std::cout << FormatKernelMemory(ReadKernelMemorySettings(*reader)) << "\n";
    if (budget.ok()) {
      PrintBudgetView(std::cout, *budget);
    } else {
      std::cout << "budget: unavailable: " << budget.status().message() << "\n";
    }
  }
  std::cout.flush();
  if (!std::cout) return Fail("topo", "could not write the output");
  return 0;
}

CommandRunner SetupTopo(CLI::App& app) {
  auto options = std::make_shared<TopoOptions>();
  app.add_flag("--json", options->json,
               "one JSON object instead of text (schema numarena.topo/1, docs/cli.md)");
  options->roots.AddTo(app);
  return [options] { return RunTopo(*options); };
}

}  // namespace
}  // namespace numarena::cli

NUMARENA_COMMAND(topo, "print NUMA nodes, distances, devices and what this process may use",
                 numarena::cli::SetupTopo);
