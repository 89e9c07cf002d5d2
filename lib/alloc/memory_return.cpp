// Memory return: freed memory that nobody reuses goes back to the kernel on a schedule.
//
// Freed objects stay with numarena for reuse: in the threads' front caches, in each heap's
// depot and large cache, and, once handed to jemalloc, as jemalloc's dirty pages. jemalloc
// returns dirty pages by decay, but only when a call into the arena ticks it, and numarena's
// caches let go of an idle class only at the next put; a program that frees a burst and goes
// idle (a server between requests) makes no calls, so without more it keeps its peak resident
// for ever. The peers return it: glibc at free, jemalloc by decay (10 s, with a background
// thread or at the next calls), tcmalloc by a background release, mimalloc after a purge delay
// at its next calls.
//
// The schedule is ArenaOptions::return_idle_ms = D (0: off, the memory stays until purge(), a
// refusal for lack of room, or jemalloc's decay at later calls). For a heap with D > 0:
//   - its jemalloc arenas decay dirty pages over D (dirty_decay_ms = D, no muzzy state: numarena
//     provides no lazy purge);
//   - every D / 4 (10 ms to 1 s) a pass (ReturnIdleMemory) ticks that decay without any call
//     from the program, and returns the depot's classes that nobody took from or put to for
//     that period (at least 50 ms; objects back to their jemalloc slabs, for other classes to
//     reuse);
//   - a heap that moved no memory to or from its shared caches or jemalloc for D is idle: its
//     depot and large cache go back to jemalloc and every dirty page of its shards to the
//     kernel at once.
// So memory freed in a burst is back with the kernel between D and about 1.25 D after the
// program stops freeing. And whatever D (0 included), once a thread's allocations made jemalloc
// commit 1 MiB of fresh pages (ReturnAfterGrowth), the freed memory the heap holds could not
// serve them: the depot's classes unused for 50 ms and the dirty pages of the thread's shard
// go back before the allocation that noticed returns, as glibc unmaps a freed large block at
// once and reuses a freed small one for any size (a phase that frees its buffers and then
// grows otherwise holds both at its peak: redis-server's outgrown hash tables and freed client
// buffers, 12 MiB of its peak). The lists of a thread's own front cache are not returned while
// the thread sleeps (only the thread itself may touch them, without locks): at most a few MiB
// per (thread, heap), design.md's bounds; they go back at the thread's exit or purge(). Its one
// large object (2 MiB to 4 MiB) is: once it has sat in the slot for D the pass takes it
// (ReturnSleepingThreadsLarge; an atomic slot, so the owner's next take simply misses), busy
// heap or not, since a server's workers each keep such a scratch buffer for as long as they
// wait for requests. A put into the slot wakes the returner without making the heap busy.
//
// Placement: returning is purging. jemalloc's purge calls the heap's hooks, which drop the pages
// with MADV_DONTNEED and keep the mapping and its mbind policy, so a page faulted in again
// later lands on the heap's node as the first time did (tests/lab/arena_cache_lab.cpp checks it
// page by page).
//
// The thread that runs the passes, and the activity stamps they read, are heap_activity.cpp's.
#include "alloc/memory_return.hpp"

#include <algorithm>

#include "alloc/depot.hpp"
#include "alloc/heap_activity.hpp"
#include "alloc/jemalloc_heap.hpp"
#include "alloc/large_cache.hpp"

namespace numarena {
namespace {

constexpr std::int64_t kNanosPerMilli = 1'000'000;
constexpr std::int64_t kMaxPeriodNanos = 1000 * kNanosPerMilli;
// The least time a depot class must go unused before a pass returns it: the depot's stamps come
// from the coarse clock (4-10 ms a tick), so a shorter rule could return a chain put a moment
// ago.
constexpr std::int64_t kMinClassIdleNanos = 50 * kNanosPerMilli;

std::int64_t ReturnIdleNanos(const Heap& heap) { return heap.return_idle_ms * kNanosPerMilli; }

struct Pass {
  std::int64_t now_ns;
  std::int64_t shortest_period_ns = kMaxPeriodNanos;
  bool more = false;
};

void ReturnFromHeap(Heap& heap, void* context) {
  Pass& pass = *static_cast<Pass*>(context);
  const std::int64_t idle_ns = ReturnIdleNanos(heap);
  if (idle_ns <= 0) return;
  pass.shortest_period_ns = std::min(pass.shortest_period_ns, MemoryReturnPeriod(idle_ns));
  const std::int64_t since = pass.now_ns - LastHeapActivity(heap.id);
  // Each thread's large object that has sat in its slot for D, whether or not the heap is
  // idle: a thread that sleeps cannot give it back itself, while others keep the heap busy.
  bool young_left = false;
  ReturnSleepingThreadsLarge(heap.id, pass.now_ns, idle_ns, &young_left);
  if (young_left) pass.more = true;
  if (since >= idle_ns) {
    LargeCacheFlush(heap.id);
    DepotFlush(heap.id);
    ForEachShardCall(heap, "purge");
  } else {
    // A class of the depot that nobody took from or put to for a pass's period goes back to
    // jemalloc, not only after the heap's D: objects go back to their slabs, whose pages
    // jemalloc then reuses for the classes the program allocates now.
    // A program that frees one class in a phase and allocates others in the next (redis:
    // LPOP's list nodes, then MSET's strings) otherwise held the first phase's objects beside
    // the second's growth for up to 1.25 D (peak RSS 1.3x the peers'). Pages are not purged
    // here: that waits for the decay over D.
    DepotSweep(heap.id, pass.now_ns, std::max(MemoryReturnPeriod(idle_ns), kMinClassIdleNanos));
    ForEachShardCall(heap, "decay");
  }
  if (since < 2 * idle_ns || DepotBytes(heap.id) + LargeCacheBytes(heap.id) > 0) {
    pass.more = true;
  }
}

bool RunPass(std::int64_t now_ns, std::int64_t* period_ns) noexcept {
  return ReturnIdleMemory(now_ns, period_ns);
}

}  // namespace

bool ReturnIdleMemory(std::int64_t now_ns, std::int64_t* period_ns) noexcept {
  Pass pass{now_ns};
  ForEachLiveHeap(ReturnFromHeap, &pass);
  if (period_ns != nullptr) *period_ns = pass.shortest_period_ns;
  return pass.more;
}

namespace arena_internal {
void ReturnAfterGrowth(int heap) noexcept {
  fresh_commit_bytes = 0;
  DepotSweep(heap, CoarseNanos(), kMinClassIdleNanos);
  // This thread's shard only: the others' dirty pages could not have served it anyway, and
  // purging them would make their threads commit afresh, and so purge this one in turn.
  PurgeThreadShardDirty(heap);
}
}  // namespace arena_internal

void EnableMemoryReturn() noexcept { SetMemoryReturnPass(&RunPass); }

}  // namespace numarena
