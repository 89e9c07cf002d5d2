// The node page provider: page-aligned spans whose pages are bound before first touch.
//
// A `NodePages` serves one placement (bind to a node or node set, page interleave, weighted
// chunk interleave) for one jemalloc arena. It owns virtual address ranges reserved
// PROT_NONE|MAP_NORESERVE and aligned to the 64 GiB granules of the address space, so the
// owner of any address is one table lookup (arena_internal::granule_heap). Spans are carved
// from a range by a bump pointer; the range is made read-write and mbind()ed to the placement
// in steps ahead of the bump pointer, before any page of it is touched. Weighted interleave
// binds successive chunks to nodes per WeightedChunkNode (kernels before 6.9 have no
// MPOL_WEIGHTED_INTERLEAVE). Strict placements fail if the kernel refuses mbind; Advisory
// ones weaken membind -> preferred -> none and count a fallback.
//
// "Committed" here means charged: `Commit` asks the per-node free-memory guard and the
// process's CapacityGate before a range may be used, and records per page who was charged
// (node, priority), so `Decommit` releases exactly that from any thread. Decommitting purges
// the pages (MADV_DONTNEED) but keeps them mapped and bound, so when they fault in again they
// land on the same node. Address space is returned to the kernel only when the provider's
// heap is destroyed (Discard).
//
// Every member that jemalloc's extent hooks call is allocation-free (jemalloc issue #978):
// failures are recorded in the thread's SpanFailure and turned into a Status by the caller.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "alloc/node_memory_guard.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "numarena/capacity.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"
#include "os/os.hpp"

namespace numarena {

class NodePages {
 public:
  // Size of one reserved range. A span larger than this gets a range of its own size.
  static constexpr std::size_t kRangeBytes = std::size_t{1} << arena_internal::kGranuleShift;
  static constexpr int kMaxRanges = 32;
  static constexpr int kMaxPlacementNodes = 64;
  // How far ahead of the bump pointer the range is made read-write and bound at once.
  static constexpr std::size_t kMapStep = std::size_t{64} << 20;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  // A provider for `placement` (kBind, kInterleave or kWeightedInterleave; validated by the
  // caller) whose ranges are tagged with `owner_heap` in the granule table. Reserves the
  // first range and binds its first step, so a Strict placement the kernel refuses fails
  // here (PermissionDenied / FailedPrecondition with errno), and checks the hugetlbfs pool
  // when options ask for it (FailedPrecondition naming nr_hugepages).
  [[nodiscard]] static StatusOr<NodePages*> Create(const Policy& placement,
                                                   const ArenaOptions& options, int owner_heap);

  // Returns everything `pages` holds to the kernel (address ranges, page states and page
  // tables with their charges, granule tags, the class map's tables of its granules) and
  // deletes it. Only for a provider no live span came from: heap creation that failed
  // (jemalloc made no arena over it, or gave back what it took), so a retry, e.g. of a
  // Preferred arena whose node was full, does not pile up reservations; or a heap whose
  // jemalloc arenas were destroyed (DestroyHeap), whose pages jemalloc could not decommit
  // (hugetlb) are released here.
  static void Discard(NodePages* pages) noexcept;

  // --- called from jemalloc extent hooks: allocation-free ---------------------------------

  // Carves a span of `size` bytes aligned to `alignment` (at `new_addr` if not null, which
  // must then be where the bump pointer is). Commits it when *commit is true. Fresh spans
  // are zero. nullptr on failure (ThreadSpanFailure says why). Carves nothing once this
  // thread's SpanFailure records a failure: jemalloc asks for a fresh span after a commit of
  // a span it already holds was refused, and would keep that one too (its retained address
  // space is never returned), so each failed allocation would cost a new range and the
  // real reason would end up replaced by kAddressSpace. Callers clear the SpanFailure
  // before each allocation.
  void* AllocateSpan(void* new_addr, std::size_t size, std::size_t alignment, bool* zero,
                     bool* commit) noexcept;
  // Charges [addr, addr+size) (pages already charged are skipped) after the free-memory
  // guard and the capacity gate agree; maps and binds it first if needed. False on refusal.
  // A commit of 2 MiB or more asks for transparent huge pages unless `advise_huge` is false.
  bool Commit(void* addr, std::size_t size, bool advise_huge = true) noexcept;
  // Purges [addr, addr+size) and releases its charges. False when the range cannot be
  // purged (hugetlb pages: jemalloc then keeps it committed).
  bool Decommit(void* addr, std::size_t size) noexcept;
  // Purges without releasing the charge (the range stays committed for jemalloc).
  bool PurgeKeepCommitted(void* addr, std::size_t size) noexcept;
  // Moves the pages of [from, from+bytes) to [to, to+bytes), both committed spans of this
  // provider (page-aligned, not overlapping), without copying or faulting them: mremap(2)
  // moves their page table entries, and `from` stays a committed span of zero pages that
  // fault in on the placement's node (the free-memory guard follows it as committed and
  // unwritten): with MREMAP_DONTUNMAP (Linux 5.7) its mapping simply stays, bound and
  // advised; on older kernels, and in a process with locked memory (MREMAP_DONTUNMAP would
  // unlock the rest of the mapping), it gets a fresh mapping, bound and advised as when it was
  // first mapped, after a moment in which it is a hole. Only for
  // a placement on one node without hugetlb pages (elsewhere the charges recorded per page
  // name a node the moved pages might not be on, or the pages cannot move).
  //   kNotMoved: nothing moved; `from` keeps its bytes, and `to` is a committed span of the
  //     provider (of zero pages when the kernel refused the move: mremap unmaps the
  //     destination before it checks the source, and a source over two mappings is refused
  //     before Linux 6.17; `to` is mapped again then).
  //   kMoved: `to` holds what `from` held; `from` is zero pages.
  //   kMovedLeftHole: (only where the move unmapped `from`: before Linux 5.7, in a process
  //     with locked memory, or where the kernel refused MREMAP_DONTUNMAP) `to` holds what
  //     `from` held, but `from` could not be mapped again (another thread mapped into the
  //     hole meanwhile, or mbind refused): never use or free it again.
  //   kDestinationLost: nothing moved, `from` keeps its bytes, but `to` could not be mapped
  //     again after a refused move: never use or free it again.
  enum class MoveResult { kNotMoved, kMoved, kMovedLeftHole, kDestinationLost };
  MoveResult MovePages(void* from, void* to, std::size_t bytes) noexcept;
  // True when MovePages can move pages of this provider at all.
  bool CanMovePages() const noexcept { return !hugetlb_ && node_ != kNodeMixed; }
  // True when both addresses lie in the same range (jemalloc may merge extents).
  bool SameRange(const void* a, const void* b) const noexcept;
  // False (kNeverFits in `failure`) when `bytes` exceed the MemTotal of the placement's
  // nodes together, so the arena refuses such a request before jemalloc reserves address
  // space for it. Nodes whose meminfo cannot be read count as unbounded.
  bool CouldEverFit(std::size_t bytes, SpanFailure* failure) const noexcept;

  // --- introspection ----------------------------------------------------------------------
  const Policy& placement() const { return placement_; }
  const ArenaOptions& options() const { return options_; }
  // The single node of the placement, or kNodeMixed.
  int node() const { return node_; }
  // The placement's first node: where the provider's own tables go, and where memory jemalloc
  // allocates for the heap outside its hooks is steered (PlacementScope).
  int first_node() const { return nodes_[0]; }
  // The placement's nodes: nodes()[0 .. node_count()).
  const int* nodes() const { return nodes_; }
  int node_count() const { return node_count_; }
  // True when the placement puts pages on `node`.
  bool places_on(int node) const noexcept {
    for (int i = 0; i < node_count_; ++i) {
      if (nodes_[i] == node) return true;
    }
    return false;
  }
  std::size_t mapped_bytes() const { return mapped_bytes_.load(std::memory_order_relaxed); }
  // Bytes charged now: committed spans and the page tables that describe them.
  std::size_t committed_bytes() const { return committed_bytes_.load(std::memory_order_relaxed); }
  // The page-table part of committed_bytes().
  std::size_t table_bytes() const { return table_bytes_.load(std::memory_order_relaxed); }
  std::uint64_t fallbacks() const { return fallbacks_.load(std::memory_order_relaxed); }
  std::uint64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }
  // The committed node recorded for the page at `addr` (kNodeNone when not committed).
  int CommittedNodeOfPage(const void* addr) const noexcept;

  // In a fork() child: re-creates every provider's lock, which a thread the child does not
  // have may have held. The lock is taken inside jemalloc's hooks, so it cannot be taken
  // before fork (os/fork.hpp); its critical sections never allocate, and every one of their
  // stores leaves the provider consistent (a span carved for a vanished thread is simply
  // never used; a range or mapping step it had not published is made again).
  static void RecreateLocksInForkChild() noexcept;

  // Tests: whether MovePages tries MREMAP_DONTUNMAP first (true at start, and until a kernel
  // refuses it), so that the path for kernels before 5.7 can be run on a newer one.
  static void SetKeepSourceMovesForTesting(bool keep) noexcept;
  // Tests: whether the calling thread's last kMoved kept its source mapped with
  // MREMAP_DONTUNMAP (false: the plain move, the source mapped again).
  static bool LastMoveKeptSourceForTesting() noexcept;

  NodePages(const NodePages&) = delete;
  NodePages& operator=(const NodePages&) = delete;

 private:
  // Maps [begin, begin+bytes), where a move left nothing mapped, as EnsureMapped maps a range
  // (read-write, base pages, bound) and a large commit advises it. False when it cannot (the
  // hole was taken, or mbind refused: then it is left inaccessible).
  bool MapSpanAgain(std::uintptr_t begin, std::size_t bytes) noexcept;
  // Whether all of [to, to+bytes) is mapped (mincore), after a refused move.
  static bool DestinationStillMapped(void* to, std::size_t bytes) noexcept;

  // A reserved range and its page tables. The tables are numarena's own memory and follow
  // the same rules as the pages they describe: one mapping per range, placed on the
  // placement's first node (MPOL_PREFERRED, base pages), and charged like any commit. The
  // mapping starts with one counter per table page (the header, charged once when the range
  // is first used), then one state per page of the range; a page of states is charged when
  // the first page it describes is committed and purged and released with the last.
  struct Range {
    std::uintptr_t base = 0;
    std::uintptr_t end = 0;
    std::uintptr_t bump = 0;        // guarded by mutex_
    std::uintptr_t mapped_end = 0;  // read-write and bound up to here; guarded by mutex_
    std::atomic<std::uint16_t>* pages = nullptr;  // per page: see kState* in node_pages.cpp
    std::atomic<std::uint32_t>* table_pages = nullptr;  // per page of `pages`: kTable*
    void* tables = nullptr;          // the mapping: table_pages, then pages
    std::size_t tables_bytes = 0;
    std::size_t header_bytes = 0;    // the table_pages part, whole pages
    std::atomic<std::uint32_t> header{0};  // kTable* word of the header pages (no count)
  };

  NodePages(const Policy& placement, const ArenaOptions& options, int owner_heap);

  Range* RangeOf(std::uintptr_t addr) const noexcept;
  void ReleaseRanges() noexcept;  // unmaps and untags every range; no span may be live
  // Releases the charges of the committed pages in [begin, end) of `range` (no purge).
  void ReleasePageCharges(Range& range, std::uintptr_t begin, std::uintptr_t end) noexcept;
  bool AddRange(std::size_t min_bytes, SpanFailure* failure) noexcept;  // mutex_ held
  bool EnsureMapped(Range* range, std::uintptr_t end, SpanFailure* failure) noexcept;
  bool PopulateHugetlb(std::uintptr_t begin, std::uintptr_t end, SpanFailure* failure) noexcept;
  bool ApplyPolicy(std::uintptr_t begin, std::uintptr_t end, SpanFailure* failure) noexcept;
  bool BindWithFallback(std::uintptr_t begin, std::uintptr_t end, const os::KernelNodeMask& mask,
                        os::PolicyMode mode, int first_node, SpanFailure* failure) noexcept;
  int NodeIndexOfPage(const Range& range, std::uintptr_t page) const noexcept;
  // Page tables: charging and releasing the pages of a range's tables (see Range).
  bool ChargeTablesHeader(Range& range, SpanFailure* failure) noexcept;
  bool AcquireTablePages(Range& range, std::size_t first, std::size_t last,
                         SpanFailure* failure) noexcept;
  bool AcquireTablePage(Range& range, std::size_t table_page, std::uint32_t pages,
                        SpanFailure* failure) noexcept;
  void ReleaseTablePage(Range& range, std::size_t table_page, std::uint32_t pages) noexcept;
  // Undoes AcquireTablePages(range, first, last) before the pages' states are written.
  void ReleaseTablePages(Range& range, std::size_t first, std::size_t last) noexcept;
  // Fork child: table pages a parent's thread was purging are charged pages again.
  void ClearBusyTablePagesInForkChild() noexcept;
  bool ChargeMetadata(std::size_t bytes, SpanFailure* failure, std::uint32_t* bits) noexcept;
  void ReleaseMetadata(std::size_t bytes, std::uint32_t bits) noexcept;
  std::size_t PagesPerTablePage() const noexcept { return page_ / sizeof(std::uint16_t); }
  void AdviseLargeCommit(std::uintptr_t begin, std::uintptr_t end, bool huge) noexcept;

  Policy placement_;
  ArenaOptions options_;
  int owner_heap_;
  int node_ = kNodeMixed;
  bool interleaved_ = false;  // page interleave: never huge pages
  bool hugetlb_ = false;
  int node_count_ = 0;
  int nodes_[kMaxPlacementNodes] = {};
  os::KernelNodeMask mask_;  // all placement nodes
  std::size_t page_ = 4096;

  mutable std::mutex mutex_;  // bump pointers, mapping steps, adding ranges
  Range ranges_[kMaxRanges];
  std::atomic<int> range_count_{0};

  std::atomic<std::size_t> mapped_bytes_{0};
  std::atomic<std::size_t> committed_bytes_{0};
  std::atomic<std::size_t> table_bytes_{0};
  std::atomic<std::uint64_t> fallbacks_{0};
  std::atomic<std::uint64_t> refusals_{0};
};

// While one is alive on a thread, that thread's commits of 2 MiB or more know the large
// request they are for (`request_bytes`; 0: none). jemalloc rounds a large request up to its
// size class (up to 25 % more: 8 MiB + 1 byte takes a 10 MiB extent), and a huge page over the
// rounding would be faulted in whole by the request's last bytes (Python's bytearray(8 MiB)
// is 8 MiB + 1: each one held 10 MiB, not 8). So a request that only crosses into a huge page
// by a few bytes gets base pages from there on (NodePages::Commit says when). Nests (the
// previous request comes back).
class HugeAdviceLimit {
 public:
  explicit HugeAdviceLimit(std::size_t request_bytes) noexcept;
  ~HugeAdviceLimit();
  HugeAdviceLimit(const HugeAdviceLimit&) = delete;
  HugeAdviceLimit& operator=(const HugeAdviceLimit&) = delete;

 private:
  std::size_t saved_;
};

// Tells the moves that the process has locked memory (mlock, mlock2 or mlockall succeeded):
// from now on they leave the moved-out-of range mapped by mapping it again, never with
// MREMAP_DONTUNMAP, which clears VM_LOCKED on the whole mapping the range lies in (the rest of
// the heap's mapping, other live objects with it). Without this note the moves learn it from
// /proc/thread-self/status, read at most once a second; the malloc override notes each lock
// as it is taken (lib/preload/preload.cpp). Async-signal-safe.
void NoteProcessLockedMemory() noexcept;

}  // namespace numarena
