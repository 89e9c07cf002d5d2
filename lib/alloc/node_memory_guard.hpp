// The per-node free-memory guard (node_memory_guard.cpp), which the node page provider asks
// before it commits pages on a node.
#pragma once

#include <cstddef>
#include <cstdint>

#include "alloc/span_failure.hpp"

namespace numarena {

// The per-node free-memory guard: refuses commits that would take a node's free memory below
// its reserve, so MPOL_BIND memory is refused up front instead of OOM-killing the process at
// fault time. The reserve (parse::NodeReserveBytes) is 1/64 of the node within [16 MiB,
// 1 GiB] and at least the node's `high` watermark: the kernel does not hand out a zone's
// last pages (below `min`, which boosts raise while the node is full, it reclaims, and with
// nothing to reclaim it OOM-kills a bound allocation; parse::NodeReserveBytes says why `low`
// was not enough), and on small nodes the watermarks are larger than 1/64 (37 MiB on a
// 512 MiB node). Free memory is MemFree plus half of the node's page cache less its `low`
// watermark (what reclaim frees to per-CPU lists first; not its reclaimable
// kernel memory, which may be pinned: parse::NodeObtainableBytes), read from
// /sys/devices/system/node/nodeN/meminfo at most every kRefreshNanos (sooner when the
// estimate gets close), the watermark from /proc/zoneinfo every few seconds; bytes
// committed since the last read are subtracted and bytes decommitted since then added back.
// A committed page takes free memory only when first written, so a read does not show the
// spans committed and not written yet: the guard follows up to kTrackedSpans of them (spans
// of at least kTrackedMinBytes committed on one node: large objects and slab runs, where
// a forgotten span is a large error) and subtracts the part of each that mincore(2) shows
// without memory (looking at up to kScanBytesPerRead of them per read, the rest keep their
// last figure), until it is all written or decommitted. Smaller spans,
// spans of interleaved placements and spans beyond the table's room are counted only until
// the next read, as every span was before.
// Free pages on per-CPU lists do not count as free: when reclaim makes no progress the
// kernel gives up without draining them (budget.hpp).
// Which pages go through it: every page numarena has the kernel fault under a bind (the
// spans' pages) is admitted here first. numarena's own bookkeeping on the node (the page
// tables, and jemalloc's metadata under PlacementScope) is charged or not, but never bound:
// it is placed with MPOL_PREFERRED, which the kernel moves to the next node once this one is
// at its `low` watermark, so it can take a full node's last room but never OOM-kill. The
// reserve (at least `high`) is what keeps the bound pages above `min` meanwhile.
// Allocation-free.
class NodeMemoryGuard {
 public:
  static constexpr std::int64_t kRefreshNanos = 50'000'000;
  static constexpr int kTrackedSpans = 16;
  static constexpr std::size_t kTrackedMinBytes = std::size_t{2} << 20;
  static constexpr std::size_t kScanBytesPerRead = std::size_t{1} << 30;
  // True when `bytes` may be committed on `node`; else records kNodeFull in `failure`.
  // Nodes whose meminfo cannot be read are admitted (nothing to check against).
  static bool Admit(int node, std::size_t bytes, SpanFailure* failure) noexcept;
  // Takes back an Admit of `bytes` on `node` (the capacity gate refused them, or they were
  // decommitted).
  static void Unadmit(int node, std::size_t bytes) noexcept;
  // Forces the next Admit of `node` to re-read meminfo (tests).
  static void Invalidate(int node) noexcept;
  // The node's MemTotal in bytes (read once if never read), or -1 when unreadable.
  static std::int64_t Total(int node) noexcept;
  // Follows [begin, begin+bytes), just committed on `node` as a whole (ignored below
  // kTrackedMinBytes), until its pages are written or it is decommitted (ForgetUnwritten).
  static void TrackUnwritten(int node, void* begin, std::size_t bytes) noexcept;
  // Stops following the spans of `node` that overlap the range (about to be decommitted).
  static void ForgetUnwritten(int node, void* begin, std::size_t bytes) noexcept;
  // Bytes of the followed spans of `node` without memory behind them, as of the last read.
  static std::int64_t Unwritten(int node) noexcept;
  // The same, looked at now (mincore over up to kScanBytesPerRead of them), less up to the
  // bytes each span has in [skip, skip + skip_bytes): what AllocateOnNode and prefault
  // subtract from a node's free memory (placement_internal::UnwrittenBytesOnNode,
  // registered when this file is linked in).
  static std::int64_t UnwrittenNow(int node, const void* skip, std::size_t skip_bytes) noexcept;
  // The fork child has one thread: no lock of the guard is held there.
  static void UnlockInForkChild() noexcept;
};

}  // namespace numarena
