// The heap lifecycle: creating and destroying heaps (the heap table, heap_table.hpp, says what
// a heap is), each thread's flags and caches of every heap, the extent hooks, and purging a
// node's dirty pages.
#pragma once

#include <jemalloc/jemalloc.h>

#include <atomic>

#include "alloc/heap_table.hpp"
#include "alloc/node_pages.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"
#include "os/os.hpp"

namespace numarena {

// While alive, the calling thread's new pages prefer `node` (set_mempolicy MPOL_PREFERRED;
// preferred, not bound, so bookkeeping never OOM-kills), and its previous policy is put back
// exactly afterwards. jemalloc allocates some memory for a heap outside the heap's extent
// hooks, from its default arena 0 and its own metadata base, on pages first touched by the
// calling thread: an explicit thread cache (tcache.create, checked mode), the statistics of a
// new arena (arenas.create), the radix-tree leaves of its extent map. numarena runs the calls
// that make those under this scope, so the pages land on the heap's node instead of the
// caller's.
// Allocation-free.
class PlacementScope {
 public:
  explicit PlacementScope(int node) noexcept;
  ~PlacementScope();
  PlacementScope(const PlacementScope&) = delete;
  PlacementScope& operator=(const PlacementScope&) = delete;

 private:
  bool active_ = false;
  os::ThreadPolicy saved_;
};

// Ends the calling thread's grow window, if one is open (see jemalloc_heap.cpp: between
// jemalloc's request for more address space and its commit, the thread's new pages prefer
// the heap's node). The arena's slow path calls it after jemalloc returns, in case jemalloc
// failed between the two hooks. Allocation-free.
void EndHeapGrowWindow() noexcept;

// Creates a heap for `placement` (kBind, kInterleave or kWeightedInterleave, validated).
// ResourceExhausted when kMaxHeaps heaps exist; provider errors as NodePages::Create.
[[nodiscard]] StatusOr<Heap*> CreateHeap(const Policy& placement, const ArenaOptions& options);

// Destroys heap `id`: every thread's caches of it (numarena's front caches and jemalloc's
// thread caches, dropped by the calling thread), its large cache, its jemalloc arenas (with
// every object in them) and its page provider (address ranges, page tables, granule tags,
// class map tables). Every charge it held on the capacity gate is released, and the id is
// free for the next CreateHeap. No thread may allocate from the heap, free its objects or
// touch its pages meanwhile or afterwards. FailedPrecondition when called from inside
// numarena (a capacity gate callback during a commit, purge or destruction); InternalError,
// with the heap kept, when jemalloc refuses to destroy an arena.
[[nodiscard]] Status DestroyHeap(int id);

// Calls visit(heap, context) for every heap, with no heap destroyed meanwhile (the walk holds
// the lock DestroyHeap takes). Not from extent hooks.
void ForEachLiveHeap(void (*visit)(Heap&, void*), void* context) noexcept;

// Gives the kernel back the dirty pages of every heap that places pages on `node` (the
// calling thread's cached objects of those heaps first, then arena.<i>.purge of each shard),
// releasing their charges; returns the bytes released. For a commit the capacity gate or the
// node's free memory just refused: memory numarena holds freed must not make it refuse.
// Every call purges, so memory freed straight to jemalloc moments before (a cache's overflow,
// a large free) is never what refuses the next allocation; with nothing dirty a call costs a
// few microseconds per shard.
// Not from extent hooks.
std::size_t PurgeDirtyOnNode(int node) noexcept;

// Runs mallctl("arena.<i>.<action>") for every shard of `heap` that exists now ("purge":
// its dirty pages go back to the kernel; "decay": those past their decay time). Not from
// extent hooks.
void ForEachShardCall(const Heap& heap, const char* action) noexcept;

// ForEachShardCall(heap, "purge") and nothing else (no cache is flushed): for a large
// allocation that the large objects just freed to jemalloc cannot hold
// (Arena::AllocateOnHeap), whose pages would otherwise stay resident beside the new ones.
// Nothing when `heap` is not live.
void PurgeHeapDirty(int heap) noexcept;

// NodePages::MovePages on `heap`'s provider, under the shared side of the lock a heap's
// destruction and fork()'s prepare take whole: no fork() copies the address space while the
// source range is a hole (a child would find one in a live extent), and no destruction unmaps
// the ranges meanwhile. kNotMoved when the heap does not exist.
NodePages::MoveResult MoveHeapPages(int heap, void* from, void* to, std::size_t bytes) noexcept;

// The dirty pages of the calling thread's own shard of `heap` (every shard's when the thread
// has none yet) go to the kernel: what jemalloc could have carved this thread's allocations
// from (a jemalloc arena reuses only its own extents). Nothing when `heap` is not live.
void PurgeThreadShardDirty(int heap) noexcept;

// The large object each thread's front cache keeps for `heap` (one of 2 MiB to 4 MiB per
// thread, FrontLargePut) goes back to jemalloc if it was put there at least `min_age_ns`
// before `now_ns` (any object when `min_age_ns` is 0: a refusal for lack of room). For the
// memory return: a thread that sleeps makes no call that would free it, and a server's worker
// threads that each used a 2-4 MiB scratch buffer would otherwise hold one each for as long
// as they sleep. The owners' lists stay theirs (no lock guards
// them). Returns the bytes freed; *young_left is set when a younger object stayed. Call from
// inside ForEachLiveHeap (no heap is destroyed meanwhile); not from extent hooks.
std::size_t ReturnSleepingThreadsLarge(int heap, std::int64_t now_ns, std::int64_t min_age_ns,
                                       bool* young_left) noexcept;

// This thread's mallocx flags for `heap` (arena_internal::thread_flags): its shard's
// MALLOCX_ARENA and its own MALLOCX_TCACHE, creating both on first use. The tcache part is
// MALLOCX_TCACHE_NONE when jemalloc's explicit cache table is full or the thread is exiting.
// In checked mode the flags are kept elsewhere and arena_internal::thread_flags stays 0.
int EnsureThreadCache(int heap) noexcept;

// This thread's flags for `heap` without creating anything: 0 when it has none yet.
int ThreadFlags(int heap) noexcept;

// True once the calling thread's exit has released its caches (its thread_local destructors
// are running, or over): a thread_local constructed now might never be destroyed.
bool ThreadExiting() noexcept;

}  // namespace numarena
