// The state the inline fast paths of numarena/arena.hpp read: which heap owns an address,
// this thread's jemalloc flags per heap, and this thread's front cache per heap.
//
// It is a header of its own so that the allocator's internals (lib/alloc) can use it without
// including the public Arena class they implement. Everything here is defined once, in
// lib/alloc/arena_fast_path.cpp (the tables) and filled by lib/alloc (heaps, front cache).
// Not an API: names and layout change without notice.
#pragma once

#include <jemalloc/jemalloc.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace numarena {
namespace arena_internal {
inline constexpr int kMaxHeaps = 256;          // jemalloc arenas numarena can create per process
inline constexpr unsigned kGranuleShift = 36;  // 64 GiB of address space per table entry
inline constexpr std::size_t kGranuleCount = std::size_t{1} << (47 - kGranuleShift);
inline constexpr std::size_t kLargeAlignThreshold = std::size_t{2} << 20;
// Granule of the address space -> 1 + heap id owning it, 0 when not numarena's. Written
// once per granule, before any pointer into it exists.
extern std::atomic<std::uint16_t> granule_heap[kGranuleCount];
// This thread's mallocx flags per heap, 0 until the thread first uses the heap:
// MALLOCX_ARENA of the heap's jemalloc arena this thread is assigned to, plus MALLOCX_TCACHE
// of the thread's own cache for the heap (or MALLOCX_TCACHE_NONE when it has none).
extern thread_local constinit int thread_flags[kMaxHeaps];
// The tcache id in thread_flags: -1 for MALLOCX_TCACHE_NONE, -2 when unset.
inline int TcacheIdOf(int flags) { return ((flags >> 8) & 0xfff) - 2; }
// The jemalloc arena index in thread_flags (MALLOCX_ARENA): -1 when unset.
inline int ArenaIndexOf(int flags) { return ((flags >> 20) & 0xfff) - 1; }

// The size numarena asks jemalloc for when `alignment` is at most alignof(max_align_t)
// (the alignments it serves without MALLOCX_LG_ALIGN): `size` raised to `alignment`.
// jemalloc's smallest class, 8 bytes, is only 8-aligned, while every larger class is a
// multiple of 16; so a request of 0 to 8 bytes with alignment 16 must take the 16-byte class.
// Allocation and sized free both go through this, so a sized free names the class the
// object came from.
inline std::size_t RequestSize(std::size_t size, std::size_t alignment) {
  return size < alignment ? alignment : size;
}

inline int HeapOf(const void* p) {
  std::uintptr_t granule = reinterpret_cast<std::uintptr_t>(p) >> kGranuleShift;
  if (granule >= kGranuleCount) return -1;
  return static_cast<int>(granule_heap[granule].load(std::memory_order_relaxed)) - 1;
}

void DeallocateSlow(void* p) noexcept;
void DeallocateSizedSlow(void* p, std::size_t size, std::size_t alignment) noexcept;

// ---- the front cache (filled by lib/alloc/front_cache.cpp) ----
// Objects of up to kFrontMaxSize bytes, grouped by jemalloc size class, one LIFO list per
// class threaded through the objects' first word. A list belongs to one (thread, heap), so an
// object only ever returns to the heap, and node, it came from.
inline constexpr std::size_t kFrontMaxSize = 4096;
inline constexpr int kFrontClasses = 32;
// The list that never holds anything: sizes the class tables could not map (a jemalloc built
// with other size classes) land here; its limit is 0, so pushes go straight back to jemalloc.
inline constexpr int kFrontUncached = kFrontClasses - 1;
struct FrontList {
  void* head;
  std::uint32_t count;
  std::uint32_t limit;
};
struct FrontCache {
  FrontList lists[kFrontClasses];
};
// This thread's front cache per heap; nullptr until the thread's first slow-path call.
extern thread_local constinit FrontCache* front_caches[kMaxHeaps];
// List of a request of n bytes (1 <= n <= kFrontMaxSize): front_class_of_request[(n + 7) / 8].
// Filled once, before the first front cache exists.
extern std::uint8_t front_class_of_request[kFrontMaxSize / 8 + 1];
// List of an object whose usable size is u (u <= kFrontMaxSize): front_class_of_usable[u / 8].
extern std::uint8_t front_class_of_usable[kFrontMaxSize / 8 + 1];

inline void* FrontPop(FrontCache* cache, std::size_t size) noexcept {
  FrontList& list = cache->lists[front_class_of_request[(size + 7) >> 3]];
  void* p = list.head;
  if (p != nullptr) {
    list.head = *static_cast<void**>(p);
    --list.count;
  }
  return p;
}

// The list is full: hands half of it back to jemalloc, then keeps `p`. Cold.
void FrontOverflow(int heap, FrontList& list, void* p) noexcept;

inline void FrontPush(int heap, FrontList& list, void* p) noexcept {
  if (list.count >= list.limit) [[unlikely]] {
    FrontOverflow(heap, list, p);
    return;
  }
  *static_cast<void**>(p) = list.head;
  list.head = p;
  ++list.count;
}

// `size` bytes (1 <= size < kLargeAlignThreshold, default alignment) from this thread's caches
// for `heap`: its front cache, else jemalloc with the thread's flags. nullptr when the thread
// has no flags for the heap yet or jemalloc failed (its hooks recorded why).
inline void* AllocateFromThreadCaches(int heap, std::size_t size) noexcept {
  if (size <= kFrontMaxSize) {
    if (FrontCache* cache = front_caches[heap]) {
      if (void* p = FrontPop(cache, size)) return p;
    }
  }
  const int flags = thread_flags[heap];
  return flags != 0 ? mallocx(size, flags) : nullptr;
}
}  // namespace arena_internal

}  // namespace numarena
