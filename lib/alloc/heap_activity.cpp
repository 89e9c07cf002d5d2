// Heap activity and the returner thread (heap_activity.hpp; the schedule and what is returned:
// memory_return.cpp).
//
// The thread. Passes must run without calls, so a thread runs them: started on the first
// activity of a heap with D > 0 (the first chain a front cache hands to the depot, the first
// 2 MiB+ free), not at start-up, so a program that never frees much never gets it. All signals
// are blocked in it, and it sleeps on a condition variable while nothing is left to return (no
// heap used within 2 D, nothing cached), woken by the next activity. It allocates nothing. A
// fork() child has no returner thread: its first activity starts its own. A program that must
// stay single-threaded (one that calls unshare(CLONE_NEWUSER) later, for one) sets D = 0
// (NUMARENA_RETURN_IDLE_MS=0 under `numarena run`).
#include "alloc/heap_activity.hpp"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>

#include "alloc/heap_table.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "os/fork.hpp"

namespace numarena {
namespace {

constexpr std::int64_t kNanosPerMilli = 1'000'000;
constexpr std::int64_t kMinPeriodNanos = 10 * kNanosPerMilli;
constexpr std::int64_t kMaxPeriodNanos = 1000 * kNanosPerMilli;

// The coarse clock at each heap's last activity (0: none yet).
std::atomic<std::int64_t> g_last_activity_ns[arena_internal::kMaxHeaps];
// The same for puts into the threads' large slots (NoteFrontSlotPut): they keep the returner
// awake, not the heap busy.
std::atomic<std::int64_t> g_last_slot_put_ns[arena_internal::kMaxHeaps];

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

// The pass the thread runs (memory_return.cpp's ReturnIdleMemory, set by the arena layer).
std::atomic<MemoryReturnPass> g_pass{nullptr};

std::int64_t ReturnIdleNanos(const Heap& heap) { return heap.return_idle_ms * kNanosPerMilli; }

// Whether any heap was active, or had an object put into a thread's large slot, at or after
// `since_ns`.
bool ActiveSince(std::int64_t since_ns) {
  for (int heap = 0; heap < arena_internal::kMaxHeaps; ++heap) {
    if (g_last_activity_ns[heap].load(std::memory_order_seq_cst) >= since_ns ||
        g_last_slot_put_ns[heap].load(std::memory_order_seq_cst) >= since_ns) {
      return true;
    }
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
    const MemoryReturnPass pass = g_pass.load(std::memory_order_acquire);
    std::int64_t period = kMaxPeriodNanos;
    const bool more = pass != nullptr && pass(start, &period);
    g_period_ns.store(period, std::memory_order_relaxed);
    if (more) continue;
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

namespace {

// Stamps `last` with `now_ns` (seq_cst, before the state is read: see ReturnerMain), then makes
// sure the returner runs for `heap`: started on the first call when `may_start_thread`, woken
// when it sleeps.
void StampAndWake(std::atomic<std::int64_t>& last, int heap, std::int64_t now_ns,
                  bool may_start_thread) noexcept {
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
    g_period_ns.store(MemoryReturnPeriod(ReturnIdleNanos(*owner)), std::memory_order_relaxed);
    StartReturner();
  }
}

}  // namespace

void NoteHeapActivity(int heap, std::int64_t now_ns, bool may_start_thread) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return;
  StampAndWake(g_last_activity_ns[heap], heap, now_ns, may_start_thread);
}

void NoteFrontSlotPut(int heap, std::int64_t now_ns) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return;
  StampAndWake(g_last_slot_put_ns[heap], heap, now_ns, /*may_start_thread=*/true);
}

std::int64_t LastHeapActivity(int heap) noexcept {
  if (heap < 0 || heap >= arena_internal::kMaxHeaps) return 0;
  return g_last_activity_ns[heap].load(std::memory_order_seq_cst);
}

void SetMemoryReturnPass(MemoryReturnPass pass) noexcept {
  g_pass.store(pass, std::memory_order_release);
}

std::int64_t MemoryReturnPeriod(std::int64_t idle_ns) noexcept {
  return std::clamp(idle_ns / 4, kMinPeriodNanos, kMaxPeriodNanos);
}

bool MemoryReturnThreadStarted() noexcept {
  const int state = g_state.load(std::memory_order_relaxed);
  return state == kRunning || state == kSleeping;
}

}  // namespace numarena
