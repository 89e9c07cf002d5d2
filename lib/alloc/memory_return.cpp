// Memory return: freed memory that nobody reuses goes back to the kernel on a schedule.
//
// Freed objects stay with numarena for reuse: in the threads' front caches, in each heap's
// depot and large cache, and, once handed to jemalloc, as jemalloc's dirty pages. jemalloc
// returns dirty pages by decay, but only when a call into the arena ticks it, and numarena's
// caches let go of an idle class only at the next put; a program that frees a burst and goes
// idle (a server between requests) makes no calls, so without more it keeps its peak resident
// for ever. The peers return it: glibc at free, jemalloc by decay (10 s, with a background
// thread or at the next calls), tcmalloc by a background release, mimalloc after a purge delay
// at its next calls.
//
// The schedule is ArenaOptions::return_idle_ms = D (0: off, the memory stays until purge(), a
// refusal for lack of room, or jemalloc's decay at later calls). For a heap with D > 0:
//   - its jemalloc arenas decay dirty pages over D (dirty_decay_ms = D, no muzzy state: numarena
//     provides no lazy purge);
//   - every D / 4 (10 ms to 1 s) a pass (ReturnIdleMemory) ticks that decay without any call
//     from the program, and returns the depot's classes that nobody took from or put to for D;
//   - a heap that moved no memory to or from its shared caches or jemalloc for D is idle: its
//     depot and large cache go back to jemalloc and every dirty page of its shards to the
//     kernel at once.
// So memory freed in a burst is back with the kernel between D and about 1.25 D after the
// program stops freeing. What a thread's own front cache holds is not returned while the
// thread sleeps (only the thread itself may touch its lists, without locks): at most a few
// MiB per (thread, heap), design.md's bounds; it goes back at the thread's exit or purge().
//
// Placement: returning is purging. jemalloc's purge calls the heap's hooks, which drop the pages
// with MADV_DONTNEED and keep the mapping and its mbind policy, so a page faulted in again
// later lands on the heap's node as the first time did (tests/lab/arena_cache_lab.cpp checks it
// page by page).
//
// The thread. Passes must run without calls, so a thread runs them: started on the first
// activity of a heap with D > 0 (the first chain a front cache hands to the depot, the first
// 2 MiB+ free), not at start-up, so a program that never frees much never gets it. All signals
// are blocked in it, and it sleeps on a condition variable while nothing is left to return (no
// heap used within 2 D, nothing cached), woken by the next activity. It allocates nothing. A
// fork() child has no returner thread: its first activity starts its own. A program that must
// stay single-threaded (one that calls unshare(CLONE_NEWUSER) later, for one) sets D = 0
// (NUMARENA_RETURN_IDLE_MS=0 under `numarena run`).
#include "alloc/memory_return.hpp"

#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "alloc/depot.hpp"
#include "alloc/jemalloc_heap.hpp"
#include "alloc/large_cache.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "os/fork.hpp"

namespace numarena {
namespace {

constexpr std::int64_t kNanosPerMilli = 1'000'000;
constexpr std::int64_t kMinPeriodNanos = 10 * kNanosPerMilli;
constexpr std::int64_t kMaxPeriodNanos = 1000 * kNanosPerMilli;

// The coarse clock at each heap's last activity (0: none yet).
std::atomic<std::int64_t> g_last_activity_ns[arena_internal::kMaxHeaps];

enum ReturnerState : int { kNoThread, kRunning, kSleeping, kCannotStart };
std::atomic<int> g_state{kNoThread};
// How long the thread waits between passes: the shortest D / 4 of the heaps it saw.
std::atomic<std::int64_t> g_period_ns{kMaxPeriodNanos};
// Held only to change g_state to or from kSleeping and to wait or signal; never while taking
// another lock or calling jemalloc. Plain pthread objects with static initializers: never
// destroyed (the thread may still wait on them while the process exits), and set afresh in a
// fork() child.
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;

std::int64_t PeriodFor(std::int64_t idle_ns) {
  return std::clamp(idle_ns / 4, kMinPeriodNanos, kMaxPeriodNanos);
}

std::int64_t ReturnIdleNanos(const Heap& heap) { return heap.return_idle_ms * kNanosPerMilli; }

void ForEachShardKey(const Heap& heap, const char* action) {
  ForEachShard(heap, [action](unsigned arena_index) {
    char key[48];
    std::snprintf(key, sizeof key, "arena.%u.%s", arena_index, action);
    mallctl(key, nullptr, nullptr, nullptr, 0);
  });
}

struct Pass {
  std::int64_t now_ns;
  std::int64_t shortest_period_ns = kMaxPeriodNanos;
  bool more = false;
};

void ReturnFromHeap(Heap& heap, void* context) {
  Pass& pass = *static_cast<Pass*>(context);
  const std::int64_t idle_ns = ReturnIdleNanos(heap);
  if (idle_ns <= 0) return;
  pass.shortest_period_ns = std::min(pass.shortest_period_ns, PeriodFor(idle_ns));
  const std::int64_t since =
      pass.now_ns - g_last_activity_ns[heap.id].load(std::memory_order_seq_cst);
  if (since >= idle_ns) {
    LargeCacheFlush(heap.id);
    DepotFlush(heap.id);
    ForEachShardKey(heap, "purge");
  } else {
    DepotSweep(heap.id, pass.now_ns, idle_ns);
    ForEachShardKey(heap, "decay");
  }
  if (since < 2 * idle_ns || DepotBytes(heap.id) + LargeCacheBytes(heap.id) > 0) {
    pass.more = true;
  }
}

// Whether any heap was active at or after `since_ns`.
bool ActiveSince(std::int64_t since_ns) {
  for (const std::atomic<std::int64_t>& last : g_last_activity_ns) {
    if (last.load(std::memory_order_seq_cst) >= since_ns) return true;
  }
  return false;
}

void SleepFor(std::int64_t nanos) {
  timespec deadline{};
  clock_gettime(CLOCK_REALTIME, &deadline);
  const std::int64_t end = deadline.tv_nsec + nanos;
  deadline.tv_sec += end / 1'000'000'000;
  deadline.tv_nsec = end % 1'000'000'000;
  pthread_mutex_lock(&g_mutex);
  // Spurious and early wake-ups only make a pass come sooner.
  pthread_cond_timedwait(&g_wake, &g_mutex, &deadline);
  pthread_mutex_unlock(&g_mutex);
}

void* ReturnerMain(void*) {
  pthread_setname_np(pthread_self(), "numarena-return");
  for (;;) {
    SleepFor(g_period_ns.load(std::memory_order_relaxed));
    const std::int64_t start = CoarseNanos();
    if (ReturnIdleMemory(start)) continue;
    // Nothing left: sleep until the next activity. The state is published before the stamps
    // are read again, and NoteHeapActivity stamps before it reads the state (both seq_cst), so
    // an activity after this pass began either shows here or sees kSleeping and wakes it.
    pthread_mutex_lock(&g_mutex);
    g_state.store(kSleeping, std::memory_order_seq_cst);
    if (ActiveSince(start)) g_state.store(kRunning, std::memory_order_seq_cst);
    while (g_state.load(std::memory_order_seq_cst) == kSleeping) {
      pthread_cond_wait(&g_wake, &g_mutex);
    }
    pthread_mutex_unlock(&g_mutex);
  }
  return nullptr;
}

void StartReturner() {
  int expected = kNoThread;
  if (!g_state.compare_exchange_strong(expected, kRunning, std::memory_order_seq_cst)) return;
  // Every signal blocked in the new thread (it inherits this mask): a process-directed signal
  // must reach the program's own threads.
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 64 * 1024);
  pthread_t thread;
  const int err = pthread_create(&thread, &attributes, ReturnerMain, nullptr);
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  // A process that may not make threads (seccomp, a thread limit) keeps its memory until its
  // calls return it, as with D = 0; it is not asked again at every free.
  if (err != 0) g_state.store(kCannotStart, std::memory_order_seq_cst);
}

void WakeReturner() {
  pthread_mutex_lock(&g_mutex);
  if (g_state.load(std::memory_order_seq_cst) == kSleeping) {
    g_state.store(kRunning, std::memory_order_seq_cst);
    pthread_cond_signal(&g_wake);
  }
  pthread_mutex_unlock(&g_mutex);
}

// The child has no returner thread; its first activity starts one. The parent's thread may have
// held the mutex, or waited on the condition variable, at the fork: both are made anew.
void ChildMemoryReturn() {
  g_mutex = PTHREAD_MUTEX_INITIALIZER;
  g_wake = PTHREAD_COND_INITIALIZER;
  if (g_state.load(std::memory_order_relaxed) != kCannotStart) {
    g_state.store(kNoThread, std::memory_order_relaxed);
  }
}

// Set when the library is loaded (os/fork.hpp says why not on first use).
[[maybe_unused]] const bool g_memory_return_fork_stage_set = [] {
  static const os::ForkStageHandlers handlers{nullptr, nullptr, ChildMemoryReturn};
  os::SetForkStage(os::ForkStage::kMemoryReturn, &handlers);
  return true;
}();

}  // namespace

std::int64_t CoarseNanos() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void NoteHeapActivity(int heap, std::int64_t now_ns, bool may_start_thread) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return;
  std::atomic<std::int64_t>& last = g_last_activity_ns[heap];
  if (last.load(std::memory_order_relaxed) != now_ns) {
    last.store(now_ns, std::memory_order_seq_cst);
  }
  const int state = g_state.load(std::memory_order_seq_cst);
  if (state == kRunning || state == kCannotStart) return;
  const Heap* owner = HeapById(heap);
  if (owner == nullptr || owner->return_idle_ms <= 0) return;
  if (state == kSleeping) {
    WakeReturner();
  } else if (may_start_thread) {
    g_period_ns.store(PeriodFor(ReturnIdleNanos(*owner)), std::memory_order_relaxed);
    StartReturner();
  }
}

bool ReturnIdleMemory(std::int64_t now_ns) noexcept {
  Pass pass{now_ns};
  ForEachLiveHeap(ReturnFromHeap, &pass);
  g_period_ns.store(pass.shortest_period_ns, std::memory_order_relaxed);
  return pass.more;
}

bool MemoryReturnThreadStarted() noexcept {
  const int state = g_state.load(std::memory_order_relaxed);
  return state == kRunning || state == kSleeping;
}

}  // namespace numarena
