// Memory chosen by what it is, not by its node number: the highest-bandwidth, the
// lowest-latency or the largest-capacity memory near a CPU. Node numbers differ from machine to
// machine (a CXL expander is node 2 here and node 4 there); the firmware's numbers say which
// memory is which, and a `MemoryTarget` names memory by them.
//
// The numbers come from the ACPI HMAT as Linux exposes it
// (/sys/devices/system/node/nodeN/access0/initiators/: read/write bandwidth in MB/s and latency
// in ns, as seen from the node's best initiators, which are listed there). When the firmware
// gives no HMAT, or leaves the needed number out for any candidate, the choice falls back to
// the SLIT distances, with memory-only nodes counted as the slow tier, and says so
// (`TargetChoice::basis`).
//
// "Near" means one of three things (`MemoryTarget::from`):
//   a node N        the memory local to N's CPUs: with HMAT, the nodes that list N among their
//                   best initiators; without, the nodes whose nearest CPU node (SLIT) is N.
//                   This includes a CXL expander attached to N's socket.
//   kCallingThread  the same, for the node the calling thread runs on when the target is
//                   resolved (for an arena: when `Arena::ForPolicy` first creates it).
//   kAnyInitiator   every node the process may allocate on.
// Candidates are always the online nodes with memory that the process may allocate on
// (cpuset). When no candidate is near N, every candidate is considered and the explanation
// says so.
//
// Ranking, best first (the documented tie-break; `best` holds every node that ties with the
// first on the primary key):
//   kBandwidth  HMAT read bandwidth, highest first; then write bandwidth; then SLIT distance
//               from N; then the lower id. Without HMAT: SLIT distance from N (from the nearest
//               CPU node for kAnyInitiator), nodes with CPUs before memory-only ones, then id.
//   kLatency    HMAT read latency, lowest first; then write latency; then as above. Without
//               HMAT: as kBandwidth without HMAT.
//   kCapacity   MemTotal, largest first (exact bytes); then the bandwidth order above.
//
//   auto topo = numarena::Topology::system();
//   auto choice = numarena::ResolveMemoryTarget(
//       **topo, {numarena::MemoryAttribute::kBandwidth, numarena::MemoryTarget::kCallingThread});
//   if (choice.ok()) std::cout << choice->explanation << "\n";
//   // In a policy: Arena::ForPolicy(Policy::Target({MemoryAttribute::kCapacity, 0}))
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "numarena/status.hpp"

namespace numarena {

class Topology;

enum class MemoryAttribute : unsigned char { kBandwidth, kLatency, kCapacity };
// "bandwidth", "latency", "capacity".
const char* MemoryAttributeName(MemoryAttribute attribute);
// The attribute named by `name` (as MemoryAttributeName prints it), or InvalidArgument.
[[nodiscard]] StatusOr<MemoryAttribute> ParseMemoryAttribute(std::string_view name);

struct MemoryTarget {
  static constexpr int kCallingThread = -1;
  static constexpr int kAnyInitiator = -2;

  MemoryAttribute attribute = MemoryAttribute::kBandwidth;
  int from = kCallingThread;  // a node id, kCallingThread or kAnyInitiator

  friend bool operator==(const MemoryTarget&, const MemoryTarget&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const MemoryTarget& t) {
    return H::combine(std::move(h), t.attribute, t.from);
  }
};

// What a choice was made from.
enum class TargetBasis : unsigned char {
  kHmat,      // the firmware's HMAT numbers
  kDistance,  // SLIT distances (no HMAT, or a needed number missing), memory-only = slow tier
};
const char* TargetBasisName(TargetBasis basis);  // "hmat", "distance"

struct TargetChoice {
  std::vector<int> best;                        // the nodes tied for best, ascending; never empty
  std::vector<int> ranked;                      // every candidate, best first
  int initiator = MemoryTarget::kAnyInitiator;  // the node "near" was measured from
  TargetBasis basis = TargetBasis::kHmat;
  // One line for logs and the CLI, e.g. "highest bandwidth near node 0 (HMAT): node 0
  // (read 20000 MB/s), then 2 (5000 MB/s)"; it says when the fallback was used and why.
  std::string explanation;
};

// Resolves `target` on `topology`. `calling_node` stands for the calling thread's node when
// target.from is kCallingThread (pass Topology::current_node(); -1, or a node without CPUs,
// means "unknown" and the first node with CPUs the process may run on is used, which the
// explanation says).
//
// Errors: InvalidArgument for a `from` that is not an online node, kCallingThread or
// kAnyInitiator; FailedPrecondition when the process may allocate on no node with memory.
[[nodiscard]] StatusOr<TargetChoice> ResolveMemoryTarget(const Topology& topology,
                                                         const MemoryTarget& target,
                                                         int calling_node);

}  // namespace numarena
