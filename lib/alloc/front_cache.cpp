// The front cache: numarena's own per-thread free lists, the thread cache of numarena's heaps.
//
// numarena must use jemalloc's explicit API (mallocx/dallocx with MALLOCX_ARENA and
// MALLOCX_TCACHE flags) so that each object comes from, and returns to, its own node's arena.
// jemalloc 5.3 serves those calls through its generic path, several times the cost of
// malloc/free's inlined fast path; and its thread caches stop at 32 KiB, so every larger
// object would take its arena's lock. The front
// cache closes that gap the way a thread cache does: per (thread, heap) and per size class
// below 2 MiB, a LIFO list of freed objects, threaded through each object's first word.
// `allocate` pops, `deallocate` pushes; both are inline in arena.hpp.
//
// Bounds. A small list (classes up to 4 KiB) starts at about 16 KiB (4 to 128 objects): a
// thread's lists hold objects its next allocations may never ask for, and each keeps part of
// a jemalloc slab resident (a larger start holds more than the threads' live bytes in a
// larson-like run; a smaller one makes that run slower). A
// thread that frees more of a class than the list holds (a batch of requests' objects freed
// together) would otherwise send half the list away and ask for it again on every round; so a
// small list that filled by frees alone (no allocation since it last ran empty, was refilled
// or overflowed, and at least half its limit of frees) doubles its limit, up to
// kMaxGrownObjects, as long as the growth of all small lists of the cache stays within a byte
// bound (Bounds::small_growth, 8 MiB) and the thread allocates that class too (an allocation
// of it missed the list since the limits were last reset, FrontCache::ran_empty: a thread
// that only frees a class, the consumer of a producer/consumer pair, would hold a grown list
// that nothing of its takes from, up to the bound per consumer); and a grown list that fills
// with allocations in between halves back toward its start limit. Only by frees alone: a
// thread that frees about as many objects of a class as it allocates, in random order
// (larson-like, or remote frees arriving), walks its list up and down, and a list refilled
// from the depot is full at once;
// if every full list grew, the limits would ratchet up to the bound, all of it RSS per thread
// and heap. A grown list keeps its growth until it overflows again, so lists that an earlier
// phase grew and that now sit idle hold part of the bound; 8 MiB leaves room beside them for
// a batch of 8192 objects of 16-512 B, whose lists want about 4.5 MiB of growth. A medium
// list (above 4 KiB) holds 2 to 32 objects, and all medium lists of one cache together at
// most Bounds::medium (so one object of a class above 128 KiB, none above 256 KiB; 256 KiB: a
// thread's medium objects of an earlier phase stay resident until it overflows or exits, no
// other thread may return them while it sleeps (the lists are its own, without locks), and a
// server has dozens of threads. At 1 MiB, a 256 MiB burst freed before a 2 s idle kept one
// 0.9 MiB object resident in the sleeping thread's list; at 4 MiB, node's llama.cpp driver held
// 9 MiB in its threads' lists at its peak. Objects of 64 KiB-1.75 MiB churn no slower through
// the depot: an A/B of the override at 256 KiB against 1 MiB, 2026-12-07, had llama.cpp, redis,
// a PyTorch decode, larson and python within noise, and llama.cpp's peak 2 MiB lower). An object larger than the bound goes to the depot at once. When a list cannot grow,
// or the medium bound is full, half of that list goes to the heap's depot at once (and, if the
// bound is still short, the largest medium lists), not one object per free. Cached objects stay
// committed and charged to the capacity gate, so with a gate installed the bounds are smaller
// (1 MiB of growth), and when the gate says a node of the heap is under pressure
// (CapacityGate::CachesShouldShrink; a Budget from its warn line on) the small lists go back to
// their start limits and the medium lists hold at most 64 KiB. The bounds are re-read on every
// overflow (the cold path), so a cache shrinks at its thread's next overflow, not at once.
// Everything in it is returned, and the small limits reset, when the thread exits and when the
// thread calls Arena::purge() or a purge for lack of room runs on
// it.
//
// Above the lists, one object of 2 MiB to 4 MiB per cache (FrontLargePut): without it, two
// threads that each free and allocate a 2 MiB buffer would meet in the heap's shared large
// cache, whose slots, byte count and objects would move between their CPUs on every call, and
// two threads would get less than one thread's throughput. It is
// bounded like the medium lists (Bounds::large) and flushed with them.
//
// Objects a list cannot keep (16 B and up) go to the heap's depot (depot.cpp) as one chain,
// not to jemalloc one by one, and a list that is empty refills from the depot before it asks
// jemalloc: the depot is what lets a batch larger than the cache, or freed on another thread,
// come back without jemalloc's explicit-arena path.
//
// Classes are numarena's numbering of jemalloc's (arena_fast_path.hpp), checked against
// nallocx once: a miss asks jemalloc for the request's size and gets an object of exactly
// that class, so a list never mixes sizes, and an unsized free finds the list from the class
// map (class_map.cpp). Objects in these lists count as allocated in jemalloc's statistics,
// as objects in jemalloc's thread caches do, and stay charged to the capacity gate.
#include "alloc/front_cache.hpp"

#include <jemalloc/jemalloc.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>

#include "alloc/depot.hpp"
#include "alloc/heap_activity.hpp"
#include "alloc/heap_table.hpp"
#include "alloc/large_cache.hpp"
#include "alloc/node_pages.hpp"
#include "numarena/arena.hpp"

namespace numarena {
namespace {

using arena_internal::FrontCache;
using arena_internal::FrontList;
using arena_internal::kClassOf4K;
using arena_internal::kFrontClasses;
using arena_internal::kFrontMaxSize;

constexpr std::size_t kListBytes = 16384;          // what one small list holds at first
constexpr std::uint32_t kMinObjects = 4;
constexpr std::uint32_t kMaxObjects = 128;
constexpr std::uint32_t kMaxGrownObjects = 8192;   // the most a grown small list holds
constexpr std::size_t kMediumListBytes = 1 << 20;  // what one medium list may hold
constexpr std::uint32_t kMinMediumObjects = 2;
constexpr std::uint32_t kMaxMediumObjects = 32;

// Per cache: how many bytes the small lists may grow by beyond their start limits, how many
// bytes all medium lists may hold, and how large its one large object may be; per heap, how
// many bytes its depot and its large cache (large_cache.cpp) may hold.
struct Bounds {
  std::size_t small_growth;
  std::size_t medium;
  std::size_t depot;
  std::size_t large;
  std::size_t shared_large;
};
constexpr std::size_t kMiB = std::size_t{1} << 20;
// No capacity gate installed; a gate, no pressure; the gate presses a node of the heap.
constexpr Bounds kUngatedBounds{8 * kMiB, kMiB / 4, 128 * kMiB, 4 * kMiB, 256 * kMiB};
constexpr Bounds kGatedBounds{1 * kMiB, kMiB / 4, 32 * kMiB, 2 * kMiB, 64 * kMiB};
constexpr Bounds kPressedBounds{0, kMiB / 16, 0, 0, 0};

// What a front cache takes from its heap: sizeof(FrontCache) (1576 bytes) rounded up to a
// class whose jemalloc slab is one page; the 1280-byte class's slabs are five.
constexpr std::size_t kFrontCacheAllocation = 2048;
static_assert(sizeof(FrontCache) <= kFrontCacheAllocation);

std::uint32_t g_class_limit[kFrontClasses];  // objects per list
bool g_front_enabled = false;

// Fills the class tables and turns the caches on, unless jemalloc's classes are not the ones
// arena_fast_path.hpp numbers (a jemalloc built with other size classes): then every call
// takes the slow path, correct but slower.
void BuildClassTables() {
  using arena_internal::front_class_bytes;
  using arena_internal::front_class_of_request;
  using arena_internal::front_class_of_usable;
  unsigned classes = 0;
  std::size_t previous = 0;
  for (std::size_t request = 8; request <= kFrontMaxSize; request += 8) {
    std::size_t size_class = nallocx(request, 0);
    // Every class up to 4 KiB is a multiple of 8 in jemalloc's usual builds; the tables are
    // indexed in steps of 8, so anything else leaves the front cache off rather than wrong.
    if (size_class == 0 || size_class % 8 != 0 || size_class < request ||
        size_class > kFrontMaxSize) {
      return;
    }
    if (size_class != previous) {
      if (classes > kClassOf4K) return;
      g_class_limit[classes] = static_cast<std::uint32_t>(
          std::clamp<std::size_t>(kListBytes / size_class, kMinObjects, kMaxObjects));
      front_class_bytes[classes] = static_cast<std::uint32_t>(size_class);
      front_class_of_usable[size_class / 8] = static_cast<std::uint8_t>(classes);
      previous = size_class;
      ++classes;
    }
    front_class_of_request[request / 8] = static_cast<std::uint8_t>(classes - 1);
  }
  if (classes != kClassOf4K + 1 || previous != kFrontMaxSize) return;
  // Above 4 KiB: the classes MediumClassOf computes must be jemalloc's, boundaries included.
  for (unsigned c = kClassOf4K + 1; c < static_cast<unsigned>(kFrontClasses); ++c) {
    const std::size_t bytes = arena_internal::MediumClassBytes(c);
    if (nallocx(bytes, 0) != bytes || nallocx(previous + 1, 0) != bytes ||
        arena_internal::MediumClassOf(bytes) != c ||
        arena_internal::MediumClassOf(previous + 1) != c) {
      return;
    }
    front_class_bytes[c] = static_cast<std::uint32_t>(bytes);
    g_class_limit[c] = static_cast<std::uint32_t>(std::clamp<std::size_t>(
        kMediumListBytes / bytes, kMinMediumObjects, kMaxMediumObjects));
    previous = bytes;
  }
  if (previous != arena_internal::kFrontMaxCached) return;
  g_front_enabled = true;
}

// The thread's flags for `heap` with jemalloc's thread cache left out (MALLOCX_TCACHE_NONE).
int UncachedFlags(int heap) {
  constexpr int kTcacheBits = 0xfff << 8;  // where MALLOCX_TCACHE keeps the cache id
  return (arena_internal::thread_flags[heap] & ~kTcacheBits) | MALLOCX_TCACHE_NONE;
}

// The bounds for a cache of `heap` now (cold: a virtual call per node of the heap).
Bounds CacheBounds(int heap) noexcept {
  CapacityGate* gate = GetCapacityGate();
  if (gate == nullptr) return kUngatedBounds;
  if (Heap* owner = HeapById(heap)) {
    const NodePages& pages = *owner->pages;
    for (int i = 0; i < pages.node_count(); ++i) {
      if (gate->CachesShouldShrink(pages.nodes()[i])) return kPressedBounds;
    }
  }
  return kGatedBounds;
}

}  // namespace

std::size_t LargeCacheBound(int heap) noexcept { return CacheBounds(heap).shared_large; }

namespace {

// Starts the list's fill history over (FrontList::pushes).
void ResetFillHistory(FrontList& list) {
  list.pushes = 0;
  list.reset_count = list.count;
}

// The list is full and got there by frees alone since its last reset, and by at least half
// its limit of them: a batch freed together, not a list that wanders up and down (or one
// refilled from the depot that a single free tips over).
bool FilledByFreesAlone(const FrontList& list) {
  return list.reset_count + list.pushes == list.count && list.pushes >= list.limit / 2;
}

// Hands the objects of `cache`'s list `size_class` back to jemalloc until `keep` remain. A
// front cache exists only while the thread's flags for its heap are set (EnsureThreadCache
// creates it after them, DestroyFrontCaches runs before they are cleared).
std::size_t Drain(int heap, FrontCache& cache, unsigned size_class, std::uint32_t keep) {
  const int flags = arena_internal::thread_flags[heap];
  FrontList& list = cache.lists[size_class];
  const std::size_t bytes = arena_internal::front_class_bytes[size_class];
  const std::size_t drained = list.count > keep ? (list.count - keep) * bytes : 0;
  while (list.count > keep) {
    void* p = list.head;
    list.head = *static_cast<void**>(p);
    --list.count;
    if (size_class > kClassOf4K) cache.medium_bytes -= bytes;
    sdallocx(p, bytes, flags);  // the class's size: jemalloc skips its own size lookup
  }
  ResetFillHistory(list);
  return drained;
}

// Moves list `size_class` of `cache` to the heap's depot as one chain until `keep` objects
// remain (the most recently freed ones go, as they come first); the 8 B class, which the depot
// does not hold, goes back to jemalloc.
void DrainToDepot(int heap, FrontCache& cache, unsigned size_class, std::uint32_t keep,
                  std::size_t depot_bound) {
  if (size_class < arena_internal::kFirstDepotClass) {
    Drain(heap, cache, size_class, keep);
    return;
  }
  FrontList& list = cache.lists[size_class];
  if (list.count <= keep) return;
  ObjectChain chain{list.head, list.head, list.count - keep};
  for (std::uint32_t i = 1; i < chain.count; ++i) chain.tail = *static_cast<void**>(chain.tail);
  list.head = *static_cast<void**>(chain.tail);
  list.count = keep;
  ResetFillHistory(list);
  if (size_class > kClassOf4K) {
    cache.medium_bytes -= chain.count * arena_internal::front_class_bytes[size_class];
  }
  DepotPut(heap, size_class, chain, depot_bound, cache.depot_home);
}

// Puts every small list back to its start limit, handing back what no longer fits.
void ResetSmallLimits(int heap, FrontCache& cache) {
  for (unsigned c = 0; c <= kClassOf4K; ++c) {
    FrontList& list = cache.lists[c];
    list.limit = g_class_limit[c];
    if (list.count > list.limit) Drain(heap, cache, c, list.limit / 2);
  }
  cache.small_growth = 0;
  cache.ran_empty = 0;
}

}  // namespace

void InitFrontCacheClasses() {
  static std::once_flag once;
  std::call_once(once, BuildClassTables);
}

bool FrontCacheEnabled() noexcept { return g_front_enabled; }

void CreateFrontCache(int heap) noexcept {
  if (!g_front_enabled || arena_internal::front_caches[heap] != nullptr) return;
  // From the heap itself: the cache is memory this (thread, heap) pair causes, so it lives
  // on the heap's node and is charged with it, like any object of the heap. Past jemalloc's
  // thread cache, which would fill a bin with more objects of its size just for this one.
  void* memory = mallocx(kFrontCacheAllocation, UncachedFlags(heap));
  if (memory == nullptr) return;  // no front cache: this thread takes the slow paths
  auto* cache = new (memory) FrontCache();
  if (Heap* owner = HeapById(heap)) owner->front_caches.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < kFrontClasses; ++i) {
    cache->lists[i] = FrontList{nullptr, 0, g_class_limit[i], 0, 0};
  }
  cache->medium_bytes = 0;
  cache->medium_limit = CacheBounds(heap).medium;
  cache->small_growth = 0;
  cache->large.store(nullptr, std::memory_order_relaxed);
  cache->large_put_ns.store(0, std::memory_order_relaxed);
  cache->large_class = 0;
  cache->depot_home = DepotNewHome();
  // Release: the memory return's walk may read the cache from now on (LoadFrontCache).
  std::atomic_ref<FrontCache*>(arena_internal::front_caches[heap])
      .store(cache, std::memory_order_release);
}

static_assert(kLastFrontLargeClass == kFirstLargeClass + 4, "2 MiB to 4 MiB: five classes");

bool FrontLargePut(int heap, unsigned size_class, void* p) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return false;
  FrontCache* cache = arena_internal::front_caches[heap];
  if (cache == nullptr) return false;
  // A back-to-back double free of the slot's object aborts; once the memory return took it
  // (StealFrontLarge), a second free of it is jemalloc's to find, as for any other block.
  void* const kept = cache->large.load(std::memory_order_relaxed);
  if (kept == p) [[unlikely]] arena_internal::FrontDoubleFree(heap, size_class, p);
  if (kept != nullptr) return false;
  if (size_class < kFirstLargeClass || size_class > kLastFrontLargeClass) return false;
  if ((reinterpret_cast<std::uintptr_t>(p) & (arena_internal::kLargeAlignThreshold - 1)) != 0) {
    return false;  // allocate promises 2 MiB alignment to whoever takes it next
  }
  if (arena_internal::MediumClassBytes(size_class) > CacheBounds(heap).large) return false;
  cache->large_class = size_class;
  // The memory return's thread may take it (StealFrontLarge) and free it once it has sat here
  // for the heap's return time, even if this thread never calls again; the put time is
  // published with the object (release).
  const std::int64_t now = CoarseNanos();
  cache->large_put_ns.store(now, std::memory_order_relaxed);
  cache->large.store(p, std::memory_order_release);
  NoteFrontSlotPut(heap, now);
  return true;
}

void* FrontLargeTake(int heap, unsigned size_class) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return nullptr;
  FrontCache* cache = arena_internal::front_caches[heap];
  if (cache == nullptr) return nullptr;
  void* p = cache->large.load(std::memory_order_relaxed);
  if (p == nullptr || cache->large_class != size_class) return nullptr;
  // Fails only when the memory return took it since the load (StealFrontLarge).
  if (!cache->large.compare_exchange_strong(p, nullptr, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
    return nullptr;
  }
  return p;
}

std::size_t FrontCacheBytes() noexcept { return nallocx(kFrontCacheAllocation, 0); }

std::size_t FlushFrontCache(int heap) noexcept {
  FrontCache* cache = arena_internal::front_caches[heap];
  if (cache == nullptr) return 0;
  std::size_t flushed = 0;
  for (unsigned c = 0; c < static_cast<unsigned>(kFrontClasses); ++c) {
    flushed += Drain(heap, *cache, c, 0);
  }
  if (void* large = cache->large.exchange(nullptr, std::memory_order_acquire)) {
    flushed += sallocx(large, 0);
    dallocx(large, arena_internal::thread_flags[heap]);  // jemalloc frees to p's own arena
  }
  ResetSmallLimits(heap, *cache);
  cache->medium_limit = CacheBounds(heap).medium;
  return flushed;
}

void* StealFrontLarge(FrontCache* cache, std::int64_t now_ns, std::int64_t min_age_ns,
                      bool* young) noexcept {
  void* p = cache->large.load(std::memory_order_acquire);
  if (p == nullptr) return nullptr;
  if (min_age_ns > 0 &&
      now_ns - cache->large_put_ns.load(std::memory_order_relaxed) < min_age_ns) {
    *young = true;
    return nullptr;
  }
  // Only that object: if the owner took it and put another since the load, that one is young.
  if (!cache->large.compare_exchange_strong(p, nullptr, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
    *young = true;
    return nullptr;
  }
  return p;
}

FrontCache* LoadFrontCache(FrontCache* const& slot) noexcept {
  // atomic_ref of a const object is C++26; the load writes nothing.
  return std::atomic_ref<FrontCache*>(const_cast<FrontCache*&>(slot))
      .load(std::memory_order_acquire);
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
    NoteHeapActivity(heap, CoarseNanos(), /*may_start_thread=*/false);  // the thread is exiting
  }
}

namespace arena_internal {

void FrontDoubleFree(int heap, unsigned size_class, void* p, bool in_depot) noexcept {
  // No allocation here: the heap may be what is broken. snprintf into a stack buffer does not
  // allocate for these conversions.
  char line[512];
  const int n = std::snprintf(
      line, sizeof line,
      "numarena: free(%p): double free detected: the %zu-byte block %s numarena heap %d; "
      "aborting (set NUMARENA_CHECK=1 to find double frees that are not back to back, and "
      "frees of pointers numarena never returned)\n",
      p,
      size_class < unsigned{kFrontClasses} ? std::size_t{front_class_bytes[size_class]}
                                            : MediumClassBytes(size_class),
      in_depot ? "was already free in the depot of" : "was already the last one this thread freed in",
      heap);
  if (n > 0) {
    ssize_t ignored = write(STDERR_FILENO, line, std::min<std::size_t>(n, sizeof line - 1));
    (void)ignored;
  }
  std::abort();
}

void FrontOverflow(int heap, FrontCache* cache, unsigned size_class, void* p) noexcept {
  FrontList& list = cache->lists[size_class];
  if (list.limit == 0) {  // not cached
    sdallocx(p, front_class_bytes[size_class], thread_flags[heap]);
    return;
  }
  const Bounds bounds = CacheBounds(heap);
  cache->medium_limit = bounds.medium;
  if (cache->small_growth > bounds.small_growth) ResetSmallLimits(heap, *cache);
  const std::size_t bytes = front_class_bytes[size_class];
  if (list.count >= list.limit) {
    // A small list that filled at once doubles while the cache's growth bound allows. One
    // that did not halves back toward its start limit if it had grown. Otherwise half of
    // what it may hold goes to the depot.
    const bool small = size_class <= kClassOf4K;
    const bool at_once = FilledByFreesAlone(list);
    const std::uint32_t grow = !small || list.limit >= kMaxGrownObjects
                                   ? 0
                                   : std::min(list.limit, kMaxGrownObjects - list.limit);
    const bool allocates = (cache->ran_empty >> size_class & 1) != 0;
    if (at_once && allocates && grow > 0 &&
        cache->small_growth + grow * bytes <= bounds.small_growth) {
      list.limit += grow;
      cache->small_growth += grow * bytes;
      ResetFillHistory(list);
    } else {
      if (!at_once && small && list.limit > g_class_limit[size_class]) {
        const std::uint32_t shrunk = std::max(g_class_limit[size_class], list.limit / 2);
        cache->small_growth -= std::min(cache->small_growth, (list.limit - shrunk) * bytes);
        list.limit = shrunk;
      }
      DrainToDepot(heap, *cache, size_class, list.limit / 2, bounds.depot);
    }
  }
  if (size_class > kClassOf4K) {
    if (bytes > cache->medium_limit) {
      // Larger than the whole bound (above 256 KiB without a gate): it can never be kept, and
      // draining the other lists would not make room, only empty them on every such free.
      DepotPut(heap, size_class, ObjectChain{p, p, 1}, bounds.depot, cache->depot_home);
      return;
    }
    // This list's own objects and `p` over the bound (a class above half of it): draining
    // the other lists could not make room, only empty them at every second such free.
    if ((std::size_t{list.count} + 1) * bytes > cache->medium_limit) {
      DrainToDepot(heap, *cache, size_class, 0, bounds.depot);
    }
    // Still over the medium bound: the largest lists go first (they free the most bytes
    // per call), this list last.
    for (unsigned c = kFrontClasses - 1;
         c > kClassOf4K && cache->medium_bytes + bytes > cache->medium_limit; --c) {
      if (c != size_class) DrainToDepot(heap, *cache, c, 0, bounds.depot);
    }
    if (cache->medium_bytes + bytes > cache->medium_limit) {
      DrainToDepot(heap, *cache, size_class, 0, bounds.depot);
    }
  }
  FrontPush(heap, cache, size_class, p);  // room now: no second overflow
}

bool FreeOutgrown(int heap, void* p) noexcept {
  if (heap < 0 || front_caches[heap] == nullptr) return false;
  const unsigned size_class = RecordedClassPlusOne(p) - 1;
  if (size_class <= kClassOf4K || size_class >= unsigned{kFrontClasses}) return false;
  sdallocx(p, front_class_bytes[size_class], thread_flags[heap]);
  NoteHeapActivity(heap);  // dirty pages to return
  return true;
}

void FrontPushRefused(int heap, FrontCache* cache, unsigned size_class, void* p) noexcept {
  if (cache->lists[size_class].head == p) FrontDoubleFree(heap, size_class, p);
  FrontOverflow(heap, cache, size_class, p);
}

void* FrontRefill(int heap, FrontCache* cache, unsigned size_class) noexcept {
  ResetFillHistory(cache->lists[size_class]);  // the list ran empty
  const ObjectChain chain = DepotTake(heap, size_class, cache->depot_home);
  if (chain.count == 0) return nullptr;
  // The first object is the caller's. The list is empty (the caller's pop missed): as many of
  // the rest as its limit and the medium bound allow go to it, spliced in O(1) when all of
  // them fit, and what is left goes back to the depot.
  FrontList& list = cache->lists[size_class];
  const std::size_t bytes = front_class_bytes[size_class];
  std::uint32_t room = list.limit > list.count ? list.limit - list.count : 0;
  if (size_class > kClassOf4K) {
    const std::size_t free_bytes =
        cache->medium_limit > cache->medium_bytes ? cache->medium_limit - cache->medium_bytes : 0;
    room = static_cast<std::uint32_t>(std::min<std::size_t>(room, free_bytes / bytes));
  }
  const std::uint32_t rest = chain.count - 1;
  if (rest == 0) return chain.head;
  void* first = *static_cast<void**>(chain.head);
  const std::uint32_t kept = std::min(rest, room);
  if (kept == rest) {
    *static_cast<void**>(chain.tail) = list.head;
    list.head = first;
  } else {
    void* leftover = first;
    if (kept > 0) {
      void* last = first;
      for (std::uint32_t i = 1; i < kept; ++i) last = *static_cast<void**>(last);
      leftover = *static_cast<void**>(last);
      *static_cast<void**>(last) = list.head;
      list.head = first;
    }
    // Back where it came from: a chain taken from another thread's slot stays that thread's.
    DepotPut(heap, size_class, ObjectChain{leftover, chain.tail, rest - kept},
             CacheBounds(heap).depot, chain.slot);
  }
  list.count += kept;
  if (size_class > kClassOf4K) cache->medium_bytes += kept * bytes;
  ResetFillHistory(list);
  return chain.head;
}

}  // namespace arena_internal
}  // namespace numarena
