// Heaps: jemalloc arenas with extent hooks over node page providers (see jemalloc_heap.hpp).
#include "alloc/jemalloc_heap.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "alloc/checked.hpp"
#include "alloc/front_cache.hpp"
#include "alloc/large_cache.hpp"
#include "alloc/depot.hpp"
#include "os/fork.hpp"
#include "os/os.hpp"

// jemalloc's start-up options, unless the program sets its own malloc_conf (ours is weak, so
// a program's definition wins; MALLOC_CONF in the environment is applied on top either way).
//
// oversize_threshold:0 turns off jemalloc's "oversize" handling, which otherwise purges every
// freed extent above 8 MiB at once, in every arena, explicit ones included, so each 8 MiB+
// tensor freed and allocated again would be faulted in afresh, page by page (the cost is in
// bench/RESULTS.md, "Code history"). Without it, large extents follow the arena's normal
// decay like every other size, and arena purge() (or a budget's reclaim) still returns them
// on demand.
//
// narenas:1, for the jemalloc that libnumarena.so and the malloc override carry (built with
// JEMALLOC_MANGLE, cmake/NumarenaShared.cmake): it serves numarena alone, and numarena asks
// for its own arenas (MALLOCX_ARENA), so jemalloc's automatic arenas (4 per CPU by default)
// hold nothing but its own metadata. Each costs ~4 KiB of statistics that numarena's first
// mallctl() commits, for every one: 0.13 MiB of the override's fixed cost on 2 CPUs, 2 MiB
// on 128. Where numarena links Debian's jemalloc, that jemalloc may be the program's malloc,
// so its arenas stay as the program's jemalloc configures them.
//
// tcache:false, for the same jemalloc: numarena never uses jemalloc's automatic thread cache
// (every call passes MALLOCX_TCACHE_NONE, or an explicit cache in checked mode, which this
// leaves alone), but jemalloc would still set one up for each thread at the thread's first
// call: 32 KiB taken zeroed from arena 0, so a madvise() per thread once that range was used
// and freed by an earlier thread.
//
// bin_shards:1-14336:N, for the same jemalloc: N bins per small size class in every arena
// (BinShardCount in heap_table.hpp says why and how many), so that threads on different CPUs
// refill from slabs of their own. N depends on the host, so the option is written into
// g_jemalloc_options by AddBinShards below, a constructor that runs before jemalloc's own
// (which initializes it): priority 101 comes before the default priority in the library's
// .init_array, and nothing calls this jemalloc before that (only numarena does, from its own
// constructors on). Debian's jemalloc, where numarena links it, may be the program's malloc and
// is initialized by then, so it keeps one bin per class.
#if defined(JEMALLOC_MANGLE)
namespace {
char g_jemalloc_options[96] = "oversize_threshold:0,narenas:1,tcache:false";

// No snprintf: the digits are written by hand, since the formatting code is a part of libc
// that no other start-up call of the override reaches (a 64 KiB window of it mapped into
// every process under `numarena run` for one number).
__attribute__((constructor(101))) void AddBinShards() {
  constexpr std::string_view kOption = ",bin_shards:1-14336:";
  char* out = g_jemalloc_options + std::strlen(g_jemalloc_options);
  out = std::copy(kOption.begin(), kOption.end(), out);
  // At most 64 (jemalloc's BIN_SHARDS_MAX, BinShardCount): two digits, and the buffer has
  // room for them and the terminator.
  const unsigned count = numarena::BinShardCount(numarena::os::AllowedCpuCount());
  if (count >= 10) *out++ = static_cast<char>('0' + count / 10);
  *out++ = static_cast<char>('0' + count % 10);
  *out = '\0';
}
}  // namespace

extern "C" {
__attribute__((weak)) const char* malloc_conf = g_jemalloc_options;
}
#else
extern "C" {
__attribute__((weak)) const char* malloc_conf = "oversize_threshold:0";
}
#endif

namespace numarena {

namespace {

std::mutex g_create_mutex;
// Set while this thread holds g_create_mutex. Creating a jemalloc arena commits memory, and
// a capacity gate may reclaim on the committing thread, which frees, which may need a shard:
// that nested call must not wait for the lock its own thread holds.
thread_local bool t_holds_create_mutex = false;

// g_create_mutex, marked as held by this thread.
class CreateLock {
 public:
  CreateLock() : lock_(g_create_mutex) { t_holds_create_mutex = true; }
  ~CreateLock() { t_holds_create_mutex = false; }

 private:
  std::lock_guard<std::mutex> lock_;
};

NodePages* PagesOf(extent_hooks_t* hooks) { return reinterpret_cast<Heap*>(hooks)->pages; }

// The grow window. When a jemalloc arena needs more address space it calls the alloc hook
// for an uncommitted extent, registers that extent in its radix tree (allocating and first
// touching a tree leaf, 2 MiB and a transparent huge page for each new GiB of address space)
// and then calls the commit hook for the part it uses. Between the two, the thread's new
// pages prefer the heap's node, as under PlacementScope; the commit hook (or any other hook,
// or the arena's slow path, should jemalloc fail in between) ends the window.
thread_local constinit bool t_grow_window = false;
thread_local constinit os::ThreadPolicy t_grow_saved{};

void BeginGrowWindow(int node) noexcept {
  if (t_grow_window || os::GetThreadPolicyNoAlloc(&t_grow_saved) != 0) return;
  t_grow_window = os::PreferNodeNoAlloc(node) == 0;
}

// ---- extent hooks: no allocation, no locks but the provider's ---------------------------
// jemalloc's convention: bool hooks return false on success.

void* HookAlloc(extent_hooks_t* hooks, void* new_addr, size_t size, size_t alignment, bool* zero,
                bool* commit, unsigned /*arena_index*/) {
  const bool grow = !*commit;  // jemalloc's retained growth: registration follows
  void* span = PagesOf(hooks)->AllocateSpan(new_addr, size, alignment, zero, commit);
  if (span != nullptr && grow) BeginGrowWindow(PagesOf(hooks)->first_node());
  return span;
}

bool HookDalloc(extent_hooks_t*, void*, size_t, bool, unsigned) {
  EndHeapGrowWindow();
  return true;  // opt out: the range stays with jemalloc (retained), never unmapped
}

void HookDestroy(extent_hooks_t* hooks, void* addr, size_t size, bool committed, unsigned) {
  EndHeapGrowWindow();
  if (committed) (void)PagesOf(hooks)->Decommit(addr, size);
}

bool HookCommit(extent_hooks_t* hooks, void* addr, size_t /*size*/, size_t offset, size_t length,
                unsigned) {
  const bool committed = PagesOf(hooks)->Commit(static_cast<char*>(addr) + offset, length);
  EndHeapGrowWindow();
  return !committed;
}

bool HookDecommit(extent_hooks_t* hooks, void* addr, size_t /*size*/, size_t offset, size_t length,
                  unsigned) {
  EndHeapGrowWindow();
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

// mallctl("arena.<arena_index>.<leaf>", write `value`): the name translated with index 0
// (jemalloc's MIB interface) and the index put in its place, rather than formatted into the
// text: no snprintf on the paths that create arenas (every process's start-up under the
// override, where libc's formatting code would cost a 64 KiB window of its own) or purge them.
int ArenaMallctl(unsigned arena_index, std::string_view leaf, void* value = nullptr,
                 std::size_t value_bytes = 0) {
  constexpr std::string_view kPrefix = "arena.0.";
  char name[48];
  if (leaf.size() >= sizeof name - kPrefix.size()) return EINVAL;
  *std::copy(leaf.begin(), leaf.end(), std::copy(kPrefix.begin(), kPrefix.end(), name)) = '\0';
  std::size_t mib[3];
  std::size_t mib_length = 3;
  if (int err = mallctlnametomib(name, mib, &mib_length); err != 0) return err;
  mib[1] = arena_index;
  return mallctlbymib(mib, mib_length, nullptr, nullptr, value, value_bytes);
}

// The jemalloc side of ArenaOptions::return_idle_ms (memory_return.cpp): dirty pages decay
// over that time, and there is no muzzy state (the hooks provide no lazy purge).
void SetReturnSchedule(unsigned arena_index, std::int64_t return_idle_ms) {
  ssize_t dirty_ms = static_cast<ssize_t>(return_idle_ms), muzzy_ms = 0;
  ArenaMallctl(arena_index, "dirty_decay_ms", &dirty_ms, sizeof dirty_ms);
  ArenaMallctl(arena_index, "muzzy_decay_ms", &muzzy_ms, sizeof muzzy_ms);
}

// Makes one more jemalloc arena over `heap`'s hooks. Caller holds g_create_mutex.
StatusOr<unsigned> CreateJemallocArena(Heap& heap, const std::string& what) {
  unsigned arena_index = 0;
  size_t index_size = sizeof arena_index;
  extent_hooks_t* hooks = &heap.hooks;
  ThreadSpanFailure().Clear();
  int err = mallctl("arenas.create", &arena_index, &index_size, &hooks, sizeof hooks);
  Status reason =
      err == 0 ? Status()
               : ThreadSpanFailure().ToStatus(absl::StrCat(what, ": jemalloc arenas.create"));
  ThreadSpanFailure().Clear();  // a failure left recorded would stop this thread's later spans
  if (err == 0) {
    if (heap.return_idle_ms > 0) SetReturnSchedule(arena_index, heap.return_idle_ms);
    return arena_index;
  }
  if (!reason.ok()) return reason;
  return ErrnoToStatus(err, absl::StrCat(what, ": mallctl(arenas.create)"));
}

// Assigns the calling thread to `heap`'s least used shard, creating that shard's arena when
// needed (shard 0 when another cannot be made: jemalloc's arena table or the node is full),
// and returns the shard's jemalloc arena index.
unsigned JoinShard(Heap& heap) {
  if (t_holds_create_mutex) {  // nested in an arena creation on this thread: see above
    heap.shard_threads[0].fetch_add(1, std::memory_order_relaxed);
    return static_cast<unsigned>(heap.shard_arena[0].load(std::memory_order_acquire));
  }
  // Once per (thread, heap): choosing under the lock keeps two threads that start together
  // from both picking the same free shard.
  CreateLock lock;
#if defined(JEMALLOC_MANGLE)
  // jemalloc gives a thread its bins (BinShardCount) at the thread's first call into it; make
  // that call here, under the lock, so that threads take bins in the order they take shards.
  // (Only the private jemalloc has several bins per class: see malloc_conf above.)
  unsigned bound_arena = 0;
  size_t bound_size = sizeof bound_arena;
  mallctl("thread.arena", &bound_arena, &bound_size, nullptr, 0);
#endif
  int shard = 0;
  for (int s = 1; s < heap.shard_limit; ++s) {
    if (heap.shard_threads[s].load(std::memory_order_relaxed) <
        heap.shard_threads[shard].load(std::memory_order_relaxed)) {
      shard = s;
    }
  }
  int index = heap.shard_arena[shard].load(std::memory_order_acquire);
  if (index < 0) {
    StatusOr<unsigned> created = CreateJemallocArena(heap, "numarena heap shard");
    if (created.ok()) {
      index = static_cast<int>(*created);
      heap.shard_arena[shard].store(index, std::memory_order_release);
    } else {
      shard = 0;
      index = heap.shard_arena[0].load(std::memory_order_acquire);
    }
  }
  heap.shard_threads[shard].fetch_add(1, std::memory_order_relaxed);
  return static_cast<unsigned>(index);
}

// The exiting thread leaves the shard its `flags` (MALLOCX_ARENA bits) name.
void LeaveShard(Heap& heap, int flags) {
  const int arena_index = arena_internal::ArenaIndexOf(flags);
  for (int s = 0; s < kMaxShards; ++s) {
    if (heap.shard_arena[s].load(std::memory_order_acquire) == arena_index) {
      heap.shard_threads[s].fetch_sub(1, std::memory_order_relaxed);
      return;
    }
  }
}

// ---- heap lifecycle: every thread's tables, and the lock that keeps walks out ------------

// DestroyHeap drops every thread's caches for the heap itself, without the threads' help, so
// it must reach each thread's flag table and front-cache pointers: a thread links its tables
// here when it first gets flags (EnsureThreadCache) and unlinks them at exit. The node lives
// in the thread's own storage (no allocation).
struct ThreadTables {
  int* flags = nullptr;                            // thread_flags, or the checked-mode table
  arena_internal::FrontCache** fronts = nullptr;  // the thread's front_caches
  ThreadTables* prev = nullptr;
  ThreadTables* next = nullptr;
  bool linked = false;
};
thread_local constinit ThreadTables t_tables;
std::mutex g_threads_mutex;
ThreadTables* g_threads = nullptr;  // guarded by g_threads_mutex

// Held shared by what walks over every heap, or over one thread's tables for every heap
// (PurgeDirtyOnNode, a thread's exit), and exclusively by DestroyHeap: no walk meets a heap
// half destroyed, and a thread's tables are never changed by its exit and a destruction at
// once. Lock order: g_create_mutex, then this, then g_threads_mutex.
// A std::shared_mutex (pthread rwlock), not an absl::Mutex: the sanitizers see its ordering.
std::shared_mutex g_lifecycle_mutex;
// How deep the calling thread is inside g_lifecycle_mutex, in either mode: a walk nested in
// another, or in a destruction (through a capacity gate's callback), does not lock again.
thread_local constinit int t_lifecycle_depth = 0;

class LifecycleShared {
 public:
  LifecycleShared() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (t_lifecycle_depth++ == 0) g_lifecycle_mutex.lock_shared();
  }
  ~LifecycleShared() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (--t_lifecycle_depth == 0) g_lifecycle_mutex.unlock_shared();
  }
  LifecycleShared(const LifecycleShared&) = delete;
  LifecycleShared& operator=(const LifecycleShared&) = delete;
};

void LinkThreadTables(int* flags) {
  if (t_tables.linked) return;
  t_tables.flags = flags;
  t_tables.fronts = arena_internal::front_caches;
  std::lock_guard<std::mutex> lock(g_threads_mutex);
  t_tables.prev = nullptr;
  t_tables.next = g_threads;
  if (g_threads != nullptr) g_threads->prev = &t_tables;
  g_threads = &t_tables;
  t_tables.linked = true;
}

void UnlinkThreadTables() {
  if (!t_tables.linked) return;
  std::lock_guard<std::mutex> lock(g_threads_mutex);
  if (t_tables.prev != nullptr) t_tables.prev->next = t_tables.next;
  if (t_tables.next != nullptr) t_tables.next->prev = t_tables.prev;
  if (g_threads == &t_tables) g_threads = t_tables.next;
  t_tables.prev = t_tables.next = nullptr;
  t_tables.linked = false;
}

// ---- thread caches ------------------------------------------------------------------------

thread_local bool t_thread_exiting = false;

// Checked mode keeps the thread's flags here (allocated on first use) and leaves
// arena_internal::thread_flags at 0, so that the inline fast paths always fall through to the
// slow paths, where the checks are (checked.hpp).
thread_local int* t_checked_flags = nullptr;

// Where the calling thread's flags are (nullptr: checked mode, none yet).
int* StoredFlagTable() noexcept {
  return checked::Enabled() ? t_checked_flags : arena_internal::thread_flags;
}

// The same, made on first use; nullptr in checked mode when memory is short.
int* FlagTable() noexcept {
  if (!checked::Enabled()) return arena_internal::thread_flags;
  if (t_checked_flags == nullptr && !t_thread_exiting) {
    t_checked_flags = new (std::nothrow) int[arena_internal::kMaxHeaps]();
  }
  return t_checked_flags;
}

// Destroys this thread's explicit tcaches when the thread exits.
struct ThreadCacheOwner {
  bool armed = false;
  ~ThreadCacheOwner() {
    LifecycleShared walk;  // a heap destruction changes this thread's tables too
    int* table = StoredFlagTable();
    t_thread_exiting = true;
    // Out of the list before the front caches are freed: ReturnSleepingThreadsLarge walks it
    // (under g_threads_mutex) and reads the caches of every thread it finds there. A heap's
    // destruction, the other walk, cannot run while this thread holds `walk`.
    UnlinkThreadTables();
    DestroyFrontCaches();  // into the explicit tcaches, before those are destroyed
    if (table == nullptr) return;
    for (int heap = 0; heap < arena_internal::kMaxHeaps; ++heap) {
      int& flags = table[heap];
      if (flags == 0) continue;
      if (Heap* owner = g_heaps[heap].load(std::memory_order_acquire)) LeaveShard(*owner, flags);
      if (int tcache = arena_internal::TcacheIdOf(flags); tcache >= 0) {
        unsigned id = static_cast<unsigned>(tcache);
        mallctl("tcache.destroy", nullptr, nullptr, &id, sizeof id);
      }
      flags = 0;
    }
    if (table == t_checked_flags) {
      t_checked_flags = nullptr;
      delete[] table;
    }
  }
};
thread_local ThreadCacheOwner t_cache_owner;

// ---- fork (os/fork.hpp) ----------------------------------------------------------------------

// Whether this thread's fork prepare took g_create_mutex: not when fork() is called from
// inside a creation on this thread (a reclaim hook or listener run by a commit), which holds it.
thread_local bool t_fork_took_create_mutex = false;

void PrepareHeapCreation() {
  t_fork_took_create_mutex = !t_holds_create_mutex;
  if (t_fork_took_create_mutex) g_create_mutex.lock();
}

void ParentHeapCreation() {
  if (t_fork_took_create_mutex) g_create_mutex.unlock();
}

void ChildHeapCreation() {
  // The threads counted on each shard are gone but for this one: count only its memberships,
  // so the child's new threads spread over the shards again.
  const int* table = StoredFlagTable();
  const int count = g_heap_count.load(std::memory_order_acquire);
  for (int id = 0; id < count; ++id) {
    Heap* heap = g_heaps[id].load(std::memory_order_acquire);
    if (heap == nullptr) continue;
    for (std::atomic<int>& threads : heap->shard_threads) threads.store(0, std::memory_order_relaxed);
    if (table != nullptr && table[id] != 0) {
      const int arena_index = arena_internal::ArenaIndexOf(table[id]);
      for (int s = 0; s < kMaxShards; ++s) {
        if (heap->shard_arena[s].load(std::memory_order_relaxed) == arena_index) {
          heap->shard_threads[s].fetch_add(1, std::memory_order_relaxed);
          break;
        }
      }
    }
  }
  ParentHeapCreation();
}

// Whether this thread's fork prepare took g_lifecycle_mutex: not when it already holds it
// (fork() from a capacity gate's callback inside a purge or a destruction).
thread_local bool t_fork_took_lifecycle = false;

void PrepareHeapLifecycle() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  t_fork_took_lifecycle = t_lifecycle_depth == 0;
  if (t_fork_took_lifecycle) g_lifecycle_mutex.lock();
  g_threads_mutex.lock();
}

void ParentHeapLifecycle() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  g_threads_mutex.unlock();
  if (t_fork_took_lifecycle) g_lifecycle_mutex.unlock();
}

void ChildHeapLifecycle() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Only this thread exists in the child. The other threads' tables lie in their storage,
  // which the child's C library may hand to its new threads: unlink them all. (Their jemalloc
  // caches are never destroyed, as at any fork; they are never used again either.)
  if (t_tables.linked) {
    t_tables.prev = t_tables.next = nullptr;
    g_threads = &t_tables;
  } else {
    g_threads = nullptr;
  }
  g_threads_mutex.unlock();
  if (t_fork_took_lifecycle) {
    // Only this thread holds it; threads the child does not have may have been queued on it:
    // build it anew.
    g_lifecycle_mutex.unlock();
    g_lifecycle_mutex.~shared_mutex();
    new (&g_lifecycle_mutex) std::shared_mutex();
  }
  // The shared caches' byte counts, which the parent's threads may have left between a count
  // and a slot: ArenaStats::cached and the caches' bounds read them.
  DepotRecountInForkChild();
  LargeCacheRecountInForkChild();
}

}  // namespace

void EndHeapGrowWindow() noexcept {
  if (!t_grow_window) return;
  t_grow_window = false;
  (void)os::SetThreadPolicyNoAlloc(t_grow_saved);
}

PlacementScope::PlacementScope(int node) noexcept {
  if (node < 0 || os::GetThreadPolicyNoAlloc(&saved_) != 0) return;
  active_ = os::PreferNodeNoAlloc(node) == 0;
}

PlacementScope::~PlacementScope() {
  // A grow window jemalloc left open inside the scope saved the scope's policy: close it
  // first, so what is put back is the policy from before the scope.
  EndHeapGrowWindow();
  if (active_) (void)os::SetThreadPolicyNoAlloc(saved_);
}

namespace {
// The fork stages of heap creation, heap lifecycle and the page providers' locks, set when
// the library is loaded (os/fork.hpp says why not on first use).
[[maybe_unused]] const bool g_heap_fork_stages_set = [] {
  static const os::ForkStageHandlers creation{PrepareHeapCreation, ParentHeapCreation,
                                              ChildHeapCreation};
  static const os::ForkStageHandlers providers{nullptr, nullptr,
                                               NodePages::RecreateLocksInForkChild};
  static const os::ForkStageHandlers lifecycle{PrepareHeapLifecycle, ParentHeapLifecycle,
                                                ChildHeapLifecycle};
  os::SetForkStage(os::ForkStage::kHeapCreation, &creation);
  os::SetForkStage(os::ForkStage::kHeapLifecycle, &lifecycle);
  os::SetForkStage(os::ForkStage::kProviderLocks, &providers);
  return true;
}();
}  // namespace

StatusOr<Heap*> CreateHeap(const Policy& placement, const ArenaOptions& options) {
  CreateLock lock;
  // The provider's tables and jemalloc's first arena for the heap (its statistics live in
  // jemalloc's own metadata) go on the placement's node, whoever creates the heap.
  PlacementScope scope(placement.nodes().empty() ? -1 : placement.nodes().front());
  checked::Decide();  // before the first heap: a pointer is made and freed in one mode
  InitFrontCacheClasses();
  // The lowest free slot: a destroyed heap's id is given to the next heap.
  const int count = g_heap_count.load(std::memory_order_relaxed);
  int id = 0;
  while (id < count && g_heaps[id].load(std::memory_order_relaxed) != nullptr) ++id;
  if (id >= arena_internal::kMaxHeaps) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "arena for ", placement.ToString(), ": numarena already has ", id,
        " heaps, its limit; reuse arenas (each distinct policy makes one, Preferred and Local "
        "one per node used) or destroy arenas made by Arena::Create"));
  }
  StatusOr<NodePages*> pages = NodePages::Create(placement, options, id);
  if (!pages.ok()) return pages.status();

  auto* heap = new Heap();
  heap->hooks = extent_hooks_t{HookAlloc,       HookDalloc,   HookDestroy,
                               HookCommit,      HookDecommit, /*purge_lazy=*/nullptr,
                               HookPurgeForced, HookSplit,    HookMerge};
  heap->id = id;
  heap->pages = *pages;
  heap->return_idle_ms = options.return_idle_ms;
  // ArenaOptions::shards; by default one per 4 CPUs: with the front cache and the depot in
  // front, jemalloc's arena locks are taken only on their misses.
  heap->shard_limit = options.shards > 0
                          ? std::min(options.shards, kMaxShards)
                          : DefaultShardCount(os::AllowedCpuCount());
  for (std::atomic<int>& shard : heap->shard_arena) shard.store(-1, std::memory_order_relaxed);
  for (std::atomic<int>& threads : heap->shard_threads) threads.store(0, std::memory_order_relaxed);
  StatusOr<unsigned> first =
      CreateJemallocArena(*heap, absl::StrCat("arena for ", placement.ToString()));
  if (!first.ok()) {
    // jemalloc kept nothing of the provider (it gives back the blocks of an arena it could
    // not finish), so a later attempt for this id starts from a clean slate.
    NodePages::Discard(heap->pages);
    delete heap;
    return first.status();
  }
  heap->shard_arena[0].store(static_cast<int>(*first), std::memory_order_release);
  g_heaps[id].store(heap, std::memory_order_release);
  if (id == count) g_heap_count.store(id + 1, std::memory_order_release);
  return heap;
}

void ForEachLiveHeap(void (*visit)(Heap&, void*), void* context) noexcept {
  LifecycleShared walk;
  const int count = g_heap_count.load(std::memory_order_acquire);
  for (int id = 0; id < count; ++id) {
    if (Heap* heap = g_heaps[id].load(std::memory_order_acquire)) visit(*heap, context);
  }
}

bool ThreadExiting() noexcept { return t_thread_exiting; }

int ThreadFlags(int heap) noexcept {
  const int* table = StoredFlagTable();
  return table == nullptr ? 0 : table[heap];
}

std::size_t PurgeDirtyOnNode(int node) noexcept {
  if (node < 0 || node >= os::KernelNodeMask::kMaxNodes) return 0;
  LifecycleShared walk;  // no heap is destroyed under this walk
  const int count = g_heap_count.load(std::memory_order_acquire);
  // This thread's cached objects, every thread's one large object (a server's workers may each
  // keep a 2-4 MiB buffer: tens of MiB charged in all) and the heaps' depots and large caches,
  // so their pages can go too (other threads' lists hold at most 32 KiB per small class and
  // 256 KiB of medium objects); the bytes they handed to jemalloc.
  // Every refusal purges: memory freed straight to jemalloc since the last purge (a cache's
  // overflow, a large free, another thread's exit) is dirty there and charged until purged,
  // and a purge that finds nothing dirty costs a few microseconds per shard.
  auto flush_caches = [](int id) {
    bool young = false;
    return FlushFrontCache(id) + ReturnSleepingThreadsLarge(id, 0, 0, &young) +
           LargeCacheFlush(id) + DepotFlush(id);
  };
  std::size_t before = 0, after = 0;
  for (int id = 0; id < count; ++id) {
    Heap* heap = g_heaps[id].load(std::memory_order_acquire);
    if (heap == nullptr || !heap->pages->places_on(node)) continue;
    before += heap->pages->committed_bytes();
    flush_caches(id);
    if (int tcache = arena_internal::TcacheIdOf(ThreadFlags(id)); tcache >= 0) {
      unsigned tcache_id = static_cast<unsigned>(tcache);
      mallctl("tcache.flush", nullptr, nullptr, &tcache_id, sizeof tcache_id);
    }
    ForEachShardCall(*heap, "purge");
    after += heap->pages->committed_bytes();
  }
  if (after >= before) return 0;
  // The pages are the kernel's again now: the retry that follows must judge the node on a
  // fresh reading, not on the guard's figures from before the purge.
  NodeMemoryGuard::Invalidate(node);
  return before - after;
}

void ForEachShardCall(const Heap& heap, const char* action) noexcept {
  ForEachShard(heap, [action](unsigned arena_index) { ArenaMallctl(arena_index, action); });
}

void PurgeHeapDirty(int heap) noexcept {
  if (const Heap* live = HeapById(heap)) ForEachShardCall(*live, "purge");
}

NodePages::MoveResult MoveHeapPages(int heap, void* from, void* to, std::size_t bytes) noexcept {
  LifecycleShared walk;
  const Heap* live = HeapById(heap);
  if (live == nullptr) return NodePages::MoveResult::kNotMoved;
  return live->pages->MovePages(from, to, bytes);
}

void PurgeThreadShardDirty(int heap) noexcept {
  const Heap* live = HeapById(heap);
  if (live == nullptr) return;
  const int shard = arena_internal::ArenaIndexOf(arena_internal::thread_flags[heap]);
  if (shard < 0) {
    ForEachShardCall(*live, "purge");
    return;
  }
  ArenaMallctl(static_cast<unsigned>(shard), "purge");
}

std::size_t ReturnSleepingThreadsLarge(int heap, std::int64_t now_ns, std::int64_t min_age_ns,
                                       bool* young_left) noexcept {
  // Taken under the list's lock, freed outside it (dallocx may purge, and the hooks take the
  // provider's locks), a batch at a time. The walk ends: what it takes is gone from the slots,
  // and what their threads put there meanwhile is younger than `min_age_ns`.
  constexpr int kBatch = 32;
  std::size_t freed = 0;
  bool more = true;
  while (more) {
    void* taken[kBatch];
    int count = 0;
    {
      std::lock_guard<std::mutex> lock(g_threads_mutex);
      for (ThreadTables* t = g_threads; t != nullptr && count < kBatch; t = t->next) {
        // The thread publishes its cache with a release store (CreateFrontCache).
        arena_internal::FrontCache* cache =
            t->fronts != nullptr ? LoadFrontCache(t->fronts[heap]) : nullptr;
        if (cache == nullptr) continue;
        if (void* p = StealFrontLarge(cache, now_ns, min_age_ns, young_left)) taken[count++] = p;
      }
      more = count == kBatch;
    }
    for (int i = 0; i < count; ++i) {
      freed += sallocx(taken[i], 0);
      dallocx(taken[i], MALLOCX_TCACHE_NONE);  // to the object's own jemalloc arena
    }
  }
  return freed;
}

int EnsureThreadCache(int heap) noexcept {
  int* table = FlagTable();
  int flags = table == nullptr ? 0 : table[heap];
  if (flags != 0) return flags;
  Heap& owner = *HeapById(heap);
  if (t_thread_exiting || table == nullptr) {
    return MALLOCX_TCACHE_NONE | MALLOCX_ARENA(static_cast<unsigned>(
                                     owner.shard_arena[0].load(std::memory_order_acquire)));
  }
  // What this thread's first use of the heap allocates is memory of the heap, so on its
  // node, not this thread's: the registrations of the thread_local destructors below, the
  // thread's jemalloc cache (jemalloc allocates it in its arena 0; pages it takes fresh and
  // first touches later, as the cache fills, still go where the thread runs), a new shard's
  // statistics, the front cache.
  PlacementScope scope(owner.pages->first_node());
  t_cache_owner.armed = true;  // constructs the owner: its destructor runs at thread exit
  LinkThreadTables(table);     // so that DestroyHeap can drop this thread's caches of a heap
  // Construct this thread's SpanFailure here, outside any hook: registering a thread_local
  // destructor may allocate, and the hooks that record failures must not.
  (void)ThreadSpanFailure();
  // With the front cache on, jemalloc's thread cache would only be a second cache behind it
  // (the front cache holds every class jemalloc's would, and more), holding memory of its own
  // per (thread, heap): the slots of every bin, and objects. What misses the front cache
  // and the depot goes to the shard's bins directly. Without the front cache (checked mode,
  // or a jemalloc with other size classes) each thread gets an explicit jemalloc cache.
  unsigned id = 0;
  size_t id_size = sizeof id;
  if (!checked::Enabled() && FrontCacheEnabled()) {
    flags = MALLOCX_TCACHE_NONE;
  } else if (mallctl("tcache.create", &id, &id_size, nullptr, 0) == 0) {
    flags = MALLOCX_TCACHE(id);
  } else {
    flags = MALLOCX_TCACHE_NONE;  // jemalloc's explicit cache table is full: uncached
  }
  flags |= MALLOCX_ARENA(JoinShard(owner));
  table[heap] = flags;
  if (!checked::Enabled()) CreateFrontCache(heap);
  return flags;
}

// ---- destroying a heap -------------------------------------------------------------------

Status DestroyHeap(int id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Heap* heap = HeapById(id);
  if (heap == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("numarena heap ", id, " does not exist"));
  }
  if (t_holds_create_mutex || t_lifecycle_depth > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "destroy numarena heap ", id, " (", heap->pages->placement().ToString(),
        "): called from inside numarena (a capacity gate's reclaim hook or listener, run while "
        "numarena commits, purges or destroys memory); destroy the arena after that call "
        "returns"));
  }
  CreateLock creation;
  g_lifecycle_mutex.lock();
  t_lifecycle_depth = 1;
  g_heaps[id].store(nullptr, std::memory_order_release);  // walks that start now skip it

  // Every thread's caches of the heap. The front caches are the heap's own memory, and what
  // they hold is live to jemalloc: both go with the arenas below, so the pointers are only
  // forgotten. jemalloc's thread caches are outside the heap and must be emptied before its
  // arenas are destroyed (jemalloc's rule for arena.<i>.destroy); each (thread, heap) pair
  // has its own, so it is destroyed whole, and its id goes back to jemalloc.
  {
    std::lock_guard<std::mutex> lock(g_threads_mutex);
    for (ThreadTables* t = g_threads; t != nullptr; t = t->next) {
      if (t->fronts != nullptr && t->fronts[id] != nullptr) t->fronts[id] = nullptr;
      if (t->flags == nullptr || t->flags[id] == 0) continue;
      const int tcache = arena_internal::TcacheIdOf(t->flags[id]);
      t->flags[id] = 0;
      if (tcache >= 0) {
        unsigned tcache_id = static_cast<unsigned>(tcache);
        mallctl("tcache.destroy", nullptr, nullptr, &tcache_id, sizeof tcache_id);
      }
    }
  }
  LargeCacheDrop(id);
  DepotDrop(id);
  if (checked::Enabled()) checked::ForgetHeap(id);  // while the granules still name the heap

  // Each shard's jemalloc arena: its objects, dirty pages and metadata blocks go back through
  // the hooks (decommit or destroy, which release their charges), and jemalloc reuses the
  // arena index.
  int failed_index = -1, failed_err = 0;
  for (std::atomic<int>& shard : heap->shard_arena) {
    const int index = shard.load(std::memory_order_acquire);
    if (index < 0) continue;
    if (int err = ArenaMallctl(static_cast<unsigned>(index), "destroy"); err != 0) {
      failed_index = index;
      failed_err = err;
      continue;
    }
    shard.store(-1, std::memory_order_release);
  }
  Status result;
  if (failed_index >= 0) {
    // jemalloc kept the arena (and so the provider's spans): the heap stays, unusable but
    // with its slot taken, since its memory is still tagged with its id.
    g_heaps[id].store(heap, std::memory_order_release);
    result = absl::InternalError(absl::StrCat(
        "destroy numarena heap ", id, " (", heap->pages->placement().ToString(),
        "): mallctl(arena.", failed_index, ".destroy) failed: ", std::strerror(failed_err),
        "; the heap's memory stays allocated"));
  } else {
    NodePages::Discard(heap->pages);  // address ranges, tables, granule tags, class map
    delete heap;
  }
  t_lifecycle_depth = 0;
  g_lifecycle_mutex.unlock();
  return result;
}

}  // namespace numarena
