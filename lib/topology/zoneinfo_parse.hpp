// /proc/zoneinfo, reduced to what numarena's free-memory checks need per NUMA node: the
// buddy allocator's free pages, the zone watermarks, and the free pages parked on per-CPU
// lists ("pagesets"), which MemFree does not count.
//
// Why the last two matter (both seen in the NUMA lab, Linux 6.1):
//   * Pages freed by a CPU go to that CPU's per-CPU list first; up to the list's `high`
//     (the zone's low watermark divided by the node's CPUs: 36 MiB on a 640 MiB node with one
//     CPU) they stay there, free but missing from MemFree. A budget that counts used memory
//     as MemTotal - MemFree sees freed memory as still used.
//   * The kernel hands out a node's pages only down to the zone's `min` watermark; below it a
//     bound (MPOL_BIND) allocation reclaims and, with nothing to reclaim, OOM-kills. A
//     free-memory check must keep at least the node's watermarks free, which on a 512 MiB
//     node is about 29 MiB (its `low` watermark), more than a fixed 16 MiB margin. Nor may
//     it count the per-CPU lists: when reclaim makes no progress the allocator gives up
//     without draining them (an OOM kill in the lab with 17 MiB on them).
//
// The parser is fed one line at a time, never allocates and never throws, so the page
// provider can run it over a file it reads in small pieces inside jemalloc's extent hooks.
// The format it expects (zones of one node are consecutive, values in pages):
//
//   Node 1, zone    DMA32
//     per-node stats
//         nr_free_pages 146732            (ignored: per-node counters)
//     pages free     146732
//           min      7508
//           low      9385
//           high     11262
//           managed  153072
//     pagesets
//       cpu: 0
//                 count: 2300             (pages on this CPU's lists)
//                 high:  9385             (ignored: the list's limit; note the colon)
//
// Lines it does not know are skipped, so fields newer kernels add (high_min, high_max, ...)
// do not break it. A malformed value in a line it does read ("min x", "count: -1", a node id
// that is not a number) is an error naming the line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "numarena/status.hpp"

namespace numarena::parse {

// One node's sums over its zones, in pages.
struct ZoneinfoNode {
  bool seen = false;               // the file has at least one zone of this node
  std::uint64_t free_pages = 0;    // "pages free": what MemFree counts
  std::uint64_t min_pages = 0;     // watermarks
  std::uint64_t low_pages = 0;
  std::uint64_t high_pages = 0;
  std::uint64_t managed_pages = 0;
  std::uint64_t pcp_pages = 0;     // free pages on per-CPU lists (not in MemFree)
};

class ZoneinfoParser {
 public:
  // Sums of node id go to nodes[id - first_node] for ids inside the span; zones of other
  // nodes are skipped.
  explicit ZoneinfoParser(std::span<ZoneinfoNode> nodes, int first_node = 0) noexcept
      : nodes_(nodes), first_node_(first_node) {}

  // Feeds one line (a trailing '\n' or '\r' is ignored). False from the first malformed
  // line on; later lines are then ignored.
  bool Feed(std::string_view line) noexcept;

  bool ok() const noexcept { return error_ == nullptr; }
  // 1-based number of the first malformed line (0 when none) and what was wrong with it.
  std::size_t error_line() const noexcept { return error_ == nullptr ? 0 : error_line_; }
  const char* error() const noexcept { return error_; }

 private:
  bool Fail(const char* why) noexcept;

  std::span<ZoneinfoNode> nodes_;
  int first_node_ = 0;
  ZoneinfoNode* current_ = nullptr;  // the zone's node when it is inside the span
  bool in_zone_ = false;             // a "Node N, zone Z" header was seen
  bool in_pagesets_ = false;
  std::size_t line_ = 0;
  std::size_t error_line_ = 0;
  const char* error_ = nullptr;
};

// Parses a whole zoneinfo text into `nodes` (see ZoneinfoParser). InvalidArgument naming
// the line and the problem.
[[nodiscard]] Status ParseZoneinfo(std::string_view text, std::span<ZoneinfoNode> nodes,
                                   int first_node = 0);

// The free memory numarena keeps untouched on a node before it refuses to commit more there:
// the larger of 1/64 of the node (at least 16 MiB, at most 1 GiB) and the node's `high`
// watermark (the level kswapd reclaims back to). Below `min` a bound allocation reclaims and,
// with nothing to reclaim, OOM-kills the process, and `min` moves up while the node is full:
// each fragmentation event boosts every watermark by 2 MiB until kswapd next runs, and pages
// that compaction frees while a fault waits sit on per-CPU lists, missing from MemFree and
// not drained before the kill. Keeping `low` free left 6 MiB above `min` on the lab's 512 MiB
// node, and a 64 MiB prefault that passed that check took 70 MiB of MemFree and was killed;
// `high` leaves twice that.
std::uint64_t NodeReserveBytes(std::uint64_t total_bytes, std::uint64_t high_watermark_bytes);

// Memory a bound allocation can still get on a node: its free memory plus half of what the
// kernel can reclaim there (its page cache, NodeMeminfo::reclaimable_bytes; the kernel's own
// MemAvailable counts about the same half: some of it is dirty, mapped or hot), less the
// node's `low` watermark, without per-CPU lists (see above). Reclaimed pages are freed to the
// reclaiming CPU's per-CPU list first and stay there up to the list's `high` (the node's `low`
// over its CPUs), where a bound fault below `min` cannot take them: the first `low` of
// reclaimed cache is no help (CI, 2026-12-07: a 256 MiB node OOM-killed at 10.6 MiB free,
// `min` 11.8, its page cache all reclaimed and 15.5 MiB of it on per-CPU lists, `low` 14.8).
// Reclaimable kernel memory (KReclaimable) does not count: it may be pinned, and a bound
// fault that reclaims nothing is an OOM kill. A server that just read its model weights from
// disk has little MemFree and a large page cache it can give back.
std::uint64_t NodeObtainableBytes(std::uint64_t free_bytes, std::uint64_t reclaimable_bytes,
                                  std::uint64_t low_watermark_bytes);

}  // namespace numarena::parse
