// Interleaved buffers: one large shared buffer spread over several nodes.
//
// Model weights and shared prompt prefixes are read by threads on every node. Putting them
// all on one node saturates that node's memory controller and makes every other node pay
// the cross-socket penalty; spreading them evenly gives every reader the aggregate
// bandwidth. `AllocateInterleaved` maps such a buffer and sets its placement before any
// page is touched, so placement does not depend on which thread loads the data:
//
//   Interleave(nodes)          MPOL_INTERLEAVE: the kernel spreads pages round-robin over
//                              the nodes (the unit is a base page, or a 2 MiB huge page
//                              where the kernel backs the buffer with one).
//   WeightedInterleave(w, c)   through the kernel's MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+)
//                              when the kernel's system-wide weights
//                              (/sys/kernel/mm/mempolicy/weighted_interleave/nodeN) already
//                              express w's proportions: the kernel then deals pages (or huge
//                              pages) over the nodes, node by node in ascending order, each
//                              as many in a row as its weight. Otherwise, and on older
//                              kernels, numarena emulates it: the buffer is cut into chunks
//                              of c bytes and each chunk is bound (MPOL_BIND) to
//                              WeightedChunkNode(w, i), so with {0:3, 1:1} chunks 0,1,2 go
//                              to node 0 and chunk 3 to node 1, repeating. numarena never
//                              writes the kernel's weights (they are the operator's, and
//                              shared by every process); `numarena advise` prints the
//                              command that sets them for a policy.
//   KernelWeightedInterleave() "weighted(auto)": the kernel's weights over every node the
//                              process may use (FailedPrecondition before Linux 6.9).
//
// Buffers of 2 MiB or more are 2 MiB aligned and, by default, advised to use transparent
// huge pages. Each differently-bound run of chunks is its own kernel mapping (VMA); a very
// large buffer with small chunks can exceed vm.max_map_count, which is reported as
// ResourceExhausted with the count, so pick a chunk that keeps chunks in the thousands.
//
// Bind modes follow policy.hpp: kStrict fails with the kernel's error when it refuses a
// placement; kAdvisory falls back (as requested -> preferred -> none) and records the
// fallback in `stats()`.
//
//   auto weights = numarena::AllocateInterleaved(
//       70ull << 30, numarena::Policy::WeightedInterleave({{0, 3}, {1, 1}}));
//   if (!weights.ok()) return weights.status();
//   LoadWeights(weights->data(), weights->size());  // any thread; placement is fixed
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include <utility>

#include "numarena/policy.hpp"
#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena {

struct InterleaveOptions {
  // Advise transparent huge pages for buffers of 2 MiB or more. When false, huge pages are
  // forbidden for the buffer (MADV_NOHUGEPAGE), so MPOL_INTERLEAVE spreads base pages and
  // ExpectedNode can predict every page.
  bool huge_pages = true;
  // Fault every page in before returning (MADV_POPULATE_WRITE), so the first reader does
  // not pay the page faults. Placement is the same either way.
  bool populate = false;
};

// How much of the requested placement the kernel accepted, worst first.
enum class AppliedPlacement : unsigned char {
  kAsRequested,  // every range got the requested policy
  kPreferred,    // at least one range fell back to MPOL_PREFERRED on its node
  kNone,         // at least one range has no policy (the default: the faulting CPU's node)
};
const char* AppliedPlacementName(AppliedPlacement placement);

struct InterleaveStats {
  AppliedPlacement applied = AppliedPlacement::kAsRequested;
  std::size_t ranges = 0;                  // mbind ranges (merged runs of same-node chunks)
  std::size_t fallbacks_to_preferred = 0;  // ranges placed MPOL_PREFERRED instead
  std::size_t fallbacks_to_none = 0;       // ranges left without a policy
  std::string first_fallback_error;        // the kernel's error behind the first fallback
  bool huge_pages = false;                 // MADV_HUGEPAGE applied to the buffer
  // Weighted interleave only: true when the kernel's MPOL_WEIGHTED_INTERLEAVE places the
  // buffer (its weights expressed the policy), false when numarena's chunked emulation does.
  bool kernel_weighted = false;
  // With kernel_weighted: the kernel's weights for the buffer's nodes when it was placed,
  // ascending by node (ExpectedNode follows them; the kernel reads its table at each fault,
  // so an operator changing the weights later changes where new pages go).
  std::vector<NodeWeight> kernel_weights;
};

// A buffer placed by an interleave policy. Owns its mapping (unmapped on destruction).
// Move-only.
class InterleavedBuffer {
 public:
  InterleavedBuffer(InterleavedBuffer&& other) noexcept;
  InterleavedBuffer& operator=(InterleavedBuffer&& other) noexcept;
  InterleavedBuffer(const InterleavedBuffer&) = delete;
  InterleavedBuffer& operator=(const InterleavedBuffer&) = delete;
  ~InterleavedBuffer();

  void* data() const { return data_; }
  std::size_t size() const { return size_; }                  // the bytes asked for
  std::size_t mapped_bytes() const { return mapped_bytes_; }  // size() rounded to pages
  // The policy placed: as given, except weighted(auto), which is the kernel's weights over
  // the nodes the process may use (e.g. weighted(0:3,1:1)).
  const Policy& policy() const { return policy_; }
  const InterleaveStats& stats() const { return stats_; }

  // The node the page at `offset` is placed on by the policy, for tests and tools that
  // verify placement page by page. -1 when it cannot be predicted: offset out of range, a
  // fallback happened (stats().applied != kAsRequested), the kernel interleaves and huge
  // pages were advised (its unit is then a huge page or a base page, depending on whether it
  // found a free huge page), or the running kernel's version is unknown and the two rules
  // below disagree for the page. Where the kernel interleaves, this is its rule for anonymous
  // memory, proven page by page in the NUMA lab on Linux 6.1 and 6.12 (see InterleavePageNode):
  // the page's index in the address space picks the node.
  int ExpectedNode(std::size_t offset) const;

 private:
  friend StatusOr<InterleavedBuffer> AllocateInterleaved(std::size_t, const Policy&,
                                                         const InterleaveOptions&);
  InterleavedBuffer(void* data, std::size_t size, std::size_t mapped_bytes, Policy policy)
      : data_(data), size_(size), mapped_bytes_(mapped_bytes), policy_(std::move(policy)) {}
  void Release();

  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_bytes_ = 0;
  Policy policy_;
  InterleaveStats stats_;
  // Interleave placed base pages only (no huge pages possible), so ExpectedNode is exact.
  bool predictable_pages_ = false;
  // The width of the kernel's interleave index (InterleavePageNode): 32, 64, or 0 unknown.
  int interleave_index_bits_ = 0;
};

// The node the kernel's page interleave over `nodes` (ascending) gives the anonymous page
// with page number `page` (its address / page size, which is also its interleave index):
// the (index mod n)-th node. Linux before 6.7 cut the index to 32 bits first
// (offset_il_node: `(unsigned int)n % nnodes`); 6.7 and later use all of it (interleave_nid:
// `ilx % nnodes`, ilx a pgoff_t), so the two differ for node counts that are not a power of
// two. index_bits: 32, 64, or 0 when the kernel is unknown (then -1 where they differ).
int InterleavePageNode(std::uint64_t page, const std::vector<int>& nodes, int index_bits);
// The interleave index width of a kernel version (32 before 6.7, 64 from 6.7).
int InterleaveIndexBits(int kernel_major, int kernel_minor);

// Whether the kernel's weights (topology.hpp, KernelMemorySettings::interleave_weights)
// express `weights`: the same proportions over the same nodes (3:1 and 6:2 do; a node
// the kernel has no weight for does not).
bool KernelWeightsExpress(const std::vector<NodeWeight>& weights,
                          const std::vector<NodeInterleaveWeight>& kernel_weights);
// The shell command (as root) that sets the kernel's weights so they express `weights`,
// lowest terms, one `echo W > /sys/kernel/mm/mempolicy/weighted_interleave/nodeN` per node;
// InvalidArgument when a weight in lowest terms exceeds the kernel's 255.
[[nodiscard]] StatusOr<std::string> KernelWeightsCommand(const std::vector<NodeWeight>& weights);

// Maps `bytes` and places it by `policy` (Interleave or WeightedInterleave) before first
// touch. The policy is validated against Topology::system() first.
//
// Errors: InvalidArgument for bytes == 0, a policy that is not an interleave, or a policy
// that fails Policy::Validate (the message names the node); FailedPrecondition for
// weighted(auto) on a kernel without weighted interleave; for kStrict policies, the
// kernel's refusal (PermissionDenied for EPERM, errno kept), or ResourceExhausted when the
// mapping cannot be made or split into its chunks.
//
//   auto prefix = numarena::AllocateInterleaved(1 << 30, numarena::Policy::Interleave({0, 1}));
[[nodiscard]] StatusOr<InterleavedBuffer> AllocateInterleaved(
    std::size_t bytes, const Policy& policy, const InterleaveOptions& options = {});

}  // namespace numarena
