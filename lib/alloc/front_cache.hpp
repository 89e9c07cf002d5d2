// The front cache's slow side (see front_cache.cpp; the inline fast path is in arena.hpp).
#pragma once

namespace numarena {

// Reads jemalloc's size classes into the front cache's tables. Call before the first
// CreateFrontCache (CreateHeap does); later calls do nothing.
void InitFrontCacheClasses();

// Gives the calling thread a front cache for `heap` (nothing when it has one, when the class
// tables could not be built, or when memory is short).
void CreateFrontCache(int heap) noexcept;

// Returns every object in the calling thread's front cache for `heap` to jemalloc.
void FlushFrontCache(int heap) noexcept;

// Flushes and frees all of the calling thread's front caches (at thread exit).
void DestroyFrontCaches() noexcept;

}  // namespace numarena
