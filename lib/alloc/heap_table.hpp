// The heap table: heap id -> Heap, and what a heap is. The main header of lib/alloc.
//
// Inner order of lib/alloc, bottom-up. A file includes its own header and files named before
// it in this list, never one after it, so a call goes down and never comes back up (the layer
// check, cmake/CheckLayers.cmake, reads this list and checks every include):
//   public:    numarena/internal/arena_fast_path.hpp numarena/address_space.hpp
//              numarena/arena.hpp
//   tables:    arena_fast_path class_map
//   pages:     span_failure node_memory_guard node_pages
//   heaps:     heap_table class_record checked heap_activity
//   caches:    depot large_cache front_cache
//   lifecycle: jemalloc_heap
//   return:    memory_return
//   arena:     address_space large_growth arena
//
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

#include "numarena/internal/arena_fast_path.hpp"
#include "numarena/policy.hpp"

namespace numarena {

class NodePages;

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

// The heap's shards that exist now, as jemalloc arena indexes.
template <typename F>
void ForEachShard(const Heap& heap, F&& f) {
  for (const std::atomic<int>& shard : heap.shard_arena) {
    int index = shard.load(std::memory_order_acquire);
    if (index >= 0) f(static_cast<unsigned>(index));
  }
}

// The shard count of a heap whose ArenaOptions::shards is 0, on a host with `cpus` CPUs: one
// per 4 CPUs, at least 1 and at most kMaxShards.
constexpr int DefaultShardCount(unsigned cpus) {
  const unsigned quarter = cpus / 4;
  return quarter < 1 ? 1 : quarter > kMaxShards ? kMaxShards : static_cast<int>(quarter);
}

// Bins per small size class in every jemalloc arena (jemalloc's bin_shards option) of the
// jemalloc that libnumarena.so and the malloc override carry, on a host with `cpus` CPUs.
//
// Why: threads that share a bin refill from the same slabs, so their objects sit side by side
// and each thread's writes take cache lines from the other (two threads replacing random small
// blocks ran no faster on 2 CPUs than on one). jemalloc gives every thread one bin of each
// class by the order in which threads first call it (thread k: bin k % count), and a heap
// gives each thread the least used of its DefaultShardCount(cpus) arenas, in much the same
// order (thread k: arena k % shards). With a count at least cpus / shards and coprime to
// shards, the first shards x count threads each get an (arena, bin) pair of their own, so every
// CPU's thread has its own slabs; a count that shares a factor with shards would give all the
// threads of one arena the same bin (shards 4, count 4: arena k's threads k, k+4, ... all
// take bin k). Each bin costs 224 bytes per class and arena (~8 KiB per arena per count);
// jemalloc allows 1 to 64.
constexpr unsigned BinShardCount(unsigned cpus) {
  constexpr unsigned kMaxBins = 64;  // jemalloc's BIN_SHARDS_MAX
  const auto shards = static_cast<unsigned>(DefaultShardCount(cpus));
  const auto coprime = [shards](unsigned count) {
    unsigned a = count, b = shards;
    while (b != 0) {
      const unsigned r = a % b;
      a = b;
      b = r;
    }
    return a == 1;
  };
  unsigned count = (cpus + shards - 1) / shards;
  if (count < 1) count = 1;
  if (count > kMaxBins) count = kMaxBins;
  for (unsigned up = count; up <= kMaxBins; ++up) {
    if (coprime(up)) return up;
  }
  for (unsigned down = count; down > 1; --down) {
    if (coprime(down)) return down;
  }
  return 1;
}

// The heap with this id (nullptr when none).
Heap* HeapById(int id);

// The table itself: heap id -> heap, nullptr for a free id; ids below g_heap_count have
// been used. Written only by the heap lifecycle (jemalloc_heap.cpp), under its creation lock.
extern std::atomic<Heap*> g_heaps[arena_internal::kMaxHeaps];
extern std::atomic<int> g_heap_count;

}  // namespace numarena
