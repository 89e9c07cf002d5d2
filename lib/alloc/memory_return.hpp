// Memory return: what the heaps' shared caches and jemalloc's dirty pages hold while nobody uses
// it goes back to the kernel on a schedule, with or without calls (see memory_return.cpp).
#pragma once

#include <cstdint>

namespace numarena {

// The clock of every idle rule in lib/alloc (CLOCK_MONOTONIC_COARSE, in nanoseconds): a few
// nanoseconds a read, a few milliseconds' resolution.
std::int64_t CoarseNanos() noexcept;

// Records that `heap` moved memory between a thread and a shared cache or jemalloc at
// `now_ns` (CoarseNanos(): a depot put, a large-cache put or take, a free to jemalloc): the heap
// is in use, and what it frees may need returning later. (Depot takes are not recorded: a
// class being taken from is kept by the depot's own rule, and a take follows puts.) For a heap
// with ArenaOptions::return_idle_ms set it starts the returner thread on its first call when
// `may_start_thread` (never from a thread's exit), and wakes the thread when it sleeps. A
// relaxed load and, at most once per clock tick, a store, when the thread runs.
void NoteHeapActivity(int heap, std::int64_t now_ns, bool may_start_thread = true) noexcept;
inline void NoteHeapActivity(int heap) noexcept { NoteHeapActivity(heap, CoarseNanos()); }

// One pass of the returner, as if the clock read `now_ns`: for every heap with
// ArenaOptions::return_idle_ms = D > 0,
//   - idle for D (no activity since now - D): its depot and large cache go back to jemalloc and
//     all its shards' dirty pages to the kernel (arena.<i>.purge);
//   - otherwise: the depot's classes that nobody took from since the last pass and nobody put to
//     for D go back to jemalloc, and each shard's dirty pages decay (arena.<i>.decay, over D).
// Returns true when some heap may still have something to return (used within the last
// 2 D, or holding cached objects). The returner thread calls it every D / 4 (10 ms to 1 s);
// tests call it with a clock of their own.
bool ReturnIdleMemory(std::int64_t now_ns) noexcept;

// Whether the returner thread has been started in this process (a fork() child starts its own
// on its first activity).
bool MemoryReturnThreadStarted() noexcept;

}  // namespace numarena
