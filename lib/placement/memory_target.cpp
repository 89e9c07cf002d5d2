// ResolveMemoryTarget: picks memory by bandwidth, latency or capacity from the firmware's HMAT
// numbers, or from SLIT distances when the firmware gives none (contract and tie-breaks in
// numarena/memory_target.hpp). A pure function of the Topology, so every rule is unit-tested on
// synthetic machines (tests/placement/memory_target_test.cpp) and proven in the lab's `cxl`
// (HMAT) and `snc4` (no HMAT) machines.
#include "numarena/memory_target.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "numarena/format.hpp"
#include "numarena/topology.hpp"

namespace numarena {
namespace {

struct Candidate {
  const NodeInfo* info = nullptr;
  int distance = INT_MAX;  // SLIT distance from the initiator (nearest CPU node for "any")
};

bool HasCpus(const Topology& topology, int node) { return !topology.cpus_of_node(node).empty(); }

int DistanceOrMax(const Topology& topology, int from, int to) {
  int d = topology.distance(from, to);
  return d < 0 ? INT_MAX : d;
}

// SLIT distance from the initiator; for "any initiator", from the nearest node with CPUs.
int DistanceFrom(const Topology& topology, int initiator, int node) {
  if (initiator != MemoryTarget::kAnyInitiator) return DistanceOrMax(topology, initiator, node);
  int best = INT_MAX;
  for (const NodeInfo& cpu_node : topology.nodes()) {
    if (!cpu_node.cpus.empty()) best = std::min(best, DistanceOrMax(topology, cpu_node.id, node));
  }
  return best;
}

// Without HMAT, memory is near a CPU node when that node is (one of) its nearest CPU nodes.
bool NearBySlit(const Topology& topology, int initiator, int node) {
  if (!HasCpus(topology, initiator)) return false;
  int nearest = DistanceFrom(topology, MemoryTarget::kAnyInitiator, node);
  return DistanceOrMax(topology, initiator, node) == nearest;
}

bool NearByHmat(const NodeInfo& node, int initiator) {
  const std::vector<int>& list = node.access->initiators;
  return std::find(list.begin(), list.end(), initiator) != list.end();
}

// HMAT decides only when every candidate has the numbers the ranking reads; a half-described
// machine is ranked by distance rather than by comparing real numbers with missing ones.
std::optional<std::string> HmatGap(const std::vector<Candidate>& candidates,
                                   MemoryAttribute attribute) {
  for (const Candidate& c : candidates) {
    const NodeInfo& n = *c.info;
    if (!n.access) return absl::StrCat("node ", n.id, " has no HMAT access0 attributes");
    if (n.access->initiators.empty()) {
      return absl::StrCat("node ", n.id, " lists no HMAT initiator");
    }
    bool latency = attribute == MemoryAttribute::kLatency;
    std::uint64_t value = latency ? n.access->read_latency_ns : n.access->read_bandwidth_mbps;
    if (value == 0) {
      return absl::StrCat("node ", n.id, " has no HMAT read ", latency ? "latency" : "bandwidth");
    }
  }
  return std::nullopt;
}

// -1: a is better, 1: b is better, 0: tie on the whole key.
template <typename T>
int Order(T a, T b, bool larger_is_better) {
  if (a == b) return 0;
  return (a > b) == larger_is_better ? -1 : 1;
}

// The primary key alone, and the full order after it.
int ComparePrimary(const Candidate& a, const Candidate& b, MemoryAttribute attribute,
                   TargetBasis basis) {
  const NodeInfo& x = *a.info;
  const NodeInfo& y = *b.info;
  if (attribute == MemoryAttribute::kCapacity) {
    return Order(x.mem_total_bytes, y.mem_total_bytes, true);
  }
  if (basis == TargetBasis::kHmat) {
    return attribute == MemoryAttribute::kLatency
               ? Order(x.access->read_latency_ns, y.access->read_latency_ns, false)
               : Order(x.access->read_bandwidth_mbps, y.access->read_bandwidth_mbps, true);
  }
  if (int d = Order(a.distance, b.distance, false); d != 0) return d;
  return Order(x.memory_only(), y.memory_only(), false);
}

int CompareAll(const Candidate& a, const Candidate& b, MemoryAttribute attribute,
               TargetBasis basis) {
  if (int d = ComparePrimary(a, b, attribute, basis); d != 0) return d;
  const NodeInfo& x = *a.info;
  const NodeInfo& y = *b.info;
  if (basis == TargetBasis::kHmat) {
    if (attribute == MemoryAttribute::kLatency) {
      if (int d = Order(x.access->write_latency_ns, y.access->write_latency_ns, false); d != 0) {
        return d;
      }
    } else {
      if (int d = Order(x.access->read_bandwidth_mbps, y.access->read_bandwidth_mbps, true);
          d != 0) {
        return d;
      }
      if (int d = Order(x.access->write_bandwidth_mbps, y.access->write_bandwidth_mbps, true);
          d != 0) {
        return d;
      }
    }
  }
  if (int d = Order(a.distance, b.distance, false); d != 0) return d;
  if (int d = Order(x.memory_only(), y.memory_only(), false); d != 0) return d;
  return Order(x.id, y.id, false);
}

std::string Describe(const Candidate& c, MemoryAttribute attribute, TargetBasis basis) {
  const NodeInfo& n = *c.info;
  if (attribute == MemoryAttribute::kCapacity) return FormatBytes(n.mem_total_bytes);
  if (basis == TargetBasis::kHmat) {
    return attribute == MemoryAttribute::kLatency
               ? absl::StrCat("read ", n.access->read_latency_ns, " ns")
               : absl::StrCat("read ", n.access->read_bandwidth_mbps, " MB/s");
  }
  return absl::StrCat("distance ", c.distance, n.memory_only() ? ", memory-only" : "");
}

const char* Superlative(MemoryAttribute attribute) {
  switch (attribute) {
    case MemoryAttribute::kBandwidth:
      return "highest bandwidth";
    case MemoryAttribute::kLatency:
      return "lowest latency";
    case MemoryAttribute::kCapacity:
      return "largest capacity";
  }
  return "?";
}

// The node "near" is measured from, and a note when it had to be guessed.
StatusOr<int> Initiator(const Topology& topology, const MemoryTarget& target, int calling_node,
                        std::string* note) {
  if (target.from == MemoryTarget::kAnyInitiator) return MemoryTarget::kAnyInitiator;
  if (target.from != MemoryTarget::kCallingThread) {
    if (!topology.has_node(target.from)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory target ", MemoryAttributeName(target.attribute), " near node ", target.from,
          ": not an online NUMA node (online: ", absl::StrJoin(topology.node_ids(), ","), ")"));
    }
    return target.from;
  }
  if (topology.has_node(calling_node) && HasCpus(topology, calling_node)) return calling_node;
  std::vector<int> own = topology.nodes_of_cpus(topology.process().allowed_cpus);
  for (int node : own.empty() ? topology.node_ids() : own) {
    if (HasCpus(topology, node)) {
      *note = absl::StrCat(" (the calling thread's node is unknown; used node ", node,
                           ", the first this process may run on)");
      return node;
    }
  }
  return MemoryTarget::kAnyInitiator;  // a machine without CPU nodes: only fixtures have one
}

}  // namespace

const char* MemoryAttributeName(MemoryAttribute attribute) {
  switch (attribute) {
    case MemoryAttribute::kBandwidth:
      return "bandwidth";
    case MemoryAttribute::kLatency:
      return "latency";
    case MemoryAttribute::kCapacity:
      return "capacity";
  }
  return "?";
}

StatusOr<MemoryAttribute> ParseMemoryAttribute(std::string_view name) {
  for (MemoryAttribute a :
       {MemoryAttribute::kBandwidth, MemoryAttribute::kLatency, MemoryAttribute::kCapacity}) {
    if (name == MemoryAttributeName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", absl::string_view(name.data(), name.size()),
                   "' is not a memory attribute (bandwidth, latency or capacity)"));
}

const char* TargetBasisName(TargetBasis basis) {
  return basis == TargetBasis::kHmat ? "hmat" : "distance";
}

StatusOr<TargetChoice> ResolveMemoryTarget(const Topology& topology, const MemoryTarget& target,
                                           int calling_node) {
  std::string note;
  StatusOr<int> initiator = Initiator(topology, target, calling_node, &note);
  if (!initiator.ok()) return initiator.status();

  std::vector<Candidate> all;
  for (const NodeInfo& node : topology.nodes()) {
    if (node.mem_total_bytes == 0 || !topology.memory_allowed(node.id)) continue;
    all.push_back({&node, DistanceFrom(topology, *initiator, node.id)});
  }
  if (all.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("memory target ", MemoryAttributeName(target.attribute),
                     ": this process may allocate on no node with memory (allowed: ",
                     absl::StrJoin(topology.process().allowed_mem_nodes, ","), ")"));
  }

  std::optional<std::string> gap = HmatGap(all, target.attribute);
  TargetBasis basis = gap ? TargetBasis::kDistance : TargetBasis::kHmat;

  std::vector<Candidate> near;
  if (*initiator == MemoryTarget::kAnyInitiator) {
    near = all;
  } else {
    for (const Candidate& c : all) {
      bool is_near = basis == TargetBasis::kHmat ? NearByHmat(*c.info, *initiator)
                                                 : NearBySlit(topology, *initiator, c.info->id);
      if (is_near) near.push_back(c);
    }
    if (near.empty()) {
      absl::StrAppend(&note, " (no allowed memory is near node ", *initiator,
                      "; every allowed node was considered)");
      near = all;
    }
  }

  std::sort(near.begin(), near.end(), [&](const Candidate& a, const Candidate& b) {
    return CompareAll(a, b, target.attribute, basis) < 0;
  });

  TargetChoice choice;
  choice.initiator = *initiator;
  choice.basis = basis;
  for (const Candidate& c : near) {
    choice.ranked.push_back(c.info->id);
    if (ComparePrimary(c, near.front(), target.attribute, basis) == 0) {
      choice.best.push_back(c.info->id);
    }
  }
  std::sort(choice.best.begin(), choice.best.end());

  std::string where = *initiator == MemoryTarget::kAnyInitiator
                          ? std::string("on any node")
                          : absl::StrCat("near node ", *initiator);
  std::string how = basis == TargetBasis::kHmat
                        ? std::string("HMAT")
                        : absl::StrCat("no HMAT: ", gap.value_or(""),
                                       "; by SLIT distance, memory-only nodes last");
  std::string ranking;
  for (std::size_t i = 0; i < near.size(); ++i) {
    absl::StrAppend(&ranking, i == 0 ? "node " : ", then ", near[i].info->id, " (",
                    Describe(near[i], target.attribute, basis), ")");
  }
  choice.explanation =
      absl::StrCat(Superlative(target.attribute), " ", where, " (", how, "): ", ranking, note);
  return choice;
}

}  // namespace numarena
