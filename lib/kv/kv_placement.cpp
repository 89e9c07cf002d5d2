// KV placement: resolution of home nodes and the cold tier (see kv_placement.hpp).
#include "kv/kv_placement.hpp"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena::kv {
namespace {

const NodeFacts* Find(const TopologyView& view, int id) {
  for (const NodeFacts& n : view.nodes)
    if (n.id == id) return &n;
  return nullptr;
}

Status CheckNode(const TopologyView* view, int node, const char* role) {
  if (node < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV pool: ", role, " node ", node, " is negative; node ids start at 0"));
  }
  if (node >= os::KernelNodeMask::kMaxNodes) {
    // The pool keeps tables indexed by node id; the kernel's node masks stop here too.
    return absl::InvalidArgumentError(absl::StrCat("KV pool: ", role, " node ", node,
                                                   " is beyond the largest node id numarena "
                                                   "supports (",
                                                   os::KernelNodeMask::kMaxNodes - 1, ")"));
  }
  if (view == nullptr) return absl::OkStatus();
  const NodeFacts* facts = Find(*view, node);
  if (facts == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV pool: ", role, " node ", node, " is not an online NUMA node"));
  }
  if (!facts->allowed) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV pool: ", role, " node ", node,
                     " is not in the process's allowed memory nodes (cpuset/mempolicy); "
                     "pick an allowed node"));
  }
  return absl::OkStatus();
}

std::vector<int> AllowedCpuNodes(const TopologyView& view, const std::set<int>& exclude) {
  std::vector<int> nodes;
  for (const NodeFacts& n : view.nodes)
    if (n.allowed && n.has_cpus && !exclude.contains(n.id)) nodes.push_back(n.id);
  return nodes;
}

StatusOr<std::vector<int>> DefaultHomes(const KvPoolOptions& options, const TopologyView& view,
                                        const std::set<int>& cold) {
  std::vector<int> homes;
  if (!options.near_cpus.empty()) {
    std::set<int> nodes;
    for (int cpu : options.near_cpus) {
      auto node = view.node_of_cpu ? view.node_of_cpu(cpu)
                                   : StatusOr<int>(absl::NotFoundError("no CPU map"));
      if (!node.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("KV pool: near_cpus names CPU ", cpu, " which no online node lists"));
      }
      nodes.insert(*node);
    }
    for (int n : nodes) {
      const NodeFacts* f = Find(view, n);
      if (f != nullptr && f->allowed && !cold.contains(n)) homes.push_back(n);
    }
  } else if (!options.near_device.empty()) {
    if (!view.node_of_device) return absl::FailedPreconditionError("KV pool: no device map");
    auto node = view.node_of_device(options.near_device);
    if (!node.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("KV pool: near_device ", options.near_device,
                                                     ": ", node.status().message()));
    }
    for (int n : AllowedCpuNodes(view, cold)) {
      if (n == *node ||
          (view.distance && view.distance(*node, n) >= 0 && view.distance(*node, n) < 20)) {
        homes.push_back(n);
      }
    }
  } else {
    homes = AllowedCpuNodes(view, cold);
  }
  if (homes.empty()) {
    return absl::FailedPreconditionError(
        "KV pool: no allowed node with CPUs is left for the head groups' home nodes; "
        "set KvPoolOptions::home_nodes");
  }
  return homes;
}

}  // namespace

TopologyView ViewOf(const Topology& topology) {
  TopologyView view;
  for (const NodeInfo& n : topology.nodes()) {
    NodeFacts facts;
    facts.id = n.id;
    facts.has_cpus = !n.memory_only();
    facts.allowed = topology.memory_allowed(n.id);
    facts.read_bandwidth_mbps = n.access ? n.access->read_bandwidth_mbps : 0;
    view.nodes.push_back(facts);
  }
  view.distance = [&topology](int a, int b) { return topology.distance(a, b); };
  view.node_of_cpu = [&topology](int cpu) { return topology.node_of_cpu(cpu); };
  view.node_of_device = [&topology](const std::string& bus) { return topology.node_of_pci(bus); };
  view.resolve_target = [&topology](const MemoryTarget& target) {
    return ResolveMemoryTarget(topology, target, Topology::current_node());
  };
  return view;
}

StatusOr<Placement> ResolvePlacement(const KvPoolOptions& options, const TopologyView* view) {
  Placement placement;
  const KvColdTier& cold = options.cold_tier;

  // Explicit cold nodes first: they are excluded from the default homes.
  std::set<int> cold_set;
  switch (cold.kind) {
    case KvColdTier::Kind::kNone:
      if (!cold.nodes.empty())
        return absl::InvalidArgumentError("KV pool: cold tier kNone must not name nodes");
      break;
    case KvColdTier::Kind::kNode:
      if (cold.nodes.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "KV pool: cold tier kNode needs exactly one node, got ", cold.nodes.size()));
      }
      [[fallthrough]];
    case KvColdTier::Kind::kInterleave:
      if (cold.nodes.empty()) {
        return absl::InvalidArgumentError("KV pool: interleaved cold tier has no nodes");
      }
      for (int n : cold.nodes) {
        if (auto s = CheckNode(view, n, "cold tier"); !s.ok()) return s;
        cold_set.insert(n);
      }
      break;
    case KvColdTier::Kind::kFarthest:
    case KvColdTier::Kind::kTarget:
      if (!cold.nodes.empty()) {
        return absl::InvalidArgumentError(
            "KV pool: a Farthest or Target cold tier chooses its node; it must not name nodes");
      }
      break;
  }

  if (!options.home_nodes.empty()) {
    std::set<int> seen;
    for (int n : options.home_nodes) {
      if (auto s = CheckNode(view, n, "home"); !s.ok()) return s;
      if (!seen.insert(n).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("KV pool: home node ", n, " is listed twice"));
      }
    }
    placement.home_nodes = options.home_nodes;
  } else {
    if (view == nullptr) {
      return absl::FailedPreconditionError(
          "KV pool: no topology to choose home nodes from; set home_nodes or topology");
    }
    auto homes = DefaultHomes(options, *view, cold_set);
    if (!homes.ok()) return homes.status();
    placement.home_nodes = *std::move(homes);
  }
  std::set<int> home_set(placement.home_nodes.begin(), placement.home_nodes.end());

  if (cold.kind == KvColdTier::Kind::kFarthest) {
    if (view == nullptr) {
      return absl::FailedPreconditionError(
          "KV pool: KvColdTier::Farthest needs a topology; name the cold node instead");
    }
    const NodeFacts* best = nullptr;
    long best_distance = -1;
    for (const NodeFacts& n : view->nodes) {
      if (!n.allowed || home_set.contains(n.id)) continue;
      long total = 0;
      for (int h : placement.home_nodes) total += view->distance ? view->distance(h, n.id) : 0;
      bool better = best == nullptr || total > best_distance;
      if (!better && total == best_distance) {
        if (!n.has_cpus != !best->has_cpus) {
          better = !n.has_cpus;  // memory-only nodes are the natural slow tier
        } else if (n.read_bandwidth_mbps != best->read_bandwidth_mbps &&
                   n.read_bandwidth_mbps != 0 && best->read_bandwidth_mbps != 0) {
          better = n.read_bandwidth_mbps < best->read_bandwidth_mbps;
        }
      }
      if (better) {
        best = &n;
        best_distance = total;
      }
    }
    if (best == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "KV pool: KvColdTier::Farthest found no allowed node outside the home nodes (",
          absl::StrJoin(placement.home_nodes, ","),
          "); name a cold node or give fewer home nodes"));
    }
    cold_set.insert(best->id);
  }
  if (cold.kind == KvColdTier::Kind::kTarget) {
    if (view == nullptr || !view->resolve_target) {
      return absl::FailedPreconditionError(
          "KV pool: KvColdTier::Target needs a topology; name the cold node instead");
    }
    int chosen = -1;
    for (int from : {placement.home_nodes.front(), int{MemoryTarget::kAnyInitiator}}) {
      auto choice = view->resolve_target(MemoryTarget{cold.attribute, from});
      if (!choice.ok()) return choice.status();
      for (int n : choice->ranked) {
        if (!home_set.contains(n)) {
          chosen = n;
          break;
        }
      }
      if (chosen >= 0) break;
    }
    if (chosen < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "KV pool: KvColdTier::Target(", MemoryAttributeName(cold.attribute),
          ") found no allowed node outside the home nodes (",
          absl::StrJoin(placement.home_nodes, ","), "); name a cold node or give fewer home nodes"));
    }
    cold_set.insert(chosen);
  }
  for (int n : cold_set) {
    if (home_set.contains(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV pool: node ", n,
                       " is both a home node and in the cold tier; demotion to it "
                       "would not move anything"));
    }
  }
  placement.cold_nodes.assign(cold_set.begin(), cold_set.end());
  return placement;
}

}  // namespace numarena::kv
