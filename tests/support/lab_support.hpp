// What a NUMA lab test knows about the machine it runs on: the topology QEMU was GIVEN.
//
// cmake/lab/run.sh builds the VM's -numa options and the file /lab/topology.txt from the
// same definition (cmake/lab/topologies/<name>.sh) and sets NUMARENA_LAB_TOPOLOGY and
// NUMARENA_LAB_TOPOLOGY_FILE. Lab tests assert the kernel's answers (sysfs, move_pages)
// against this description, never against what numarena itself discovered, so a bug in
// discovery cannot hide a bug in placement or vice versa.
//
// The file has one fact per line, "<key> <values...>":
//   topology 2s                     summary <free text>            hmat 0|1
//   nodes 0 1                       (node ids, ascending)
//   cpus <node> <cpu>...            (no cpus: a memory-only node)
//   mem_mib <node> <MiB>            distances <node> <d to each node, in `nodes` order>
//   hmat_initiator <node> <init>    hmat_lb <initiator> <target> <latency_ns> <bandwidth_MBps>
//
//   const auto& lab = numarena::lab::Expected();   // throws outside the lab
//   for (const auto& node : lab.nodes) bind_and_check(node.id);
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numarena/status.hpp"
#include "os/os.hpp"

namespace numarena::lab {

// One HMAT "hmat-lb" pair QEMU was given (kernel units: ns and MB/s).
struct HmatEntry {
  int initiator = -1;
  int target = -1;
  std::uint64_t latency_ns = 0;
  std::uint64_t bandwidth_mbps = 0;
};

struct ExpectedNode {
  int id = -1;
  std::vector<int> cpus;              // ascending; empty for a memory-only node
  std::uint64_t mem_mib = 0;          // the memory backend's size
  std::map<int, int> distance_to;     // node id -> SLIT distance
  std::optional<int> hmat_initiator;  // the node's attached initiator (hmat topologies)

  bool memory_only() const { return cpus.empty(); }
};

struct ExpectedTopology {
  std::string name;
  std::string summary;
  bool hmat = false;
  std::vector<ExpectedNode> nodes;  // ascending by id
  std::vector<HmatEntry> hmat_lb;

  std::vector<int> node_ids() const {
    std::vector<int> ids;
    for (const auto& n : nodes) ids.push_back(n.id);
    return ids;
  }
  // Nodes that have CPUs.
  std::vector<int> cpu_node_ids() const {
    std::vector<int> ids;
    for (const auto& n : nodes)
      if (!n.memory_only()) ids.push_back(n.id);
    return ids;
  }
  const ExpectedNode& node(int id) const {
    for (const auto& n : nodes)
      if (n.id == id) return n;
    throw std::out_of_range(absl::StrCat("lab topology ", name, " has no node ", id));
  }
  int distance(int from, int to) const { return node(from).distance_to.at(to); }
  std::optional<HmatEntry> hmat_entry(int initiator, int target) const {
    for (const auto& e : hmat_lb)
      if (e.initiator == initiator && e.target == target) return e;
    return std::nullopt;
  }
  // What the kernel reports in nodeN/access0/initiators/: a memory target whose SRAT entry
  // names an attached initiator gets exactly that initiator's HMAT entry (Linux
  // drivers/acpi/numa/hmat.c, hmat_parse_locality + hmat_register_target_initiators).
  std::optional<HmatEntry> expected_access0(int target) const {
    const auto& n = node(target);
    if (!hmat || !n.hmat_initiator) return std::nullopt;
    return hmat_entry(*n.hmat_initiator, target);
  }
  // A node with CPUs other than `node`, the farthest one by distance (ties: lowest id);
  // nullopt when there is none. Touching memory from there proves that a binding, not
  // first-touch locality, decided where the pages went.
  std::optional<int> farthest_cpu_node(int node_id) const {
    std::optional<int> best;
    for (int other : cpu_node_ids()) {
      if (other == node_id) continue;
      if (!best || distance(node_id, other) > distance(node_id, *best)) best = other;
    }
    return best;
  }
};

// Parses the description; DataLoss naming the line for anything malformed or unknown, so the
// format of run.sh and this parser cannot silently drift apart.
inline StatusOr<ExpectedTopology> ParseExpectedTopology(std::string_view text) {
  ExpectedTopology topo;
  std::vector<std::pair<int, std::vector<int>>> distance_rows;
  std::istringstream lines{std::string(text)};
  std::string line;
  int line_number = 0;
  auto bad = [&](std::string_view why) {
    return absl::DataLossError(
        absl::StrCat("lab topology line ", line_number, " '", line, "': ", std::string(why)));
  };
  auto node_entry = [&](int id) -> ExpectedNode* {
    for (auto& n : topo.nodes)
      if (n.id == id) return &n;
    return nullptr;
  };
  while (std::getline(lines, line)) {
    ++line_number;
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    if (key == "topology") {
      words >> topo.name;
      continue;
    }
    if (key == "summary") {
      std::getline(words >> std::ws, topo.summary);
      continue;
    }
    std::vector<long long> values;
    for (long long v; words >> v;) values.push_back(v);
    if (!words.eof()) return bad("expected numbers after the key");
    if (key == "hmat") {
      if (values.size() != 1) return bad("want 'hmat 0|1'");
      topo.hmat = values[0] != 0;
    } else if (key == "nodes") {
      if (values.empty()) return bad("no node ids");
      for (long long id : values) topo.nodes.push_back(ExpectedNode{.id = static_cast<int>(id)});
    } else if (key == "hmat_lb") {
      if (values.size() != 4) return bad("want 'hmat_lb initiator target latency bandwidth'");
      topo.hmat_lb.push_back(HmatEntry{static_cast<int>(values[0]), static_cast<int>(values[1]),
                                       static_cast<std::uint64_t>(values[2]),
                                       static_cast<std::uint64_t>(values[3])});
    } else if (key == "cpus" || key == "mem_mib" || key == "distances" || key == "hmat_initiator") {
      if (values.empty()) return bad("missing the node id");
      ExpectedNode* node = node_entry(static_cast<int>(values[0]));
      if (node == nullptr) return bad("node not listed on the 'nodes' line (which comes first)");
      std::vector<int> rest(values.begin() + 1, values.end());
      if (key == "cpus") {
        node->cpus = rest;
        std::sort(node->cpus.begin(), node->cpus.end());
      } else if (key == "mem_mib") {
        if (rest.size() != 1) return bad("want 'mem_mib node MiB'");
        node->mem_mib = static_cast<std::uint64_t>(rest[0]);
      } else if (key == "hmat_initiator") {
        if (rest.size() != 1) return bad("want 'hmat_initiator node initiator'");
        node->hmat_initiator = rest[0];
      } else {
        distance_rows.emplace_back(node->id, rest);
      }
    } else {
      return bad("unknown key");
    }
  }
  if (topo.name.empty() || topo.nodes.empty()) {
    return absl::DataLossError("lab topology description lacks the 'topology' or 'nodes' line");
  }
  std::sort(topo.nodes.begin(), topo.nodes.end(),
            [](const ExpectedNode& a, const ExpectedNode& b) { return a.id < b.id; });
  for (const auto& [id, row] : distance_rows) {
    if (row.size() != topo.nodes.size()) {
      return absl::DataLossError(absl::StrCat("lab topology: distance row of node ", id, " has ",
                                              row.size(), " entries for ", topo.nodes.size(),
                                              " nodes"));
    }
    for (std::size_t j = 0; j < row.size(); ++j)
      node_entry(id)->distance_to[topo.nodes[j].id] = row[j];
  }
  for (const auto& n : topo.nodes) {
    if (n.distance_to.size() != topo.nodes.size() || n.mem_mib == 0) {
      return absl::DataLossError(
          absl::StrCat("lab topology: node ", n.id, " lacks its distances or mem_mib line"));
    }
  }
  return topo;
}

// The topology of the VM this test runs in, read once. Throws (which Catch2 reports as a
// failure with this message) when the program does not run inside the lab.
inline const ExpectedTopology& Expected() {
  static const ExpectedTopology topology = [] {
    std::string name = os::GetEnv("NUMARENA_LAB_TOPOLOGY");
    std::string path = os::GetEnv("NUMARENA_LAB_TOPOLOGY_FILE");
    if (name.empty() || path.empty()) {
      throw std::runtime_error(
          "not inside the NUMA lab (NUMARENA_LAB_TOPOLOGY is unset): lab tests run in QEMU via "
          "`ctest -L lab` or `cmake/lab/run.sh --topology 2s -- <this binary>`");
    }
    auto text = os::ReadFile(path);
    if (!text.ok()) throw std::runtime_error(std::string(text.status().message()));
    auto parsed = ParseExpectedTopology(*text);
    if (!parsed.ok()) throw std::runtime_error(std::string(parsed.status().message()));
    if (parsed->name != name) {
      throw std::runtime_error(absl::StrCat("NUMARENA_LAB_TOPOLOGY=", name, " but ", path,
                                            " describes '", parsed->name, "'"));
    }
    return *std::move(parsed);
  }();
  return topology;
}

// An anonymous private mapping that is unmapped on destruction; nothing is touched.
class Mapping {
 public:
  explicit Mapping(std::size_t bytes) : bytes_(bytes) {
    auto p = os::MapAnonymous(bytes);
    if (!p.ok()) throw std::runtime_error(std::string(p.status().message()));
    data_ = static_cast<unsigned char*>(*p);
  }
  ~Mapping() { os::Unmap(data_, bytes_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  unsigned char* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  std::size_t pages() const { return bytes_ / os::PageSize(); }

 private:
  std::size_t bytes_;
  unsigned char* data_ = nullptr;
};

// Pins the calling thread to `cpus` for its lifetime and restores the previous affinity.
class PinnedTo {
 public:
  explicit PinnedTo(const std::vector<int>& cpus) {
    auto before = os::ThreadAffinity();
    if (!before.ok()) throw std::runtime_error(std::string(before.status().message()));
    previous_ = *before;
    if (Status s = os::SetThreadAffinity(cpus); !s.ok()) {
      throw std::runtime_error(std::string(s.message()));
    }
  }
  ~PinnedTo() { (void)os::SetThreadAffinity(previous_); }
  PinnedTo(const PinnedTo&) = delete;
  PinnedTo& operator=(const PinnedTo&) = delete;

 private:
  std::vector<int> previous_;
};

// "node 0: 12 pages, node 1: 4084 pages, not resident: 0, errors: 0" for failure messages.
inline std::string SummarizePageNodes(const std::vector<int>& page_nodes) {
  std::map<int, std::size_t> per_node;
  std::size_t not_resident = 0, errors = 0;
  for (int n : page_nodes) {
    if (n >= 0) {
      ++per_node[n];
    } else if (n == -ENOENT) {
      ++not_resident;
    } else {
      ++errors;
    }
  }
  std::string out;
  for (const auto& [node, count] : per_node)
    absl::StrAppend(&out, "node ", node, ": ", count, " pages, ");
  absl::StrAppend(&out, "not resident: ", not_resident, ", errors: ", errors);
  return out;
}

}  // namespace numarena::lab
