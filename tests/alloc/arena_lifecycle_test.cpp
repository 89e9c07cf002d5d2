// Arena lifecycle: Arena::Create / Arena::Destroy give back all of an arena's memory and
// charges, reuse its slots, and leave no thread holding a stale cache of it.
#include <catch2/catch.hpp>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// The sanitizer runtimes' allocator interface (<sanitizer/allocator_interface.h>, which
// Debian's GCC does not install).
extern "C" std::size_t __sanitizer_get_heap_size();
#endif

#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/topology.hpp"

// The fork tests' children start no thread, but TSan would also refuse a child of a
// multi-threaded process its first new thread; say that this is fine. And its deadlock
// detector tracks at most 64 locks held at once, fewer than jemalloc's fork handler takes
// (every arena's locks) after this file's tests made arenas: its CHECK failed in fork().
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "die_after_fork=0:detect_deadlocks=0"; }
#endif

namespace numarena {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr int kCycles = 1000;  // TSan makes each cycle's mappings far slower; the bound holds
#else
constexpr int kCycles = 10000;
#endif

constexpr std::size_t kMiB = std::size_t{1} << 20;

// The process's gate for every test here: a quota budget, so its usage is exactly what
// numarena charged. Installed before the first arena of the process.
Budget& TheBudget() {
  static Budget* budget = [] {
    BudgetOptions options;
    options.mode = BudgetMode::kQuota;
    options.default_quota_bytes = std::uint64_t{1} << 40;
    auto made = Budget::Create(options, **Topology::system());
    if (!made.ok()) {
      std::fprintf(stderr, "budget: %s\n", made.status().ToString().c_str());
      std::abort();
    }
    Budget* b = made->release();
    SetCapacityGate(b);
    return b;
  }();
  return *budget;
}

std::uint64_t BudgetUsage() {
  std::uint64_t total = 0;
  for (const NodeBudgetSnapshot& node : TheBudget().Snapshot().nodes) total += node.usage;
  return total;
}

// Bytes the sanitizer's own allocator has mapped (0 without one). ASan keeps freed heap
// blocks in its quarantine (up to 256 MiB): numarena's objects freed at each Destroy (the
// Arena, its page provider, its heap) stay resident there, as ASan's memory, not the arena's.
std::size_t SanitizerHeapBytes() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return __sanitizer_get_heap_size();
#else
  return 0;
#endif
}

std::size_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  unsigned long size = 0, resident = 0;
  REQUIRE(std::fscanf(f, "%lu %lu", &size, &resident) == 2);
  std::fclose(f);
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

int AnyNode() { return (*Topology::system())->node_ids().front(); }

// The sizes a cycle allocates: small and medium classes (front caches, jemalloc's thread
// cache), and large ones (the large cache).
const std::vector<std::size_t>& CycleSizes() {
  static const std::vector<std::size_t> sizes{16,        48,        256,        1024,
                                              4096,      24 << 10,  256 << 10,  1 * kMiB,
                                              2 * kMiB,  4 * kMiB,  6 * kMiB};
  return sizes;
}

// Allocates a few objects of every size, writes them, frees half (into the caches) and
// leaves the rest live for Destroy. False when an allocation failed. (No Catch macros here:
// threads call it, and Catch's assertions are not thread-safe.)
[[nodiscard]] bool Exercise(Arena* arena) {
  std::vector<void*> objects;
  for (std::size_t size : CycleSizes()) {
    for (int i = 0; i < 3; ++i) {
      void* p = arena->allocate(size);
      if (p == nullptr) return false;
      std::memset(p, 0x5a, std::min<std::size_t>(size, 8192));
      objects.push_back(p);
    }
  }
  for (std::size_t i = 0; i < objects.size(); i += 2) deallocate(objects[i]);
  return true;
}

TEST_CASE("Destroy refuses nullptr and the shared arenas of ForNode and ForPolicy") {
  TheBudget();
  Status s = Arena::Destroy(nullptr);
  CHECK(absl::IsInvalidArgument(s));
  auto shared = Arena::ForNode(AnyNode());
  REQUIRE(shared.ok());
  s = Arena::Destroy(*shared);
  INFO(s.ToString());
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find("Arena::Create") != std::string_view::npos);
  void* p = (*shared)->allocate(64);  // still usable
  CHECK(p != nullptr);
  deallocate(p);
}

TEST_CASE("Create makes a new arena each time, never the shared one") {
  TheBudget();
  auto shared = Arena::ForNode(AnyNode());
  auto a = Arena::Create(Policy::Bind(AnyNode()));
  auto b = Arena::Create(Policy::Bind(AnyNode()));
  REQUIRE(shared.ok());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a != *shared);
  CHECK(*a != *b);
  void* pa = (*a)->allocate(100);
  void* pb = (*b)->allocate(100);
  REQUIRE(pa != nullptr);
  REQUIRE(pb != nullptr);
  CHECK(arena_internal::HeapOf(pa) != arena_internal::HeapOf(pb));
  CHECK(node_of(pa) == AnyNode());
  CHECK(Arena::Destroy(*a).ok());
  CHECK(Arena::Destroy(*b).ok());
  // A bad policy is refused as ForPolicy refuses it.
  auto bad = Arena::Create(Policy::Bind(4000));
  CHECK(absl::IsInvalidArgument(bad.status()));
}

TEST_CASE("Destroy releases every charge and the arena's pages") {
  TheBudget();
  const std::uint64_t usage_before = BudgetUsage();
  auto arena = Arena::Create(Policy::Bind(AnyNode()));
  REQUIRE(arena.ok());
  std::vector<void*> live;
  for (int i = 0; i < 16; ++i) {
    void* p = (*arena)->allocate(8 * kMiB);
    REQUIRE(p != nullptr);
    std::memset(p, 1, 8 * kMiB);
    live.push_back(p);
  }
  REQUIRE(Exercise(*arena));
  CHECK(BudgetUsage() >= usage_before + 128 * kMiB);
  CHECK((*arena)->stats().committed >= 128 * kMiB);
  const std::size_t rss_full = ResidentBytes();
  REQUIRE(Arena::Destroy(*arena).ok());
  CHECK(BudgetUsage() == usage_before);
  // The 128 MiB written are gone from the process (the ranges are unmapped).
  CHECK(ResidentBytes() + 120 * kMiB <= rss_full);
}

// The bound arena.hpp states for Destroy: charges back exactly, RSS within 8 MiB.
TEST_CASE("10,000 create/destroy cycles return memory, charges and slots") {
  TheBudget();
  const int node = AnyNode();
  const std::vector<Policy> policies{Policy::Bind(node), Policy::Preferred(node), Policy::Local(),
                                     Policy::Interleave({node})};
  // Warm up: jemalloc's and the C library's one-time structures, this thread's caches.
  for (int i = 0; i < 50; ++i) {
    auto arena = Arena::Create(policies[i % policies.size()]);
    REQUIRE(arena.ok());
    REQUIRE(Exercise(*arena));
    REQUIRE(Arena::Destroy(*arena).ok());
  }
  const std::uint64_t usage_before = BudgetUsage();
  const std::size_t rss_before = ResidentBytes();
  const std::size_t sanitizer_before = SanitizerHeapBytes();
  int first_slot = -1;
  int slot_changes = 0;
  for (int i = 0; i < kCycles; ++i) {
    auto arena = Arena::Create(policies[i % policies.size()]);
    INFO("cycle " << i << ": " << arena.status().ToString());
    REQUIRE(arena.ok());
    void* p = (*arena)->allocate(64);
    REQUIRE(p != nullptr);
    const int slot = arena_internal::HeapOf(p);
    if (first_slot < 0) first_slot = slot;
    slot_changes += slot != first_slot;
    if (i % 10 == 0) REQUIRE(Exercise(*arena));  // every cycle would take minutes under ASan
    Status s = Arena::Destroy(*arena);
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  const std::size_t rss_after = ResidentBytes();
  const std::size_t sanitizer_growth = SanitizerHeapBytes() - sanitizer_before;
  INFO("RSS before " << rss_before << ", after " << rss_after << "; the sanitizer's heap grew by "
                     << sanitizer_growth);
  CHECK(BudgetUsage() == usage_before);
  CHECK(rss_after <= rss_before + sanitizer_growth + 8 * kMiB);
  CHECK(slot_changes == 0);  // every arena reused the first one's heap slot
}

// Not under TSan: its runtime leaves applications a few TiB of address space, and 100 live
// arenas reserve 6.4 TiB (64 GiB each; 256 for the full table).
#if !defined(__SANITIZE_THREAD__)
TEST_CASE("more arenas than numarena's heap table holds, one after another") {
  TheBudget();
  // 300 > kMaxHeaps live at once would fail; destroyed ones free their slot.
  std::vector<Arena*> batch;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 100; ++i) {
      auto arena = Arena::Create(Policy::Bind(AnyNode()));
      INFO(arena.status().ToString());
      REQUIRE(arena.ok());
      batch.push_back(*arena);
    }
    for (Arena* arena : batch) REQUIRE(Arena::Destroy(arena).ok());
    batch.clear();
  }
  // With the table full, Create names the way out. (The shared arena is made first: it
  // takes a slot of the same table.)
  auto shared = Arena::ForNode(AnyNode());
  REQUIRE(shared.ok());
  std::vector<Arena*> all;
  Status full;
  for (int i = 0; i < arena_internal::kMaxHeaps + 1; ++i) {
    auto arena = Arena::Create(Policy::Bind(AnyNode()));
    if (!arena.ok()) {
      full = arena.status();
      break;
    }
    all.push_back(*arena);
  }
  INFO(full.ToString());
  CHECK(absl::IsResourceExhausted(full));
  CHECK(full.message().find("destroy") != std::string_view::npos);
  // The refused Create took nothing down with it: the shared arena still works.
  void* p = (*shared)->allocate(64);
  CHECK(p != nullptr);
  CHECK(owns(p));
  deallocate(p);
  for (Arena* arena : all) REQUIRE(Arena::Destroy(arena).ok());
  auto again = Arena::Create(Policy::Bind(AnyNode()));
  REQUIRE(again.ok());
  CHECK(Arena::Destroy(*again).ok());
}
#endif

// A thread that stops on `gate` until released, then runs `then`.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST_CASE("threads that cached objects of a destroyed arena get only the new arena's memory") {
  TheBudget();
  const int node = AnyNode();
  auto old_arena = Arena::Create(Policy::Bind(node));
  REQUIRE(old_arena.ok());
  void* probe = (*old_arena)->allocate(64);
  const int slot = arena_internal::HeapOf(probe);
  constexpr int kThreads = 4;
  Gate cached, destroyed;
  std::atomic<int> ready{0};
  std::vector<std::vector<std::pair<void*, std::size_t>>> got(kThreads);
  std::vector<int> stale_state(kThreads, -1);
  Arena* new_arena = nullptr;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Fill this thread's front cache and jemalloc cache with the old arena's objects.
      std::vector<void*> mine;
      for (std::size_t size : CycleSizes()) {
        for (int i = 0; i < 8; ++i) mine.push_back((*old_arena)->allocate(size));
      }
      for (void* p : mine) deallocate(p);
      ready.fetch_add(1);
      cached.Wait();
      destroyed.Wait();
      // Destroy dropped this thread's caches of the slot itself.
      stale_state[t] = (arena_internal::front_caches[slot] != nullptr ? 1 : 0) +
                       (arena_internal::thread_flags[slot] != 0 ? 2 : 0);
      for (std::size_t size : CycleSizes()) {
        for (int i = 0; i < 8; ++i) {
          void* p = new_arena->allocate(size);
          if (p != nullptr) std::memset(p, t + 1, size);
          got[t].emplace_back(p, size);
        }
      }
    });
  }
  while (ready.load() < kThreads) std::this_thread::yield();
  cached.Open();
  deallocate(probe);
  REQUIRE(Arena::Destroy(*old_arena).ok());
  auto made = Arena::Create(Policy::Bind(node));
  REQUIRE(made.ok());
  new_arena = *made;
  void* first = new_arena->allocate(64);
  CHECK(arena_internal::HeapOf(first) == slot);  // the same slot, reused
  destroyed.Open();
  for (std::thread& thread : threads) thread.join();
  // Every object is the new arena's, distinct, and kept what its thread wrote.
  std::vector<std::pair<std::uintptr_t, std::size_t>> spans;
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(stale_state[t] == 0);
    for (auto [p, size] : got[t]) {
      REQUIRE(p != nullptr);
      CHECK(arena_internal::HeapOf(p) == slot);
      const auto* bytes = static_cast<const unsigned char*>(p);
      CHECK(bytes[0] == t + 1);
      CHECK(bytes[size - 1] == t + 1);
      spans.emplace_back(reinterpret_cast<std::uintptr_t>(p), size);
    }
  }
  std::sort(spans.begin(), spans.end());
  std::size_t overlaps = 0;
  for (std::size_t i = 1; i < spans.size(); ++i) {
    overlaps += spans[i - 1].first + spans[i - 1].second > spans[i].first;
  }
  CHECK(overlaps == 0);
  for (int t = 0; t < kThreads; ++t) {
    for (auto [p, size] : got[t]) deallocate(p);
  }
  deallocate(first);
  CHECK(Arena::Destroy(new_arena).ok());
}

TEST_CASE("threads may exit after an arena they used was destroyed") {
  TheBudget();
  const std::uint64_t usage_before = BudgetUsage();
  auto arena = Arena::Create(Policy::Bind(AnyNode()));
  REQUIRE(arena.ok());
  Gate go;
  std::atomic<int> ready{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      if (!Exercise(*arena)) failures.fetch_add(1);  // leaves cached and live objects behind
      ready.fetch_add(1);
      go.Wait();  // exits (and drops its caches) after Destroy
    });
  }
  while (ready.load() < 3) std::this_thread::yield();
  REQUIRE(Arena::Destroy(*arena).ok());
  go.Open();
  for (std::thread& thread : threads) thread.join();
  CHECK(failures.load() == 0);
  CHECK(BudgetUsage() == usage_before);
}

TEST_CASE("arenas are created and destroyed while other threads allocate and exit") {
  TheBudget();
  const int node = AnyNode();
  auto shared = Arena::ForNode(node);
  REQUIRE(shared.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  // Each of these makes, uses and destroys arenas of its own.
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 60; ++i) {
        auto arena = Arena::Create(i % 2 == 0 ? Policy::Bind(node) : Policy::Local());
        if (!arena.ok()) {
          failures.fetch_add(1);
          continue;
        }
        if (!Exercise(*arena)) failures.fetch_add(1);
        if (!Arena::Destroy(*arena).ok()) failures.fetch_add(1);
      }
    });
  }
  // These use the shared arena, and short-lived threads come and go (their exits walk every
  // heap), and purges walk every heap on the node.
  threads.emplace_back([&] {
    while (!stop.load()) {
      std::vector<void*> objects;
      for (int i = 0; i < 64; ++i) objects.push_back((*shared)->allocate(64 << (i % 12)));
      for (void* p : objects) deallocate(p);
      (*shared)->purge();
    }
  });
  threads.emplace_back([&] {
    while (!stop.load()) {
      std::thread([&] {
        void* p = (*shared)->allocate(1000);
        deallocate(p);
      }).join();
    }
  });
  for (int t = 0; t < 3; ++t) threads[t].join();
  stop.store(true);
  for (std::size_t t = 3; t < threads.size(); ++t) threads[t].join();
  CHECK(failures.load() == 0);
}

TEST_CASE("freeing a destroyed arena's pointer is reported while its range is unused") {
  TheBudget();
  auto arena = Arena::Create(Policy::Bind(AnyNode()));
  REQUIRE(arena.ok());
  void* p = (*arena)->allocate(128);
  REQUIRE(p != nullptr);
  REQUIRE(Arena::Destroy(*arena).ok());
  CHECK_FALSE(owns(p));
  CHECK(node_of(p) == kNodeNone);
  std::fflush(nullptr);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGABRT, SIG_DFL);  // the abort is the expected outcome, not Catch's to report
    deallocate(p);  // must abort: "not allocated by numarena"
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGABRT);
}

// Not under ASan: GCC 12's AddressSanitizer runtime does not hold its allocator's locks
// across fork(), so a child forked while the churning thread is inside ASan's malloc can
// wait for ever in ASan's code (tests/budget/fork_safety_test.cpp has the details).
// Under TSan it once hung (2026-12-02): the fork handler was installed by the budget before
// the allocator's stages were set, on first use, so a fork could miss the heap creation stage
// while the churning thread took its lock. The stages are now set at load
// (tests/os/fork_stages_test.cpp).
#if !defined(__SANITIZE_ADDRESS__)
TEST_CASE("a fork child can create and destroy arenas while the parent does") {
  TheBudget();
  const int node = AnyNode();
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load()) {
      auto arena = Arena::Create(Policy::Bind(node));
      if (!arena.ok()) continue;
      (void)Exercise(*arena);
      (void)Arena::Destroy(*arena);
    }
  });
  for (int i = 0; i < 10; ++i) {
    std::fflush(nullptr);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      int code = 0;
      for (int j = 0; j < 5 && code == 0; ++j) {
        auto arena = Arena::Create(Policy::Bind(node));
        if (!arena.ok()) code = 1;
        else if ((*arena)->allocate(4096) == nullptr) code = 2;
        else if (!Arena::Destroy(*arena).ok()) code = 3;
      }
      _exit(code);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    INFO("child " << i);
    CHECK(WIFEXITED(status));
    if (WIFEXITED(status)) CHECK(WEXITSTATUS(status) == 0);
  }
  stop.store(true);
  churn.join();
}
#endif

// What a thread's last destructor saw when it allocated: for each size, "numarena" (an object
// of the arena, freed again), "refused" (nullptr with Unavailable), or what went wrong.
pthread_key_t late_key;
std::mutex late_mutex;
std::vector<std::string> late_outcomes;

void AllocateFromLastDestructor(void*) {
  auto arena = Arena::ForNode(0);
  std::vector<std::string> outcomes;
  for (std::size_t size : CycleSizes()) {
    void* p = arena.ok() ? (*arena)->allocate(size) : nullptr;
    if (p == nullptr) {
      const Status error = last_allocation_error();
      outcomes.push_back(absl::IsUnavailable(error) ? "refused" : error.ToString());
    } else if (!owns(p) || node_of(p) != 0) {
      outcomes.push_back("foreign");  // left alone: no allocator here could free it
    } else {
      std::memset(p, 0x5a, std::min<std::size_t>(size, 8192));
      deallocate(p);
      outcomes.push_back("numarena");
    }
  }
  std::lock_guard<std::mutex> lock(late_mutex);
  late_outcomes = std::move(outcomes);
}

TEST_CASE("a thread's last destructors get the arena's memory or a refusal, never foreign") {
  // A key made now runs its destructor after jemalloc's own (made when jemalloc started), when
  // jemalloc serves every request from its arena 0 whatever arena is asked for.
  REQUIRE(pthread_key_create(&late_key, AllocateFromLastDestructor) == 0);
  Arena* arena = *Arena::ForNode(0);
  std::thread worker([&] {
    deallocate(arena->allocate(100));
    pthread_setspecific(late_key, &late_key);
  });
  worker.join();
  std::lock_guard<std::mutex> lock(late_mutex);
  REQUIRE(late_outcomes.size() == CycleSizes().size());
  for (std::size_t i = 0; i < late_outcomes.size(); ++i) {
    INFO("size " << CycleSizes()[i] << ": " << late_outcomes[i]);
    CHECK((late_outcomes[i] == "numarena" || late_outcomes[i] == "refused"));
  }
  pthread_key_delete(late_key);
}

}  // namespace
}  // namespace numarena
