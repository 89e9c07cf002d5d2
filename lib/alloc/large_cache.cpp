// The large cache: recently freed extents of 2 MiB to 256 MiB, kept per heap for reuse.
//
// A tensor, a request buffer or a growing vector of 2 MiB or more is freed and allocated again
// at the same size, often on another thread. jemalloc serves every such call under its arena
// lock and its extent bookkeeping (the 2 MiB pair took several times glibc's time,
// bench/RESULTS.md). The large cache keeps the freed object as it is, still live for jemalloc,
// in a slot of its heap: the next allocation of the same class from the same heap takes it
// back with one atomic exchange. The heap is the unit of placement, so an extent only ever
// returns to the heap, and node, it came from, whichever thread frees or allocates it.
//
// Bounded: at most kSlots objects per class, and per heap the bytes its caller passes
// (front_cache.cpp's table: 256 MiB without a capacity gate, 64 MiB with one, none while the
// gate presses a node of the heap, which also flushes the cache at its next put). Everything in
// it stays committed and charged to the capacity gate, like any live object, and counts as
// allocated in ArenaStats; Arena::purge() and the purge that precedes a refusal for lack of
// room (PurgeDirtyOnNode) flush it to jemalloc first, so that its pages can be returned.
//
// Lock-free (slots are atomic pointers, the byte count an atomic), so a fork() child finds
// the slots consistent whatever its parent's threads were doing. The byte count moves apart
// from them (a put reserves its bytes before it has a slot, a take uncounts after its
// exchange), so the child counts what its slots hold anew (LargeCacheRecountInForkChild); an
// object another thread held at the fork stays in the child's memory, unused.
#include "alloc/large_cache.hpp"

#include <jemalloc/jemalloc.h>

#include <atomic>
#include <cstdint>

#include "alloc/heap_activity.hpp"
#include "numarena/internal/arena_fast_path.hpp"

namespace numarena {
namespace {

constexpr int kSlots = 4;
constexpr unsigned kClasses = kLargeClassEnd - kFirstLargeClass;

struct LargeCache {
  std::atomic<void*> slots[kClasses][kSlots];
  std::atomic<std::size_t> bytes;
};

// Zero-initialized, so untouched (and not resident) for heaps that never free a large object.
LargeCache g_caches[arena_internal::kMaxHeaps];

static_assert(kFirstLargeClass == arena_internal::kFrontClasses);

using arena_internal::MediumClassBytes;

}  // namespace

bool LargeCachePut(int heap, unsigned size_class, void* p, std::size_t bound_bytes) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return false;
  if (size_class < kFirstLargeClass || size_class >= kLargeClassEnd) return false;
  if ((reinterpret_cast<std::uintptr_t>(p) & (arena_internal::kLargeAlignThreshold - 1)) != 0) {
    return false;  // allocate promises 2 MiB alignment to whoever takes it next
  }
  LargeCache& cache = g_caches[heap];
  // The bound shrank (a gate was installed, or presses a node of the heap): what the cache
  // holds beyond it goes back now, not only at the next purge.
  if (cache.bytes.load(std::memory_order_relaxed) > bound_bytes) LargeCacheFlush(heap);
  const std::size_t bytes = MediumClassBytes(size_class);
  // bytes <= 256 MiB and the count never exceeds the bound + one class per thread: no overflow.
  if (cache.bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes > bound_bytes) {
    cache.bytes.fetch_sub(bytes, std::memory_order_relaxed);
    return false;
  }
  for (std::atomic<void*>& slot : cache.slots[size_class - kFirstLargeClass]) {
    void* expected = nullptr;
    if (slot.load(std::memory_order_relaxed) == nullptr &&
        slot.compare_exchange_strong(expected, p, std::memory_order_release,
                                     std::memory_order_relaxed)) {
      NoteHeapActivity(heap);
      return true;
    }
  }
  cache.bytes.fetch_sub(bytes, std::memory_order_relaxed);
  return false;
}

void* LargeCacheTake(int heap, unsigned size_class) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return nullptr;
  if (size_class < kFirstLargeClass || size_class >= kLargeClassEnd) return nullptr;
  LargeCache& cache = g_caches[heap];
  for (std::atomic<void*>& slot : cache.slots[size_class - kFirstLargeClass]) {
    if (slot.load(std::memory_order_relaxed) == nullptr) continue;
    if (void* p = slot.exchange(nullptr, std::memory_order_acquire)) {
      cache.bytes.fetch_sub(MediumClassBytes(size_class), std::memory_order_relaxed);
      NoteHeapActivity(heap);
      return p;
    }
  }
  return nullptr;
}

void* LargeCacheTakeLargest(int heap, unsigned* size_class) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return nullptr;
  if (g_caches[heap].bytes.load(std::memory_order_relaxed) == 0) return nullptr;
  for (unsigned c = kLargeClassEnd; c-- > kFirstLargeClass;) {
    if (void* p = LargeCacheTake(heap, c)) {
      *size_class = c;
      return p;
    }
  }
  return nullptr;
}

std::size_t LargeCacheFlush(int heap) noexcept {
  std::size_t flushed = 0;
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return flushed;
  LargeCache& cache = g_caches[heap];
  for (unsigned c = 0; c < kClasses; ++c) {
    for (std::atomic<void*>& slot : cache.slots[c]) {
      if (slot.load(std::memory_order_relaxed) == nullptr) continue;
      if (void* p = slot.exchange(nullptr, std::memory_order_acquire)) {
        const std::size_t bytes = MediumClassBytes(c + kFirstLargeClass);
        cache.bytes.fetch_sub(bytes, std::memory_order_relaxed);
        dallocx(p, MALLOCX_TCACHE_NONE);  // jemalloc frees to the arena that owns p
        flushed += bytes;
      }
    }
  }
  return flushed;
}

void LargeCacheDrop(int heap) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return;
  LargeCache& cache = g_caches[heap];
  for (auto& slots : cache.slots) {
    for (std::atomic<void*>& slot : slots) slot.store(nullptr, std::memory_order_relaxed);
  }
  cache.bytes.store(0, std::memory_order_relaxed);
}

std::size_t LargeCacheBytes(int heap) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return 0;
  return g_caches[heap].bytes.load(std::memory_order_relaxed);
}

void LargeCacheRecountInForkChild() noexcept {
  for (LargeCache& cache : g_caches) {
    if (cache.bytes.load(std::memory_order_relaxed) == 0) continue;  // then no slot is full
    std::size_t bytes = 0;
    for (unsigned c = 0; c < kClasses; ++c) {
      for (const std::atomic<void*>& slot : cache.slots[c]) {
        if (slot.load(std::memory_order_relaxed) != nullptr) {
          bytes += MediumClassBytes(c + kFirstLargeClass);
        }
      }
    }
    cache.bytes.store(bytes, std::memory_order_relaxed);
  }
}

}  // namespace numarena
