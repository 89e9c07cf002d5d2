// A heap: one jemalloc arena whose extent hooks take spans from one NodePages provider.
//
// numarena's arenas are built from heaps: a Bind or interleave arena has one, a Preferred or
// Local arena one per node it has used. Each heap owns a jemalloc arena made with
// mallctl("arenas.create") and a set of extent hooks (embedded in the Heap, so a hook finds
// its provider from the hooks pointer jemalloc passes back), and each thread gets its own
// jemalloc thread cache per heap (mallctl("tcache.create"), used with MALLOCX_TCACHE and
// destroyed when the thread exits). jemalloc's default thread cache is shared by all arenas
// and would hand an object freed into one node's arena to a caller of another node's arena
// (jemalloc issues #1016, #518); explicit per-heap caches never mix.
//
// The hooks never allocate (jemalloc issue #978):
//   alloc        carve a span from the provider's range (commit it if asked)
//   dalloc       opt out: jemalloc keeps the address space (retain), it is never unmapped
//   destroy      purge and release the charge
//   commit       charge against the free-memory guard and the capacity gate
//   decommit     purge (MADV_DONTNEED, mapping and binding kept) and release the charge
//   purge_forced purge, keep the charge (jemalloc still counts the range committed)
//   purge_lazy   not provided (MADV_FREE would keep charges ambiguous)
//   split/merge  allowed within one reserved range
#pragma once

#include <jemalloc/jemalloc.h>

#include "node_pages.hpp"
#include "numarena/arena.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"

namespace numarena {

struct Heap {
  extent_hooks_t hooks;  // first member: jemalloc hands &hooks back to every hook
  int id = -1;
  unsigned arena_index = 0;
  int mallocx_arena = 0;  // MALLOCX_ARENA(arena_index)
  NodePages* pages = nullptr;
};

// Creates a heap for `placement` (kBind, kInterleave or kWeightedInterleave, validated).
// ResourceExhausted when kMaxHeaps heaps exist; provider errors as NodePages::Create.
[[nodiscard]] StatusOr<Heap*> CreateHeap(const Policy& placement, const ArenaOptions& options);

// The heap with this id (nullptr when none).
Heap* HeapById(int id);

// This thread's MALLOCX_TCACHE flags for `heap`, creating the thread cache on first use.
// MALLOCX_TCACHE_NONE when jemalloc's explicit cache table is full or the thread is exiting.
int EnsureThreadCache(int heap) noexcept;

}  // namespace numarena
