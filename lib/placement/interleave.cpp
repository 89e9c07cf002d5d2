// Interleaved buffers (see interleave.hpp).
//
// Placement is set on the fresh mapping before any page is touched, so it holds whoever
// faults the pages in. Weighted interleave binds runs of chunks, not single chunks: adjacent
// chunks of the same node ({0:3} gives runs of three) share one mbind call and one VMA, and
// the kernel merges nothing we did not ask it to.
//
// Kernel facts ExpectedNode relies on (Linux 6.1, mm/mempolicy.c and mm/mmap.c): a private
// anonymous mapping's page offset is its virtual page number (vm_pgoff = addr >> PAGE_SHIFT),
// and MPOL_INTERLEAVE on a VMA puts the page of offset `off` on the (off mod n)-th node of
// the policy's node mask, counted in ascending node order, where `off` is first truncated
// to 32 bits. A transparent huge page uses the huge page's offset instead, which is why
// prediction needs huge pages forbidden.
#include "numarena/interleave.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

Status Annotate(const Status& status, const std::string& context) {
  return Status(status.code(), absl::StrCat(context, ": ", std::string(status.message())));
}

// One range to place: [begin, begin+bytes) with `mode` on `nodes`; `fallback_node` is the
// node MPOL_PREFERRED falls back to when the kernel refuses and the policy is advisory.
struct PlannedRange {
  char* begin = nullptr;
  std::size_t bytes = 0;
  os::PolicyMode mode = os::PolicyMode::kBind;
  std::vector<int> nodes;
  int fallback_node = -1;
};

std::vector<PlannedRange> PlanRanges(char* base, std::size_t mapped, const Policy& policy) {
  std::vector<PlannedRange> plan;
  if (policy.kind() == PolicyKind::kInterleave) {
    plan.push_back(
        {base, mapped, os::PolicyMode::kInterleave, policy.nodes(), policy.nodes().front()});
    return plan;
  }
  const std::size_t chunk = policy.chunk_bytes();
  const std::size_t chunks = (mapped + chunk - 1) / chunk;
  for (std::size_t i = 0; i < chunks; ++i) {
    int node = WeightedChunkNode(policy.weights(), i);
    std::size_t begin = i * chunk;
    std::size_t bytes = std::min(chunk, mapped - begin);
    if (!plan.empty() && plan.back().nodes.front() == node) {
      plan.back().bytes += bytes;
    } else {
      plan.push_back({base + begin, bytes, os::PolicyMode::kBind, {node}, node});
    }
  }
  return plan;
}

}  // namespace

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
      predictable_pages_(other.predictable_pages_) {}

InterleavedBuffer& InterleavedBuffer::operator=(InterleavedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    policy_ = other.policy_;
    stats_ = std::move(other.stats_);
    predictable_pages_ = other.predictable_pages_;
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
  if (policy_.kind() == PolicyKind::kWeightedInterleave) {
    return WeightedChunkNode(policy_.weights(), offset / policy_.chunk_bytes());
  }
  if (!predictable_pages_) return -1;
  const std::size_t page_number =
      (reinterpret_cast<std::uintptr_t>(data_) + offset) / os::PageSize();
  const std::vector<int>& nodes = policy_.nodes();
  // The kernel reduces the offset to 32 bits before taking it modulo the node count
  // (offset_il_node: `(unsigned int)n % nnodes`); it matters when the count is not a power
  // of two (the lab's 3-node cxl topology showed it).
  return nodes[static_cast<std::uint32_t>(page_number) % nodes.size()];
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
  if (!topology.ok()) return Annotate(topology.status(), context);
  if (Status s = policy.Validate(**topology); !s.ok()) return Annotate(s, context);

  const std::size_t page = os::PageSize();
  const std::size_t mapped = (bytes + page - 1) / page * page;
  const bool large = bytes >= kHugePage;
  auto data = os::MapAnonymous(mapped, large ? kHugePage : 0);
  if (!data.ok()) return Annotate(data.status(), context);
  // From here the buffer owns the mapping: every error return unmaps it.
  InterleavedBuffer buffer(*data, bytes, mapped, policy);

  if (options.huge_pages) {
    // Huge pages only change the TLB cost; a kernel without THP places the same way.
    if (large) buffer.stats_.huge_pages = os::AdviseHugePages(*data, mapped).ok();
    buffer.predictable_pages_ = !large;
  } else {
    buffer.predictable_pages_ = !large || os::AdviseNoHugePages(*data, mapped).ok();
  }

  std::vector<PlannedRange> plan = PlanRanges(static_cast<char*>(*data), mapped, policy);
  InterleaveStats& stats = buffer.stats_;
  for (const PlannedRange& range : plan) {
    ++stats.ranges;
    Status bound = os::BindRange(range.begin, range.bytes, range.mode, range.nodes);
    if (bound.ok()) continue;
    if (policy.mode() == BindMode::kStrict) {
      if (bound.code() == absl::StatusCode::kResourceExhausted) {
        return Annotate(bound, absl::StrCat(context, ": the buffer needs ", plan.size(),
                                            " separately bound ranges (kernel mappings); if "
                                            "vm.max_map_count is the limit, use a larger chunk"));
      }
      return Annotate(bound, context);
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
  }

  if (options.populate) {
    if (Status s = os::PopulateWrite(*data, mapped); !s.ok()) return Annotate(s, context);
  }
  return buffer;
}

}  // namespace numarena
