// The front cache's slow side (see front_cache.cpp; the inline fast path is in arena.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace numarena {

// Reads jemalloc's size classes into the front cache's tables. Call before the first
// CreateFrontCache (CreateHeap does); later calls do nothing.
void InitFrontCacheClasses();

// True once the class tables are built and match jemalloc's classes: only then do the front
// caches, the class map and the large cache run.
bool FrontCacheEnabled() noexcept;

// Gives the calling thread a front cache for `heap`, allocated from the heap (so on its node
// and charged): nothing when it has one, when the class tables could not be built, or when
// the heap has no memory. Call after the thread's flags for the heap are set.
void CreateFrontCache(int heap) noexcept;

// Bytes one front cache takes in its heap (its jemalloc size class).
std::size_t FrontCacheBytes() noexcept;

// The calling thread's own large object for `heap`: one freed object of a class from
// kFirstLargeClass (2 MiB) to kLastFrontLargeClass (4 MiB), kept ahead of the heap's shared
// large cache so that a thread that frees and allocates such buffers (activations, request
// scratch) touches no cache line another thread writes. FrontLargePut keeps `p` (a live,
// 2 MiB-aligned object of `heap` whose class is `size_class`) when the calling thread has a
// front cache for the heap, holds no large object yet, and the cache's bounds allow it (4 MiB
// without a capacity gate, 2 MiB with one, none while the gate presses a node of the heap);
// false otherwise. FrontLargeTake hands it back for an allocation of the same class, or
// returns nullptr.
inline constexpr unsigned kLastFrontLargeClass = 68;  // 4 MiB
bool FrontLargePut(int heap, unsigned size_class, void* p) noexcept;
void* FrontLargeTake(int heap, unsigned size_class) noexcept;

// How many bytes `heap`'s large cache may hold now: 256 MiB without a capacity gate, 64 MiB
// with one, none while the gate presses a node of the heap (cold: asks the gate).
std::size_t LargeCacheBound(int heap) noexcept;

// Returns every object in the calling thread's front cache for `heap` to jemalloc; the bytes
// of the objects it returned.
std::size_t FlushFrontCache(int heap) noexcept;

// Flushes and frees all of the calling thread's front caches (at thread exit).
void DestroyFrontCaches() noexcept;

namespace arena_internal {
struct FrontCache;
}
// Takes the large object another thread's front cache keeps (FrontLargePut) if it was put
// there at least `min_age_ns` before `now_ns` (any age when `min_age_ns` <= 0), for the
// memory return to free: the object, or nullptr (none, or a younger one: then *young is
// set). Safe against the owner's own puts and
// takes at the same time (one of the two gets the object); the caller must keep `cache` from
// being freed meanwhile (ReturnSleepingThreadsLarge, jemalloc_heap.cpp).
void* StealFrontLarge(arena_internal::FrontCache* cache, std::int64_t now_ns,
                      std::int64_t min_age_ns, bool* young) noexcept;

// The calling thread's front cache for `heap` is published for other threads to read
// (ReturnSleepingThreadsLarge) with a release store, read there with an acquire load; the
// owner itself reads arena_internal::front_caches directly.
arena_internal::FrontCache* LoadFrontCache(arena_internal::FrontCache* const& slot) noexcept;

}  // namespace numarena
