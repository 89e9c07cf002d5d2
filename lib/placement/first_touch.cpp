// First-touch correction: prefault, correct, and node-verified allocation (see
// first_touch.hpp).
//
// The kernel facts this relies on:
//   - mbind(MPOL_BIND) without MPOL_MF_MOVE changes where *future* faults go and leaves
//     resident pages alone, so prefault binds first, populates, then migrates the pages that
//     were resident before it was called.
//   - move_pages(2) with a node list stores, per page, the node it is on afterwards or a
//     negative errno (EBUSY pinned, EACCES shared, ENOMEM node full, EFAULT not mapped,
//     ENOENT not present). When a migration attempt fails part-way the kernel returns the
//     count of pages it did not migrate and leaves the status of the rest unwritten, so
//     statuses start at a sentinel and unwritten ones are retried, then counted as EAGAIN.
#include "numarena/first_touch.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <exception>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.hpp"
#include "base/status_context.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"
#include "placement/page_walk.hpp"
#include "placement/unwritten.hpp"
#include "topology/node_room.hpp"
#include "topology/topology_parse.hpp"
#include "topology/zoneinfo_parse.hpp"

namespace numarena {
namespace {

// move_pages leaves a status unwritten when it aborts a batch; no kernel value is INT_MIN.
constexpr int kStatusUnwritten = INT_MIN;
// Retries for pages the kernel did not get to (transient failures: page locked, under I/O).
constexpr int kMoveAttempts = 3;

std::string Hex(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<std::uintptr_t>(p)));
}

struct PageRange {
  void* begin = nullptr;
  std::size_t bytes = 0;
  std::size_t pages = 0;
};

// The pages [ptr, ptr+len) touches; InvalidArgument when it runs past the address space.
StatusOr<PageRange> WidenToPages(void* ptr, std::size_t len, const std::string& context) {
  StatusOr<placement_internal::PageSpan> span = placement_internal::WidenToPages(ptr, len, context);
  if (!span.ok()) return span.status();
  // No overflow: the span lies inside the address space.
  return PageRange{reinterpret_cast<void*>(span->begin), span->pages * os::PageSize(), span->pages};
}

// The node must be online and the process allowed to use its memory.
Status CheckTargetNode(int node, const std::string& context, const Topology** topology_out) {
  auto topology = Topology::system();
  if (!topology.ok()) return WithContext(topology.status(), context);
  const Topology& topo = **topology;
  if (!topo.has_node(node)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": node ", node, " is not an online NUMA node (online: ",
                     absl::StrJoin(topo.node_ids(), ","), "); pass one of those"));
  }
  if (!topo.memory_allowed(node)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": node ", node,
        " is outside this process's allowed memory nodes (Mems_allowed / cpuset.mems: ",
        absl::StrJoin(topo.process().allowed_mem_nodes, ","),
        "); widen the cpuset or pick an allowed node"));
  }
  if (topology_out != nullptr) *topology_out = &topo;
  return absl::OkStatus();
}

Status CheckRange(const void* ptr, std::size_t len, const CorrectOptions& options,
                  const std::string& context) {
  if (ptr == nullptr && len > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": null pointer with a length of ", len, " bytes"));
  }
  if (options.batch_pages == 0 || options.batch_pages > CorrectOptions::kMaxBatchPages) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": CorrectOptions::batch_pages is ", options.batch_pages,
                     "; use 1 to ", CorrectOptions::kMaxBatchPages, " (default 1024)"));
  }
  return absl::OkStatus();
}

void CountFailure(PlacementReport& report, int negative_errno) {
  ++report.failed;
  ++report.failures_by_reason[negative_errno];
}

// Migrates `pages` (all misplaced) to `node`. Pages that did not report `node` are asked
// again before they count as failed: a transparent huge page migrates as a whole, and the
// kernel reports its other subpages in the same call as busy (already isolated) although
// they move with it. Pages still elsewhere are retried a few times (transient failures:
// page locked, under I/O, batch aborted), then counted with the kernel's last reason.
Status MoveBatch(std::vector<void*> pages, int node, PlacementReport& report) {
  std::vector<int> reasons;
  for (int attempt = 0; attempt < kMoveAttempts && !pages.empty(); ++attempt) {
    std::vector<int> targets(pages.size(), node);
    std::vector<int> status(pages.size(), kStatusUnwritten);
    if (Status s = os::MovePages(pages, targets, status); !s.ok()) return s;
    std::vector<void*> pending;
    reasons.clear();
    for (std::size_t i = 0; i < pages.size(); ++i) {
      if (status[i] == node) {
        ++report.moved;
        continue;
      }
      pending.push_back(pages[i]);
      if (status[i] == kStatusUnwritten) {
        reasons.push_back(-EAGAIN);
      } else if (status[i] >= 0) {
        reasons.push_back(-EREMOTE);  // migrated, but the kernel put it elsewhere
      } else {
        reasons.push_back(status[i]);
      }
    }
    if (pending.empty()) return absl::OkStatus();
    std::vector<int> now(pending.size(), -ENOENT);
    if (Status s = os::QueryPageNodes(pending, now); !s.ok()) return s;
    pages.clear();
    std::vector<int> still;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (now[i] == node) {
        ++report.moved;
      } else {
        pages.push_back(pending[i]);
        still.push_back(reasons[i]);
      }
    }
    reasons = std::move(still);
  }
  for (int reason : reasons) CountFailure(report, reason);
  return absl::OkStatus();
}

// The end (page index from `base`) of the window starting at page `first`: at least
// `batch` pages, extended to the next huge-page boundary, so a transparent huge page (which
// migrates as a whole) never straddles two windows and is counted once, as moved.
std::size_t WindowEnd(const char* base, std::size_t first, std::size_t batch, std::size_t total) {
  const std::size_t page = os::PageSize();
  std::size_t end = first + std::min(batch, total - first);
  auto address = reinterpret_cast<std::uintptr_t>(base) + end * page;  // inside the range
  std::optional<std::uintptr_t> aligned = RoundUpChecked(address, os::kTransparentHugePage);
  if (!aligned) return end;  // the last huge page of the address space: nothing to extend
  return end + std::min(total - end, (*aligned - address) / page);
}

StatusOr<PlacementReport> CorrectRange(const PageRange& range, int node,
                                       const CorrectOptions& options) {
  PlacementReport report;
  report.node = node;
  report.pages_checked = range.pages;
  const std::size_t page = os::PageSize();
  auto* base = static_cast<char*>(range.begin);
  for (std::size_t first = 0, end = 0; first < range.pages; first = end) {
    end = WindowEnd(base, first, options.batch_pages, range.pages);
    const std::size_t count = end - first;
    char* window = base + first * page;
    auto nodes = page_node_list(window, count * page);
    // page_node_list says -ENOENT for untouched pages on every kernel (6.1 says -EFAULT).
    if (!nodes.ok()) return nodes.status();
    if (std::all_of(nodes->begin(), nodes->end(), [](int where) { return where == -EFAULT; })) {
      // Perhaps a hole: step over all of it at once rather than window by window.
      auto hole = placement_internal::UnmappedPagesAt(reinterpret_cast<std::uintptr_t>(window),
                                                      range.pages - first);
      if (!hole.ok()) return hole.status();
      if (*hole >= count) {
        report.failed += *hole;
        report.failures_by_reason[-EFAULT] += *hole;
        end = first + *hole;
        continue;
      }
    }
    std::vector<void*> misplaced;
    for (std::size_t i = 0; i < count; ++i) {
      int where = (*nodes)[i];
      if (where == node) {
        ++report.already_local;
      } else if (where == -ENOENT) {
        ++report.not_resident;
      } else if (where < 0) {
        CountFailure(report, where);
      } else {
        misplaced.push_back(window + i * page);
      }
    }
    if (!misplaced.empty()) {
      if (Status s = MoveBatch(std::move(misplaced), node, report); !s.ok()) return s;
    }
  }
  return report;
}

// How much more `node` can take before numarena's reserve (parse::NodeReserveBytes: 1/64 of
// the node, at least its `high` watermark), from its meminfo and /proc/zoneinfo. A bound
// (MPOL_BIND) fault past that makes the kernel reclaim and, with nothing to reclaim,
// OOM-kill the process, so populating stops before it.
struct NodeRoom {
  bool known = false;  // false when the node's meminfo cannot be read: nothing to check
  std::uint64_t total = 0;
  // Free, plus half of what the kernel can reclaim (page cache) less the node's `low`
  // watermark (parse::NodeObtainableBytes), less what numarena's arenas
  // committed there and have not written yet (`unwritten`): those pages are taken as soon
  // as their owner writes them, and meminfo does not show them.
  std::uint64_t free = 0;
  std::uint64_t unwritten = 0;
  std::uint64_t reserve = 0;
  std::uint64_t available() const { return free > reserve ? free - reserve : 0; }
};

// `filling`: the range the caller is about to fault in. An arena's unwritten pages in it are
// not subtracted: they are the pages being written (prefault over an arena's own object).
NodeRoom ReadNodeRoom(int node, const void* filling = nullptr, std::size_t filling_bytes = 0) {
  NodeRoom room;
  parse::NodeMeminfo meminfo;
  if (!ReadNodeMeminfoNoAlloc(node, &meminfo)) return room;
  std::uint64_t low_watermark = 0, high_watermark = 0;  // 0 when zoneinfo says nothing
  (void)ReadNodeWatermarksNoAlloc(node, &low_watermark, &high_watermark);
  room.known = true;
  room.total = meminfo.total_bytes;
  room.unwritten = static_cast<std::uint64_t>(
      placement_internal::UnwrittenBytesOnNode(node, filling, filling_bytes));
  const std::uint64_t obtainable =
      parse::NodeObtainableBytes(meminfo.free_bytes, meminfo.reclaimable_bytes, low_watermark);
  room.free = obtainable - std::min(obtainable, room.unwritten);
  room.reserve = parse::NodeReserveBytes(room.total, high_watermark);
  return room;
}

std::string MiB(std::uint64_t bytes) { return absl::StrCat(bytes >> 20, " MiB"); }

// ResourceExhausted saying that `node` cannot take `needed` more bytes, with its numbers.
Status NoRoom(int node, std::uint64_t needed, const NodeRoom& room, const std::string& context) {
  return absl::ResourceExhaustedError(absl::StrCat(
      context, ": node ", node, " cannot take ", MiB(needed), " (", needed,
      " bytes) more: ", MiB(room.free), " of its ", MiB(room.total),
      " are free (counting half of its reclaimable page cache, less its low watermark",
      room.unwritten > 0 ? absl::StrCat(", less ", MiB(room.unwritten),
                                        " numarena's arenas have committed there and not "
                                        "written yet")
                         : std::string(),
      ") and numarena keeps ", MiB(room.reserve),
      " of them free, because faulting bound pages past that makes the kernel OOM-kill the "
      "process; free memory on node ",
      node, ", ask for less, or use another node"));
}

// ResourceExhausted when faulting in `needed` more bytes would take `node` below its reserve.
Status CheckRoom(int node, std::uint64_t needed, const std::string& context) {
  NodeRoom room = ReadNodeRoom(node);
  if (!room.known || needed <= room.available()) return absl::OkStatus();
  return NoRoom(node, needed, room, context);
}

// Pages populated and checked per step: the node's free memory is checked before each one,
// so memory another process takes meanwhile stops us before the node runs out.
constexpr std::size_t kPopulateStep = std::size_t{64} << 20;
// A step is taken only when the node has this many times its bytes free above the reserve:
// a step takes more of MemFree than its own pages (pages compaction moves while the faults
// wait for huge pages are freed onto per-CPU lists, out of MemFree, and an OOM kill does not
// drain them first; a 64 MiB step took up to 70 MiB in the lab). Near the end the step
// shrinks to the room over this factor, down to kSmallestStep, so prefault still fills
// what fits.
constexpr std::uint64_t kStepHeadroom = 2;
constexpr std::size_t kSmallestStep = std::size_t{256} << 10;

// Writes every page of the range, step by step, from a thread on `cpus` when there are any.
// Before each step, checks that `node` can take the step's pages that are not on it yet
// (kStepHeadroom times over). Returns the node the writing thread ran on (-1 when the kernel
// does not say).
StatusOr<int> PopulateFrom(const std::vector<int>& cpus, const PageRange& range, int node,
                           const std::string& context) {
  auto populate = [&]() -> Status {
    auto* base = static_cast<char*>(range.begin);
    const std::size_t page = os::PageSize();
    const std::size_t step_pages = kPopulateStep / page;
    for (std::size_t first = 0, end = 0; first < range.pages; first = end) {
      end = WindowEnd(base, first, step_pages, range.pages);
      std::size_t bytes = (end - first) * page;
      NodeRoom room = ReadNodeRoom(node, range.begin, range.pages * page);
      auto fits = [&](std::uint64_t needed) {
        return !room.known || needed <= room.available() / kStepHeadroom;
      };
      if (!fits(bytes)) {
        // Short of room for the whole step: only the pages not on the node yet need any.
        auto nodes = page_node_list(base + first * page, bytes);
        if (!nodes.ok()) return WithContext(nodes.status(), context);
        std::size_t missing = 0;
        for (int where : *nodes) missing += where != node;
        if (missing == 0) continue;
        if (!fits(std::uint64_t{missing} * page)) {
          // Take what half the room allows (every page of the shorter step may be missing).
          const std::size_t fit_pages = room.available() / kStepHeadroom / page;
          if (fit_pages * page < kSmallestStep) {
            Status refused = NoRoom(node, std::uint64_t{missing} * page, room, context);
            return Status(refused.code(),
                          absl::StrCat(refused.message(), " (stopped after faulting in ",
                                       first * page, " of ", range.bytes, " bytes)"));
          }
          end = first + std::min(fit_pages, end - first);
          bytes = (end - first) * page;
        }
      }
      if (Status s = os::PopulateWrite(base + first * page, bytes); !s.ok()) {
        return WithContext(s, context);
      }
    }
    return absl::OkStatus();
  };
  if (!cpus.empty()) {
    Status populated = absl::OkStatus();
    int ran_on = -1;
    try {
      std::thread worker([&] {
        // If pinning fails (a cpuset changed since discovery) the page still lands on the
        // bound node; only the zeroing runs remotely.
        (void)os::SetThreadAffinity(cpus);
        populated = populate();
        ran_on = os::CurrentCpuAndNode().node;
      });
      worker.join();
      if (!populated.ok()) return populated;
      return ran_on;
    } catch (const std::exception&) {
      // No thread available (thread limit): the calling thread populates; the binding
      // still decides the node.
    }
  }
  if (Status s = populate(); !s.ok()) return s;
  return os::CurrentCpuAndNode().node;
}

// `bytes` rounded up to whole pages; std::nullopt when that does not fit in a size_t.
std::optional<std::size_t> MappedBytes(std::size_t bytes) {
  return RoundUpChecked(bytes, os::PageSize());
}

// Maps, binds, prefaults and verifies. On success the caller owns [*data, MappedBytes).
StatusOr<void*> MapOnNode(std::size_t bytes, int node, PlacementReport* report_out) {
  std::string context = absl::StrCat("AllocateOnNode(", bytes, " bytes, node ", node, ")");
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": size is 0; ask for at least 1 byte"));
  }
  if (Status s = CheckTargetNode(node, context, nullptr); !s.ok()) return s;
  const std::optional<std::size_t> rounded = MappedBytes(bytes);
  if (!rounded) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": the size rounded up to whole pages does not fit in the address space"));
  }
  const std::size_t mapped = *rounded;
  // Refuse before mapping anything when the node cannot take it now; prefault checks again
  // step by step, in case others take the node's memory meanwhile.
  if (Status s = CheckRoom(node, mapped, context); !s.ok()) return s;
  const bool large = bytes >= os::kTransparentHugePage;
  auto data = os::MapAnonymous(mapped, large ? os::kTransparentHugePage : 0);
  if (!data.ok()) return WithContext(data.status(), context);
  // Huge pages are a TLB optimisation only; a kernel without THP still places correctly.
  if (large) (void)os::AdviseHugePages(*data, mapped);

  auto report = prefault(*data, mapped, node);
  if (!report.ok()) {
    os::Unmap(*data, mapped);
    return WithContext(report.status(), context);
  }
  // Verify independently of the report: the kernel's answer for every page, now. Seen in the
  // NUMA lab's full-node test (about 1 run in 8 under ASan): 1 page of 64,492 "not on node"
  // right after prefault found every one local, most likely a page the kernel was migrating
  // within the node at that instant (compaction, which a nearly full node and huge-page
  // advice wake), which has no node in move_pages' answer for a moment. So a shortfall is
  // asked again a few times, a millisecond apart; a page really elsewhere stays elsewhere.
  StatusOr<PageNodeCounts> counts = page_nodes(*data, mapped);
  for (int retry = 0; retry < 3 && counts.ok() && counts->on(node) != counts->total_pages;
       ++retry) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    counts = page_nodes(*data, mapped);
  }
  if (!counts.ok()) {
    os::Unmap(*data, mapped);
    return WithContext(counts.status(), context);
  }
  const std::size_t elsewhere = counts->total_pages - counts->on(node);
  if (elsewhere > 0) {
    os::Unmap(*data, mapped);
    std::string detail = absl::StrCat(context, ": ", elsewhere, " of ", counts->total_pages,
                                      " pages are not on node ", node,
                                      " after prefault and correction; ", report->ToString());
    if (report->failures_by_reason.count(-ENOMEM) > 0) {
      return absl::ResourceExhaustedError(absl::StrCat(detail, "; the node is out of free memory"));
    }
    return absl::FailedPreconditionError(detail);
  }
  if (report_out != nullptr) *report_out = *std::move(report);
  return *data;
}

}  // namespace

std::string PlacementFailureName(int negative_errno) {
  switch (-negative_errno) {
    case EBUSY:
      return "EBUSY pinned page";
    case ENOMEM:
      return "ENOMEM target node full";
    case EACCES:
      return "EACCES page shared with another process";
    case EFAULT:
      return "EFAULT not mapped";
    case ENOENT:
      return "ENOENT page vanished";
    case EIO:
      return "EIO page could not be written back";
    case EINVAL:
      return "EINVAL dirty page without migration support";
    case EAGAIN:
      return "EAGAIN kernel did not migrate it (transient)";
    case EREMOTE:
      return "EREMOTE kernel put the page on another node";
    default:
      return absl::StrCat("errno ", -negative_errno);
  }
}

std::string PlacementReport::ToString() const {
  std::string out = absl::StrCat("node ", node, ": ", pages_checked, " pages checked, ",
                                 already_local, " already local, ", moved, " moved, ", not_resident,
                                 " not resident, ", failed, " failed");
  if (!failures_by_reason.empty()) {
    out += " (";
    out +=
        absl::StrJoin(failures_by_reason, ", ",
                      [](std::string* s, const std::pair<const int, std::size_t>& entry) {
                        absl::StrAppend(s, PlacementFailureName(entry.first), ": ", entry.second);
                      });
    out += ")";
  }
  return out;
}

StatusOr<PlacementReport> correct(void* ptr, std::size_t len, int node,
                                  const CorrectOptions& options) {
  std::string context = absl::StrCat("correct(", Hex(ptr), ", ", len, " bytes, node ", node, ")");
  if (Status s = CheckTargetNode(node, context, nullptr); !s.ok()) return s;
  if (Status s = CheckRange(ptr, len, options, context); !s.ok()) return s;
  PlacementReport report;
  report.node = node;
  if (len == 0) return report;
  StatusOr<PageRange> widened = WidenToPages(ptr, len, context);
  if (!widened.ok()) return widened.status();
  const PageRange& range = *widened;
  if (options.bind_range) {
    const int nodes[] = {node};
    if (Status s = os::BindRange(range.begin, range.bytes, os::PolicyMode::kBind, nodes);
        !s.ok()) {
      return WithContext(s, context);
    }
  }
  auto corrected = CorrectRange(range, node, options);
  if (!corrected.ok()) return WithContext(corrected.status(), context);
  return corrected;
}

StatusOr<PlacementReport> prefault(void* ptr, std::size_t len, int node,
                                   const CorrectOptions& options) {
  std::string context = absl::StrCat("prefault(", Hex(ptr), ", ", len, " bytes, node ", node, ")");
  const Topology* topology = nullptr;
  if (Status s = CheckTargetNode(node, context, &topology); !s.ok()) return s;
  if (Status s = CheckRange(ptr, len, options, context); !s.ok()) return s;
  PlacementReport empty;
  empty.node = node;
  if (len == 0) return empty;

  StatusOr<PageRange> widened = WidenToPages(ptr, len, context);
  if (!widened.ok()) return widened.status();
  const PageRange& range = *widened;
  const int nodes[] = {node};
  if (Status s = os::BindRange(range.begin, range.bytes, os::PolicyMode::kBind, nodes);
      !s.ok()) {
    return WithContext(s, context);
  }
  // The node's CPUs this process may run on; empty for memory-only nodes.
  std::vector<int> cpus;
  const std::vector<int>& allowed = topology->process().allowed_cpus;
  for (int cpu : topology->cpus_of_node(node)) {
    if (std::find(allowed.begin(), allowed.end(), cpu) != allowed.end()) cpus.push_back(cpu);
  }
  auto populated_from = PopulateFrom(cpus, range, node, context);
  if (!populated_from.ok()) return populated_from.status();

  auto report = CorrectRange(range, node, options);
  if (!report.ok()) return WithContext(report.status(), context);
  report->populated_from_node = *populated_from;
  return report;
}

// ---- NodeBuffer and FirstTouchAllocator ----------------------------------------------------

NodeBuffer::NodeBuffer(NodeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      node_(std::exchange(other.node_, -1)),
      report_(std::move(other.report_)) {}

NodeBuffer& NodeBuffer::operator=(NodeBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    node_ = std::exchange(other.node_, -1);
    report_ = std::move(other.report_);
  }
  return *this;
}

NodeBuffer::~NodeBuffer() { Release(); }

void NodeBuffer::Release() {
  if (data_ != nullptr) os::Unmap(data_, *MappedBytes(size_));  // fitted when allocated
  data_ = nullptr;
  size_ = 0;
}

StatusOr<NodeBuffer> AllocateOnNode(std::size_t bytes, int node) {
  PlacementReport report;
  auto data = MapOnNode(bytes, node, &report);
  if (!data.ok()) return data.status();
  NodeBuffer buffer;
  buffer.data_ = *data;
  buffer.size_ = bytes;
  buffer.node_ = node;
  buffer.report_ = std::move(report);
  return buffer;
}

StatusOr<void*> FirstTouchAllocator::allocate(std::size_t bytes) {
  return MapOnNode(bytes, node_, nullptr);
}

void FirstTouchAllocator::deallocate(void* ptr, std::size_t bytes) {
  // A size allocate() could not have accepted unmaps nothing rather than a wrapped length.
  std::optional<std::size_t> mapped = MappedBytes(bytes);
  if (ptr != nullptr && bytes > 0 && mapped) os::Unmap(ptr, *mapped);
}

}  // namespace numarena
