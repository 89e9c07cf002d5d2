// Memory return: what the heaps' shared caches and jemalloc's dirty pages hold while nobody uses
// it goes back to the kernel on a schedule, with or without calls (see memory_return.cpp). The
// activity stamps and the thread that runs the passes: heap_activity.hpp.
#pragma once

#include <cstdint>

#include "alloc/heap_activity.hpp"

namespace numarena {

// One pass of the returner, as if the clock read `now_ns`: for every heap with
// ArenaOptions::return_idle_ms = D > 0,
//   - idle for D (no activity since now - D): its depot and large cache go back to jemalloc and
//     all its shards' dirty pages to the kernel (arena.<i>.purge);
//   - otherwise: the depot's classes that nobody took from or put to for the pass period
//     (D / 4, 10 ms to 1 s; at least 50 ms) go back to jemalloc, and each shard's dirty
//     pages decay (arena.<i>.decay, over D).
// Returns true when some heap may still have something to return (used within the last
// 2 D, or holding cached objects); *period_ns (when not null) gets the shortest D / 4 (10 ms to
// 1 s), how long the thread waits for the next pass. Tests call it with a clock of their own.
bool ReturnIdleMemory(std::int64_t now_ns, std::int64_t* period_ns = nullptr) noexcept;

// arena_internal::ReturnAfterGrowth(heap) (declared in numarena/internal/arena_fast_path.hpp,
// defined in memory_return.cpp): once a thread's allocations made jemalloc commit 1 MiB of
// fresh pages, the depot's classes nobody took from or put to for 50 ms go back to jemalloc and
// the dirty pages of the thread's own shard of the heap to the kernel, before the allocation
// that noticed returns, rather than sit resident beside the new memory until the decay (with
// or without a returner thread).

// Makes the returner thread run ReturnIdleMemory. The arena layer calls it before it creates
// the first arena with return_idle_ms set.
void EnableMemoryReturn() noexcept;

}  // namespace numarena
