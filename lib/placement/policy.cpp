// Placement policy values and their validation against a topology (see policy.hpp).
#include "numarena/policy.hpp"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

std::vector<int> SortedUnique(std::vector<int> nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

Status CheckNode(const Topology& topology, int node, const Policy& policy) {
  if (!topology.has_node(node)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", policy.ToString(), ": node ", node,
        " is not an online NUMA node (online: ", absl::StrJoin(topology.node_ids(), ","), ")"));
  }
  if (!topology.memory_allowed(node)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", policy.ToString(), ": node ", node,
        " is outside this process's allowed memory nodes (Mems_allowed / cpuset.mems: ",
        absl::StrJoin(topology.process().allowed_mem_nodes, ","),
        "); widen the cpuset or pick an allowed node"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kBind:
      return "bind";
    case PolicyKind::kPreferred:
      return "preferred";
    case PolicyKind::kInterleave:
      return "interleave";
    case PolicyKind::kWeightedInterleave:
      return "weighted";
    case PolicyKind::kLocal:
      return "local";
    case PolicyKind::kTarget:
      return "target";
  }
  return "?";
}

Policy Policy::Bind(int node, BindMode mode) { return Bind(std::vector<int>{node}, mode); }

Policy Policy::Bind(std::vector<int> nodes, BindMode mode) {
  Policy p(PolicyKind::kBind, mode);
  p.nodes_ = SortedUnique(std::move(nodes));
  return p;
}

Policy Policy::Preferred(int node, BindMode mode) {
  return Preferred(std::vector<int>{node}, mode);
}

Policy Policy::Preferred(std::vector<int> nodes, BindMode mode) {
  Policy p(PolicyKind::kPreferred, mode);
  p.nodes_ = std::move(nodes);  // the order is the preference
  return p;
}

std::vector<int> Policy::FallbackOrder(const Topology& topology) const {
  std::vector<int> order;
  if (kind_ != PolicyKind::kPreferred || nodes_.empty()) return order;
  auto add = [&](int node) {
    if (topology.has_node(node) && topology.memory_allowed(node) &&
        std::find(order.begin(), order.end(), node) == order.end()) {
      order.push_back(node);
    }
  };
  for (int node : nodes_) add(node);
  if (topology.has_node(nodes_[0])) {
    for (int node : topology.nodes_by_distance(nodes_[0])) add(node);
  }
  return order;
}

Policy Policy::Interleave(std::vector<int> nodes, BindMode mode) {
  Policy p(PolicyKind::kInterleave, mode);
  p.nodes_ = SortedUnique(std::move(nodes));
  return p;
}

Policy Policy::WeightedInterleave(std::vector<NodeWeight> weights, BindMode mode,
                                  std::size_t chunk_bytes) {
  Policy p(PolicyKind::kWeightedInterleave, mode);
  for (const NodeWeight& w : weights) p.nodes_.push_back(w.node);
  p.weights_ = std::move(weights);
  p.chunk_bytes_ = chunk_bytes;
  return p;
}

Policy Policy::KernelWeightedInterleave(BindMode mode) {
  Policy p(PolicyKind::kWeightedInterleave, mode);
  p.kernel_weights_ = true;
  p.chunk_bytes_ = kDefaultWeightedChunk;
  return p;
}

Policy Policy::Local(BindMode mode) { return Policy(PolicyKind::kLocal, mode); }

Policy Policy::Target(MemoryTarget target, BindMode mode) {
  Policy p(PolicyKind::kTarget, mode);
  p.target_ = target;
  return p;
}

StatusOr<Policy> Policy::Resolve(const Topology& topology, int calling_node) const {
  if (kind_ != PolicyKind::kTarget) return *this;
  StatusOr<TargetChoice> choice = ResolveMemoryTarget(topology, target_, calling_node);
  if (!choice.ok()) return choice.status();
  if (mode_ == BindMode::kStrict) return Bind(choice->best, BindMode::kStrict);
  return Preferred(choice->ranked, BindMode::kAdvisory);
}

int Policy::single_node() const {
  if (kind_ == PolicyKind::kBind && nodes_.size() == 1) return nodes_[0];
  if (kind_ == PolicyKind::kPreferred && !nodes_.empty()) return nodes_[0];
  return -1;
}

Status Policy::Validate(const Topology& topology) const {
  // weighted(auto) names no node: it spreads over the nodes the process may use.
  if (kind_ == PolicyKind::kLocal || kernel_weights_) return absl::OkStatus();
  if (kind_ == PolicyKind::kTarget) {
    if (target_.from == MemoryTarget::kCallingThread ||
        target_.from == MemoryTarget::kAnyInitiator || topology.has_node(target_.from)) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", ToString(), ": node ", target_.from,
        " is not an online NUMA node (online: ", absl::StrJoin(topology.node_ids(), ","), ")"));
  }
  if (nodes_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy ", ToString(), ": the node set is empty; name at least one node"));
  }
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (Status s = CheckNode(topology, nodes_[i], *this); !s.ok()) return s;
    if (kind_ == PolicyKind::kPreferred &&
        std::find(nodes_.begin(), nodes_.begin() + i, nodes_[i]) != nodes_.begin() + i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy ", ToString(), ": node ", nodes_[i],
          " is listed twice; a preference lists each node once, most preferred first"));
    }
  }
  if (kind_ == PolicyKind::kWeightedInterleave) {
    std::vector<int> seen;
    std::uint64_t total = 0;  // at most 2^32 x nodes: cannot overflow
    for (const NodeWeight& w : weights_) {
      total += w.weight;
      if (w.weight == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("policy ", ToString(), ": node ", w.node,
                         " has weight 0; drop it from the set or give it a positive weight"));
      }
      if (std::find(seen.begin(), seen.end(), w.node) != seen.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("policy ", ToString(), ": node ", w.node, " is weighted twice"));
      }
      seen.push_back(w.node);
    }
    if (total > kMaxWeightTotal) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy ", ToString(), ": the weights add up to ", total, ", more than ", kMaxWeightTotal,
          " (Policy::kMaxWeightTotal); divide them by a common factor"));
    }
    if (chunk_bytes_ == 0 || chunk_bytes_ % os::PageSize() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy ", ToString(), ": chunk of ", chunk_bytes_,
                       " bytes is not a multiple of the page size ", os::PageSize()));
    }
    if (chunk_bytes_ > kMaxWeightedChunk) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy ", ToString(), ": chunk of ", chunk_bytes_, " bytes is larger than ",
          kMaxWeightedChunk, " (1 TiB, Policy::kMaxWeightedChunk); use a smaller chunk"));
    }
  }
  return absl::OkStatus();
}

std::string Policy::ToString() const {
  std::string body;
  if (kernel_weights_) {
    body = "auto";
  } else if (kind_ == PolicyKind::kWeightedInterleave) {
    body = absl::StrJoin(weights_, ",", [](std::string* out, const NodeWeight& w) {
      absl::StrAppend(out, w.node, ":", w.weight);
    });
  } else if (kind_ == PolicyKind::kTarget) {
    body = MemoryAttributeName(target_.attribute);
    if (target_.from == MemoryTarget::kAnyInitiator) {
      body += "@any";
    } else if (target_.from != MemoryTarget::kCallingThread) {
      absl::StrAppend(&body, "@", target_.from);
    }
  } else {
    body = absl::StrJoin(nodes_, ",");
  }
  std::string out = kind_ == PolicyKind::kLocal
                        ? std::string("local")
                        : absl::StrCat(PolicyKindName(kind_), "(", body, ")");
  bool default_mode = (kind_ == PolicyKind::kPreferred || kind_ == PolicyKind::kLocal ||
                       kind_ == PolicyKind::kTarget)
                          ? mode_ == BindMode::kAdvisory
                          : mode_ == BindMode::kStrict;
  if (!default_mode) out += mode_ == BindMode::kStrict ? "/strict" : "/advisory";
  if (kind_ == PolicyKind::kWeightedInterleave && !kernel_weights_ &&
      chunk_bytes_ != kDefaultWeightedChunk) {
    absl::StrAppend(&out, "/chunk=", chunk_bytes_);
  }
  return out;
}

int WeightedChunkNode(const std::vector<NodeWeight>& weights, std::size_t index) {
  std::size_t period = 0;
  for (const NodeWeight& w : weights) period += w.weight;
  if (period == 0) return -1;
  std::size_t slot = index % period;
  for (const NodeWeight& w : weights) {
    if (slot < w.weight) return w.node;
    slot -= w.weight;
  }
  return -1;
}

}  // namespace numarena
