// Topology discovery: reads the kernel's description of the machine through a
// SystemReader and builds an immutable Topology, then answers queries on it.
//
// Discovery is one pass in a fixed order: online nodes, then each node's CPUs, memory,
// distance row and HMAT attributes, then the PCI devices, then what the process may use.
// Files the kernel always has on a NUMA kernel are required (a missing one is NotFound,
// a malformed one DataLoss, both naming the file); the rest are optional but still
// DataLoss when present and malformed, because a file that says something unexpected
// means the model of the machine would be wrong. Oddities that do not stop discovery
// (a device without a known node, affinity over several nodes, a cpuset that hides
// nodes) become warnings().
#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "numarena/topology.hpp"
#include "os/os.hpp"
#include "topology/topology_parse.hpp"

namespace numarena {
namespace {

constexpr const char* kNodeDir = "/sys/devices/system/node";
constexpr const char* kPciDir = "/sys/bus/pci/devices";
constexpr const char* kCgroupRoot = "/sys/fs/cgroup";
constexpr const char* kCgroupV1CpusetRoot = "/sys/fs/cgroup/cpuset";

std::string NodePath(int node, const char* file) {
  return absl::StrCat(kNodeDir, "/node", node, "/", file);
}

std::vector<int> Intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::string Hex4(std::uint16_t v) { return absl::StrCat(absl::Hex(v, absl::kZeroPad4)); }

// "41:00.0" -> "0000:41:00.0"; lower case, as sysfs names devices.
std::string NormalizeBusId(std::string_view bus_id) {
  std::string id = absl::AsciiStrToLower(absl::string_view(bus_id.data(), bus_id.size()));
  if (std::count(id.begin(), id.end(), ':') == 1) id = "0000:" + id;
  return id;
}

// A cpuset file found for the process: its ids and the file it came from.
struct CgroupList {
  std::vector<int> ids;
  std::string path;
};

}  // namespace

// Builds a Topology from a reader; a friend of Topology so it fills the fields directly.
class TopologyBuilder {
 public:
  explicit TopologyBuilder(const SystemReader& reader) : reader_(reader) {}

  StatusOr<Topology> Build() {
    if (Status s = ReadNodes(); !s.ok()) return s;
    if (Status s = ReadDevices(); !s.ok()) return s;
    if (Status s = ReadProcessScope(); !s.ok()) return s;
    return std::move(topo_);
  }

 private:
  // ---- reading files -----------------------------------------------------------------

  std::string Display(const std::string& path) const { return reader_.DisplayPath(path); }

  // The reader's error with the file named (a reader's own message may already do so).
  Status WithPath(const Status& status, const std::string& path) const {
    std::string shown = Display(path);
    std::string message(status.message());
    if (message.find(shown) != std::string::npos) return status;
    return Status(status.code(), absl::StrCat(shown, ": ", message));
  }

  // A file discovery cannot do without; `why` tells the user what it is needed for.
  StatusOr<std::string> ReadRequired(const std::string& path, std::string_view why) const {
    auto text = reader_.Read(path);
    if (text.ok()) return text;
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat(Display(path), ": missing (needed for ",
                                              absl::string_view(why.data(), why.size()), ")"));
    }
    return WithPath(text.status(), path);
  }

  // A file that may be absent: nullopt then. Other read errors are returned.
  StatusOr<std::optional<std::string>> ReadOptional(const std::string& path) const {
    auto text = reader_.Read(path);
    if (text.ok()) return std::optional<std::string>(*std::move(text));
    if (absl::IsNotFound(text.status())) return std::optional<std::string>();
    return WithPath(text.status(), path);
  }

  // Runs a parser over a file's text; a failure becomes DataLoss naming the file.
  template <typename Parser>
  auto Parse(const std::string& path, const std::string& text, Parser parser) const
      -> decltype(parser(std::string_view())) {
    auto parsed = parser(std::string_view(text));
    if (parsed.ok()) return parsed;
    return absl::DataLossError(absl::StrCat(Display(path), ": ", parsed.status().message()));
  }

  Status Malformed(const std::string& path, const std::string& why) const {
    return absl::DataLossError(absl::StrCat(Display(path), ": ", why));
  }

  // ---- nodes -------------------------------------------------------------------------

  Status ReadNodes() {
    std::string online_path = absl::StrCat(kNodeDir, "/online");
    auto online_text =
        ReadRequired(online_path,
                     "the list of online NUMA nodes; is this a kernel without CONFIG_NUMA, or "
                     "the wrong --sysfs-root?");
    if (!online_text.ok()) return online_text.status();
    auto online = Parse(online_path, *online_text, parse::ParseNodeList);
    if (!online.ok()) return online.status();
    if (online->empty()) return Malformed(online_path, "lists no online node");

    std::vector<int> owner_of_cpu;  // node id per CPU, -1 when none yet
    for (int id : *online) {
      NodeInfo node;
      node.id = id;

      std::string cpulist_path = NodePath(id, "cpulist");
      auto cpulist = ReadRequired(cpulist_path, absl::StrCat("the CPUs of node ", id));
      if (!cpulist.ok()) return cpulist.status();
      auto cpus = Parse(cpulist_path, *cpulist, parse::ParseCpuList);
      if (!cpus.ok()) return cpus.status();
      for (int cpu : *cpus) {
        if (owner_of_cpu.size() <= static_cast<std::size_t>(cpu)) owner_of_cpu.resize(cpu + 1, -1);
        if (owner_of_cpu[cpu] >= 0) {
          return Malformed(cpulist_path, absl::StrCat("CPU ", cpu, " is also listed by node ",
                                                      owner_of_cpu[cpu]));
        }
        owner_of_cpu[cpu] = id;
      }
      node.cpus = *std::move(cpus);

      std::string meminfo_path = NodePath(id, "meminfo");
      auto meminfo_text = ReadRequired(meminfo_path, absl::StrCat("the memory of node ", id));
      if (!meminfo_text.ok()) return meminfo_text.status();
      auto meminfo = Parse(meminfo_path, *meminfo_text, parse::ParseNodeMeminfo);
      if (!meminfo.ok()) return meminfo.status();
      if (meminfo->node != id) {
        return Malformed(meminfo_path,
                         absl::StrCat("describes node ", meminfo->node, ", expected node ", id));
      }
      node.mem_total_bytes = meminfo->total_bytes;
      node.mem_free_bytes = meminfo->free_bytes;
      node.mem_used_bytes = meminfo->used_bytes;

      std::string distance_path = NodePath(id, "distance");
      auto distance_text =
          ReadRequired(distance_path, absl::StrCat("the distances from node ", id));
      if (!distance_text.ok()) return distance_text.status();
      auto row = Parse(distance_path, *distance_text, parse::ParseDistanceRow);
      if (!row.ok()) return row.status();
      if (row->size() != online->size()) {
        return Malformed(distance_path,
                         absl::StrCat("has ", row->size(), " entries but ", online->size(),
                                      " nodes are online (", FormatIdList(*online), ")"));
      }

      if (Status s = ReadAccess(node); !s.ok()) return s;
      topo_.nodes_.push_back(std::move(node));
      topo_.distances_.push_back(*std::move(row));
    }
    return absl::OkStatus();
  }

  // HMAT attributes: nodeN/access0/initiators/{read,write}_{bandwidth,latency} and the
  // nodeM entries (links to the initiator nodes) beside them.
  Status ReadAccess(NodeInfo& node) {
    std::string dir = NodePath(node.id, "access0/initiators");
    auto entries = reader_.List(dir);
    if (!entries.ok()) {
      if (absl::IsNotFound(entries.status())) return absl::OkStatus();
      return WithPath(entries.status(), dir);
    }
    AccessAttributes access;
    struct Field {
      const char* file;
      std::uint64_t* value;
    };
    const Field fields[] = {{"read_bandwidth", &access.read_bandwidth_mbps},
                            {"write_bandwidth", &access.write_bandwidth_mbps},
                            {"read_latency", &access.read_latency_ns},
                            {"write_latency", &access.write_latency_ns}};
    for (const Field& field : fields) {
      std::string path = absl::StrCat(dir, "/", field.file);
      auto text = ReadOptional(path);
      if (!text.ok()) return text.status();
      if (!text->has_value()) continue;  // the kernel leaves out attributes HMAT lacks
      auto value = Parse(path, **text, parse::ParseDecimalU64);
      if (!value.ok()) return value.status();
      *field.value = *value;
    }
    for (const std::string& name : *entries) {
      if (auto initiator = parse::ParseNodeEntryName(name)) access.initiators.push_back(*initiator);
    }
    std::sort(access.initiators.begin(), access.initiators.end());
    node.access = std::move(access);
    return absl::OkStatus();
  }

  // ---- PCI devices -------------------------------------------------------------------

  Status ReadDevices() {
    auto entries = reader_.List(kPciDir);
    if (!entries.ok()) {
      if (absl::IsNotFound(entries.status())) return absl::OkStatus();  // no PCI bus
      topo_.warnings_.push_back(
          absl::StrCat("PCI devices not listed: ", WithPath(entries.status(), kPciDir).message()));
      return absl::OkStatus();
    }
    std::sort(entries->begin(), entries->end());
    for (const std::string& bus_id : *entries) {
      std::string dir = absl::StrCat(kPciDir, "/", bus_id);
      std::string class_path = dir + "/class";
      auto class_text = ReadOptional(class_path);
      if (!class_text.ok()) return class_text.status();
      if (!class_text->has_value()) continue;
      auto class_code = Parse(class_path, **class_text, parse::ParsePciClass);
      if (!class_code.ok()) return class_code.status();
      std::optional<DeviceKind> kind = DeviceKindOfClass(*class_code);
      if (!kind) continue;

      PciDevice device;
      device.bus_id = bus_id;
      device.class_code = *class_code;
      device.kind = *kind;
      const std::pair<const char*, std::uint16_t*> ids[] = {{"vendor", &device.vendor},
                                                            {"device", &device.device}};
      for (auto [file, slot] : ids) {
        std::string path = absl::StrCat(dir, "/", file);
        auto text = ReadOptional(path);
        if (!text.ok()) return text.status();
        if (!text->has_value()) continue;  // left 0: unknown
        auto id = Parse(path, **text, parse::ParseHexId);
        if (!id.ok()) return id.status();
        *slot = *id;
      }

      std::string label = absl::StrCat(DeviceKindName(device.kind), " ", bus_id, " (",
                                       Hex4(device.vendor), ":", Hex4(device.device), ")");
      std::string node_path = dir + "/numa_node";
      auto node_text = ReadOptional(node_path);
      if (!node_text.ok()) return node_text.status();
      if (!node_text->has_value()) {
        topo_.warnings_.push_back(absl::StrCat(label,
                                               " has no numa_node file: its NUMA node is "
                                               "unknown (kernel without NUMA support?)"));
      } else {
        auto node = Parse(node_path, **node_text, parse::ParseNumaNode);
        if (!node.ok()) return node.status();
        if (!node->has_value()) {
          std::string hint = topo_.nodes_.size() == 1 ? absl::StrCat(" (the machine has one node, ",
                                                                     topo_.nodes_.front().id, ")")
                                                      : std::string();
          topo_.warnings_.push_back(absl::StrCat(
              label,
              " has numa_node -1: the firmware gives no proximity, so its NUMA node is "
              "unknown and is not assumed to be node 0; choose the node for its buffers and "
              "threads explicitly",
              hint));
        } else if (!topo_.has_node(**node)) {
          topo_.warnings_.push_back(absl::StrCat(label, " reports numa_node ", **node,
                                                 ", which is not an online node; treated as "
                                                 "unknown"));
        } else {
          device.node = **node;
        }
      }
      topo_.devices_.push_back(std::move(device));
    }
    return absl::OkStatus();
  }

  // ---- process scope -----------------------------------------------------------------

  // Looks for `file` in the process's cgroup and then its ancestors up to `mount`.
  // A cgroup without the cpuset controller has no such file and inherits its parent's
  // set; an empty file cannot describe a running process, so it is skipped likewise.
  StatusOr<std::optional<CgroupList>> FindCgroupList(const std::string& mount,
                                                     const std::string& cgroup,
                                                     const char* file) const {
    std::string dir = cgroup;
    while (!dir.empty() && dir.back() == '/') dir.pop_back();
    for (;;) {
      std::string path = absl::StrCat(mount, dir, "/", file);
      auto text = ReadOptional(path);
      if (!text.ok()) return text.status();
      if (text->has_value()) {
        auto ids = Parse(path, **text, parse::ParseCpuList);
        if (!ids.ok()) return ids.status();
        if (!ids->empty()) return std::optional<CgroupList>(CgroupList{*std::move(ids), path});
      }
      if (dir.empty()) return std::optional<CgroupList>();
      dir.erase(dir.rfind('/'));
    }
  }

  Status ReadProcessScope() {
    ProcessScope& scope = topo_.process_;
    std::vector<int> all_cpus, online, memory_nodes;
    for (const NodeInfo& node : topo_.nodes_) {
      all_cpus.insert(all_cpus.end(), node.cpus.begin(), node.cpus.end());
      online.push_back(node.id);
      if (node.mem_total_bytes > 0) memory_nodes.push_back(node.id);
    }
    std::sort(all_cpus.begin(), all_cpus.end());
    if (memory_nodes.empty()) memory_nodes = online;

    // What the process itself says (the cpuset as the kernel applies it to this task).
    const std::string status_path = "/proc/self/status";
    parse::ProcStatusLimits limits;
    auto status_text = ReadOptional(status_path);
    if (!status_text.ok()) return status_text.status();
    if (status_text->has_value()) {
      auto parsed = Parse(status_path, **status_text, parse::ParseProcStatus);
      if (!parsed.ok()) return parsed.status();
      limits = *std::move(parsed);
    }

    std::vector<int> affinity;
    auto live_affinity = reader_.CpuAffinity();
    if (live_affinity.ok()) {
      affinity = *std::move(live_affinity);
    } else if (absl::IsUnimplemented(live_affinity.status())) {
      affinity = limits.cpus_allowed.value_or(all_cpus);
    } else {
      return live_affinity.status();
    }
    std::vector<int> mems = limits.mems_allowed.value_or(online);

    // The cgroup's cpuset.
    const std::string cgroup_path = "/proc/self/cgroup";
    auto cgroup_text = ReadOptional(cgroup_path);
    if (!cgroup_text.ok()) return cgroup_text.status();
    std::optional<CgroupList> cgroup_cpus, cgroup_mems;
    if (cgroup_text->has_value()) {
      auto paths = Parse(cgroup_path, **cgroup_text, parse::ParseProcCgroup);
      if (!paths.ok()) return paths.status();
      if (paths->unified) {
        scope.cgroup = paths->unified;
        auto cpus = FindCgroupList(kCgroupRoot, *paths->unified, "cpuset.cpus.effective");
        if (!cpus.ok()) return cpus.status();
        auto nodes = FindCgroupList(kCgroupRoot, *paths->unified, "cpuset.mems.effective");
        if (!nodes.ok()) return nodes.status();
        cgroup_cpus = *std::move(cpus);
        cgroup_mems = *std::move(nodes);
      }
      if (paths->cpuset_v1 && (!cgroup_cpus || !cgroup_mems)) {
        if (!scope.cgroup) scope.cgroup = paths->cpuset_v1;
        if (!cgroup_cpus) {
          auto cpus =
              FindCgroupList(kCgroupV1CpusetRoot, *paths->cpuset_v1, "cpuset.effective_cpus");
          if (!cpus.ok()) return cpus.status();
          cgroup_cpus = *std::move(cpus);
        }
        if (!cgroup_mems) {
          auto nodes =
              FindCgroupList(kCgroupV1CpusetRoot, *paths->cpuset_v1, "cpuset.effective_mems");
          if (!nodes.ok()) return nodes.status();
          cgroup_mems = *std::move(nodes);
        }
      }
    }

    scope.allowed_cpus = affinity;
    if (cgroup_cpus) {
      scope.cgroup_cpus = cgroup_cpus->ids;
      scope.allowed_cpus = Intersect(scope.allowed_cpus, cgroup_cpus->ids);
    }
    scope.allowed_mem_nodes = Intersect(mems, online);
    if (cgroup_mems) {
      scope.cgroup_mems = cgroup_mems->ids;
      scope.allowed_mem_nodes = Intersect(scope.allowed_mem_nodes, cgroup_mems->ids);
    }

    // Warnings a user should act on.
    auto& warnings = topo_.warnings_;
    std::vector<int> cpu_nodes = topo_.nodes_of_cpus(scope.allowed_cpus);
    if (scope.allowed_cpus.empty()) {
      warnings.push_back(
          absl::StrCat("no CPU is allowed: the affinity (", FormatIdList(affinity),
                       ") and the cgroup cpuset (",
                       cgroup_cpus ? FormatIdList(cgroup_cpus->ids) : std::string("none"),
                       ") do not intersect"));
    } else if (cpu_nodes.size() > 1) {
      warnings.push_back(absl::StrCat(
          "the process may run on CPUs of ", cpu_nodes.size(), " nodes (",
          FormatIdList(cpu_nodes),
          "): threads can move between nodes, so memory first touched by one thread may be "
          "remote for another; pin each worker to one node's CPUs"));
    }
    if (cgroup_cpus) {
      std::vector<int> cgroup_nodes = topo_.nodes_of_cpus(cgroup_cpus->ids);
      std::vector<int> cpu_bearing = topo_.nodes_of_cpus(all_cpus);
      if (cgroup_nodes != cpu_bearing) {
        warnings.push_back(absl::StrCat(
            "the cgroup cpuset (", Display(cgroup_cpus->path), ") allows CPUs of nodes ",
            FormatIdList(cgroup_nodes), " only, of ", FormatIdList(cpu_bearing)));
      }
    }
    if (scope.allowed_mem_nodes.empty()) {
      warnings.push_back(
          "no memory node is allowed: Mems_allowed_list and the cgroup cpuset "
          "leave none of the online nodes");
    } else if (scope.allowed_mem_nodes != memory_nodes) {
      std::string source =
          cgroup_mems ? absl::StrCat("the cgroup cpuset (", Display(cgroup_mems->path), ")")
                      : std::string("Mems_allowed_list of /proc/self/status");
      warnings.push_back(absl::StrCat(source, " limits memory to nodes ",
                                      FormatIdList(scope.allowed_mem_nodes), " of ",
                                      FormatIdList(memory_nodes)));
    }
    return absl::OkStatus();
  }

  const SystemReader& reader_;
  Topology topo_;
};

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
