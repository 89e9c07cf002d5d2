// KV placement: which nodes are the head groups' homes and which form the cold tier.
//
// The pool spreads head groups over home nodes (group g on home[g % n]) and sends demoted
// blocks to a cold tier. Both come from the options when given, else from the topology:
// the process's allowed nodes that have CPUs (or the nodes of `near_cpus`, or the socket of
// `near_device`), and for `KvColdTier::Farthest` the allowed node farthest from the homes.
// Resolution works on a small `TopologyView` so every rule is unit-tested with synthetic
// machines; `ViewOf` builds the view from a real `Topology`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "numarena/kv_types.hpp"
#include "numarena/memory_target.hpp"
#include "numarena/status.hpp"

namespace numarena::kv {

struct NodeFacts {
  int id = -1;
  bool has_cpus = true;
  bool allowed = true;                    // in the process's allowed memory nodes
  std::uint64_t read_bandwidth_mbps = 0;  // HMAT, 0 when unknown
};

struct TopologyView {
  std::vector<NodeFacts> nodes;                   // online nodes, ascending
  std::function<int(int, int)> distance;          // SLIT, -1 unknown
  std::function<StatusOr<int>(int)> node_of_cpu;  // NotFound for unknown CPUs
  std::function<StatusOr<int>(const std::string&)> node_of_device;
  std::function<StatusOr<TargetChoice>(const MemoryTarget&)> resolve_target;
};

TopologyView ViewOf(const Topology& topology);

struct Placement {
  std::vector<int> home_nodes;  // in group order
  std::vector<int> cold_nodes;  // ascending; empty without a cold tier
};

// Resolves and validates. `view` may be null when everything is explicit (then nodes are
// not validated). InvalidArgument names the offending node; FailedPrecondition when a
// default cannot be resolved.
[[nodiscard]] StatusOr<Placement> ResolvePlacement(const KvPoolOptions& options,
                                                   const TopologyView* view);

}  // namespace numarena::kv
