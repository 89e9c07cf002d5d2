// The front cache: numarena's own per-thread free lists in front of jemalloc's thread caches.
//
// numarena must use jemalloc's explicit API (mallocx/dallocx with MALLOCX_ARENA and
// MALLOCX_TCACHE flags) so that each object comes from, and returns to, its own node's arena.
// jemalloc 5.3 serves those calls through its generic path, about three times the cost of
// malloc/free, which has an inlined fast path (bench/RESULTS.md, "Code history"). The front
// cache closes that gap the way a thread cache does: per (thread, heap) and per size
// class, a LIFO list of freed objects, threaded through each object's first word. `allocate`
// pops, `deallocate` pushes; both are inline in arena.hpp. A list holds at most about 8 KiB
// (4 to 64 objects); when it is full, half of it goes back to jemalloc's thread cache for the
// same heap. Everything in it is returned when the thread exits and when the thread calls
// Arena::purge().
//
// Classes are jemalloc's own, read with nallocx once: a miss asks jemalloc for the request's
// size and gets an object of exactly that class, so a list never mixes sizes, and an unsized
// free finds the list from sallocx(p). Objects in these lists count as allocated in jemalloc's
// statistics, as objects in jemalloc's thread caches do.
#include "alloc/front_cache.hpp"

#include <jemalloc/jemalloc.h>

#include <algorithm>
#include <mutex>
#include <new>

#include "alloc/jemalloc_heap.hpp"

namespace numarena {
namespace {

using arena_internal::FrontCache;
using arena_internal::FrontList;
using arena_internal::kFrontClasses;
using arena_internal::kFrontMaxSize;
using arena_internal::kFrontUncached;

constexpr std::size_t kListBytes = 8192;  // what one list may hold, in object bytes
constexpr std::uint32_t kMinObjects = 4;
constexpr std::uint32_t kMaxObjects = 64;

std::uint32_t g_class_limit[kFrontClasses];  // objects per list; 0 for the uncached list
bool g_front_enabled = false;

void BuildClassTables() {
  using arena_internal::front_class_of_request;
  using arena_internal::front_class_of_usable;
  std::fill(std::begin(front_class_of_request), std::end(front_class_of_request), kFrontUncached);
  std::fill(std::begin(front_class_of_usable), std::end(front_class_of_usable), kFrontUncached);
  int classes = 0;
  std::size_t previous = 0;
  for (std::size_t request = 8; request <= kFrontMaxSize; request += 8) {
    std::size_t size_class = nallocx(request, 0);
    // Every class up to 4 KiB is a multiple of 8 in jemalloc's usual builds; the tables are
    // indexed in steps of 8, so anything else leaves the front cache off rather than wrong.
    if (size_class == 0 || size_class % 8 != 0 || size_class < request) return;
    if (size_class != previous) {
      if (size_class > kFrontMaxSize) break;
      if (classes == kFrontUncached) break;  // more classes than lists: the rest go uncached
      g_class_limit[classes] = static_cast<std::uint32_t>(
          std::clamp<std::size_t>(kListBytes / size_class, kMinObjects, kMaxObjects));
      front_class_of_usable[size_class / 8] = static_cast<std::uint8_t>(classes);
      previous = size_class;
      ++classes;
    }
    front_class_of_request[request / 8] = static_cast<std::uint8_t>(classes - 1);
  }
  g_class_limit[kFrontUncached] = 0;
  g_front_enabled = true;
}

// The thread's flags for `heap` with jemalloc's thread cache left out (MALLOCX_TCACHE_NONE).
int UncachedFlags(int heap) {
  constexpr int kTcacheBits = 0xfff << 8;  // where MALLOCX_TCACHE keeps the cache id
  return (arena_internal::thread_flags[heap] & ~kTcacheBits) | MALLOCX_TCACHE_NONE;
}

// Hands `list`'s objects back to jemalloc until `keep` remain. A front cache exists only
// while the thread's flags for its heap are set (EnsureThreadCache creates it after them,
// DestroyFrontCaches runs before they are cleared).
void Drain(int heap, FrontList& list, std::uint32_t keep) {
  const int flags = arena_internal::thread_flags[heap];
  while (list.count > keep) {
    void* p = list.head;
    list.head = *static_cast<void**>(p);
    --list.count;
    dallocx(p, flags);
  }
}

}  // namespace

void InitFrontCacheClasses() {
  static std::once_flag once;
  std::call_once(once, BuildClassTables);
}

void CreateFrontCache(int heap) noexcept {
  if (!g_front_enabled || arena_internal::front_caches[heap] != nullptr) return;
  // From the heap itself: the cache is memory this (thread, heap) pair causes, so it lives
  // on the heap's node and is charged with it, like any object of the heap. Past jemalloc's
  // thread cache, which would fill a bin with more objects of its size just for this one.
  void* memory = mallocx(sizeof(FrontCache), UncachedFlags(heap));
  if (memory == nullptr) return;  // no front cache: jemalloc's thread cache still serves
  auto* cache = new (memory) FrontCache();
  if (Heap* owner = HeapById(heap)) owner->front_caches.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < kFrontClasses; ++i) {
    cache->lists[i] = FrontList{nullptr, 0, g_class_limit[i]};
  }
  arena_internal::front_caches[heap] = cache;
}

std::size_t FrontCacheBytes() noexcept { return nallocx(sizeof(FrontCache), 0); }

void FlushFrontCache(int heap) noexcept {
  FrontCache* cache = arena_internal::front_caches[heap];
  if (cache == nullptr) return;
  for (FrontList& list : cache->lists) Drain(heap, list, 0);
}

void DestroyFrontCaches() noexcept {
  for (int heap = 0; heap < arena_internal::kMaxHeaps; ++heap) {
    FrontCache* cache = arena_internal::front_caches[heap];
    if (cache == nullptr) continue;
    FlushFrontCache(heap);
    arena_internal::front_caches[heap] = nullptr;
    cache->~FrontCache();
    dallocx(cache, UncachedFlags(heap));
    if (Heap* owner = HeapById(heap)) owner->front_caches.fetch_sub(1, std::memory_order_relaxed);
  }
}

namespace arena_internal {

void FrontOverflow(int heap, FrontList& list, void* p) noexcept {
  if (list.limit == 0) {  // the uncached list
    dallocx(p, thread_flags[heap]);
    return;
  }
  Drain(heap, list, list.limit / 2);
  FrontPush(heap, list, p);  // room now: no second overflow
}

}  // namespace arena_internal
}  // namespace numarena
