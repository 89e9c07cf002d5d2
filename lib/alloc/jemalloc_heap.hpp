// A heap: jemalloc arenas whose extent hooks take spans from one NodePages provider.
//
// numarena's arenas are built from heaps: a Bind or interleave arena has one, a Preferred or
// Local arena one per node it has used. Each heap owns one set of extent hooks (embedded in
// the Heap, so a hook finds its provider from the hooks pointer jemalloc passes back) and up
// to kMaxShards jemalloc arenas made with mallctl("arenas.create") over those hooks; each
// thread takes the shard with the fewest live threads, so large allocations, which take an
// arena lock, do not serialize two threads. jemalloc's default thread cache is shared by all
// arenas and would hand an object freed into one node's arena to a caller of another node's
// arena (jemalloc issues #1016, #518), so it is never used: numarena's front cache is the
// thread cache, per (thread, heap), and calls pass MALLOCX_TCACHE_NONE. Without the front
// cache (checked mode) each thread gets an explicit jemalloc cache per heap
// (mallctl("tcache.create"), used with MALLOCX_TCACHE, destroyed when the thread exits).
// Shards of one heap share its provider, so mixing between them is harmless: every object is
// on the heap's node.
//
// Cost of a shard: jemalloc commits a 2 MiB metadata block per arena through the hooks, so
// each shard charges 2 MiB to the capacity gate (mostly untouched, so not resident).
//
// The hooks never allocate (jemalloc issue #978):
//   alloc        carve a span from the provider's range (commit it if asked)
//   dalloc       opt out: jemalloc keeps the address space (retain); it is unmapped only
//                when the heap is destroyed (DestroyHeap), by the provider
//   destroy      purge and release the charge (jemalloc gives up an extent for good: its
//                arena is being destroyed)
//   commit       charge against the free-memory guard and the capacity gate
//   decommit     purge (MADV_DONTNEED, mapping and binding kept) and release the charge
//   purge_forced purge, keep the charge (jemalloc still counts the range committed)
//   purge_lazy   not provided (MADV_FREE would keep charges ambiguous)
//   split/merge  allowed within one reserved range
#pragma once

#include <jemalloc/jemalloc.h>

#include <atomic>

#include "alloc/node_pages.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"
#include "os/os.hpp"

namespace numarena {

// jemalloc arenas per heap at most. What misses numarena's caches takes a jemalloc arena's
// lock, so threads sharing one arena serialize on it; a heap spreads its threads over up to
// ArenaOptions::shards arenas (all with the same hooks, so the same provider and node),
// created when a thread first needs one.
inline constexpr int kMaxShards = ArenaOptions::kMaxShards;

struct Heap {
  extent_hooks_t hooks;  // first member: jemalloc hands &hooks back to every hook
  int id = -1;
  NodePages* pages = nullptr;
  int shard_limit = 1;  // shards this heap may create (ArenaOptions::shards, resolved)
  // jemalloc arena index of each shard, -1 until created. Shard 0 exists with the heap.
  std::atomic<int> shard_arena[kMaxShards];
  // Live threads assigned to each shard: a new thread takes the least used one, so two busy
  // threads never share a shard while another is free.
  std::atomic<int> shard_threads[kMaxShards];
  // Front caches allocated from this heap (one per thread that uses it); statistics leave
  // them out of the bytes the arena's callers hold.
  std::atomic<int> front_caches{0};
  // ArenaOptions::return_idle_ms: 0, or how long memory nobody uses stays before it goes back
  // to the kernel (memory_return.hpp); each shard's dirty_decay_ms.
  std::int64_t return_idle_ms = 0;
};

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

// The heap's shards that exist now, as jemalloc arena indexes.
template <typename F>
void ForEachShard(const Heap& heap, F&& f) {
  for (const std::atomic<int>& shard : heap.shard_arena) {
    int index = shard.load(std::memory_order_acquire);
    if (index >= 0) f(static_cast<unsigned>(index));
  }
}

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

// The heap with this id (nullptr when none).
Heap* HeapById(int id);

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
