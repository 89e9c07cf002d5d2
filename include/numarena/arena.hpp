// Arenas: malloc-speed allocation whose pages live where a placement policy says.
//
// An `Arena` is a heap for one placement policy: `Arena::ForNode(1)` hands out memory whose
// pages are bound to node 1 before they are first touched, `Arena::ForPolicy(...)` does the
// same for any `Policy` (bind to a set, preferred with fallback by distance, page interleave,
// weighted chunk interleave, the calling thread's local node). Arenas are created lazily,
// once per distinct (policy, options), live for the whole process, and are thread-safe.
// `Arena::Create` makes an arena of one's own instead, which `Arena::Destroy` takes down with
// everything allocated in it (below).
//
// Under the hood each arena is one or more jemalloc arenas whose extent hooks take spans from
// numarena's node page provider (lib/alloc/node_pages.hpp). Every provider span lies in a virtual
// address range reserved for that arena's placement, so the owner of any numarena pointer,
// and its node, is an O(1) table lookup: `numarena::deallocate(p)` needs no arena or node,
// and `node_of(p)` makes no system call. Objects below 2 MiB go through numarena's own
// front cache (lib/alloc/front_cache.cpp; the state the inline paths read is in
// numarena/internal/arena_fast_path.hpp): per (thread, arena), per size class up to 1.75 MiB,
// a list of freed objects (about 32 KiB per class up to 4 KiB; above that 256 KiB for all of
// them together, so objects above 256 KiB go straight to the shared depot). The
// fast paths are inline: `allocate` pops a list, a `deallocate` pushes one; an unsized one finds
// the class in numarena's class map (a byte per 4 KiB of address space, recorded when jemalloc
// hands the object out; class_map.cpp), not by asking jemalloc. Objects of 2 MiB and more that are
// freed go to their heap's large cache
// (up to 256 MiB per heap, less with a capacity gate, lib/alloc/large_cache.cpp), which
// hands them out again to the same arena, from any thread. Only misses call into jemalloc,
// whose explicit-arena calls (mallocx with flags) always take its slower generic path. What
// the caches hold stays committed and charged like live memory until purge(), thread exit
// (the thread's front caches) or a purge before a refusal for lack of room (below) hands it
// back.
//
// Capacity: before the provider commits memory it asks the process-wide `CapacityGate`
// (`SetCapacityGate`, e.g. a numarena::Budget) and checks the node's free memory, so a full
// node gives nullptr (or ResourceExhausted from `try_allocate`) instead of an OOM kill when
// the pages are touched. Memory freed into numarena's arenas stays committed (and charged)
// until it is purged, by jemalloc's decay or `purge()`; before a refusal for lack of room
// stands, the arena purges the dirty pages of every numarena arena on that node and tries
// once more on a fresh reading of the node's free memory (the calling thread's caches and
// the heaps' depots and large caches are emptied first; every refusal does this, however
// soon after the last), so
// memory one thread freed is not what refuses another, up to what other threads' front
// caches hold (per thread and arena at most about 32 KiB per class up to 4 KiB and 256 KiB of
// larger objects), which only they can hand back. `Preferred` arenas
// then move on to the next node by distance, also when the preferred node is already full
// when the arena is made.
//
// Where an arena's own bookkeeping goes: what numarena makes for an arena lives on the
// arena's node (its first node for multi-node placements) and is charged there like the
// memory it describes: the provider's page tables (2 bytes per page, charged a page at a
// time and given back with the last page they describe, plus a header of 4 bytes per 8 MiB
// of reserved range, charged when the range is first used and kept with it:
// ArenaStats::tables) and each thread's front cache (allocated from the arena's heap).
// The class map that unsized frees read (lib/alloc/class_map.cpp; one byte per 4 KiB of the
// arena's address space in which objects start) prefers the arena's node but is not
// charged: its pages are faulted in by stores on the allocation fast path.
// jemalloc also allocates for a heap outside its extent hooks: a new jemalloc arena's
// statistics and the leaves of its extent map when the heap's address space grows. numarena
// has jemalloc do that with the calling thread's memory policy preferring the heap's node
// (restored exactly afterwards), so those pages land there too; jemalloc offers no way to
// charge them, so they are placed but not charged. Not placed: the few pages of its own
// metadata jemalloc touches after numarena's hooks have returned (1-2 pages per thread's
// first use of an arena in the lab),
// the process's one-time setup in its first ForPolicy call, and, now and then, a leaf of
// jemalloc's extent map (2 MiB, one per GiB of address space it covers, shared by every
// arena so no node is right for it) that jemalloc makes when it splits an extent it already
// holds, with no hook call first; those go on the calling thread's node
// (tests/lab/arena_memory_lab.cpp bounds them).
//
//   auto arena = numarena::Arena::ForNode(1);
//   if (!arena.ok()) { std::cerr << arena.status() << "\n"; return; }
//   void* p = (*arena)->allocate(4096);
//   if (p == nullptr) std::cerr << numarena::last_allocation_error() << "\n";
//   numarena::deallocate(p);                       // any thread, no arena needed
//
//   auto kv = numarena::Arena::ForPolicy(numarena::Policy::WeightedInterleave({{0, 3}, {1, 1}}));
//   StatusOr<void*> big = (*kv)->try_allocate(std::size_t{1} << 30);
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "numarena/capacity.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"

namespace numarena {

// A snapshot of one arena (all its jemalloc arenas summed). Byte counts are jemalloc's
// ("stats.arenas.<i>.*" after an "epoch" refresh) except `committed`, which is the page
// provider's own count of bytes charged against the capacity gate.
struct ArenaStats {
  // Bytes in live allocations (small + large), counting objects that sit freed in thread
  // caches (numarena's front caches; jemalloc's in checked mode) until purge() or thread
  // exit, and in the arena's depot and large cache until purge(), but not the front caches
  // themselves (one per thread that uses the arena, in its memory).
  std::size_t allocated = 0;
  // The part of `allocated` that is freed objects the arena's shared caches keep for any of
  // its threads to reuse (per heap: the depot, 16 B to 1.75 MiB, and the large cache,
  // 2 MiB to 256 MiB); purge() returns them. The threads' own caches are not counted.
  std::size_t cached = 0;
  std::size_t active = 0;     // bytes in pages holding live allocations
  std::size_t resident = 0;   // bytes jemalloc believes are resident (upper bound)
  std::size_t mapped = 0;     // bytes of provider spans jemalloc holds (active + dirty + ...)
  std::size_t committed = 0;  // bytes the provider has committed and charged now
  // The part of `committed` that is numarena's own page tables (2 bytes per page the arena
  // has committed, charged and placed on its node like the pages they describe).
  std::size_t tables = 0;
  std::size_t retained = 0;   // bytes of address space held but purged (no memory)
  // Times the arena placed memory somewhere else than asked: a Preferred arena moved to the
  // next node by distance, or an Advisory policy the kernel refused was weakened
  // (membind -> preferred -> none).
  std::uint64_t fallbacks = 0;
  // Commits refused by the capacity gate or the node's free-memory check.
  std::uint64_t refusals = 0;
  // jemalloc arenas behind this arena: per node heap, one per group of threads (up to 8,
  // no more than the CPUs), each with a 2 MiB metadata block counted in `committed`.
  int jemalloc_arenas = 0;
};

namespace arena_internal {
struct OverrideFastPath;  // lib/preload/override_fast_path.hpp
}  // namespace arena_internal

class Arena {
 public:
  // The arena that binds to `node` (Policy::Bind(node), strict). Created on first use.
  // InvalidArgument for a node that is not online or not allowed to this process.
  //
  //   void* p = numarena::Arena::ForNode(0).value()->allocate(256);
  [[nodiscard]] static StatusOr<Arena*> ForNode(int node);

  // The arena for `policy` (and `options`), created on first use: the same policy always
  // gives the same arena. The policy is validated against Topology::system(); errors:
  // InvalidArgument (see Policy::Validate and ArenaOptions), PermissionDenied or
  // FailedPrecondition when a Strict policy is refused by the kernel,
  // ResourceExhausted when numarena's arena table (kMaxHeaps jemalloc arenas) is full, or
  // when the node cannot take the arena's first metadata block (2 MiB): for Bind and
  // interleave policies, when a node of the placement cannot; for Preferred, only when no
  // allowed node can (a full preferred node makes an arena that spills to the next node by
  // distance and returns to the preferred node once it has room, trying at most every
  // 50 ms).
  //
  //   auto local = numarena::Arena::ForPolicy(numarena::Policy::Local());
  //   auto cxl = numarena::Arena::ForPolicy(numarena::Policy::Preferred(2));
  [[nodiscard]] static StatusOr<Arena*> ForPolicy(const Policy& policy,
                                                  const ArenaOptions& options = {});

  // A new arena of its own for `policy` (and `options`) that Destroy can take down again,
  // e.g. one per request, per model load or per tenant. Never shared: every call makes
  // another, and ForNode/ForPolicy never return it. Same placement, speed and errors as
  // ForPolicy (it validates and resolves the policy the same way). While it lives it holds
  // heaps of numarena's table (kMaxHeaps, 256, shared with ForPolicy's arenas: one heap for
  // Bind and interleave policies, one per node used for Preferred and Local), each with a
  // 2 MiB metadata block charged on its node; Destroy gives them back.
  //
  //   auto request = numarena::Arena::Create(numarena::Policy::Bind(1));
  //   if (!request.ok()) return request.status();
  //   void* kv = (*request)->allocate(64 << 20);
  //   ...
  //   numarena::Arena::Destroy(*request).IgnoreError();  // kv, and all the rest, are gone
  [[nodiscard]] static StatusOr<Arena*> Create(const Policy& policy,
                                               const ArenaOptions& options = {});

  // Destroys an arena made by Create and deletes `arena`, giving back at once everything it
  // holds: every allocation still live in it, whatever numarena's and jemalloc's caches of
  // every thread keep of it, its pages, page tables, jemalloc metadata and address ranges go
  // back to the kernel, every charge it holds on the capacity gate is released, and its heap
  // slots and jemalloc arena indexes are reused by the next arenas.
  //
  // Pointers. Every pointer the arena handed out is invalid from the call on, live or not:
  // reading or writing through one is undefined (the memory is unmapped: usually a crash), and
  // so is freeing one. numarena usually catches such a free (the address is no longer
  // numarena's: it says so on stderr and aborts, as for a pointer from malloc), but not once
  // a later arena got the same address range; then it corrupts that arena. Free or forget
  // them all first.
  //
  // Threads. The caller must make sure that no thread is inside a call on the arena (allocate,
  // purge, stats...) or frees one of its pointers while Destroy runs, and that their last such
  // calls happen before Destroy (joined, or synchronized by a mutex or a release/acquire
  // pair). Other threads need do nothing else: Destroy drops their cached objects of the arena
  // itself, and they may use other arenas meanwhile; a thread that cached objects of it and
  // then uses an arena made later in the same slot gets only that arena's memory.
  //
  // What is left. The capacity gate's charges of the arena go back to exactly what they were
  // before Create: no byte of it stays charged. The process's resident memory goes back to
  // within 8 MiB of where it was (jemalloc keeps, and reuses for the next arenas, a little
  // metadata of its own outside the arena: the bookkeeping of destroyed arena indexes and the
  // per-thread caches' structures): tests/alloc/arena_lifecycle_test.cpp runs 10,000
  // create/destroy cycles and checks both.
  //
  // Not from inside a capacity gate's callback (a reclaim hook or listener, which numarena
  // runs while it commits, purges or destroys memory): numarena may be inside jemalloc there.
  //
  // Errors: InvalidArgument for nullptr; FailedPrecondition, with nothing destroyed, for an
  // arena made by ForNode/ForPolicy (shared, they live for the process) and for a call from
  // inside such a callback when numarena can tell (during a heap creation, purge for room or
  // destruction); InternalError when jemalloc refuses to destroy one of its arenas (not seen in
  // practice: that heap's memory then stays allocated, and `arena` is deleted all the same).
  // Destroying an arena twice is undefined, like a double free.
  [[nodiscard]] static Status Destroy(Arena* arena);

  // `size` bytes aligned to `alignment` (a power of two), or nullptr with the reason in
  // last_allocation_error(). Every size is aligned, the smallest too: a request of up to 8
  // bytes with alignment 16 (the default) is served from the 16-byte class. size 0 gives a
  // unique minimal allocation. Allocations of 2 MiB and more are 2 MiB aligned. An alignment
  // of up to 64 bytes for sizes up to 1.75 MiB, or of up to 4 KiB for sizes up to 4 KiB, is
  // served from the same thread caches as the default alignment (from the size class of
  // `size` rounded up to `alignment`); larger ones take jemalloc's aligned path.
  // Thread-safe; never throws.
  void* allocate(std::size_t size, std::size_t alignment = alignof(std::max_align_t)) noexcept {
    if (alignment - 1 < alignof(std::max_align_t) && (alignment & (alignment - 1)) == 0) {
      if (has_fast_path_) {
        size = arena_internal::RequestSize(size, alignment);
        if (size - 1 < kFastLimit) {
          if (void* p = arena_internal::AllocateFromThreadCaches(primary_heap_, size)) return p;
          if (arena_internal::front_caches[primary_heap_] != nullptr) {
            return AllocateAfterFastMiss(size);
          }
        }
      } else if (local_fast_path_) {
        return AllocateLocal(size, alignment);
      }
    }
    return AllocateSlow(size, alignment);
  }

  // Like allocate, with the reason on failure: InvalidArgument (alignment not a power of
  // two, size too large, the thread's PriorityScope holds a value that is not a Priority),
  // ResourceExhausted (capacity gate or node free memory refused, or the size is larger than
  // the placement's nodes hold in total; the message names the node and the numbers),
  // FailedPrecondition (no hugetlb pages), PermissionDenied (kernel refused a Strict
  // binding), Unavailable (called while the thread exits, from a pthread key destructor that
  // runs after jemalloc has released the thread's state: no arena can serve the thread then).
  // Refusals do not pile up address space: a request whose size, or size and alignment
  // together, exceed what its nodes hold is refused before anything is reserved, and of
  // other refused requests jemalloc keeps at most the span of the first (later allocations
  // reuse it), so a hundred refusals in a row leave the process's virtual size and the
  // reason as they were after the first.
  [[nodiscard]] StatusOr<void*> try_allocate(std::size_t size,
                                             std::size_t alignment = alignof(std::max_align_t));

  // Frees `p` (from any numarena arena, on any thread). nullptr is ignored.
  void deallocate(void* p) noexcept;
  // Sized free: `size` and `alignment` must be those given to allocate.
  void deallocate(void* p, std::size_t size,
                  std::size_t alignment = alignof(std::max_align_t)) noexcept;

  // Resizes the allocation at `p` to `size` bytes in this arena, keeping its first
  // min(size, old usable size) bytes, as C's realloc does. The result is `p` itself when
  // this arena made `p` (contains), `p` is aligned to `alignment`, and `size` falls in the
  // size class `p` already has (so a sized deallocate of the result with `size` and
  // `alignment` is correct either way), and also when `p` is a large block (2 MiB or more)
  // that grows to `size` where it lies because the address space after it is free: nothing
  // is copied and only the new part is committed, on the block's placement (a sized
  // deallocate then takes the new size). Otherwise it is a new allocation of this arena, on
  // this arena's placement (a pointer from another arena moves to this one's nodes), with the
  // bytes copied and `p` freed. nullptr `p` is allocate(size, alignment); size 0 gives a
  // minimal allocation, as allocate(0) does (C's numarena_realloc frees instead).
  //
  // On failure it returns nullptr and `p` stays allocated and unchanged, with the reason in
  // last_allocation_error(): allocate's reasons, or InvalidArgument for a `p` numarena does
  // not own (freed by nothing: it is not numarena's to free). Checked mode (NUMARENA_CHECK=1)
  // always moves, so every size it records stays exact. Thread-safe; never throws.
  //
  //   auto* buf = static_cast<float*>(arena->allocate(1024 * sizeof(float)));
  //   void* grown = arena->reallocate(buf, 4096 * sizeof(float));
  //   if (grown == nullptr) return numarena::last_allocation_error();  // buf still valid
  //   buf = static_cast<float*>(grown);
  void* reallocate(void* p, std::size_t size,
                   std::size_t alignment = alignof(std::max_align_t)) noexcept;

  // True when `p` points into memory of one of this arena's heaps: this arena allocated
  // it (and it has not been freed). An arena made by Create contains nothing another arena
  // handed out, even on the same node. O(1) for Bind and interleave arenas, O(nodes) for
  // Preferred and Local; no system call.
  bool contains(const void* p) const noexcept;

  const Policy& policy() const { return policy_; }
  const ArenaOptions& options() const { return options_; }

  // Returns the arena's unused dirty pages to the kernel now (instead of after jemalloc's
  // decay time) and releases their charge on the capacity gate. Objects freed into the
  // calling thread's caches and the arena's shared caches go back first; other threads'
  // cached objects stay until those threads overflow their lists or exit (with
  // ArenaOptions::return_idle_ms, their single objects of 2 MiB to 4 MiB go back too once
  // unused for that long). What one thread's
  // cache for one heap holds at most: about 32 KiB per size class up to 4 KiB, plus up to
  // 8 MiB more when its lists grow for batches freed together, 256 KiB of larger objects up
  // to 256 KiB each, and one object of 2 MiB to 4 MiB. The shared caches, per heap: the depot
  // (objects of 16 B to 1.75 MiB that the threads' caches had no room for, up to 128 MiB, and
  // a size class nobody took from for a second goes back by itself) and the large cache
  // (2 MiB to 256 MiB, up to 256 MiB); ArenaStats::cached counts them. With a capacity gate
  // installed (SetCapacityGate, a Budget) that is 1 MiB of growth, 256 KiB of larger objects, a
  // single object of 2 MiB, a 32 MiB depot and a 64 MiB large cache, and when the gate
  // reports pressure on a node of the heap (CapacityGate::CachesShouldShrink; a Budget from
  // its warn line on) no growth, 64 KiB, no single object kept (from the next free on), no
  // depot and no large cache (both flushed at their next put), the lists' bounds applied at
  // each thread's next list overflow.
  void purge();

  // A snapshot of the arena's counters. Costs a few mallctl calls; not for hot paths.
  ArenaStats stats() const;

  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

 private:
  friend class ArenaRegistry;
  // The malloc override's allocation fast path (lib/preload/override_fast_path.hpp) reads the
  // members allocate's fast path reads, to pop without calling anything.
  friend struct arena_internal::OverrideFastPath;
  Arena(const Policy& policy, const ArenaOptions& options);
  ~Arena();

  static constexpr std::size_t kFastLimit = arena_internal::kFrontMaxCached;

  [[nodiscard]] Status Init();
  void* AllocateSlow(std::size_t size, std::size_t alignment) noexcept;
  // An alignment above alignof(max_align_t) that the caches can serve for this size (see
  // arena_internal::AlignedCachedRequest): from the calling thread's caches, or nullptr.
  void* AllocateAlignedFromCaches(std::size_t size, std::size_t alignment) noexcept;
  // The fast path's mallocx on the primary heap just failed (its hooks said why).
  void* AllocateAfterFastMiss(std::size_t size) noexcept;
  // Local's fast path: the front cache of the heap of the calling thread's node, once that
  // heap exists; the slow path otherwise (and on any miss jemalloc cannot serve).
  void* AllocateLocal(std::size_t size, std::size_t alignment) noexcept;
  // Preferred / Local: the heap of the calling thread's node, -1 while it has none.
  int CurrentNodeHeap() const noexcept;
  void* AllocateWithFallback(std::size_t size, std::size_t alignment, bool primary_tried,
                             Status* error) noexcept;
  void* AllocateOnHeap(int heap, std::size_t size, std::size_t alignment, Status* error) noexcept;
  void* RefuseForeignAllocation(void* p, std::size_t size, Status* error) noexcept;
  int HeapForNode(int node, Status* error) noexcept;
  // Destroy's work: every heap of the arena (FailedPrecondition, with none destroyed, when
  // called from inside a capacity gate callback).
  [[nodiscard]] Status DestroyHeaps();

  Policy policy_;
  ArenaOptions options_;
  int primary_heap_ = 0;          // heap of the fast path
  bool has_fast_path_ = false;    // false for Local, which picks a heap per call
  bool local_fast_path_ = false;  // Local: AllocateLocal picks the heap of the caller's node
  // Preferred / Local: heap per node (-1 = not created yet), indexed by node id.
  std::atomic<int>* node_heaps_ = nullptr;
  int node_heap_count_ = 0;
  // Preferred / Local, per node: when a failed heap creation may be retried, and why it failed.
  struct NodeHeapRetry;
  NodeHeapRetry* node_heap_retry_ = nullptr;
  // Preferred: Policy::FallbackOrder, the listed nodes in order, then the others by distance.
  std::vector<int> fallback_order_;
  std::atomic<std::uint64_t> fallbacks_{0};
  bool destroyable_ = false;  // made by Create
};

// Misuse. Freeing a pointer outside numarena's address ranges (from malloc, another
// allocator, the stack) is always detected: numarena says so on stderr and aborts. So is a
// block freed twice in a row on one thread, up to 4 MiB (what glibc's default catches: the
// block is then the head of the thread's cache list, a comparison the free makes anyway).
// Otherwise, inside its ranges the fast paths trust the caller, and these are undefined
// behaviour that numarena does not detect by default:
//   - another double free (a small object is then handed out twice, a large one crashes
//     jemalloc);
//   - freeing an address numarena never returned (a pointer into the middle of an object,
//     or a stray one): a crash in jemalloc or a corrupt heap;
//   - a sized free whose size or alignment differs from the allocation's: the object goes
//     back to the wrong size class and is later handed out for requests it is too small for;
//   - use after free and writes past the end of an object (never detected: numarena's memory
//     is not instrumented by AddressSanitizer).
// Checked mode detects the first three: it reports the call, the pointer and what is wrong
// with it on stderr and aborts. Turn it on with the environment variable NUMARENA_CHECK=1; it
// is read once, when the first arena is created, and holds for the life of the process. In
// checked mode every allocation and free takes the out-of-line path (no front cache) and a
// locked table lookup, several times slower than the fast paths, which do not change when
// checking is off.
//
// Frees any pointer numarena allocated, on any thread; nullptr is ignored (see Misuse above).
inline void deallocate(void* p) noexcept {
  const int heap = arena_internal::HeapOf(p);
  if (heap >= 0) {
    arena_internal::DeallocateFromHeap(heap, p);
    return;
  }
  arena_internal::DeallocateSlow(p);
}

// Sized free: `size` and `alignment` exactly as given to allocate (an alignment up to
// alignof(max_align_t) counts as alignof(max_align_t)).
inline void deallocate(void* p, std::size_t size,
                       std::size_t alignment = alignof(std::max_align_t)) noexcept {
  const int heap = arena_internal::HeapOf(p);
  if (heap >= 0) {
    // The class allocate used for this size and alignment.
    const std::size_t request = arena_internal::CachedRequest(size, alignment);
    if (request != 0) {
      if (arena_internal::FrontCache* cache = arena_internal::front_caches[heap]) {
        arena_internal::FrontPush(heap, cache, arena_internal::ClassOfRequest(request), p);
        return;
      }
    }
  }
  arena_internal::DeallocateSizedSlow(p, size, alignment);
}

// The members are the free functions, inline like them, so that a sized free through the
// member also folds a constant size's class at compile time and costs no extra call.
inline void Arena::deallocate(void* p) noexcept { numarena::deallocate(p); }
inline void Arena::deallocate(void* p, std::size_t size, std::size_t alignment) noexcept {
  numarena::deallocate(p, size, alignment);
}

// True when `p` points into memory numarena's arenas manage. O(1), no system call.
inline bool owns(const void* p) { return arena_internal::HeapOf(p) >= 0; }

// Usable bytes of the allocation at `p` (at least the size asked for); 0 when numarena
// does not own `p`. `p` must be a live allocation (checked mode aborts otherwise).
std::size_t usable_size(const void* p);

// True when checked mode is on (NUMARENA_CHECK=1; see Misuse above). The first call, or the
// first arena, reads the environment; the answer never changes afterwards.
bool checked_mode();

// The node the arena that allocated `p` places its pages on: a node id for single-node
// Bind arenas and for the per-node heaps of Preferred and Local arenas; kNodeMixed for
// interleaved and multi-node arenas; kNodeNone when numarena does not own `p`. O(1), no
// system call. It reports the placement asked of the kernel: use page_nodes() to see
// where pages really are (e.g. after an Advisory policy fell back).
int node_of(const void* p);

// The reason the most recent failed allocation on this thread returned nullptr (OK when
// none has failed). Cleared by the next failure only, not by successes.
//
//   if (void* p = arena->allocate(n); p == nullptr) log(numarena::last_allocation_error());
Status last_allocation_error();

// Installs the process-wide capacity gate that the page provider charges before committing
// memory and releases after purging (nullptr: no gate). Set it before the first allocation
// (or when nothing is charged): pages committed under one gate are released to whichever
// gate is installed when they are purged, and pages committed without a gate are never
// released to one. The gate must outlive every arena use. Returns the previous gate.
//
//   static numarena::Budget budget(...);
//   numarena::SetCapacityGate(&budget);
CapacityGate* SetCapacityGate(CapacityGate* gate);
CapacityGate* GetCapacityGate();

}  // namespace numarena
