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

// ---- size classes and the class map (lib/alloc/class_map.cpp) ----
// numarena numbers jemalloc's size classes itself: 0.. for the classes up to 4 KiB, in
// order (read from nallocx once; jemalloc's usual build has 29 of them, 8 B to 4 KiB), then
// four classes per doubling above 4 KiB (2^k + i * 2^(k-2), i = 1..4), which is jemalloc's
// spacing there. front_cache.cpp checks every class up to kFrontMaxCached against nallocx
// before it turns the caches on.
inline constexpr std::size_t kFrontMaxSize = 4096;   // the last table-mapped class
inline constexpr unsigned kClassOf4K = 28;           // its number
// The largest class the front cache holds, 1.75 MiB: the last below kLargeAlignThreshold.
inline constexpr std::size_t kFrontMaxCached = std::size_t{1792} << 10;
inline constexpr int kFrontClasses = 64;             // classes up to kFrontMaxCached: 0..63
// Class of a request of n bytes (1 <= n <= kFrontMaxSize): front_class_of_request[(n + 7) / 8].
// Filled once, before the first front cache exists.
extern std::uint8_t front_class_of_request[kFrontMaxSize / 8 + 1];
// Class of an object whose usable size is u (u <= kFrontMaxSize): front_class_of_usable[u / 8].
extern std::uint8_t front_class_of_usable[kFrontMaxSize / 8 + 1];
// Bytes of each cached class (its usable size).
extern std::uint32_t front_class_bytes[kFrontClasses];

// The class of n > kFrontMaxSize bytes (n <= 2^62): 4 classes per doubling.
inline unsigned MediumClassOf(std::size_t n) noexcept {
  const std::size_t x = n - 1;
  const unsigned lg = 63u - static_cast<unsigned>(__builtin_clzll(x));  // 2^lg <= x
  return kClassOf4K + 4 * (lg - 12) + static_cast<unsigned>(x >> (lg - 2)) - 3;
}
// The bytes of class c > kClassOf4K, 2^k + i * 2^(k-2): the inverse of MediumClassOf.
inline std::size_t MediumClassBytes(unsigned c) noexcept {
  const unsigned k = (c - kClassOf4K - 1) / 4 + 12;
  const unsigned i = (c - kClassOf4K - 1) % 4 + 1;
  return (std::size_t{1} << k) + i * (std::size_t{1} << (k - 2));
}
inline unsigned ClassOfRequest(std::size_t n) noexcept {
  return n <= kFrontMaxSize ? front_class_of_request[(n + 7) >> 3] : MediumClassOf(n);
}

// Alignments above alignof(max_align_t) the caches serve. An object of one of jemalloc's
// classes up to kFrontMaxSize starts at a multiple of its class's largest power-of-two
// divisor (capped at the page: it lives in a page-aligned slab), and the class of a size
// rounded up to an alignment of at most 4 KiB is a multiple of that alignment. Larger
// classes are extents that jemalloc offsets by a random multiple of 64 bytes (its
// cache-oblivious layout), so above kFrontMaxSize only alignments up to 64 are served.
inline constexpr std::size_t kMaxCachedAlignment = 4096;
inline constexpr std::size_t kMaxLargeCachedAlignment = 64;

// The request size whose class serves `size` bytes aligned to `alignment` (a power of two,
// alignof(max_align_t) < alignment <= kMaxCachedAlignment) from the caches, or 0 when they
// cannot (a size above kFrontMaxCached, or an alignment only jemalloc's aligned path gives).
// Allocation and sized free both go through this, so a sized free names the object's class.
inline std::size_t AlignedCachedRequest(std::size_t size, std::size_t alignment) {
  if (size > kFrontMaxCached) return 0;  // also keeps the rounding below from overflowing
  const std::size_t request = size == 0 ? alignment : (size + alignment - 1) & ~(alignment - 1);
  if (request <= kFrontMaxSize) return request;
  return alignment <= kMaxLargeCachedAlignment && request <= kFrontMaxCached ? request : 0;
}

// The request size whose class the caches serve `size` bytes aligned to `alignment` (a power
// of two) from, for any alignment: 0 when they do not.
inline std::size_t CachedRequest(std::size_t size, std::size_t alignment) {
  if (alignment <= alignof(std::max_align_t)) {
    const std::size_t request = RequestSize(size, alignment);
    return request <= kFrontMaxCached ? request : 0;
  }
  return alignment <= kMaxCachedAlignment ? AlignedCachedRequest(size, alignment) : 0;
}

// The class map: for every 4 KiB chunk of a granule in which a live numarena object starts,
// 1 + the object's class (0: not recorded). One byte per chunk, one table per granule, made
// when the granule's first object is recorded. See lib/alloc/class_map.cpp for why a chunk
// never holds the starts of two objects of different classes.
inline constexpr unsigned kChunkShift = 12;
inline constexpr std::size_t kChunksPerGranule = std::size_t{1} << (kGranuleShift - kChunkShift);
extern std::atomic<std::atomic<std::uint8_t>*> class_tables[kGranuleCount];
// Makes the granule's table, then records (cold; a no-op when the table cannot be made).
void RecordClassSlow(const void* p, unsigned size_class) noexcept;
inline void RecordClass(const void* p, unsigned size_class) noexcept {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  if (std::atomic<std::uint8_t>* table =
          class_tables[a >> kGranuleShift].load(std::memory_order_acquire)) {
    // Stored only when it changes: objects are mostly reused from the same slabs, and a store
    // of the same byte would still take the cache line (64 chunks, 256 KiB of objects) away
    // from the threads whose unsized frees read it, e.g. a consumer freeing what this thread
    // allocates.
    std::atomic<std::uint8_t>& entry = table[(a >> kChunkShift) & (kChunksPerGranule - 1)];
    const auto value = static_cast<std::uint8_t>(size_class + 1);
    if (entry.load(std::memory_order_relaxed) != value) {
      entry.store(value, std::memory_order_relaxed);
    }
    return;
  }
  RecordClassSlow(p, size_class);
}
// 1 + the class of the live object at p (whose granule is numarena's), or 0 when unknown.
inline unsigned RecordedClassPlusOne(const void* p) noexcept {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  // Acquire: the table is published by RecordClassSlow's CAS after it was mapped, and another
  // thread may read its entries first (a plain load on x86-64, as relaxed was).
  std::atomic<std::uint8_t>* table = class_tables[a >> kGranuleShift].load(std::memory_order_acquire);
  if (table == nullptr) return 0;
  return table[(a >> kChunkShift) & (kChunksPerGranule - 1)].load(std::memory_order_relaxed);
}

// The usable size of the live numarena object at p from the class map: its class's bytes (the
// size sallocx would say, without the lookup in jemalloc's radix tree), or 0 when the map does
// not say (a class of 2 MiB or more, or no record: checked mode, the front cache off), and
// then jemalloc must be asked.
inline std::size_t RecordedUsableSize(const void* p) noexcept {
  const unsigned class_plus_one = RecordedClassPlusOne(p);
  return class_plus_one - 1 < unsigned{kFrontClasses} ? front_class_bytes[class_plus_one - 1] : 0;
}

// ---- the front cache (filled by lib/alloc/front_cache.cpp) ----
// Objects of up to kFrontMaxCached (1.75 MiB), one LIFO list per class threaded through the
// objects' first word. A list belongs to one (thread, heap), so an object only ever returns
// to the heap, and node, it came from. The classes above 4 KiB ("medium") also share a byte
// bound per cache, and the small lists' limits grow within a byte bound per cache (both in
// front_cache.cpp, smaller when a capacity gate is installed or presses the heap's nodes).
// What a list cannot keep goes to the heap's depot (lib/alloc/depot.cpp).
struct FrontList {
  void* head;
  std::uint32_t count;
  std::uint32_t limit;   // 0: the class is not cached
  // Since the list's last reset (it ran empty, was refilled, overflowed or was drained):
  // the pushes, and the count it had then. front_cache.cpp grows a list only when it filled
  // with frees alone (no pop since the reset), and shrinks a grown one that did not.
  std::uint32_t pushes;
  std::uint32_t reset_count;
};
struct FrontCache {
  FrontList lists[kFrontClasses];
  std::size_t medium_bytes;    // bytes in the medium lists
  std::size_t medium_limit;    // their bound
  std::size_t small_growth;    // sum over the small lists of (limit - start limit) x bytes
  // One freed object of 2 MiB to 4 MiB kept for this thread ahead of the heap's shared large
  // cache (front_cache.cpp, FrontLargePut): nullptr, or an object of class large_class.
  // Atomic because the memory return may take it from a thread that sleeps
  // (StealFrontLarge) once it has sat there since large_put_ns for the heap's return time;
  // large_class is the owner's alone.
  std::atomic<void*> large;
  std::atomic<std::int64_t> large_put_ns;
  std::uint32_t large_class;
  std::uint32_t depot_home;  // the heap's depot slot this cache puts to and takes from first
  // Bit c: an allocation of class c missed list c (it ran empty, or the allocation took the
  // slow path) since the small limits were last reset. Only such a list may grow
  // (front_cache.cpp): a thread that only frees a class (the consumer of a producer/consumer
  // pair) would hold a grown list that nothing of its takes from.
  std::uint64_t ran_empty;
};
// This thread's front cache per heap; nullptr until the thread's first slow-path call.
extern thread_local constinit FrontCache* front_caches[kMaxHeaps];

// A small list's next object is prefetched: objects freed in random order leave the list in
// random address order, and each pop's load of the next pointer would otherwise wait for a
// cache miss that the previous pop could have started (pointer-array caches such as
// tcmalloc's do not chase this chain). Never for NULL, which costs a page walk, nor for the
// medium classes, whose next object is seldom used soon.
inline void* FrontPop(FrontCache* cache, unsigned size_class) noexcept {
  FrontList& list = cache->lists[size_class];
  void* p = list.head;
  if (p != nullptr) {
    void* next = *static_cast<void**>(p);
    list.head = next;
    --list.count;
    if (size_class > kClassOf4K) {
      cache->medium_bytes -= front_class_bytes[size_class];
    } else if (next != nullptr) {
      __builtin_prefetch(next, 1);
    }
  }
  return p;
}

// The list (or the medium bound) is full: hands part of the cache back to jemalloc, then
// keeps `p`. Cold.
void FrontOverflow(int heap, FrontCache* cache, unsigned size_class, void* p) noexcept;

// `p` was already the last object this thread freed into its class (or, `in_depot`, is
// already free in the heap's depot: lib/alloc/depot.cpp): a double free. Reports it on
// stderr and aborts (what glibc does for the same mistake). Cold.
[[noreturn]] void FrontDoubleFree(int heap, unsigned size_class, void* p,
                                  bool in_depot = false) noexcept;

// Pushes `p` onto this cache's list of `size_class` when the list (and, for a medium class,
// the cache's medium bound) has room and `p` is not already the list's head; false, with
// nothing done, otherwise. Calls nothing: the malloc override's free runs it before its
// reentrancy guard (lib/preload/override_fast_path.hpp).
inline bool TryFrontPush(FrontCache* cache, unsigned size_class, void* p) noexcept {
  FrontList& list = cache->lists[size_class];
  // A block freed twice in a row on one thread would be the list's head: pushed again, the
  // list would loop and hand it out twice. The head is loaded below anyway.
  if (list.head == p || list.count >= list.limit) return false;
  if (size_class > kClassOf4K) {
    const std::size_t bytes = front_class_bytes[size_class];
    if (cache->medium_bytes + bytes > cache->medium_limit) return false;
    cache->medium_bytes += bytes;
  }
  *static_cast<void**>(p) = list.head;
  list.head = p;
  ++list.count;
  ++list.pushes;
  return true;
}

// What TryFrontPush refused: `p` already the list's head (FrontDoubleFree) or no room
// (FrontOverflow). Cold.
void FrontPushRefused(int heap, FrontCache* cache, unsigned size_class, void* p) noexcept;

inline void FrontPush(int heap, FrontCache* cache, unsigned size_class, void* p) noexcept {
  if (!TryFrontPush(cache, size_class, p)) [[unlikely]] {
    FrontPushRefused(heap, cache, size_class, p);
  }
}

// The first class the heap's depot holds (16 B: a chain's first object keeps its tail in its
// second word).
inline constexpr unsigned kFirstDepotClass = 1;

// An empty list: an object of `size_class` from the heap's depot (lib/alloc/depot.cpp), with
// the list refilled from the same chain, or nullptr when the depot has none. Cold.
void* FrontRefill(int heap, FrontCache* cache, unsigned size_class) noexcept;

// Notes that an allocation of `size_class` (< kFrontClasses) missed this cache's list: the
// thread allocates that class, so its list may grow (FrontCache::ran_empty).
inline void NoteListMiss(FrontCache* cache, unsigned size_class) noexcept {
  cache->ran_empty |= std::uint64_t{1} << size_class;
}

// Bytes of fresh pages jemalloc committed for this thread's allocations, in any heap, since
// ReturnAfterGrowth last ran on the thread (lib/alloc/node_pages.cpp counts them).
extern thread_local constinit std::size_t fresh_commit_bytes;
// How many make an allocation call ReturnAfterGrowth once it has its object.
inline constexpr std::size_t kReturnAfterFreshBytes = std::size_t{1} << 20;
// This thread made jemalloc commit kReturnAfterFreshBytes of fresh pages: what it held freed
// could not serve them (it carves from its dirty extents first), so what `heap` holds freed
// and unused goes back now rather than sit resident beside the new memory
// (lib/alloc/memory_return.cpp). Resets fresh_commit_bytes. Cold.
void ReturnAfterGrowth(int heap) noexcept;
// The check both allocation paths make once jemalloc has handed them an object.
inline void ReturnAfterGrowthIfDue(int heap) noexcept {
  if (__builtin_expect(fresh_commit_bytes >= kReturnAfterFreshBytes, 0)) ReturnAfterGrowth(heap);
}

// `size` bytes (1 <= size <= kFrontMaxCached, default alignment) from this thread's caches
// for `heap`: its front cache, the heap's depot, else jemalloc with the thread's flags.
// nullptr when the thread has no flags for the heap yet or jemalloc failed (its hooks
// recorded why).
inline void* AllocateFromThreadCaches(int heap, std::size_t size) noexcept {
  FrontCache* cache = front_caches[heap];
  if (cache == nullptr) return nullptr;  // no cache yet: the slow path makes one
  const unsigned size_class = ClassOfRequest(size);
  if (void* p = FrontPop(cache, size_class)) return p;
  NoteListMiss(cache, size_class);
  if (size_class >= kFirstDepotClass) {
    if (void* p = FrontRefill(heap, cache, size_class)) return p;
  }
  void* p = mallocx(size, thread_flags[heap]);
  if (p != nullptr) RecordClass(p, size_class);
  ReturnAfterGrowthIfDue(heap);
  return p;
}

// `p`, a medium object (above 4 KiB, below 2 MiB) that a reallocation outgrew, back to
// jemalloc rather than into this thread's lists; false (nothing done) for any other object or
// a thread without a front cache for `heap`. Cold. Why: a block that grows by reallocation
// (a Python list or string, a server's request buffer) leaves one outgrown block of each size
// it passes through, which the lists and the depot keep by size while nothing asks for that
// size again; jemalloc merges freed extents and carves the next step from them (python3 on
// JSON records: 0.7 MiB less at its peak).
bool FreeOutgrown(int heap, void* p) noexcept;

// A free that the front cache does not take: a class of 2 MiB or more (the heap's large
// cache, lib/alloc/large_cache.hpp) or an unrecorded one. Cold.
void DeallocateUncached(int heap, void* p, unsigned class_plus_one) noexcept;

// Frees `p`, which HeapOf says belongs to `heap` (>= 0), through this thread's caches for the
// heap: into the front list of its recorded class, else the uncached path. False (and nothing
// done) when the thread has no front cache for the heap yet.
inline bool FreeToThreadCaches(int heap, void* p) noexcept {
  FrontCache* cache = front_caches[heap];
  if (cache == nullptr) return false;
  const unsigned class_plus_one = RecordedClassPlusOne(p);
  if (class_plus_one - 1 < unsigned{kFrontClasses}) {
    FrontPush(heap, cache, class_plus_one - 1, p);
  } else {
    DeallocateUncached(heap, p, class_plus_one);
  }
  return true;
}

// FreeToThreadCaches's common case alone: `p` (HeapOf says `heap`) pushed onto this thread's
// front list of its recorded class (TryFrontPush); false, with nothing done, when the thread
// has no front cache for the heap, the class is not one the lists hold, or the list refuses.
// Calls nothing (the malloc override's free, before its reentrancy guard).
inline bool TryFreeToFrontList(int heap, void* p) noexcept {
  FrontCache* cache = front_caches[heap];
  if (cache == nullptr) return false;
  const unsigned class_plus_one = RecordedClassPlusOne(p);
  return class_plus_one - 1 < unsigned{kFrontClasses} &&
         TryFrontPush(cache, class_plus_one - 1, p);
}

// numarena::deallocate's body once the heap is known; the override calls it with the heap its
// ownership test found.
inline void DeallocateFromHeap(int heap, void* p) noexcept {
  if (!FreeToThreadCaches(heap, p)) DeallocateSlow(p);
}
}  // namespace arena_internal

}  // namespace numarena
