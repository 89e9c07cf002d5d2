// The per-node free-memory guard (see node_memory_guard.hpp): per node, the free memory read
// from meminfo, the watermark from zoneinfo, and the spans committed and not written yet.
#include "alloc/node_memory_guard.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

#include "base/clock.hpp"
#include "os/os.hpp"
#include "placement/unwritten.hpp"
#include "topology/node_room.hpp"
#include "topology/zoneinfo_parse.hpp"

namespace numarena {

namespace {

// ---- the free-memory guard's per-node cache ----------------------------------------------

// How long a caller waits for a node's spans lock. A look at kScanBytesPerRead of spans takes
// about 0.3 ms, but its thread may be preempted while it holds the lock, for several
// scheduler ticks on a busy machine (2 ms of patience gave up in 1 of 10 runs of
// node_pages_test's race while the test suite ran beside it).
constexpr std::int64_t kSpansLockPatienceNanos = 50'000'000;

struct NodeMemory {
  // Whether the node's meminfo was read: all members start at zero, so that the table (one
  // entry per possible kernel node, 0.7 MiB) is in .bss and costs a process only the pages of
  // the nodes it uses; with a non-zero initial value it sat in .data, and reading node 0's
  // entry mapped 40-64 KiB of the library file around it.
  enum Reading : std::uint8_t { kNeverRead = 0, kUnreadable = 1, kRead = 2 };
  std::atomic<std::uint8_t> reading{kNeverRead};
  std::atomic<std::int64_t> free_at_refresh{0};  // valid when reading == kRead
  std::atomic<std::int64_t> total{0};
  std::atomic<std::int64_t> committed_since{0};
  std::atomic<std::int64_t> refreshed_ns{0};
  // The node's `low` and `high` watermarks (sums over its zones, /proc/zoneinfo), re-read
  // rarely: they only change with vm.min_free_kbytes, vm.watermark_scale_factor or memory
  // hotplug. 0 when zoneinfo says nothing.
  std::atomic<std::int64_t> low_watermark{0};
  std::atomic<std::int64_t> high_watermark{0};
  std::atomic<std::int64_t> watermark_read_ns{0};  // 0: never read
  // Spans committed on this node as a whole (NodeMemoryGuard::TrackUnwritten) and not all
  // written when last looked at; begin == 0 marks a free slot. Guarded by spans_busy, a
  // spin lock held for a few stores or one look at up to kScanBytesPerRead (well under a
  // millisecond); callers wait for it only briefly (LockSpansBriefly).
  std::atomic<bool> spans_busy{false};
  std::atomic<bool> spans_stale{false};  // a span was decommitted while the lock was busy
  struct Span {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    // Bytes without memory behind them at the end of the last full pass over the span (all
    // of them until one finished), and the pass under way: where it goes on, and what it
    // found resident so far.
    std::uintptr_t unwritten = 0;
    std::uintptr_t cursor = 0;
    std::uintptr_t resident_so_far = 0;
  };
  Span spans[NodeMemoryGuard::kTrackedSpans];
  int next_span = 0;  // where the next read starts looking, so every span gets its turn
  // Their bytes without memory behind them, at the last meminfo read.
  std::atomic<std::int64_t> unwritten{0};

  bool TryLockSpans() {
    bool expected = false;
    return spans_busy.compare_exchange_strong(expected, true, std::memory_order_acquire,
                                              std::memory_order_relaxed);
  }
  // Waits, yielding, up to kSpansLockPatienceNanos, then gives up (false): the caller has a
  // fallback (a span not followed, or all of them dropped at the next read). The commit and
  // decommit hooks call this: they never wait for long, and no lock of jemalloc's is taken
  // while spans_busy is held.
  bool LockSpansBriefly() {
    if (TryLockSpans()) return true;
    const std::int64_t give_up = MonotonicNanos() + kSpansLockPatienceNanos;
    do {
      std::this_thread::yield();
      if (TryLockSpans()) return true;
    } while (MonotonicNanos() < give_up);
    return false;
  }
  void UnlockSpans() { spans_busy.store(false, std::memory_order_release); }
};
constexpr std::int64_t kWatermarkRefreshNanos = 10'000'000'000;
NodeMemory g_node_memory[os::KernelNodeMask::kMaxNodes];

// Looks at the followed spans of `memory` (its spans lock held) and returns their bytes
// without memory behind them, less up to the bytes each has in [skip_begin, skip_end).
// mincore costs about 0.3 ms per GiB: one call looks at no more than kScanBytesPerRead,
// span after span from where the last one stopped. A span not looked at this time keeps the
// figure of its last full pass, which can only be too large (pages get written, and
// decommits drop the span at once), so the guard refuses early rather than late.
std::int64_t ScanSpans(NodeMemory& memory, std::uintptr_t skip_begin = 0,
                       std::uintptr_t skip_end = 0) {
  const bool forget_all = memory.spans_stale.exchange(false, std::memory_order_relaxed);
  std::uintptr_t budget = NodeMemoryGuard::kScanBytesPerRead;
  const std::uintptr_t page = os::PageSize();
  std::int64_t unwritten = 0;
  const int first_slot = memory.next_span;
  for (int k = 0; k < NodeMemoryGuard::kTrackedSpans; ++k) {
    const int slot = (first_slot + k) % NodeMemoryGuard::kTrackedSpans;
    NodeMemory::Span& span = memory.spans[slot];
    if (span.begin == 0) continue;
    if (forget_all) {
      span = NodeMemory::Span();
      continue;
    }
    bool failed = false;
    while (budget > 0 && !failed) {
      const std::uintptr_t chunk = std::min(budget, span.end - span.cursor);
      std::size_t resident = 0;
      failed =
          os::ResidentPagesNoAlloc(reinterpret_cast<void*>(span.cursor), chunk, &resident) != 0;
      budget -= chunk;
      span.cursor += chunk;
      span.resident_so_far += resident * page;
      if (span.cursor == span.end) {  // a pass finished
        span.unwritten =
            span.end - span.begin - std::min(span.resident_so_far, span.end - span.begin);
        span.cursor = span.begin;
        span.resident_so_far = 0;
        if (budget > 0) memory.next_span = (slot + 1) % NodeMemoryGuard::kTrackedSpans;
        break;
      }
      memory.next_span = slot;  // out of budget within this span: go on from here
    }
    if (failed || span.unwritten == 0) {  // unmapped under it, or all written
      span = NodeMemory::Span();
      continue;
    }
    const std::uintptr_t skip_from = std::max(span.begin, skip_begin);
    const std::uintptr_t skip_to = std::min(span.end, skip_end);
    const std::uintptr_t skipped = skip_to > skip_from ? skip_to - skip_from : 0;
    unwritten += static_cast<std::int64_t>(span.unwritten - std::min(span.unwritten, skipped));
  }
  return unwritten;
}

// Re-reads the node's meminfo (and, every kWatermarkRefreshNanos, its watermark) without
// allocating.
void RefreshNodeMemory(int node, NodeMemory& memory) {
  const std::int64_t now = MonotonicNanos();
  const std::int64_t watermark_read = memory.watermark_read_ns.load(std::memory_order_acquire);
  if (watermark_read == 0 || now - watermark_read > kWatermarkRefreshNanos) {
    // Stamped after the values: a thread that reads the node for the first time meanwhile
    // reads zoneinfo too, rather than take watermarks of 0.
    if (std::uint64_t low = 0, high = 0; ReadNodeWatermarksNoAlloc(node, &low, &high)) {
      memory.low_watermark.store(static_cast<std::int64_t>(low), std::memory_order_relaxed);
      memory.high_watermark.store(static_cast<std::int64_t>(high), std::memory_order_relaxed);
    }
    memory.watermark_read_ns.store(now, std::memory_order_release);
  }

  parse::NodeMeminfo meminfo;
  const bool read = ReadNodeMeminfoNoAlloc(node, &meminfo);
  memory.refreshed_ns.store(now, std::memory_order_relaxed);
  if (!read) {
    memory.reading.store(NodeMemory::kUnreadable, std::memory_order_release);
    return;
  }
  memory.total.store(
      static_cast<std::int64_t>(std::min<std::uint64_t>(meminfo.total_bytes, INT64_MAX)),
      std::memory_order_relaxed);
  // The spans committed and not written yet are in neither this reading nor, from now on,
  // committed_since: they are subtracted on their own until written or decommitted.
  if (memory.LockSpansBriefly()) {
    memory.unwritten.store(ScanSpans(memory), std::memory_order_relaxed);
    memory.UnlockSpans();
  }
  memory.committed_since.store(0, std::memory_order_relaxed);
  // The page cache only, as parse::NodeObtainableBytes says: reclaimable kernel memory may
  // be pinned (the lab's tmpfs root put 9 MiB on a 256 MiB node), and counting half of it
  // took a filled node below its `min` watermark, where the next bound fault was OOM-killed.
  memory.free_at_refresh.store(
      static_cast<std::int64_t>(std::min<std::uint64_t>(
          parse::NodeObtainableBytes(
              meminfo.free_bytes, meminfo.reclaimable_bytes,
              static_cast<std::uint64_t>(memory.low_watermark.load(std::memory_order_relaxed))),
          INT64_MAX)),
      std::memory_order_relaxed);
  memory.reading.store(NodeMemory::kRead, std::memory_order_release);
}

std::int64_t MarginFor(const NodeMemory& memory) {
  return static_cast<std::int64_t>(parse::NodeReserveBytes(
      static_cast<std::uint64_t>(std::max<std::int64_t>(memory.total.load(std::memory_order_relaxed), 0)),
      static_cast<std::uint64_t>(memory.high_watermark.load(std::memory_order_relaxed))));
}

void UnadmitOnNode(int node, std::size_t bytes) {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes) return;
  g_node_memory[node].committed_since.fetch_sub(static_cast<std::int64_t>(bytes),
                                                std::memory_order_relaxed);
}

}  // namespace

// ---- NodeMemoryGuard -----------------------------------------------------------------------

bool NodeMemoryGuard::Admit(int node, std::size_t bytes, SpanFailure* failure) noexcept {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes) return true;
  NodeMemory& memory = g_node_memory[node];
  // Beyond any node's size (and safe to subtract from int64 figures).
  auto request = static_cast<std::int64_t>(std::min<std::size_t>(bytes, std::size_t{1} << 62));
  std::int64_t now = MonotonicNanos();
  auto estimate = [&] {
    return memory.free_at_refresh.load(std::memory_order_relaxed) -
           memory.unwritten.load(std::memory_order_relaxed) -
           memory.committed_since.load(std::memory_order_relaxed);
  };
  const std::uint8_t reading = memory.reading.load(std::memory_order_acquire);
  bool stale = now - memory.refreshed_ns.load(std::memory_order_relaxed) > kRefreshNanos;
  if (reading == NodeMemory::kNeverRead || (reading == NodeMemory::kRead && stale)) {
    RefreshNodeMemory(node, memory);
  } else if (reading == NodeMemory::kRead &&
             estimate() - request < MarginFor(memory)) {
    // Close to the limit: decide on fresh numbers (bounded to one read per millisecond).
    if (now - memory.refreshed_ns.load(std::memory_order_relaxed) > 1'000'000) {
      RefreshNodeMemory(node, memory);
    }
  }
  if (memory.reading.load(std::memory_order_acquire) != NodeMemory::kRead) return true;
  std::int64_t total = memory.total.load(std::memory_order_relaxed);
  std::int64_t available = estimate();
  std::int64_t margin = MarginFor(memory);
  if (available - request < margin) {
    failure->kind = SpanFailure::Kind::kNodeFull;
    failure->node = node;
    failure->bytes = bytes;
    failure->node_available = available;
    failure->node_total = total;
    failure->margin = margin;
    failure->node_unwritten = memory.unwritten.load(std::memory_order_relaxed);
    return false;
  }
  memory.committed_since.fetch_add(request, std::memory_order_relaxed);
  return true;
}

void NodeMemoryGuard::Unadmit(int node, std::size_t bytes) noexcept { UnadmitOnNode(node, bytes); }

std::int64_t NodeMemoryGuard::Total(int node) noexcept {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes) return -1;
  NodeMemory& memory = g_node_memory[node];
  if (memory.reading.load(std::memory_order_acquire) == NodeMemory::kNeverRead) {
    RefreshNodeMemory(node, memory);
  }
  if (memory.reading.load(std::memory_order_acquire) != NodeMemory::kRead) return -1;
  return memory.total.load(std::memory_order_relaxed);
}

void NodeMemoryGuard::Invalidate(int node) noexcept {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes) return;
  g_node_memory[node].refreshed_ns.store(0, std::memory_order_relaxed);
}

void NodeMemoryGuard::TrackUnwritten(int node, void* begin, std::size_t bytes) noexcept {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes || bytes < kTrackedMinBytes) return;
  NodeMemory& memory = g_node_memory[node];
  // A span not recorded (the lock busy for long) is only the guard's older, forgetful
  // estimate: counted until the next read.
  if (!memory.LockSpansBriefly()) return;
  // A free slot, else the smallest span's (the one whose forgetting matters least).
  NodeMemory::Span* slot = &memory.spans[0];
  for (NodeMemory::Span& span : memory.spans) {
    if (span.begin == 0) {
      slot = &span;
      break;
    }
    if (span.end - span.begin < slot->end - slot->begin) slot = &span;
  }
  const auto at = reinterpret_cast<std::uintptr_t>(begin);
  if (slot->begin == 0 || slot->end - slot->begin < bytes) {
    *slot = {.begin = at, .end = at + bytes, .unwritten = bytes, .cursor = at,
             .resident_so_far = 0};
  }
  memory.UnlockSpans();
}

void NodeMemoryGuard::ForgetUnwritten(int node, void* begin, std::size_t bytes) noexcept {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes) return;
  NodeMemory& memory = g_node_memory[node];
  if (!memory.LockSpansBriefly()) {
    // The next read drops every span rather than count purged pages as still to come.
    memory.spans_stale.store(true, std::memory_order_relaxed);
    return;
  }
  const auto from = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t to = from + bytes;
  for (NodeMemory::Span& span : memory.spans) {
    if (span.begin != 0 && span.begin < to && from < span.end) span = NodeMemory::Span();
  }
  memory.UnlockSpans();
}

std::int64_t NodeMemoryGuard::Unwritten(int node) noexcept {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes) return 0;
  return g_node_memory[node].unwritten.load(std::memory_order_relaxed);
}

std::int64_t NodeMemoryGuard::UnwrittenNow(int node, const void* skip,
                                           std::size_t skip_bytes) noexcept {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes) return 0;
  NodeMemory& memory = g_node_memory[node];
  // Busy for long: the last read's figure does.
  if (!memory.LockSpansBriefly()) return memory.unwritten.load(std::memory_order_relaxed);
  // Not stored in `unwritten`: the guard's own figure has to stay paired with the meminfo
  // read it was taken at (pages written since then are in neither).
  const auto skip_begin = reinterpret_cast<std::uintptr_t>(skip);
  const std::uintptr_t skip_end =
      skip_bytes > UINTPTR_MAX - skip_begin ? UINTPTR_MAX : skip_begin + skip_bytes;
  const std::int64_t now = ScanSpans(memory, skip_begin, skip_end);
  memory.UnlockSpans();
  return now;
}

namespace {
// AllocateOnNode and prefault, a layer below, subtract what the arenas committed and have
// not written yet from a node's free memory.
[[maybe_unused]] const bool g_unwritten_source_registered =
    (placement_internal::SetUnwrittenBytesSource(&NodeMemoryGuard::UnwrittenNow), true);
}  // namespace

void NodeMemoryGuard::UnlockInForkChild() noexcept {
  for (NodeMemory& memory : g_node_memory) {
    if (memory.spans_busy.load(std::memory_order_relaxed)) memory.UnlockSpans();
  }
}

}  // namespace numarena
