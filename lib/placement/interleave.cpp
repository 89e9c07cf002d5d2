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
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/checked_math.hpp"
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

  const std::optional<std::size_t> rounded = RoundUpChecked(bytes, os::PageSize());
  if (!rounded) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": the size rounded up to whole pages does not fit in the address space"));
  }
  const std::size_t mapped = *rounded;
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

  InterleaveStats& stats = buffer.stats_;
  StatusOr<std::size_t> placed = ForEachRange(
      static_cast<char*>(*data), mapped, policy, [&](const PlannedRange& range) -> Status {
        ++stats.ranges;
        Status bound = os::BindRange(range.begin, range.bytes, range.mode, range.nodes);
        if (bound.ok()) return absl::OkStatus();
        if (policy.mode() == BindMode::kStrict) {
          if (bound.code() == absl::StatusCode::kResourceExhausted) {
            StatusOr<std::size_t> needed =
                ForEachRange(static_cast<char*>(*data), mapped, policy,
                             [](const PlannedRange&) { return absl::OkStatus(); });
            return Annotate(bound,
                            absl::StrCat(context, ": the buffer needs ", needed.value_or(0),
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
        return absl::OkStatus();
      });
  if (!placed.ok()) return placed.status();

  if (options.populate) {
    if (Status s = os::PopulateWrite(*data, mapped); !s.ok()) return Annotate(s, context);
  }
  return buffer;
}

}  // namespace numarena
