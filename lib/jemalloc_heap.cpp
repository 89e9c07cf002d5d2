// Heaps: jemalloc arenas with extent hooks over node page providers (see jemalloc_heap.hpp).
#include "jemalloc_heap.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "front_cache.hpp"

// jemalloc's start-up options, unless the program sets its own malloc_conf (ours is weak, so
// a program's definition wins; MALLOC_CONF in the environment is applied on top either way).
//
// oversize_threshold:0 turns off jemalloc's "oversize" handling, which otherwise purges every
// freed extent above 8 MiB at once, in every arena, explicit ones included. For numarena that
// meant each 8 MiB+ tensor freed and allocated again was re-faulted page by page: 132 us per
// 8 MiB alloc+free pair instead of 0.3 us here (bench/peers_bench alloc_free_8MiB). Without it,
// large extents follow the arena's normal decay like every other size, and arena purge()
// (or a budget's reclaim) still returns them on demand.
extern "C" {
__attribute__((weak)) const char* malloc_conf = "oversize_threshold:0";
}

namespace numarena {

namespace arena_internal {
thread_local constinit int tcache_flags[kMaxHeaps] = {};
}  // namespace arena_internal

namespace {

std::atomic<Heap*> g_heaps[arena_internal::kMaxHeaps];
std::atomic<int> g_heap_count{0};
std::mutex g_create_mutex;

NodePages* PagesOf(extent_hooks_t* hooks) { return reinterpret_cast<Heap*>(hooks)->pages; }

// ---- extent hooks: no allocation, no locks but the provider's ---------------------------
// jemalloc's convention: bool hooks return false on success.

void* HookAlloc(extent_hooks_t* hooks, void* new_addr, size_t size, size_t alignment, bool* zero,
                bool* commit, unsigned /*arena_index*/) {
  return PagesOf(hooks)->AllocateSpan(new_addr, size, alignment, zero, commit);
}

bool HookDalloc(extent_hooks_t*, void*, size_t, bool, unsigned) {
  return true;  // opt out: the range stays with jemalloc (retained), never unmapped
}

void HookDestroy(extent_hooks_t* hooks, void* addr, size_t size, bool committed, unsigned) {
  if (committed) (void)PagesOf(hooks)->Decommit(addr, size);
}

bool HookCommit(extent_hooks_t* hooks, void* addr, size_t /*size*/, size_t offset, size_t length,
                unsigned) {
  return !PagesOf(hooks)->Commit(static_cast<char*>(addr) + offset, length);
}

bool HookDecommit(extent_hooks_t* hooks, void* addr, size_t /*size*/, size_t offset, size_t length,
                  unsigned) {
  return !PagesOf(hooks)->Decommit(static_cast<char*>(addr) + offset, length);
}

bool HookPurgeForced(extent_hooks_t* hooks, void* addr, size_t /*size*/, size_t offset,
                     size_t length, unsigned) {
  return !PagesOf(hooks)->PurgeKeepCommitted(static_cast<char*>(addr) + offset, length);
}

bool HookSplit(extent_hooks_t*, void*, size_t, size_t, size_t, bool, unsigned) {
  return false;  // splitting never crosses a range boundary
}

bool HookMerge(extent_hooks_t* hooks, void* addr_a, size_t, void* addr_b, size_t, bool, unsigned) {
  return !PagesOf(hooks)->SameRange(addr_a, addr_b);
}

// ---- thread caches ------------------------------------------------------------------------

thread_local bool t_thread_exiting = false;

// Destroys this thread's explicit tcaches when the thread exits.
struct ThreadCacheOwner {
  bool armed = false;
  ~ThreadCacheOwner() {
    t_thread_exiting = true;
    DestroyFrontCaches();  // into the explicit tcaches, before those are destroyed
    for (int& flags : arena_internal::tcache_flags) {
      if (flags != 0 && flags != MALLOCX_TCACHE_NONE) {
        unsigned id = static_cast<unsigned>((flags >> 8) - 2);
        mallctl("tcache.destroy", nullptr, nullptr, &id, sizeof id);
      }
      flags = 0;
    }
  }
};
thread_local ThreadCacheOwner t_cache_owner;

}  // namespace

StatusOr<Heap*> CreateHeap(const Policy& placement, const ArenaOptions& options) {
  std::lock_guard<std::mutex> lock(g_create_mutex);
  InitFrontCacheClasses();
  int id = g_heap_count.load(std::memory_order_relaxed);
  if (id >= arena_internal::kMaxHeaps) {
    return absl::ResourceExhaustedError(
        absl::StrCat("arena for ", placement.ToString(), ": numarena already made ", id,
                     " jemalloc arenas, its limit; reuse arenas (each distinct policy makes one)"));
  }
  StatusOr<NodePages*> pages = NodePages::Create(placement, options, id);
  if (!pages.ok()) return pages.status();

  auto* heap = new Heap();
  heap->hooks = extent_hooks_t{HookAlloc,       HookDalloc,   HookDestroy,
                               HookCommit,      HookDecommit, /*purge_lazy=*/nullptr,
                               HookPurgeForced, HookSplit,    HookMerge};
  heap->id = id;
  heap->pages = *pages;
  unsigned arena_index = 0;
  size_t index_size = sizeof arena_index;
  extent_hooks_t* hooks = &heap->hooks;
  ThreadSpanFailure().Clear();
  int err = mallctl("arenas.create", &arena_index, &index_size, &hooks, sizeof hooks);
  if (err != 0) {
    Status reason = ThreadSpanFailure().ToStatus(
        absl::StrCat("arena for ", placement.ToString(), ": jemalloc arenas.create"));
    if (!reason.ok()) return reason;
    return ErrnoToStatus(
        err, absl::StrCat("arena for ", placement.ToString(), ": mallctl(arenas.create)"));
  }
  heap->arena_index = arena_index;
  heap->mallocx_arena = MALLOCX_ARENA(arena_index);
  g_heaps[id].store(heap, std::memory_order_release);
  g_heap_count.store(id + 1, std::memory_order_release);
  return heap;
}

Heap* HeapById(int id) {
  if (id < 0 || id >= arena_internal::kMaxHeaps) return nullptr;
  return g_heaps[id].load(std::memory_order_acquire);
}

int EnsureThreadCache(int heap) noexcept {
  int flags = arena_internal::tcache_flags[heap];
  if (flags != 0) return flags;
  if (t_thread_exiting) return MALLOCX_TCACHE_NONE;
  t_cache_owner.armed = true;  // constructs the owner: its destructor runs at thread exit
  // Construct this thread's SpanFailure here, outside any hook: registering a thread_local
  // destructor may allocate, and the hooks that record failures must not.
  (void)ThreadSpanFailure();
  unsigned id = 0;
  size_t id_size = sizeof id;
  if (mallctl("tcache.create", &id, &id_size, nullptr, 0) == 0) {
    flags = MALLOCX_TCACHE(id);
  } else {
    flags = MALLOCX_TCACHE_NONE;  // jemalloc's explicit cache table is full: uncached
  }
  arena_internal::tcache_flags[heap] = flags;
  CreateFrontCache(heap);
  return flags;
}

}  // namespace numarena
