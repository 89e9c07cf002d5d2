// Interleaved buffers (see interleave.hpp).
//
// Placement is set on the fresh mapping before any page is touched, so it holds whoever
// faults the pages in. Weighted interleave binds runs of chunks, not single chunks: adjacent
// chunks of the same node ({0:3} gives runs of three) share one mbind call and one VMA, and
// the kernel merges nothing we did not ask it to.
//
// Kernel facts ExpectedNode relies on (mm/mempolicy.c and mm/mmap.c, proven in the lab on 6.1
// and 6.12): a private anonymous mapping's page offset is its virtual page number
// (vm_pgoff = addr >> PAGE_SHIFT), and MPOL_INTERLEAVE on a VMA puts the page of offset `off`
// on the (off mod n)-th node of the policy's node mask, counted in ascending node order;
// before 6.7 `off` is first truncated to 32 bits (InterleavePageNode). MPOL_WEIGHTED_INTERLEAVE
// (6.9+) takes the same index modulo the sum of the nodes' weights and walks the nodes in
// ascending order, each covering as many indexes as its weight (weighted_interleave_nid).
// A transparent huge page uses the huge page's offset instead, which is why prediction needs
// huge pages forbidden.
#include "numarena/interleave.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.hpp"
#include "numarena/topology.hpp"
#include "base/status_context.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {


// One range to place: [begin, begin+bytes) with `mode` on `nodes`; `fallback_node` is the
// node MPOL_PREFERRED falls back to when the kernel refuses and the policy is advisory.
struct PlannedRange {
  char* begin = nullptr;
  std::size_t bytes = 0;
  os::PolicyMode mode = os::PolicyMode::kBind;
  std::vector<int> nodes;
  int fallback_node = -1;
};

// Calls place(range) for each range of the buffer in order, and returns how many there were
// (or the first error place returns). Weighted interleave gives one range per run of chunks
// of one node: a run is weight x chunk bytes (Policy::Validate bounds both, so no product
// overflows), and runs are made one at a time, in memory that does not grow with the buffer.
template <typename Place>
StatusOr<std::size_t> ForEachRange(char* base, std::size_t mapped, const Policy& policy,
                                   Place&& place) {
  if (policy.kind() == PolicyKind::kInterleave) {
    if (Status s = place(PlannedRange{base, mapped, os::PolicyMode::kInterleave, policy.nodes(),
                                      policy.nodes().front()});
        !s.ok()) {
      return s;
    }
    return std::size_t{1};
  }
  const std::vector<NodeWeight>& weights = policy.weights();
  std::size_t ranges = 0;
  PlannedRange pending;  // the run being extended; bytes == 0 before the first
  for (std::size_t at = 0, next = 0; at < mapped; next = (next + 1) % weights.size()) {
    const int node = weights[next].node;
    const std::size_t bytes = std::min(weights[next].weight * policy.chunk_bytes(), mapped - at);
    if (pending.bytes > 0 && pending.nodes.front() == node) {
      pending.bytes += bytes;  // one node only: a single range
    } else {
      if (pending.bytes > 0) {
        if (Status s = place(pending); !s.ok()) return s;
        ++ranges;
      }
      pending = PlannedRange{base + at, bytes, os::PolicyMode::kBind, {node}, node};
    }
    at += bytes;
  }
  if (Status s = place(pending); !s.ok()) return s;
  return ranges + 1;
}

// The weights in lowest terms, ascending by node.
std::vector<NodeWeight> LowestTerms(std::vector<NodeWeight> weights) {
  unsigned divisor = 0;
  for (const NodeWeight& w : weights) divisor = std::gcd(divisor, w.weight);
  for (NodeWeight& w : weights) w.weight = divisor == 0 ? w.weight : w.weight / divisor;
  std::sort(weights.begin(), weights.end(),
            [](const NodeWeight& a, const NodeWeight& b) { return a.node < b.node; });
  return weights;
}

constexpr const char* kKernelWeightsDir = "/sys/kernel/mm/mempolicy/weighted_interleave";

// weighted(auto) resolved: the kernel's weight for every node the process may allocate on.
StatusOr<Policy> ResolveKernelWeights(const Policy& policy, const Topology& topology,
                                      const KernelMemorySettings& kernel) {
  if (!kernel.has_weighted_interleave()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weighted(auto) asks for the kernel's weighted interleave weights, and this kernel has "
        "none (", kKernelWeightsDir, " is missing: Linux before 6.9); give the weights, e.g. "
        "weighted(0:3,1:1), and numarena places them itself"));
  }
  std::vector<NodeWeight> weights;
  for (int node : topology.node_ids()) {
    if (!topology.memory_allowed(node)) continue;
    weights.push_back({node, std::max(kernel.interleave_weight(node), 1u)});
  }
  if (weights.empty()) {
    return absl::FailedPreconditionError("weighted(auto): the process may allocate on no node");
  }
  return Policy::WeightedInterleave(std::move(weights), policy.mode());
}

}  // namespace

int InterleaveIndexBits(int kernel_major, int kernel_minor) {
  return os::KernelVersion{kernel_major, kernel_minor} < os::KernelVersion{6, 7} ? 32 : 64;
}

int InterleavePageNode(std::uint64_t page, const std::vector<int>& nodes, int index_bits) {
  if (nodes.empty()) return -1;
  const std::uint64_t count = nodes.size();
  const std::uint64_t narrow = static_cast<std::uint32_t>(page) % count;
  const std::uint64_t wide = page % count;
  if (index_bits == 32) return nodes[narrow];
  if (index_bits == 64) return nodes[wide];
  return narrow == wide ? nodes[wide] : -1;
}

bool KernelWeightsExpress(const std::vector<NodeWeight>& weights,
                          const std::vector<NodeInterleaveWeight>& kernel_weights) {
  if (weights.empty()) return false;
  std::vector<NodeWeight> kernel;
  for (const NodeWeight& w : weights) {
    auto it = std::find_if(kernel_weights.begin(), kernel_weights.end(),
                           [&](const NodeInterleaveWeight& k) { return k.node == w.node; });
    if (it == kernel_weights.end() || w.weight == 0) return false;
    kernel.push_back({w.node, std::max(it->weight, 1u)});
  }
  return LowestTerms(weights) == LowestTerms(std::move(kernel));
}

StatusOr<std::string> KernelWeightsCommand(const std::vector<NodeWeight>& weights) {
  std::vector<std::string> commands;
  for (const NodeWeight& w : LowestTerms(weights)) {
    if (w.weight == 0 || w.weight > 255) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node ", w.node, "'s weight is ", w.weight,
          " in lowest terms; the kernel's weights are 1 to 255, so these proportions can only "
          "be placed by numarena's chunked emulation"));
    }
    commands.push_back(absl::StrCat("echo ", w.weight, " > ", kKernelWeightsDir, "/node", w.node));
  }
  return absl::StrJoin(commands, "; ");
}

const char* AppliedPlacementName(AppliedPlacement placement) {
  switch (placement) {
    case AppliedPlacement::kAsRequested:
      return "as-requested";
    case AppliedPlacement::kPreferred:
      return "preferred";
    case AppliedPlacement::kNone:
      return "none";
  }
  return "?";
}

InterleavedBuffer::InterleavedBuffer(InterleavedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      policy_(other.policy_),
      stats_(std::move(other.stats_)),
      predictable_pages_(other.predictable_pages_),
      interleave_index_bits_(other.interleave_index_bits_) {}

InterleavedBuffer& InterleavedBuffer::operator=(InterleavedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    policy_ = other.policy_;
    stats_ = std::move(other.stats_);
    predictable_pages_ = other.predictable_pages_;
    interleave_index_bits_ = other.interleave_index_bits_;
  }
  return *this;
}

InterleavedBuffer::~InterleavedBuffer() { Release(); }

void InterleavedBuffer::Release() {
  if (data_ != nullptr) os::Unmap(data_, mapped_bytes_);
  data_ = nullptr;
  size_ = 0;
  mapped_bytes_ = 0;
}

int InterleavedBuffer::ExpectedNode(std::size_t offset) const {
  if (data_ == nullptr || offset >= size_) return -1;
  if (stats_.applied != AppliedPlacement::kAsRequested) return -1;
  if (policy_.kind() == PolicyKind::kWeightedInterleave && !stats_.kernel_weighted) {
    return WeightedChunkNode(policy_.weights(), offset / policy_.chunk_bytes());
  }
  if (stats_.kernel_weighted && stats_.kernel_weights.size() == 1) {
    return stats_.kernel_weights.front().node;  // one node: whatever the kernel's unit
  }
  if (!predictable_pages_) return -1;
  const std::uint64_t page_number =
      (reinterpret_cast<std::uintptr_t>(data_) + offset) / os::PageSize();
  if (policy_.kind() == PolicyKind::kWeightedInterleave) {
    // The kernel's weighted interleave (6.9+: a 64-bit index) over the nodes in ascending order.
    return WeightedChunkNode(stats_.kernel_weights, page_number);
  }
  std::vector<int> nodes = policy_.nodes();
  std::sort(nodes.begin(), nodes.end());
  return InterleavePageNode(page_number, nodes, interleave_index_bits_);
}

StatusOr<InterleavedBuffer> AllocateInterleaved(std::size_t bytes, const Policy& policy,
                                                const InterleaveOptions& options) {
  const std::string context =
      absl::StrCat("AllocateInterleaved(", bytes, " bytes, ", policy.ToString(), ")");
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": size is 0; ask for at least 1 byte"));
  }
  if (policy.kind() != PolicyKind::kInterleave &&
      policy.kind() != PolicyKind::kWeightedInterleave) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": ", PolicyKindName(policy.kind()),
        " is not an interleave policy; use Policy::Interleave or Policy::WeightedInterleave "
        "here, or AllocateOnNode / an arena for single-node placement"));
  }
  auto topology = Topology::system();
  if (!topology.ok()) return WithContext(topology.status(), context);
  if (Status s = policy.Validate(**topology); !s.ok()) return WithContext(s, context);

  // Weighted interleave goes through the kernel when its weights already say the same.
  Policy placed = policy;
  std::vector<NodeWeight> kernel_weights;
  if (policy.kind() == PolicyKind::kWeightedInterleave) {
    StatusOr<KernelMemorySettings> kernel = ReadKernelMemorySettings();
    if (policy.uses_kernel_weights()) {
      if (!kernel.ok()) return WithContext(kernel.status(), context);
      StatusOr<Policy> resolved = ResolveKernelWeights(policy, **topology, *kernel);
      if (!resolved.ok()) return WithContext(resolved.status(), context);
      placed = *std::move(resolved);
    }
    // A kernel whose files cannot be read is treated as one without weights: the emulation
    // places the same proportions.
    if (kernel.ok() && KernelWeightsExpress(placed.weights(), kernel->interleave_weights)) {
      for (const NodeWeight& w : LowestTerms(placed.weights())) {
        kernel_weights.push_back({w.node, std::max(kernel->interleave_weight(w.node), 1u)});
      }
    }
  }

  const std::optional<std::size_t> rounded = RoundUpChecked(bytes, os::PageSize());
  if (!rounded) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": the size rounded up to whole pages does not fit in the address space"));
  }
  const std::size_t mapped = *rounded;
  const bool large = bytes >= os::kTransparentHugePage;
  auto data = os::MapAnonymous(mapped, large ? os::kTransparentHugePage : 0);
  if (!data.ok()) return WithContext(data.status(), context);
  // From here the buffer owns the mapping: every error return unmaps it.
  InterleavedBuffer buffer(*data, bytes, mapped, placed);
  if (std::optional<os::KernelVersion> running = os::RunningKernel()) {
    buffer.interleave_index_bits_ = InterleaveIndexBits(running->major, running->minor);
  }

  if (options.huge_pages) {
    // Huge pages only change the TLB cost; a kernel without THP places the same way.
    if (large) buffer.stats_.huge_pages = os::AdviseHugePages(*data, mapped).ok();
    buffer.predictable_pages_ = !large;
  } else {
    buffer.predictable_pages_ = !large || os::AdviseNoHugePages(*data, mapped).ok();
  }

  InterleaveStats& stats = buffer.stats_;
  if (!kernel_weights.empty()) {
    // A kernel that refuses the mode after all (its files said it has it) gets the emulation.
    if (os::BindRange(*data, mapped, os::PolicyMode::kWeightedInterleave, placed.nodes()).ok()) {
      stats.kernel_weighted = true;
      stats.kernel_weights = std::move(kernel_weights);
      stats.ranges = 1;
    }
  }
  auto place_range = [&](const PlannedRange& range) -> Status {
    ++stats.ranges;
    Status bound = os::BindRange(range.begin, range.bytes, range.mode, range.nodes);
    if (bound.ok()) return absl::OkStatus();
    if (placed.mode() == BindMode::kStrict) {
      if (bound.code() == absl::StatusCode::kResourceExhausted) {
        StatusOr<std::size_t> needed =
            ForEachRange(static_cast<char*>(*data), mapped, placed,
                         [](const PlannedRange&) { return absl::OkStatus(); });
        return WithContext(bound,
                        absl::StrCat(context, ": the buffer needs ", needed.value_or(0),
                                     " separately bound ranges (kernel mappings); if "
                                     "vm.max_map_count is the limit, use a larger chunk"));
      }
      return WithContext(bound, context);
    }
    if (stats.first_fallback_error.empty()) {
      stats.first_fallback_error = std::string(bound.message());
    }
    const int preferred[] = {range.fallback_node};
    if (os::BindRange(range.begin, range.bytes, os::PolicyMode::kPreferred, preferred).ok()) {
      ++stats.fallbacks_to_preferred;
      if (stats.applied == AppliedPlacement::kAsRequested) {
        stats.applied = AppliedPlacement::kPreferred;
      }
    } else {
      ++stats.fallbacks_to_none;
      stats.applied = AppliedPlacement::kNone;
    }
    return absl::OkStatus();
  };
  if (!stats.kernel_weighted) {
    StatusOr<std::size_t> ranges =
        ForEachRange(static_cast<char*>(*data), mapped, placed, place_range);
    if (!ranges.ok()) return ranges.status();
  }

  if (options.populate) {
    if (Status s = os::PopulateWrite(*data, mapped); !s.ok()) return WithContext(s, context);
  }
  return buffer;
}

}  // namespace numarena
