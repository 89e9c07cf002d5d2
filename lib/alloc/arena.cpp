// Arenas (see arena.hpp): the registry of arenas per (policy, options), their slow paths,
// per-node dispatch for Preferred and Local policies, frees, and statistics.
#include "numarena/arena.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "alloc/checked.hpp"
#include "alloc/front_cache.hpp"
#include "alloc/jemalloc_heap.hpp"
#include "alloc/large_cache.hpp"
#include "alloc/large_growth.hpp"
#include "alloc/memory_return.hpp"
#include "alloc/depot.hpp"
#include "alloc/node_pages.hpp"
#include "base/clock.hpp"
#include "numarena/topology.hpp"
#include "os/current_node.hpp"
#include "os/fork.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

// The reason of this thread's last failed allocation. A trivially destructible pointer, so it
// can be read and written at any point of the thread's exit (allocations may fail inside other
// thread_local destructors); LastErrorOwner frees it when the thread's thread_locals are
// destroyed.
thread_local Status* t_last_error = nullptr;
// Set once LastErrorOwner has run: a Status made after that would never be freed, so later
// failures keep only their code (t_late_error_code). The same holds once the thread's exit
// has begun (ThreadExiting) for a thread that never failed before: an owner constructed from a
// pthread key destructor, after the thread_local destructors ran, is never destroyed.
thread_local bool t_last_error_released = false;
thread_local absl::StatusCode t_late_error_code = absl::StatusCode::kOk;

struct LastErrorOwner {
  bool armed = false;
  ~LastErrorOwner() {
    delete t_last_error;
    t_last_error = nullptr;
    t_last_error_released = true;
  }
};
thread_local LastErrorOwner t_last_error_owner;

void SetLastError(Status status) {
  if (t_last_error == nullptr) {
    if (t_last_error_released || ThreadExiting()) {
      t_late_error_code = status.code();
      return;
    }
    t_last_error_owner.armed = true;  // constructs the owner: its destructor runs at thread exit
    t_last_error = new Status();
  }
  *t_last_error = std::move(status);
}

bool IsPowerOfTwo(std::size_t value) { return value != 0 && (value & (value - 1)) == 0; }

// Allocations of 2 MiB and more are 2 MiB aligned so they can be backed by huge pages;
// sized frees must repeat the same alignment.
std::size_t EffectiveAlignment(std::size_t size, std::size_t alignment) {
  if (size >= arena_internal::kLargeAlignThreshold &&
      alignment < arena_internal::kLargeAlignThreshold) {
    return arena_internal::kLargeAlignThreshold;
  }
  return alignment;
}

int AlignFlags(std::size_t alignment) {
  if (alignment <= alignof(std::max_align_t)) return 0;
  return MALLOCX_LG_ALIGN(__builtin_ctzll(alignment));
}

std::string Bytes(std::size_t bytes) { return absl::StrCat(bytes, " bytes"); }

// The node a commit was refused on for lack of room (the capacity gate's ResourceExhausted,
// or the node's free-memory guard), or -1 for any other failure.
int RefusedNode(const SpanFailure& failure) {
  if (failure.kind == SpanFailure::Kind::kNodeFull) return failure.node;
  if (failure.kind == SpanFailure::Kind::kGateRefused &&
      absl::IsResourceExhausted(failure.gate_status)) {
    return failure.node;
  }
  return -1;
}

template <typename T>
T ReadArenaStat(unsigned arena_index, const char* name) {
  T value{};
  std::size_t size = sizeof value;
  std::string key = absl::StrCat("stats.arenas.", arena_index, ".", name);
  if (mallctl(key.c_str(), &value, &size, nullptr, 0) != 0) return T{};
  return value;
}

// Records the class of `p`, fresh from mallocx with any flags for `heap`, in the class map
// (the slow path's objects may be aligned, so the class is that of the usable size jemalloc
// gave), and notes in this thread's front cache for the heap that the thread allocates that
// class (an allocation the caches did not serve: its list may grow, front_cache.cpp).
void RecordClass(int heap, void* p) {
  const std::size_t usable = sallocx(p, 0);
  const unsigned size_class = usable <= arena_internal::kFrontMaxSize
                                  ? arena_internal::front_class_of_usable[usable >> 3]
                                  : arena_internal::MediumClassOf(usable);
  arena_internal::RecordClass(p, size_class);
  if (size_class < unsigned{arena_internal::kFrontClasses}) {
    if (arena_internal::FrontCache* cache = arena_internal::front_caches[heap]) {
      arena_internal::NoteListMiss(cache, size_class);
    }
  }
}

}  // namespace

// A node that could not take a heap (ResourceExhausted) is asked again after this long, not
// on every allocation: each attempt reserves address space and asks the capacity gate.
constexpr std::int64_t kHeapRetryNanos = NodeMemoryGuard::kRefreshNanos;

struct Arena::NodeHeapRetry {
  std::int64_t not_before_ns = 0;  // guarded by g_node_heap_mutex
  Status error;                    // the refusal, repeated until then
};

// Owns every arena, keyed by (policy, options); arenas are never destroyed.
class ArenaRegistry {
 public:
  static ArenaRegistry& Get() {
    // call_once rather than a function-local static: pthread_once recovers in a fork child
    // whose parent was inside it, a static's guard would stay taken.
    static std::once_flag once;
    static ArenaRegistry* registry = nullptr;
    std::call_once(once, [] {
      registry = new ArenaRegistry();
      // Before any thread can hold the registry's lock (the stages are set at load).
      os::InstallForkHandlers();
    });
    return *registry;
  }

  // The registry's lock, for the fork handlers.
  absl::Mutex& mutex() ABSL_LOCK_RETURNED(mutex_) { return mutex_; }

  StatusOr<Arena*> Find(const Policy& policy, const ArenaOptions& options) {
    {
      absl::MutexLock lock(&mutex_);
      auto it = arenas_.find(std::make_pair(policy, options));
      if (it != arenas_.end()) return it->second;
    }
    // A new arena: everything it allocates for itself, here and in its heaps, goes on the
    // policy's (first) node, not the calling thread's.
    PlacementScope scope(policy.nodes().empty() ? -1 : policy.nodes().front());
    absl::MutexLock lock(&mutex_);
    auto it = arenas_.find(std::make_pair(policy, options));
    if (it != arenas_.end()) return it->second;
    auto* arena = new Arena(policy, options);
    if (Status s = arena->Init(); !s.ok()) {
      delete arena;
      return s;
    }
    arenas_.emplace(std::make_pair(policy, options), arena);
    return arena;
  }

 private:
  absl::Mutex mutex_;
  absl::flat_hash_map<std::pair<Policy, ArenaOptions>, Arena*> arenas_ ABSL_GUARDED_BY(mutex_);
};

// ---- creation -----------------------------------------------------------------------------

StatusOr<Arena*> Arena::ForNode(int node) { return ForPolicy(Policy::Bind(node)); }

namespace {
// The policy an arena for (`policy`, `options`) is made for: validated, its memory target
// (if any) resolved from the calling thread's node, the options checked.
StatusOr<Policy> ArenaPolicy(const Policy& policy, const ArenaOptions& options) {
  StatusOr<const Topology*> topology = Topology::system();
  if (!topology.ok()) return topology.status();
  if (Status s = policy.Validate(**topology); !s.ok()) return s;
  // A memory target is chosen once, now, from this thread's node; the arena is the one of the
  // chosen policy, so every thread that names the same target after it shares it.
  StatusOr<Policy> resolved = policy.Resolve(**topology, Topology::current_node());
  if (!resolved.ok()) return resolved.status();
  std::size_t huge = options.hugetlb_page_bytes;
  if (huge != 0 && huge != ArenaOptions::kHugetlb2M && huge != ArenaOptions::kHugetlb1G) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena for ", resolved->ToString(), ": hugetlb_page_bytes ", huge,
                     " is not 0, 2 MiB (ArenaOptions::kHugetlb2M) or 1 GiB (kHugetlb1G)"));
  }
  if (options.shards < 0 || options.shards > ArenaOptions::kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena for ", resolved->ToString(), ": shards ", options.shards,
                     " is not 0 (one per 4 CPUs) or 1 to ", ArenaOptions::kMaxShards));
  }
  if (options.return_idle_ms < 0 || options.return_idle_ms > ArenaOptions::kMaxReturnIdleMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "arena for ", resolved->ToString(), ": return_idle_ms ", options.return_idle_ms,
        " is not 0 (keep freed memory for reuse) or 1 to ", ArenaOptions::kMaxReturnIdleMs,
        " milliseconds"));
  }
  if (options.return_idle_ms > 0) EnableMemoryReturn();  // before the heap exists
  return resolved;
}
}  // namespace

StatusOr<Arena*> Arena::ForPolicy(const Policy& policy, const ArenaOptions& options) {
  StatusOr<Policy> resolved = ArenaPolicy(policy, options);
  if (!resolved.ok()) return resolved.status();
  return ArenaRegistry::Get().Find(*resolved, options);
}

// ---- arenas that can be destroyed ------------------------------------------------------------

StatusOr<Arena*> Arena::Create(const Policy& policy, const ArenaOptions& options) {
  StatusOr<Policy> resolved = ArenaPolicy(policy, options);
  if (!resolved.ok()) return resolved.status();
  (void)ArenaRegistry::Get();  // the allocator's fork handlers, before the first heap
  // Like a shared arena: what it allocates for itself goes on the policy's (first) node.
  PlacementScope scope(resolved->nodes().empty() ? -1 : resolved->nodes().front());
  auto* arena = new Arena(*resolved, options);
  arena->destroyable_ = true;
  if (Status s = arena->Init(); !s.ok()) {
    (void)arena->DestroyHeaps();  // a Preferred arena may have made a heap before failing
    delete arena;
    return s;
  }
  return arena;
}

Status Arena::Destroy(Arena* arena) {
  if (arena == nullptr) return absl::InvalidArgumentError("Arena::Destroy(nullptr)");
  if (!arena->destroyable_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Arena::Destroy: the arena for ", arena->policy_.ToString(),
        " is shared (Arena::ForNode and ForPolicy hand it to every caller that names the same "
        "policy) and lives for the process; only arenas made by Arena::Create can be "
        "destroyed"));
  }
  Status status = arena->DestroyHeaps();
  if (absl::IsFailedPrecondition(status)) return status;  // nothing was destroyed
  delete arena;
  return status;
}

Status Arena::DestroyHeaps() {
  std::vector<int> heaps;
  if (node_heaps_ == nullptr) {
    // Bind and interleave: the fast path is on once the one heap exists (an arena whose
    // creation failed has none, and primary_heap_ names no heap of its own).
    if (has_fast_path_) heaps.push_back(primary_heap_);
  } else {
    for (int i = 0; i < node_heap_count_; ++i) {
      const int heap = node_heaps_[i].load(std::memory_order_acquire);
      if (heap >= 0) heaps.push_back(heap);
    }
  }
  Status status;
  for (std::size_t i = 0; i < heaps.size(); ++i) {
    Status s = DestroyHeap(heaps[i]);
    // Refused before anything was touched (a call from a capacity gate callback): the
    // arena stays whole, if this was its first heap.
    if (i == 0 && absl::IsFailedPrecondition(s)) return s;
    if (!s.ok() && status.ok()) status = s;
  }
  return status;
}

Arena::~Arena() {
  delete[] node_heaps_;
  delete[] node_heap_retry_;
}

Arena::Arena(const Policy& policy, const ArenaOptions& options)
    : policy_(policy), options_(options) {}

Status Arena::Init() {
  switch (policy_.kind()) {
    case PolicyKind::kBind:
    case PolicyKind::kInterleave:
    case PolicyKind::kWeightedInterleave: {
      StatusOr<Heap*> heap = CreateHeap(policy_, options_);
      if (!heap.ok()) return heap.status();
      primary_heap_ = (*heap)->id;
      has_fast_path_ = true;
      return absl::OkStatus();
    }
    case PolicyKind::kPreferred:
      break;
    case PolicyKind::kLocal:
      local_fast_path_ = true;
      break;
    case PolicyKind::kTarget:  // ForPolicy resolves targets; an arena never holds one
      return absl::InternalError("arena: unresolved memory-target policy");
  }
  const Topology* topology = *Topology::system();
  int highest = 0;
  for (int id : topology->node_ids()) highest = std::max(highest, id);
  node_heap_count_ = highest + 1;
  node_heaps_ = new std::atomic<int>[node_heap_count_];
  for (int i = 0; i < node_heap_count_; ++i) node_heaps_[i].store(-1);
  node_heap_retry_ = new NodeHeapRetry[node_heap_count_];

  if (policy_.kind() == PolicyKind::kPreferred) {
    fallback_order_ = policy_.FallbackOrder(*topology);
    if (fallback_order_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "arena ", policy_.ToString(), ": none of its nodes is one this process may use"));
    }
    int preferred = fallback_order_.front();
    Status error;
    int heap = HeapForNode(preferred, &error);
    if (heap >= 0) {
      primary_heap_ = heap;
      has_fast_path_ = true;
      return absl::OkStatus();
    }
    // The preferred node cannot take even the heap's metadata now (it is full, or the
    // capacity gate refuses it). Spilling to the next node by distance is what Preferred
    // promises, so the arena starts without a fast path: each allocation takes the slow path,
    // which uses the nearest node that has room and makes the preferred node's heap once that
    // node can take it (AllocateWithFallback). Other errors (a Strict binding the kernel
    // refuses) are the caller's to see.
    if (!absl::IsResourceExhausted(error)) return error;
    for (std::size_t i = 1; i < fallback_order_.size(); ++i) {
      Status reason;
      if (HeapForNode(fallback_order_[i], &reason) >= 0) return absl::OkStatus();
    }
    return Status(error.code(),
                  absl::StrCat(error.message(), " (and no other node had room for a heap)"));
  }
  return absl::OkStatus();
}

// Per-node heaps of Preferred and Local arenas are created under this lock (not the
// registry's: Arena::Init runs under that one and creates the preferred node's heap).
absl::Mutex g_node_heap_mutex(absl::kConstInit);


int Arena::HeapForNode(int node, Status* error) noexcept {
  if (node < 0 || node >= node_heap_count_) {
    *error = absl::InvalidArgumentError(
        absl::StrCat("arena ", policy_.ToString(), ": node ", node, " is not online"));
    return -1;
  }
  int heap = node_heaps_[node].load(std::memory_order_acquire);
  if (heap >= 0) return heap;
  absl::MutexLock lock(&g_node_heap_mutex);
  heap = node_heaps_[node].load(std::memory_order_acquire);
  if (heap >= 0) return heap;
  NodeHeapRetry& retry = node_heap_retry_[node];
  const std::int64_t now = MonotonicNanos();
  if (now < retry.not_before_ns) {
    *error = retry.error;
    return -1;
  }
  StatusOr<Heap*> created = CreateHeap(Policy::Bind(node, policy_.mode()), options_);
  if (!created.ok()) {
    *error = created.status();
    if (absl::IsResourceExhausted(*error)) {
      retry.not_before_ns = now + kHeapRetryNanos;
      retry.error = *error;
    }
    return -1;
  }
  node_heaps_[node].store((*created)->id, std::memory_order_release);
  return (*created)->id;
}

// ---- allocation -----------------------------------------------------------------------------

// jemalloc answered an explicit-arena request from an arena of its own: once jemalloc has torn
// down the calling thread's state at exit (a pthread key destructor that runs after its own),
// it serves every request from its arena 0, whatever arena is asked for. Such memory is on no
// numarena node and no numarena free would take it back, so it is returned at once and the
// request refused (Unavailable, which the LD_PRELOAD library answers from glibc instead).
void* Arena::RefuseForeignAllocation(void* p, std::size_t size, Status* error) noexcept {
  dallocx(p, MALLOCX_TCACHE_NONE);
  *error = absl::UnavailableError(absl::StrCat(
      "arena ", policy_.ToString(), ": allocate ", Bytes(size),
      ": this thread is exiting and jemalloc has already released its per-thread state (the "
      "call comes from a pthread key destructor that runs after jemalloc's), so no numarena "
      "arena can serve it; allocate before the thread's destructors run, or from another "
      "thread"));
  return nullptr;
}

bool GrowLargeInPlace(int heap, void* p, std::size_t usable, std::size_t size) noexcept {
  // Only a 2 MiB-aligned object: a request of 1.75-2 MiB gets the 2 MiB class at its own
  // alignment, and grown in place it would be a large block that breaks the 2 MiB alignment
  // every allocation of 2 MiB or more has (arena.hpp), which the large caches rely on.
  if (checked::Enabled() || !FrontCacheEnabled() || usable < arena_internal::kLargeAlignThreshold ||
      reinterpret_cast<std::uintptr_t>(p) % arena_internal::kLargeAlignThreshold != 0 ||
      size <= usable || size > (std::size_t{1} << 62)) {
    return false;
  }
  ThreadSpanFailure().Clear();  // the provider carves nothing while one is recorded
  // Huge pages only over the request's own bytes (node_pages.hpp): the commit the growth
  // makes starts where the object ends.
  HugeAdviceLimit huge_limit(size - usable);
  if (xallocx(p, size, 0, MALLOCX_TCACHE_NONE) < size) {
    ThreadSpanFailure().Clear();  // a refused commit is the caller's fallback, not an error
    return false;
  }
  RecordClass(heap, p);  // its class is the larger one now
  return true;
}

LargeMove MoveLargePages(int heap, void* from, std::size_t usable, void* to) noexcept {
  constexpr std::size_t kAlign = arena_internal::kLargeAlignThreshold;
  if (checked::Enabled() || !FrontCacheEnabled() || usable < kAlign ||
      reinterpret_cast<std::uintptr_t>(from) % kAlign != 0 ||
      reinterpret_cast<std::uintptr_t>(to) % kAlign != 0 || arena_internal::HeapOf(to) != heap ||
      arena_internal::HeapOf(from) != heap || GetCapacityGate() != nullptr) {
    return LargeMove::kNotMoved;
  }
  switch (MoveHeapPages(heap, from, to, usable)) {
    case NodePages::MoveResult::kMoved:
      return LargeMove::kMoved;
    case NodePages::MoveResult::kMovedLeftHole:
      return LargeMove::kLost;
    case NodePages::MoveResult::kDestinationLost:
      return LargeMove::kToLost;
    case NodePages::MoveResult::kNotMoved:
      break;
  }
  return LargeMove::kNotMoved;
}

namespace {

// Grows `p` (a large object of `usable` bytes, which GrowLargeInPlace could not grow to
// `size`) in place to the largest class below `size` that the free address space after it
// allows, trying at most kTries classes from the top; returns its usable size now. What
// follows a large block is often the rest of a block jemalloc split for an earlier, smaller
// allocation, freed and still resident: grown over, those pages move with the block
// (AllocateOverLargest) instead of being purged and faulted in afresh. A loop of random
// 5-25 MiB blocks faulted in 1,400 more pages than tcmalloc at its one step up from a 24 MiB
// to a 28 MiB block (the 16 MiB block it moved had 8 MiB of its old pages after it).
std::size_t GrowLargeTowards(int heap, void* p, std::size_t usable, std::size_t size) noexcept {
  constexpr int kTries = 8;  // two doublings of jemalloc's classes: 4 per doubling
  if (size <= usable || size > (std::size_t{1} << 62)) return usable;  // as GrowLargeInPlace
  unsigned size_class = arena_internal::MediumClassOf(size);
  for (int i = 0; i < kTries; ++i) {
    const std::size_t candidate = arena_internal::MediumClassBytes(--size_class);
    if (candidate <= usable) break;
    if (GrowLargeInPlace(heap, p, usable, candidate)) return candidate;
  }
  return usable;
}

// Whether a large block of `heap` may move its pages into a new one now (AllocateOverLargest):
// a heap on one node without hugetlb pages, and no capacity gate (the old block would be
// charged beside the new one for a moment).
bool LargePagesCanMove(int heap) noexcept {
  const Heap* owner = HeapById(heap);
  return owner != nullptr && owner->pages->CanMovePages() && GetCapacityGate() == nullptr;
}

// The large cache's largest block (`largest`, `largest_bytes`) is smaller than this
// allocation and cannot grow where it lies (jemalloc grows an extent only into one freed
// neighbour that is large enough, and never into fresh address space). Instead of purging it
// and faulting the new block in page by page, the new block is allocated first and the old
// block's resident pages move to its front (MoveLargePages): a loop of random 5-25 MiB
// blocks faulted in 17,000 pages against tcmalloc's 7,300, which extends its freed spans
// into fresh address space. The old block is charged beside the new one meanwhile, so not
// under a capacity gate (its limit holds for the old order: free first, then allocate) nor
// where the pages cannot move. nullptr when not done, `largest` untouched; else the block.
void* AllocateOverLargest(int heap, int flags, std::size_t size, void* largest,
                          std::size_t largest_bytes) noexcept {
  if (!LargePagesCanMove(heap)) return nullptr;
  ThreadSpanFailure().Clear();  // the provider carves nothing while one is recorded
  // As the usual way: never let jemalloc reserve address space for what cannot fit.
  if (!HeapById(heap)->pages->CouldEverFit(size, &ThreadSpanFailure())) {
    ThreadSpanFailure().Clear();
    return nullptr;
  }
  void* p;
  {
    HugeAdviceLimit huge_limit(size);
    p = mallocx(size, flags);
  }
  ThreadSpanFailure().Clear();  // refused: the caller goes the usual way, which reports it
  if (p == nullptr) {
    EndHeapGrowWindow();
    return nullptr;
  }
  if (arena_internal::HeapOf(p) != heap) {  // jemalloc's own arena (RefuseForeignAllocation)
    dallocx(p, MALLOCX_TCACHE_NONE);
    return nullptr;
  }
  RecordClass(heap, p);
  switch (MoveLargePages(heap, largest, largest_bytes, p)) {
    case LargeMove::kToLost:
      return nullptr;  // `p` is lost; the caller frees `largest` and goes the usual way
    case LargeMove::kLost:
      break;  // `largest` is lost
    case LargeMove::kMoved:     // zero pages now
    case LargeMove::kNotMoved:  // its own pages
      dallocx(largest, MALLOCX_TCACHE_NONE);
      PurgeHeapDirty(heap);
      break;
  }
  arena_internal::ReturnAfterGrowthIfDue(heap);
  return p;
}

}  // namespace

void* Arena::AllocateOnHeap(int heap, std::size_t size, std::size_t alignment,
                            Status* error) noexcept {
  const std::size_t effective_alignment = EffectiveAlignment(size, alignment);
  int flags = EnsureThreadCache(heap) | AlignFlags(effective_alignment);
  const bool cached_modes = !checked::Enabled() && FrontCacheEnabled();
  if (cached_modes && size >= arena_internal::kLargeAlignThreshold &&
      effective_alignment == arena_internal::kLargeAlignThreshold) {
    // A freed extent of this class, kept by this thread or the heap (its class is recorded
    // already).
    const unsigned size_class = arena_internal::MediumClassOf(size);
    if (void* p = FrontLargeTake(heap, size_class)) return p;
    if (void* p = LargeCacheTake(heap, size_class)) return p;
    // What the large cache holds now is of other classes: back to jemalloc with it, so that
    // this allocation is carved from those resident pages rather than from fresh ones (a loop
    // of random large sizes otherwise holds the cache's bound resident on top of its live
    // blocks). When even the largest of them is smaller than this allocation, jemalloc cannot
    // carve it from them (freed extents that are not neighbours do not merge) and would map
    // new pages beside them: the largest is grown in place if the address space after it is
    // free (xallocx: its resident pages serve the allocation and only the rest is new), else
    // as far as it is, and the others go back to the kernel before the rest is committed
    // (the growth itself commits first: on a nearly full node the guard may refuse it while
    // they are resident, and the allocation then goes on without it), so the loop's
    // resident set stays its live blocks (bench/RESULTS.md, big-blocks); then
    // the largest block's pages move into the new block. A loop of random 5-25 MiB blocks
    // faulted every block in afresh without all that (1.5 GiB of pages over 100 blocks, 3-6x
    // tcmalloc's time where a fault is cheap; tcmalloc reuses its coalesced free spans); now
    // fewer pages than tcmalloc. Under a capacity gate the others go back first and nothing
    // moves, so what is charged meanwhile is never more than the old order (everything
    // purged, then the allocation committed) charged: the largest block and the rest of the
    // request.
    unsigned largest_class = 0;
    if (void* largest = LargeCacheTakeLargest(heap, &largest_class)) {
      const std::size_t largest_bytes = arena_internal::MediumClassBytes(largest_class);
      const std::size_t others = LargeCacheFlush(heap);  // the largest is out of the cache
      if (largest_bytes < size) {
        // Grown in place before the others are purged (over them too, where they follow it),
        // so that resident pages serve what they can; then the rest of what the heap holds
        // freed goes back before the allocation is made, since it cannot hold it. Under a
        // capacity gate the others are charged: they go back first, as everything did before
        // the growth, and a block grown part of the way would be no use (no moves under a
        // gate: AllocateOverLargest).
        const bool gated = GetCapacityGate() != nullptr;
        if (gated && others != 0) PurgeHeapDirty(heap);
        const bool grown = GrowLargeInPlace(heap, largest, largest_bytes, size);
        // Part of the way only where the pages can then move (AllocateOverLargest).
        const std::size_t usable = grown || !LargePagesCanMove(heap)
                                       ? largest_bytes
                                       : GrowLargeTowards(heap, largest, largest_bytes, size);
        if (!gated && others != 0) PurgeHeapDirty(heap);
        if (grown) return largest;
        if (void* p = AllocateOverLargest(heap, flags, size, largest, usable)) return p;
        dallocx(largest, MALLOCX_TCACHE_NONE);
        PurgeHeapDirty(heap);
      } else {
        dallocx(largest, MALLOCX_TCACHE_NONE);  // jemalloc carves this allocation from it
      }
    }
  }
  std::size_t reserve = size;
  if (effective_alignment > arena_internal::kLargeAlignThreshold &&
      __builtin_add_overflow(size, effective_alignment, &reserve)) {
    reserve = SIZE_MAX;
  }
  SpanFailure& failure = ThreadSpanFailure();
  for (int attempt = 0;; ++attempt) {
    failure.Clear();  // the provider carves no new span while a failure is recorded
    // A request larger than the placement's nodes can never succeed: refuse it before
    // jemalloc reserves address space for it (which it would keep for good). An alignment
    // above 2 MiB makes jemalloc reserve about size + alignment, so that is what must fit.
    if (reserve < arena_internal::kLargeAlignThreshold ||
        HeapById(heap)->pages->CouldEverFit(reserve, &failure)) {
      // A large request's class rounds it up: huge pages only where the request's own bytes
      // are (node_pages.hpp).
      HugeAdviceLimit huge_limit(size >= NodePages::kHugePage ? size : 0);
      if (void* p = mallocx(size, flags)) {
        if (__builtin_expect(arena_internal::HeapOf(p) != heap, 0)) {
          return RefuseForeignAllocation(p, size, error);
        }
        if (cached_modes) RecordClass(heap, p);
        // jemalloc committed fresh pages (this call's, or earlier ones' that no allocation
        // through the caches has answered yet): before the caller touches the block, what the
        // heap holds freed goes back (memory_return.hpp). llama.cpp's driver freed 20 MiB,
        // took 2 MiB of it and asked for 20 MiB again: the first block's other 18 MiB and the
        // model load's freed buffers in the depot stayed on top of the new block (peak RSS
        // 1.15x glibc's, which unmaps a freed large block at once).
        arena_internal::ReturnAfterGrowthIfDue(heap);
        return p;
      }
    }
    EndHeapGrowWindow();  // jemalloc failed: it may have stopped between two hooks
    // Refused for lack of room: memory numarena holds freed on that node (dirty pages of this
    // and other arenas, which stay charged until purged) goes back first, then one retry.
    const int node = RefusedNode(failure);
    if (attempt > 0 || node < 0 || PurgeDirtyOnNode(node) == 0) break;
  }
  std::string what = absl::StrCat("arena ", policy_.ToString(), ": allocate ", Bytes(size));
  if (reserve != size) {
    absl::StrAppend(&what, " aligned to ", Bytes(effective_alignment), " (jemalloc reserves ",
                    reserve == SIZE_MAX ? std::string("more than SIZE_MAX") : Bytes(reserve),
                    " for it)");
  }
  *error = failure.failed()
               ? failure.ToStatus(what)
               : absl::ResourceExhaustedError(absl::StrCat(what, ": jemalloc could not allocate"));
  failure.Clear();
  return nullptr;
}

void* Arena::AllocateWithFallback(std::size_t size, std::size_t alignment, bool primary_tried,
                                  Status* error) noexcept {
  switch (policy_.kind()) {
    case PolicyKind::kBind:
    case PolicyKind::kInterleave:
    case PolicyKind::kWeightedInterleave:
      if (primary_tried) return nullptr;
      return AllocateOnHeap(primary_heap_, size, alignment, error);
    case PolicyKind::kPreferred: {
      bool first = true;
      for (int node : fallback_order_) {
        if (!(first && primary_tried)) {
          Status reason;
          int heap = HeapForNode(node, &reason);
          void* p = heap < 0 ? nullptr : AllocateOnHeap(heap, size, alignment, &reason);
          if (p != nullptr) {
            if (!first) {
              fallbacks_.fetch_add(1, std::memory_order_relaxed);
              if (CapacityGate* gate = GetCapacityGate()) {
                gate->RecordFallback(fallback_order_.front(), node);
              }
            }
            return p;
          }
          if (first || error->ok()) *error = reason;  // report the preferred node's reason
          if (reason.code() == absl::StatusCode::kInvalidArgument) return nullptr;
        }
        first = false;
      }
      if (!error->ok()) {
        *error =
            Status(error->code(), absl::StrCat(error->message(), " (and no other node had room)"));
      }
      return nullptr;
    }
    case PolicyKind::kLocal: {
      int node = os::CurrentNodeFast();
      if (node < 0 || node >= node_heap_count_) node = 0;
      const Topology* topology = *Topology::system();
      if (!topology->has_node(node) || !topology->memory_allowed(node)) {
        for (int candidate : topology->nodes_by_distance(node)) {
          if (topology->memory_allowed(candidate)) {
            node = candidate;
            break;
          }
        }
      }
      int heap = HeapForNode(node, error);
      if (heap < 0) return nullptr;
      return AllocateOnHeap(heap, size, alignment, error);
    }
    case PolicyKind::kTarget:  // never here: ForPolicy resolves targets
      break;
  }
  return nullptr;
}

// Inlined into its two callers here (the only ones): as a call, with its register saves, it
// cost --local's malloc 6 more instructions of 135 (bench/RESULTS.md).
[[gnu::always_inline]] inline int Arena::CurrentNodeHeap() const noexcept {
  const int node = os::CurrentNodeFast();
  return node >= 0 && node < node_heap_count_ ? node_heaps_[node].load(std::memory_order_acquire)
                                              : -1;
}

void* Arena::AllocateLocal(std::size_t size, std::size_t alignment) noexcept {
  // A node's heap exists only once the slow path has chosen that node, and it chooses only
  // online nodes this process may place memory on, so for a thread running on that node the
  // heap found here is the one the slow path would use. Threads on a node without a heap (a
  // CPU of a memory-less node, a node outside the cpuset's mems) keep taking the slow path,
  // which picks the nearest allowed node. Without this path every allocation of a Local
  // arena went to jemalloc while its frees filled a front cache nothing took from
  // (bench/RESULTS.md, "Code history").
  const int heap = CurrentNodeHeap();
  if (heap >= 0) {
    const std::size_t request = arena_internal::RequestSize(size, alignment);
    if (request - 1 < kFastLimit) {
      // The pop inline: AllocateFromThreadCaches, too large for GCC to inline here, costs a
      // call and its register saves on every allocation.
      if (arena_internal::FrontCache* cache = arena_internal::front_caches[heap]) {
        if (void* p = arena_internal::FrontPop(cache, arena_internal::ClassOfRequest(request))) {
          return p;
        }
      }
      if (void* p = arena_internal::AllocateFromThreadCaches(heap, request)) return p;
      // jemalloc failed: it may have stopped between two hooks.
      if (arena_internal::front_caches[heap] != nullptr) EndHeapGrowWindow();
    }
  }
  // No heap or front cache yet, a size the front cache does not serve, or jemalloc could
  // not allocate: the slow path makes what is missing, or retries (after purging a full
  // node's dirty pages) and records the reason of a failure.
  return AllocateSlow(size, alignment);
}

void* Arena::AllocateAlignedFromCaches(std::size_t size, std::size_t alignment) noexcept {
  // An aligned request of a class whose objects are all aligned enough (tensors: 64 bytes)
  // is a request of that class: the same caches as the fast path. Everything else, and the
  // first request of a thread (which makes its caches), goes on to jemalloc's aligned path.
  const std::size_t request = arena_internal::AlignedCachedRequest(size, alignment);
  if (request == 0) return nullptr;
  const int heap = has_fast_path_ ? primary_heap_ : local_fast_path_ ? CurrentNodeHeap() : -1;
  if (heap < 0 || arena_internal::front_caches[heap] == nullptr) return nullptr;
  if (void* p = arena_internal::AllocateFromThreadCaches(heap, request)) return p;
  EndHeapGrowWindow();  // jemalloc failed: the slow path retries and records why
  return nullptr;
}

void* Arena::AllocateSlow(std::size_t size, std::size_t alignment) noexcept {
  if (!IsPowerOfTwo(alignment)) {
    SetLastError(absl::InvalidArgumentError(absl::StrCat(
        "arena ", policy_.ToString(), ": alignment ", alignment, " is not a power of two")));
    return nullptr;
  }
  if (alignment > alignof(std::max_align_t) &&
      alignment <= arena_internal::kMaxCachedAlignment) {
    if (void* p = AllocateAlignedFromCaches(size, alignment)) return p;
  }
  if (alignment <= alignof(std::max_align_t)) size = arena_internal::RequestSize(size, alignment);
  if (size == 0) size = 1;
  if (size > (std::size_t{1} << 62)) {
    SetLastError(absl::InvalidArgumentError(
        absl::StrCat("arena ", policy_.ToString(), ": size ", size, " is too large")));
    return nullptr;
  }
  Status error;
  void* p = AllocateWithFallback(size, alignment, /*primary_tried=*/false, &error);
  if (p == nullptr) {
    SetLastError(std::move(error));
  } else if (checked::Enabled()) {
    checked::RecordAllocation(p, size, alignment);
  }
  return p;
}

void* Arena::AllocateAfterFastMiss(std::size_t size) noexcept {
  // The primary heap's hooks recorded why the fast path's mallocx failed.
  EndHeapGrowWindow();  // jemalloc failed: it may have stopped between two hooks
  SpanFailure& failure = ThreadSpanFailure();
  std::string what = absl::StrCat("arena ", policy_.ToString(), ": allocate ", Bytes(size));
  Status error =
      failure.failed()
          ? failure.ToStatus(what)
          : absl::ResourceExhaustedError(absl::StrCat(what, ": jemalloc could not allocate"));
  const int refused_node = RefusedNode(failure);
  failure.Clear();
  // Refused for lack of room: after giving back the dirty pages numarena holds on that node,
  // the primary heap is worth another try.
  const bool retry_primary = refused_node >= 0 && PurgeDirtyOnNode(refused_node) > 0;
  void* p = AllocateWithFallback(size, alignof(std::max_align_t),
                                 /*primary_tried=*/!retry_primary, &error);
  if (p == nullptr) {
    SetLastError(std::move(error));
  } else if (checked::Enabled()) {  // not reached: checked mode leaves thread_flags at 0
    checked::RecordAllocation(p, size, alignof(std::max_align_t));
  }
  return p;
}

StatusOr<void*> Arena::try_allocate(std::size_t size, std::size_t alignment) {
  if (void* p = allocate(size, alignment)) return p;
  return last_allocation_error();
}

bool Arena::contains(const void* p) const noexcept {
  const int heap = arena_internal::HeapOf(p);
  if (heap < 0) return false;
  if (node_heaps_ == nullptr) return heap == primary_heap_;
  for (int i = 0; i < node_heap_count_; ++i) {
    if (node_heaps_[i].load(std::memory_order_acquire) == heap) return true;
  }
  return false;
}

void* Arena::reallocate(void* p, std::size_t size, std::size_t alignment) noexcept {
  if (p == nullptr) return allocate(size, alignment);
  if (!numarena::owns(p)) {
    SetLastError(absl::InvalidArgumentError(
        absl::StrCat("arena ", policy_.ToString(), ": reallocate(0x",
                     absl::Hex(reinterpret_cast<std::uintptr_t>(p)),
                     "): the pointer was not allocated by numarena; resize it with the "
                     "allocator that made it")));
    return nullptr;
  }
  const std::size_t usable = usable_size(p);
  if (IsPowerOfTwo(alignment) && size <= (std::size_t{1} << 62) && !checked::Enabled() &&
      reinterpret_cast<std::uintptr_t>(p) % alignment == 0 && contains(p)) {
    // The class a sized free of (size, alignment) names: the caches' request, else the
    // request jemalloc's sized free sees. Equal usable sizes are the same class.
    std::size_t request = arena_internal::CachedRequest(size, alignment);
    int flags = 0;
    if (request == 0) {
      request = alignment <= alignof(std::max_align_t)
                    ? arena_internal::RequestSize(size, alignment) : size;
      flags = AlignFlags(EffectiveAlignment(request, alignment));
    }
    if (nallocx(request == 0 ? 1 : request, flags) == usable) return p;
    // A large object grows where it lies when the space after it is free: nothing copied,
    // and its old pages are not freed beside a new copy (glibc's mremap, jemalloc's rallocx).
    // (`p` is aligned to `alignment` already, and stays where it is.)
    if (GrowLargeInPlace(arena_internal::HeapOf(p), p, usable, size)) return p;
  }
  void* fresh = allocate(size, alignment);
  if (fresh == nullptr) return nullptr;
  // A large object that could not grow: its pages move into the new one (mremap, as glibc's
  // realloc of an mmap()ed block), not copied.
  if (size > usable && usable >= arena_internal::kLargeAlignThreshold) {
    switch (MoveLargePages(arena_internal::HeapOf(p), p, usable, fresh)) {
      case LargeMove::kMoved:
        numarena::deallocate(p);
        return fresh;
      case LargeMove::kLost:
        return fresh;
      case LargeMove::kToLost:  // `fresh` is lost: copy into another block
        fresh = allocate(size, alignment);
        if (fresh == nullptr) return nullptr;
        break;
      case LargeMove::kNotMoved:
        break;
    }
  }
  std::memcpy(fresh, p, size < usable ? size : usable);
  // Outgrown: a medium block goes back to jemalloc, which can carve the next step of the
  // growth from it, not into this thread's list of its size (arena_fast_path.hpp).
  if (size <= usable || !arena_internal::FreeOutgrown(arena_internal::HeapOf(p), p)) {
    numarena::deallocate(p);
  }
  return fresh;
}

// ---- maintenance and statistics ---------------------------------------------------------------

namespace {
template <typename F>
void ForEachHeap(int primary, const std::atomic<int>* node_heaps, int node_heap_count, F&& f) {
  if (node_heaps == nullptr) {
    if (Heap* heap = HeapById(primary)) f(*heap);
    return;
  }
  for (int i = 0; i < node_heap_count; ++i) {
    if (Heap* heap = HeapById(node_heaps[i].load(std::memory_order_acquire))) f(*heap);
  }
}
}  // namespace

void Arena::purge() {
  ForEachHeap(primary_heap_, node_heaps_, node_heap_count_, [](Heap& heap) {
    // This thread's cached objects first, so their pages can be purged too.
    FlushFrontCache(heap.id);
    LargeCacheFlush(heap.id);
    DepotFlush(heap.id);
    if (int tcache = arena_internal::TcacheIdOf(ThreadFlags(heap.id)); tcache >= 0) {
      unsigned id = static_cast<unsigned>(tcache);
      mallctl("tcache.flush", nullptr, nullptr, &id, sizeof id);
    }
    ForEachShardCall(heap, "purge");
  });
}

ArenaStats Arena::stats() const {
  std::uint64_t epoch = 1;
  std::size_t epoch_size = sizeof epoch;
  mallctl("epoch", &epoch, &epoch_size, &epoch, sizeof epoch);
  ArenaStats out;
  out.fallbacks = fallbacks_.load(std::memory_order_relaxed);
  std::size_t page = os::PageSize();
  ForEachHeap(primary_heap_, node_heaps_, node_heap_count_, [&](Heap& heap) {
    std::size_t allocated = 0;
    ForEachShard(heap, [&](unsigned i) {
      allocated += ReadArenaStat<std::size_t>(i, "small.allocated") +
                   ReadArenaStat<std::size_t>(i, "large.allocated");
      out.active += ReadArenaStat<std::size_t>(i, "pactive") * page;
      out.resident += ReadArenaStat<std::size_t>(i, "resident");
      out.mapped += ReadArenaStat<std::size_t>(i, "mapped");
      out.retained += ReadArenaStat<std::size_t>(i, "retained");
      out.jemalloc_arenas += 1;
    });
    // The threads' front caches live in the heap too, but are numarena's, not the caller's.
    const std::size_t front = static_cast<std::size_t>(std::max(
                                  heap.front_caches.load(std::memory_order_relaxed), 0)) *
                              FrontCacheBytes();
    out.allocated += allocated > front ? allocated - front : 0;
    out.cached += LargeCacheBytes(heap.id) + DepotBytes(heap.id);
    out.committed += heap.pages->committed_bytes();
    out.tables += heap.pages->table_bytes();
    out.fallbacks += heap.pages->fallbacks();
    out.refusals += heap.pages->refusals();
  });
  return out;
}

// ---- pointer queries and frees ------------------------------------------------------------------

std::size_t usable_size(const void* p) {
  if (p == nullptr || arena_internal::HeapOf(p) < 0) return 0;
  if (checked::Enabled()) {
    checked::CheckLive(p, "numarena::usable_size");
  } else if (const std::size_t bytes = arena_internal::RecordedUsableSize(p)) {
    return bytes;  // the class map's answer, without jemalloc's radix-tree lookup
  }
  return sallocx(const_cast<void*>(p), 0);
}

bool checked_mode() {
  checked::Decide();
  return checked::Enabled();
}

int node_of(const void* p) {
  if (p == nullptr) return kNodeNone;
  Heap* heap = HeapById(arena_internal::HeapOf(p));
  return heap == nullptr ? kNodeNone : heap->pages->node();
}

Status last_allocation_error() {
  if (t_last_error != nullptr) return *t_last_error;
  if (t_late_error_code != absl::StatusCode::kOk) {
    return Status(t_late_error_code,
                  "numarena: an allocation failed after this thread's thread_local objects were "
                  "destroyed, where its full reason can no longer be kept");
  }
  return absl::OkStatus();
}

namespace arena_internal {

[[noreturn]] static void NotOurs(const void* p) {
  std::fprintf(stderr,
               "numarena::deallocate(%p): pointer was not allocated by numarena (free it with "
               "the allocator that made it)\n",
               p);
  std::abort();
}

void DeallocateSlow(void* p) noexcept {
  if (p == nullptr) return;
  int heap = HeapOf(p);
  if (heap < 0 || HeapById(heap) == nullptr) NotOurs(p);
  if (checked::Enabled()) {
    checked::CheckFree(p);
    dallocx(p, EnsureThreadCache(heap));
    return;
  }
  const int flags = EnsureThreadCache(heap);  // makes this thread's front cache for the heap
  if (FreeToThreadCaches(heap, p)) return;
  dallocx(p, flags);
}

// A large object (class_plus_one - 1 >= kFirstLargeClass) is kept by this thread's front
// cache, else by the heap's large cache, when they have room.
static bool KeepLarge(int heap, void* p, unsigned class_plus_one) noexcept {
  if (class_plus_one <= unsigned{kFrontClasses}) return false;
  return FrontLargePut(heap, class_plus_one - 1, p) ||
         LargeCachePut(heap, class_plus_one - 1, p, LargeCacheBound(heap));
}

void DeallocateUncached(int heap, void* p, unsigned class_plus_one) noexcept {
  if (KeepLarge(heap, p, class_plus_one)) return;
  dallocx(p, thread_flags[heap]);  // a front cache exists, so the flags are set
  NoteHeapActivity(heap);           // dirty pages to return
}

void DeallocateSizedSlow(void* p, std::size_t size, std::size_t alignment) noexcept {
  if (p == nullptr) return;
  int heap = HeapOf(p);
  if (heap < 0 || HeapById(heap) == nullptr) NotOurs(p);
  // The size allocate used (and checked mode recorded).
  if (alignment <= alignof(std::max_align_t)) size = RequestSize(size, alignment);
  if (checked::Enabled()) {
    checked::CheckSizedFree(p, size, alignment);
  } else if (size >= kLargeAlignThreshold && alignment <= kLargeAlignThreshold &&
             FrontCacheEnabled()) {
    // The recorded class, not one computed from `size`: the same for a correct sized free,
    // and the object is kept only as what it really is.
    if (KeepLarge(heap, p, RecordedClassPlusOne(p))) return;
  }
  if (size == 0) size = 1;
  sdallocx(p, size, EnsureThreadCache(heap) | AlignFlags(EffectiveAlignment(size, alignment)));
}

}  // namespace arena_internal

// ---- fork (os/fork.hpp) ------------------------------------------------------------------------

namespace {

// In the child the lock is this thread's (prepare took it), but threads the child does not
// have may be queued on it, and a wake-up absl designates for one of them would never be
// passed on: release it, then build it anew.
void RecreateInChild(absl::Mutex& mutex) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  mutex.Unlock();
  mutex.~Mutex();
  new (&mutex) absl::Mutex();
}

void PrepareRegistry() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Function-local statics the arena paths use: if another thread were in the middle of
  // initializing one, its guard would stay taken in the child. Finish them first.
  (void)Topology::system();
  (void)os::PageSize();
  (void)os::PossibleNodeCount();
  ArenaRegistry::Get().mutex().Lock();
}
void ParentRegistry() ABSL_NO_THREAD_SAFETY_ANALYSIS { ArenaRegistry::Get().mutex().Unlock(); }
void ChildRegistry() { RecreateInChild(ArenaRegistry::Get().mutex()); }

void PrepareNodeHeaps() ABSL_NO_THREAD_SAFETY_ANALYSIS { g_node_heap_mutex.Lock(); }
void ParentNodeHeaps() ABSL_NO_THREAD_SAFETY_ANALYSIS { g_node_heap_mutex.Unlock(); }
void ChildNodeHeaps() { RecreateInChild(g_node_heap_mutex); }

// The registry's and node heaps' stages are set when the library is loaded (see os/fork.hpp
// for why not on first use); the handler itself is installed with the registry.
[[maybe_unused]] const bool g_arena_fork_stages_set = [] {
  static const os::ForkStageHandlers registry{PrepareRegistry, ParentRegistry, ChildRegistry};
  static const os::ForkStageHandlers node_heaps{PrepareNodeHeaps, ParentNodeHeaps,
                                                ChildNodeHeaps};
  os::SetForkStage(os::ForkStage::kArenaRegistry, &registry);
  os::SetForkStage(os::ForkStage::kNodeHeaps, &node_heaps);
  return true;
}();

}  // namespace
}  // namespace numarena
