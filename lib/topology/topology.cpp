// Topology discovery: reads the kernel's description of the machine through a
// SystemReader and builds an immutable Topology, then answers queries on it.
//
// Discovery is one pass in a fixed order: online nodes, then each node's CPUs, memory,
// distance row and HMAT attributes (here), then the PCI devices (pci_devices.cpp), then what
// the process may use (process_scope.cpp), all reading through KernelFiles
// (kernel_files.hpp).
// Files the kernel always has on a NUMA kernel are required (a missing one is NotFound,
// a malformed one DataLoss, both naming the file); the rest are optional but still
// DataLoss when present and malformed, because a file that says something unexpected
// means the model of the machine would be wrong. Oddities that do not stop discovery
// (a device without a known node, affinity over several nodes, a cpuset that hides
// nodes) become warnings().
#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "numarena/topology.hpp"
#include "os/os.hpp"
#include "topology/kernel_files.hpp"
#include "topology/topology_parse.hpp"

namespace numarena {
namespace {

constexpr const char* kNodeDir = "/sys/devices/system/node";

std::string NodePath(int node, const char* file) {
  return absl::StrCat(kNodeDir, "/node", node, "/", file);
}

// "41:00.0" -> "0000:41:00.0"; lower case, as sysfs names devices.
std::string NormalizeBusId(std::string_view bus_id) {
  std::string id = absl::AsciiStrToLower(absl::string_view(bus_id.data(), bus_id.size()));
  if (std::count(id.begin(), id.end(), ':') == 1) id = "0000:" + id;
  return id;
}

}  // namespace

// Builds a Topology from a reader; a friend of Topology so it fills the fields directly.
class TopologyBuilder {
 public:
  explicit TopologyBuilder(const SystemReader& reader) : files_(reader) {}

  StatusOr<Topology> Build() {
    if (Status s = ReadNodes(); !s.ok()) return s;
    auto devices = topology_internal::ReadPciDevices(files_, topo_, topo_.warnings_);
    if (!devices.ok()) return devices.status();
    topo_.devices_ = *std::move(devices);
    auto scope = topology_internal::ReadProcessScope(files_, topo_, topo_.warnings_);
    if (!scope.ok()) return scope.status();
    topo_.process_ = *std::move(scope);
    return std::move(topo_);
  }

 private:
  // ---- nodes -------------------------------------------------------------------------

  Status ReadNodes() {
    std::string online_path = absl::StrCat(kNodeDir, "/online");
    auto online_text = files_.ReadRequired(
        online_path,
        "the list of online NUMA nodes; is this a kernel without CONFIG_NUMA, or "
        "the wrong --sysfs-root?");
    if (!online_text.ok()) return online_text.status();
    auto online = files_.Parse(online_path, *online_text, parse::ParseNodeList);
    if (!online.ok()) return online.status();
    if (online->empty()) return files_.Malformed(online_path, "lists no online node");

    std::vector<int> owner_of_cpu;  // node id per CPU, -1 when none yet
    for (int id : *online) {
      NodeInfo node;
      node.id = id;

      std::string cpulist_path = NodePath(id, "cpulist");
      auto cpulist = files_.ReadRequired(cpulist_path, absl::StrCat("the CPUs of node ", id));
      if (!cpulist.ok()) return cpulist.status();
      auto cpus = files_.Parse(cpulist_path, *cpulist, parse::ParseCpuList);
      if (!cpus.ok()) return cpus.status();
      for (int cpu : *cpus) {
        if (owner_of_cpu.size() <= static_cast<std::size_t>(cpu)) owner_of_cpu.resize(cpu + 1, -1);
        if (owner_of_cpu[cpu] >= 0) {
          return files_.Malformed(
              cpulist_path,
              absl::StrCat("CPU ", cpu, " is also listed by node ", owner_of_cpu[cpu]));
        }
        owner_of_cpu[cpu] = id;
      }
      node.cpus = *std::move(cpus);

      std::string meminfo_path = NodePath(id, "meminfo");
      auto meminfo_text =
          files_.ReadRequired(meminfo_path, absl::StrCat("the memory of node ", id));
      if (!meminfo_text.ok()) return meminfo_text.status();
      auto meminfo = files_.Parse(meminfo_path, *meminfo_text, parse::ParseNodeMeminfo);
      if (!meminfo.ok()) return meminfo.status();
      if (meminfo->node != id) {
        return files_.Malformed(
            meminfo_path, absl::StrCat("describes node ", meminfo->node, ", expected node ", id));
      }
      node.mem_total_bytes = meminfo->total_bytes;
      node.mem_free_bytes = meminfo->free_bytes;
      node.mem_used_bytes = meminfo->used_bytes;

      std::string distance_path = NodePath(id, "distance");
      auto distance_text =
          files_.ReadRequired(distance_path, absl::StrCat("the distances from node ", id));
      if (!distance_text.ok()) return distance_text.status();
      auto row = files_.Parse(distance_path, *distance_text, parse::ParseDistanceRow);
      if (!row.ok()) return row.status();
      if (row->size() != online->size()) {
        return files_.Malformed(distance_path,
                                absl::StrCat("has ", row->size(), " entries but ", online->size(),
                                             " nodes are online (", FormatIdList(*online), ")"));
      }

      if (Status s = ReadAccess(node); !s.ok()) return s;
      if (Status s = ReadHugePages(node); !s.ok()) return s;
      topo_.nodes_.push_back(std::move(node));
      topo_.distances_.push_back(*std::move(row));
    }
    return absl::OkStatus();
  }

  // HMAT attributes: nodeN/access0/initiators/{read,write}_{bandwidth,latency} and the
  // nodeM entries (links to the initiator nodes) beside them.
  Status ReadAccess(NodeInfo& node) {
    std::string dir = NodePath(node.id, "access0/initiators");
    auto entries = files_.reader().List(dir);
    if (!entries.ok()) {
      if (absl::IsNotFound(entries.status())) return absl::OkStatus();
      return files_.WithPath(entries.status(), dir);
    }
    AccessAttributes access;
    // The kernel leaves out attributes HMAT lacks: they stay 0.
    if (Status s = ReadOptionalCounts(dir, {{"read_bandwidth", &access.read_bandwidth_mbps},
                                            {"write_bandwidth", &access.write_bandwidth_mbps},
                                            {"read_latency", &access.read_latency_ns},
                                            {"write_latency", &access.write_latency_ns}});
        !s.ok()) {
      return s;
    }
    for (const std::string& name : *entries) {
      if (auto initiator = parse::ParseNodeEntryName(name)) access.initiators.push_back(*initiator);
    }
    std::sort(access.initiators.begin(), access.initiators.end());
    node.access = std::move(access);
    return absl::OkStatus();
  }

  // Decimal counts in files of `dir`; a file that is absent leaves its value as it is,
  // a malformed one is DataLoss naming it.
  struct CountFile {
    const char* file;
    std::uint64_t* value;
  };
  Status ReadOptionalCounts(const std::string& dir, std::initializer_list<CountFile> counts) {
    for (const CountFile& count : counts) {
      std::string path = absl::StrCat(dir, "/", count.file);
      auto text = files_.ReadOptional(path);
      if (!text.ok()) return text.status();
      if (!text->has_value()) continue;
      auto value = files_.Parse(path, **text, parse::ParseDecimalU64);
      if (!value.ok()) return value.status();
      *count.value = *value;
    }
    return absl::OkStatus();
  }

  // Per-node hugetlbfs pools: nodeN/hugepages/hugepages-<kB>kB/{nr,free,surplus}_hugepages.
  Status ReadHugePages(NodeInfo& node) {
    std::string dir = NodePath(node.id, "hugepages");
    auto entries = files_.reader().List(dir);
    if (!entries.ok()) {
      if (absl::IsNotFound(entries.status())) return absl::OkStatus();
      return files_.WithPath(entries.status(), dir);
    }
    for (const std::string& name : *entries) {
      std::optional<std::uint64_t> kb = parse::ParseHugePageDirName(name);
      if (!kb) continue;  // not a pool directory
      HugePagePool pool;
      pool.page_bytes = static_cast<std::size_t>(*kb) << 10;
      if (Status s = ReadOptionalCounts(absl::StrCat(dir, "/", name),
                                        {{"nr_hugepages", &pool.total},
                                         {"free_hugepages", &pool.free},
                                         {"surplus_hugepages", &pool.surplus}});
          !s.ok()) {
        return s;
      }
      node.huge_pages.push_back(pool);
    }
    std::sort(
        node.huge_pages.begin(), node.huge_pages.end(),
        [](const HugePagePool& a, const HugePagePool& b) { return a.page_bytes < b.page_bytes; });
    return absl::OkStatus();
  }

  topology_internal::KernelFiles files_;
  Topology topo_;
};

std::string NodeHugePagePoolFile(int node, std::size_t page_bytes, std::string_view file) {
  return absl::StrCat("/sys/devices/system/node/node", node, "/hugepages/hugepages-",
                      page_bytes >> 10, "kB/", absl::string_view(file.data(), file.size()));
}

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kGpu:
      return "gpu";
    case DeviceKind::kNic:
      return "nic";
    case DeviceKind::kInfiniband:
      return "infiniband";
  }
  return "?";
}

std::optional<DeviceKind> DeviceKindOfClass(std::uint32_t class_code) {
  switch (class_code >> 8) {  // base class and subclass; the prog-if does not matter
    case 0x0300:
    case 0x0302:
    case 0x0380:
    case 0x1200:  // processing accelerator (e.g. Intel Gaudi): served like a GPU
      return DeviceKind::kGpu;
    case 0x0200:
      return DeviceKind::kNic;
    case 0x0207:
      return DeviceKind::kInfiniband;
    default:
      return std::nullopt;
  }
}

StatusOr<Topology> Topology::discover() {
  std::unique_ptr<SystemReader> reader = MakeRootedReader();
  return discover(*reader);
}

StatusOr<Topology> Topology::discover(const SystemReader& reader) {
  return TopologyBuilder(reader).Build();
}

StatusOr<const Topology*> Topology::system() {
  // Never destroyed: code running in other static destructors may still ask for it.
  static const StatusOr<Topology>* const discovered = new StatusOr<Topology>(discover());
  if (!discovered->ok()) return discovered->status();
  return &**discovered;
}

std::vector<int> Topology::node_ids() const {
  std::vector<int> ids;
  ids.reserve(nodes_.size());
  for (const NodeInfo& node : nodes_) ids.push_back(node.id);
  return ids;
}

const NodeInfo* Topology::node(int id) const {
  auto it = std::lower_bound(nodes_.begin(), nodes_.end(), id,
                             [](const NodeInfo& n, int value) { return n.id < value; });
  return it != nodes_.end() && it->id == id ? &*it : nullptr;
}

int Topology::distance(int from, int to) const {
  const NodeInfo* a = node(from);
  const NodeInfo* b = node(to);
  if (a == nullptr || b == nullptr) return -1;
  return distances_[a - nodes_.data()][b - nodes_.data()];
}

std::vector<int> Topology::nodes_by_distance(int from) const {
  if (!has_node(from)) return {};
  std::vector<int> others;
  for (const NodeInfo& n : nodes_) {
    if (n.id != from) others.push_back(n.id);
  }
  std::stable_sort(others.begin(), others.end(), [&](int a, int b) {
    return distance(from, a) < distance(from, b);  // ids are ascending already: ties by id
  });
  std::vector<int> order{from};
  order.insert(order.end(), others.begin(), others.end());
  return order;
}

StatusOr<int> Topology::node_of_cpu(int cpu) const {
  for (const NodeInfo& n : nodes_) {
    if (std::binary_search(n.cpus.begin(), n.cpus.end(), cpu)) return n.id;
  }
  return absl::NotFoundError(absl::StrCat("CPU ", cpu, " is not listed by any online node (",
                                          FormatIdList(node_ids()), ")"));
}

const std::vector<int>& Topology::cpus_of_node(int id) const {
  static const std::vector<int> kNone;
  const NodeInfo* n = node(id);
  return n == nullptr ? kNone : n->cpus;
}

std::vector<int> Topology::nodes_of_cpus(std::span<const int> cpus) const {
  std::vector<int> out;
  for (const NodeInfo& n : nodes_) {
    bool owns_any = std::any_of(cpus.begin(), cpus.end(), [&](int cpu) {
      return std::binary_search(n.cpus.begin(), n.cpus.end(), cpu);
    });
    if (owns_any) out.push_back(n.id);
  }
  return out;
}

StatusOr<int> Topology::node_of_pci(std::string_view bus_id) const {
  std::string wanted = NormalizeBusId(bus_id);
  for (const PciDevice& d : devices_) {
    if (d.bus_id != wanted) continue;
    if (!d.node) {
      return absl::FailedPreconditionError(
          absl::StrCat("the kernel does not know the NUMA node of ", DeviceKindName(d.kind), " ",
                       wanted, " (numa_node is -1); choose a node explicitly"));
    }
    return *d.node;
  }
  return absl::NotFoundError(absl::StrCat("no GPU, NIC or InfiniBand device at PCI address '",
                                          absl::string_view(bus_id.data(), bus_id.size()), "' (",
                                          devices_.size(),
                                          " such devices found; `numarena topo` lists them)"));
}

bool Topology::memory_allowed(int id) const {
  return has_node(id) && std::binary_search(process_.allowed_mem_nodes.begin(),
                                            process_.allowed_mem_nodes.end(), id);
}

int Topology::current_node() { return os::CurrentCpuAndNode().node; }

}  // namespace numarena
