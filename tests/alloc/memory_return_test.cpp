// Memory return (ArenaOptions::return_idle_ms, lib/alloc/memory_return.cpp) on the host: a pass
// over the heaps returns an idle arena's caches and dirty pages, and of a busy one only the
// depot's classes nobody used for a pass period; the
// returner thread does it without any call from the program, in a fork() child too; and a loop
// of random large sizes does not hold the large cache's bound on top of its live block.
// Passes are run with a clock the test gives (now + hours), so nothing here depends on how fast
// the machine is; the thread's tests wait for an outcome, with a deadline minutes away.
// Placement of pages faulted in again after a return: tests/lab/memory_return_lab.cpp.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <set>
#include <vector>

#include "alloc/memory_return.hpp"
#include "numarena/arena.hpp"
#include "resident_pages.hpp"
#include "sleeping_thread.hpp"

#if defined(__SANITIZE_THREAD__)
// The fork test's child starts the returner thread: TSan must let a child of a multi-threaded
// process make threads.
extern "C" const char* __tsan_default_options() { return "die_after_fork=0:detect_deadlocks=0"; }
#endif

namespace numarena {
namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = kKiB * 1024;
constexpr std::int64_t kHourNanos = std::int64_t{3600} * 1'000'000'000;

// An arena of its own (a weighted policy of one node, with a weight no other test uses).
Arena* Get(unsigned weight, std::int64_t return_idle_ms) {
  ArenaOptions options;
  options.return_idle_ms = return_idle_ms;
  auto arena = Arena::ForPolicy(Policy::WeightedInterleave({{0, weight}}), options);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  return *arena;
}

// A burst freed at once: 96 objects of 160 KiB (most go to the depot: a thread's front cache
// keeps 1 MiB of them) and 6 of 8-24 MiB (the large cache), every page written.
void BurstAndFree(Arena* arena) {
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (int i = 0; i < 96; ++i) blocks.emplace_back(arena->allocate(160 * kKiB), 160 * kKiB);
  for (std::size_t mib : {8, 12, 16, 20, 24, 10}) {
    blocks.emplace_back(arena->allocate(mib * kMiB), mib * kMiB);
  }
  for (auto [p, size] : blocks) {
    REQUIRE(p != nullptr);
    std::memset(p, 0x5a, size);
  }
  for (auto [p, size] : blocks) deallocate(p);
}

TEST_CASE("a pass returns an idle arena's shared caches and dirty pages") {
  // An hour: the returner thread never finds this arena idle by the real clock.
  Arena* arena = Get(61, kHourNanos / 1'000'000);
  BurstAndFree(arena);
  const ArenaStats before = arena->stats();
  INFO("cached " << before.cached << " committed " << before.committed);
  REQUIRE(before.cached >= 60 * kMiB);
  ReturnIdleMemory(CoarseNanos() + 2 * kHourNanos);
  const ArenaStats after = arena->stats();
  INFO("after: cached " << after.cached << " committed " << after.committed);
  CHECK(after.cached == 0);
  // What the caches held and jemalloc's dirty pages went back: only the thread's own front
  // cache (1 MiB of 160 KiB objects) and the arena's metadata stay committed.
  CHECK(before.committed - after.committed >= 70 * kMiB);
}

TEST_CASE("a pass leaves the caches of an arena in use alone") {
  Arena* arena = Get(62, kHourNanos / 1'000'000);
  BurstAndFree(arena);
  const ArenaStats before = arena->stats();
  REQUIRE(before.cached >= 60 * kMiB);
  // The clock of the frees: they were moments ago.
  ReturnIdleMemory(CoarseNanos());
  CHECK(arena->stats().cached == before.cached);
  arena->purge();
}

TEST_CASE("a pass returns the depot's idle classes of an arena in use, and keeps the rest") {
  // An hour's D (a pass period of 1 s): two seconds after the burst the arena is not idle,
  // but nobody took from or put to the depot's 160 KiB class since the last pass, so those
  // objects go back to jemalloc (for the classes the program allocates next); the large
  // cache's 90 MiB of blocks stay until the arena is idle for D.
  Arena* arena = Get(66, kHourNanos / 1'000'000);
  BurstAndFree(arena);
  const ArenaStats before = arena->stats();
  INFO("cached before " << before.cached);
  REQUIRE(before.cached >= 90 * kMiB);
  ReturnIdleMemory(CoarseNanos() + 2'000'000'000);
  CHECK(arena->stats().cached == 90 * kMiB);
  arena->purge();
}

TEST_CASE("an arena without return_idle_ms keeps its caches at a pass") {
  Arena* arena = Get(63, 0);
  BurstAndFree(arena);
  const ArenaStats before = arena->stats();
  REQUIRE(before.cached >= 60 * kMiB);
  ReturnIdleMemory(CoarseNanos() + 2 * kHourNanos);
  CHECK(arena->stats().cached == before.cached);
  arena->purge();
  CHECK(arena->stats().cached == 0);
}

TEST_CASE("return_idle_ms outside 0 to an hour is refused") {
  for (std::int64_t ms : {std::int64_t{-1}, ArenaOptions::kMaxReturnIdleMs + 1}) {
    ArenaOptions options;
    options.return_idle_ms = ms;
    auto arena = Arena::ForPolicy(Policy::WeightedInterleave({{0, 64}}), options);
    REQUIRE_FALSE(arena.ok());
    CHECK(arena.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(arena.status().message()), Catch::Contains("return_idle_ms"));
  }
}

// Polls `returned` every 20 ms for up to two minutes (the thread's schedule is 50 ms here; the
// deadline only bounds a failure on a host slowed down many times).
template <typename Predicate>
bool EventuallyTrue(Predicate returned) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < deadline) {
    if (returned()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return returned();
}

TEST_CASE("the returner thread returns an idle arena's burst with no call from the program") {
  Arena* arena = Get(65, 50);
  BurstAndFree(arena);
  const std::size_t committed = arena->stats().committed;
  CHECK(MemoryReturnThreadStarted());
  // No call into the arena from here on: only the thread can return it.
  const bool returned = EventuallyTrue([&] {
    const ArenaStats now = arena->stats();
    return now.cached == 0 && committed - now.committed >= 70 * kMiB;
  });
  CHECK(returned);
}

TEST_CASE("a pass returns the large object a sleeping thread's front cache keeps") {
  // A thread frees a 3 MiB block (its front cache keeps it, ahead of the heap's shared large
  // cache) and then sleeps: once the block has sat there for D the pass frees it and its pages
  // go back, although that thread makes no call; a younger block stays. The thread's next
  // allocation of the class must not get the block the pass freed while someone else has it.
  Arena* arena = Get(70, kHourNanos / 1'000'000);
  constexpr std::size_t kBlock = 3 * kMiB;
  unsigned char* later = nullptr;
  numarena::testing::SleepingThread sleeper([&](numarena::testing::SleepingThread& self) {
    auto* p = static_cast<unsigned char*>(arena->allocate(kBlock));
    if (p != nullptr) std::memset(p, 0x5a, kBlock);
    deallocate(p);
    self.Wait(p);
    later = static_cast<unsigned char*>(arena->allocate(kBlock));
    if (later != nullptr) std::memset(later, 0x11, kBlock);
  });
  void* kept = sleeper.Reached();
  REQUIRE(kept != nullptr);
  // In the thread's slot, not in the heap's large cache (which any idle pass flushes).
  REQUIRE(arena->stats().cached == 0);
  const auto before = numarena::testing::CountResident(kept, kBlock);
  INFO(before.resident << " of " << before.pages << " pages of the kept block resident");
  REQUIRE(before.resident == before.pages);
  const std::size_t committed = arena->stats().committed;

  // Put moments ago: it stays, and the pass says there is more to come.
  CHECK(ReturnIdleMemory(CoarseNanos()));
  CHECK(numarena::testing::CountResident(kept, kBlock).resident == before.pages);

  ReturnIdleMemory(CoarseNanos() + 2 * kHourNanos);
  const auto after = numarena::testing::CountResident(kept, kBlock);
  INFO(after.resident << " of " << after.pages << " pages resident after the pass");
  CHECK(after.resident == 0);
  CHECK(arena->stats().committed + kBlock <= committed);

  // The block is jemalloc's again: this thread may get it, the sleeper must not.
  auto* mine = static_cast<unsigned char*>(arena->allocate(kBlock));
  REQUIRE(mine != nullptr);
  std::memset(mine, 0x77, kBlock);
  sleeper.Join();
  REQUIRE(later != nullptr);
  CHECK(later != mine);
  bool intact = true;
  for (std::size_t i = 0; i < kBlock; i += 512) intact = intact && mine[i] == 0x77;
  CHECK(intact);
  deallocate(later);
  deallocate(mine);
  arena->purge();
}

TEST_CASE("passes that take threads' large objects never hand one block to two owners") {
  // Two threads free and allocate 3 MiB blocks through their slots while passes, with a clock
  // hours ahead, take whatever sits there. Each thread stamps its blocks and checks the stamp
  // before it frees: a block handed out twice would carry the other thread's stamp. (Under
  // TSan this also checks the slot's atomics against the owner's puts and takes.)
  Arena* arena = Get(71, kHourNanos / 1'000'000);
  constexpr std::size_t kBlock = 3 * kMiB;
  constexpr std::size_t kStride = 64 * kKiB;
  std::atomic<int> running{2};
  std::atomic<int> clobbered{0};
  auto work = [&](unsigned char stamp) {
    for (int round = 0; round < 200; ++round) {
      auto* p = static_cast<unsigned char*>(arena->allocate(kBlock));
      if (p == nullptr) {
        clobbered.fetch_add(1000);
        break;
      }
      for (std::size_t at = 0; at < kBlock; at += kStride) p[at] = stamp;
      std::this_thread::yield();
      for (std::size_t at = 0; at < kBlock; at += kStride) {
        if (p[at] != stamp) clobbered.fetch_add(1);
      }
      deallocate(p);
    }
    running.fetch_sub(1);
  };
  std::thread a(work, 0xa1), b(work, 0xb2);
  int passes = 0;
  while (running.load() > 0) {
    ReturnIdleMemory(CoarseNanos() + 2 * kHourNanos);
    ++passes;
  }
  a.join();
  b.join();
  INFO(passes << " passes");
  CHECK(clobbered.load() == 0);
  CHECK(passes > 0);
  arena->purge();
}

// Whether a thread of this process is named "numarena-return": the returner names itself first
// thing in its own code, so by then its start-up (in the C library and any sanitizer runtime)
// is over.
bool ReturnerThreadRunning() {
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name == "numarena-return") return true;
  }
  return false;
}

TEST_CASE("a fork() child starts a returner thread of its own") {
  Arena* arena = Get(66, 50);
  BurstAndFree(arena);  // starts the parent's thread, if no test before did
  REQUIRE(MemoryReturnThreadStarted());
  // fork() only once the parent's thread is past its start-up: under GCC 12's AddressSanitizer
  // a new thread frees memory while it starts, and a fork at that instant leaves the
  // sanitizer's allocator locked in the child, which then hangs at its first allocation (seen
  // once in CI; the runtime takes no lock around fork()).
  REQUIRE(EventuallyTrue(ReturnerThreadRunning));
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child has no thread until it frees a burst of its own.
    if (MemoryReturnThreadStarted()) _exit(10);
    BurstAndFree(arena);
    if (!MemoryReturnThreadStarted()) _exit(11);
    const std::size_t committed = arena->stats().committed;
    const bool returned = EventuallyTrue([&] {
      const ArenaStats now = arena->stats();
      return now.cached == 0 && committed - now.committed >= 70 * kMiB;
    });
    _exit(returned ? 0 : 12);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 10: inherited, 11: not started, 12: nothing returned
}

TEST_CASE("a large block on fresh pages returns the depot's idle classes and dirty pages first") {
  // No returner (return_idle_ms 0): the rule holds whether or not a pass ever runs. A phase's
  // buffers (96 of 160 KiB) go to the depot; 100 ms later a 64 MiB block needs fresh pages: the
  // buffers go back to jemalloc and their pages to the kernel before the block is handed out.
  // The same block again, from the large cache, needs none: the next phase's buffers stay.
  Arena* arena = Get(68, 0);
  auto batch = [&](std::size_t size, int count) {
    std::vector<void*> objects;
    for (int i = 0; i < count; ++i) {
      objects.push_back(arena->allocate(size));
      REQUIRE(objects.back() != nullptr);
      std::memset(objects.back(), 0x5a, size);
    }
    for (void* p : objects) deallocate(p, size);
    return objects;
  };
  // Whole pages only (a large object may start inside a page: jemalloc's random offset).
  auto resident = [](const std::vector<void*>& objects, std::size_t size) {
    std::size_t count = 0;
    for (void* p : objects) count += testing::CountResident(p, size).resident;
    return count;
  };
  auto pages = [](const std::vector<void*>& objects, std::size_t size) {
    std::size_t count = 0;
    for (void* p : objects) count += testing::CountResident(p, size).pages;
    return count;
  };
  const std::vector<void*> first = batch(160 * kKiB, 96);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const ArenaStats before = arena->stats();
  INFO("cached before " << before.cached);
  REQUIRE(before.cached >= 12 * kMiB);  // what the front cache's 1 MiB had no room for
  REQUIRE(resident(first, 160 * kKiB) == pages(first, 160 * kKiB));

  void* block = arena->allocate(64 * kMiB);
  REQUIRE(block != nullptr);
  const ArenaStats after = arena->stats();
  INFO("cached after " << after.cached << ", committed " << before.committed << " -> "
                       << after.committed);
  CHECK(after.cached == 0);
  // What the thread's own front cache keeps of the class (its 256 KiB of medium objects) stays
  // resident; the depot's part is the kernel's again.
  CHECK(resident(first, 160 * kKiB) <= pages(first, 160 * kKiB) / 8);

  deallocate(block);  // to the large cache
  const std::vector<void*> second = batch(160 * kKiB, 96);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::size_t second_cached = arena->stats().cached;
  block = arena->allocate(64 * kMiB);  // the cached block: no fresh pages
  REQUIRE(block != nullptr);
  INFO("cached with the block " << second_cached << ", then " << arena->stats().cached);
  CHECK(arena->stats().cached == second_cached - 64 * kMiB);
  CHECK(resident(second, 160 * kKiB) == pages(second, 160 * kKiB));
  deallocate(block);
  arena->purge();
}

TEST_CASE("small allocations that take 1 MiB of fresh pages return the depot's idle classes first") {
  // No returner (return_idle_ms 0). A phase's 64 KiB buffers (8 MiB) are freed: the thread's
  // lists keep 1 MiB, the depot the rest. 100 ms later the next phase allocates 16 KiB
  // objects, another class, which jemalloc cannot carve from the buffers the depot holds: once
  // they have taken 1 MiB of fresh pages, the buffers go back to jemalloc and their pages to
  // the kernel (before, only a large block on fresh pages did this, and the buffers stayed
  // resident beside the new phase until the decay or the idle pass).
  Arena* arena = Get(69, 0);
  arena->purge();
  constexpr std::size_t kBuffer = 64 * kKiB, kObject = 16 * kKiB;
  std::vector<void*> buffers;
  for (int i = 0; i < 128; ++i) {
    buffers.push_back(arena->allocate(kBuffer));
    REQUIRE(buffers.back() != nullptr);
    std::memset(buffers.back(), 0x5a, kBuffer);
  }
  for (void* p : buffers) deallocate(p, kBuffer);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::size_t pages = 0, resident_before = 0;
  for (void* p : buffers) {
    const auto count = testing::CountResident(p, kBuffer);
    pages += count.pages;
    resident_before += count.resident;
  }
  const ArenaStats before = arena->stats();
  INFO("cached before " << before.cached);
  REQUIRE(before.cached >= 6 * kMiB);
  REQUIRE(resident_before == pages);

  std::vector<void*> objects;
  for (int i = 0; i < 192; ++i) {  // 3 MiB
    objects.push_back(arena->allocate(kObject));
    REQUIRE(objects.back() != nullptr);
    std::memset(objects.back(), 0x33, kObject);
  }
  const ArenaStats after = arena->stats();
  // The buffers' whole pages that no new object lies on: resident only where the thread's own
  // lists keep a buffer (1 MiB: 16 of the 128); the rest (jemalloc carved part of the new
  // objects from them) is the kernel's again.
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  std::set<std::uintptr_t> object_pages;
  for (void* p : objects) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    for (std::uintptr_t a = at / page * page; a < at + kObject; a += page) object_pages.insert(a);
  }
  std::size_t resident_after = 0;
  for (void* p : buffers) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    for (std::uintptr_t a = (at + page - 1) / page * page; a + page <= at + kBuffer; a += page) {
      if (object_pages.count(a) == 0) {
        resident_after += testing::CountResident(reinterpret_cast<void*>(a), page).resident;
      }
    }
  }
  INFO("cached after " << after.cached << "; buffers' pages resident off the new objects "
                       << resident_after << " of " << pages);
  CHECK(after.cached == 0);
  CHECK(resident_after <= 16 * kBuffer / page);
  for (void* p : objects) deallocate(p, kObject);
  arena->purge();
}

TEST_CASE("a loop of random 5-25 MiB blocks holds its live block and not the large cache's bound") {
  // Each block freed waits in the large cache for its class; the next block is of another
  // class most of the time. Before, each miss took fresh pages while the cache kept up to
  // 256 MiB of other classes committed; now a miss hands them back to jemalloc first and is
  // carved from their pages.
  Arena* arena = Get(67, 0);
  std::mt19937 random(3);
  std::size_t most_committed = 0;
  for (int i = 0; i < 100; ++i) {
    const std::size_t size = 5 * kMiB + random() % (20 * kMiB);
    void* p = arena->allocate(size);
    REQUIRE(p != nullptr);
    most_committed = std::max(most_committed, arena->stats().committed);
    deallocate(p);
  }
  INFO("most committed " << most_committed);
  // One live block of at most 25 MiB, the block freed before it (cached until this miss),
  // jemalloc's metadata and its extent rounding.
  CHECK(most_committed <= 80 * kMiB);
  arena->purge();
}

}  // namespace
}  // namespace numarena
