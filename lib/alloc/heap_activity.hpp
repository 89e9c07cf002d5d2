// Heap activity: when each heap last moved memory between a thread and a shared cache or
// jemalloc, and the thread that returns idle memory (memory_return.cpp says what it returns and
// why). Below the caches, which note their activity here; the pass the thread runs is
// memory_return.cpp's, above the heap lifecycle, handed down as a function pointer
// (SetMemoryReturnPass) so that no call comes back up.
#pragma once

#include <cstdint>

#include "base/clock.hpp"

namespace numarena {

// The clock of every idle rule in lib/alloc (CLOCK_MONOTONIC_COARSE, in nanoseconds): a few
// nanoseconds a read, a few milliseconds' resolution.
inline std::int64_t CoarseNanos() noexcept { return CoarseMonotonicNanos(); }

// Records that `heap` moved memory between a thread and a shared cache or jemalloc at
// `now_ns` (CoarseNanos(): a depot put, a large-cache put or take, a free to jemalloc): the heap
// is in use, and what it frees may need returning later. (Depot takes are not recorded: a
// class being taken from is kept by the depot's own rule, and a take follows puts.) For a heap
// with ArenaOptions::return_idle_ms set it starts the returner thread on its first call when
// `may_start_thread` (never from a thread's exit), and wakes the thread when it sleeps. A
// relaxed load and, at most once per clock tick, a store, when the thread runs.
void NoteHeapActivity(int heap, std::int64_t now_ns, bool may_start_thread = true) noexcept;
inline void NoteHeapActivity(int heap) noexcept { NoteHeapActivity(heap, CoarseNanos()); }

// Records that a thread of `heap` put a freed object into its own front cache's large slot at
// `now_ns` (FrontLargePut): not activity of the heap (a slot that a thread keeps reusing moves
// no memory between threads), but something the returner must look at once it has sat there
// for the heap's return time, so the returner is started or woken as by NoteHeapActivity.
void NoteFrontSlotPut(int heap, std::int64_t now_ns) noexcept;

// The coarse clock at `heap`'s last activity (0: none yet, or no such heap).
std::int64_t LastHeapActivity(int heap) noexcept;

// One pass of the returner at `now_ns`: returns true when some heap may still have something to
// return, and sets *period_ns to how long the thread should wait before the next pass.
using MemoryReturnPass = bool (*)(std::int64_t now_ns, std::int64_t* period_ns) noexcept;

// The pass the returner thread runs (set before the first heap with return_idle_ms exists;
// until then the thread has nothing to run and sleeps).
void SetMemoryReturnPass(MemoryReturnPass pass) noexcept;

// How often the returner passes for a heap with idle time `idle_ns`: a quarter of it, 10 ms to
// 1 s.
std::int64_t MemoryReturnPeriod(std::int64_t idle_ns) noexcept;

// Whether the returner thread has been started in this process (a fork() child starts its own
// on its first activity).
bool MemoryReturnThreadStarted() noexcept;

}  // namespace numarena
