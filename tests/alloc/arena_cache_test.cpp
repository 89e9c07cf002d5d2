// The caches behind issue 16's speed (host, one node): the front cache's medium classes
// (above 4 KiB, below 2 MiB), the class map that unsized frees read, the heaps' medium depot
// (what the medium lists cannot keep), large cache (2 MiB to 256 MiB) and each thread's one
// object of 2-4 MiB. That they never hand out an object smaller or less aligned than
// asked, that a thread's caches go back when it exits, that purge() and the purge before a
// refusal return what the caches hold, and that cross-thread frees are safe (run under TSan).
// Placement across nodes is in tests/lab/arena_cache_lab.cpp.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <jemalloc/jemalloc.h>

#include "absl/strings/str_cat.h"
#include "limit_gate.hpp"
#include "sleeping_thread.hpp"
#include "resident_pages.hpp"
#include "numarena/arena.hpp"
#include "numarena/budget.hpp"

// The fork test's children start no thread, but TSan would refuse a child of a multi-threaded
// process its first new thread; and its deadlock detector tracks fewer locks than jemalloc's
// fork handler takes (every arena's locks).
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "die_after_fork=0:detect_deadlocks=0"; }
#endif

namespace {

using numarena_test::GateScope;
using numarena_test::LimitGate;

using numarena::Arena;
using numarena::Policy;
using numarena::Priority;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = kKiB * 1024;

Arena* Get(const Policy& policy) {
  auto arena = Arena::ForPolicy(policy);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  return *arena;
}

// Sizes on both sides of every class boundary from 4 KiB to 3 MiB (jemalloc: four classes
// per doubling).
std::vector<std::size_t> BoundarySizes() {
  std::vector<std::size_t> sizes;
  for (std::size_t base = 4 * kKiB; base < 3 * kMiB; base *= 2) {
    for (std::size_t i = 1; i <= 4; ++i) {
      const std::size_t bytes = base + i * (base / 4);
      sizes.insert(sizes.end(), {bytes - 1, bytes, bytes + 1});
    }
  }
  return sizes;
}


// Waits for a fork() child of round `round` and checks that it exited with status 0 (a
// child that died of a signal, a SIGSEGV in a hole of its heap, says so).
void CheckChildExitedZero(pid_t child, int round) {
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO("round " << round << (WIFSIGNALED(status) ? ": the child died of a signal" : ""));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace

TEST_CASE("usable_size answers from the class map exactly what jemalloc says") {
  // usable_size reads the object's class from numarena's class map, not jemalloc's radix tree
  // (sallocx): the two must agree for every size and alignment the caches serve, for objects
  // fresh from jemalloc and reused from the lists alike.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 59}}));
  std::vector<std::size_t> sizes;
  for (std::size_t size = 1; size <= 4200; ++size) sizes.push_back(size);
  for (std::size_t size : BoundarySizes()) sizes.push_back(size);
  for (int round = 0; round < 2; ++round) {  // the second round reuses the first's objects
    for (std::size_t alignment : {alignof(std::max_align_t), std::size_t{64}, std::size_t{4096}}) {
      for (std::size_t size : sizes) {
        void* p = arena->allocate(size, alignment);
        REQUIRE(p != nullptr);
        INFO("size " << size << " alignment " << alignment);
        REQUIRE(numarena::usable_size(p) == sallocx(p, 0));
        numarena::deallocate(p);
      }
    }
  }
  arena->purge();
}

TEST_CASE("an object above the medium bound goes to the depot and leaves the other lists alone") {
  // A thread's medium lists hold 256 KiB in all: a 1.5 MiB object can never be kept, and its
  // free must not empty the thread's other medium lists into the depot on the way (it did,
  // on every such free, before the bound check came first).
  Arena* arena = Get(Policy::WeightedInterleave({{0, 61}}));
  arena->purge();
  std::vector<void*> kept;
  for (int i = 0; i < 4; ++i) kept.push_back(arena->allocate(64 * kKiB));
  for (void* p : kept) {
    REQUIRE(p != nullptr);
    numarena::deallocate(p);  // into this thread's 64 KiB list
  }
  const std::size_t before = arena->stats().cached;
  void* big = arena->allocate(1536 * kKiB);
  REQUIRE(big != nullptr);
  const std::size_t big_bytes = numarena::usable_size(big);
  numarena::deallocate(big);
  const std::size_t after = arena->stats().cached;
  INFO("cached " << before << " -> " << after << ", the big object " << big_bytes);
  CHECK(after - before == big_bytes);
  // And the 64 KiB objects are still this thread's: the next four are the same four.
  std::set<void*> old(kept.begin(), kept.end());
  for (int i = 0; i < 4; ++i) {
    void* p = arena->allocate(64 * kKiB);
    CHECK(old.count(p) == 1);
    numarena::deallocate(p);
  }
  arena->purge();
}

TEST_CASE("a block that grows by reallocation leaves no outgrown block in the thread's lists") {
  // 8 KiB grown by half each step to 768 KiB: each outgrown block goes back to jemalloc, which
  // can carve later steps from it; kept in the thread's lists by size, the eleven of them
  // (2 MiB) stayed allocated while nothing asked for their sizes again.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 62}}));
  arena->purge();
  const std::size_t base = arena->stats().allocated;
  std::size_t size = 8 * kKiB;
  auto* p = static_cast<unsigned char*>(arena->allocate(size));
  REQUIRE(p != nullptr);
  std::memset(p, 0x11, size);
  std::size_t outgrown = 0;
  while (size < 768 * kKiB) {
    const std::size_t next = size + size / 2;
    outgrown += numarena::usable_size(p);
    auto* q = static_cast<unsigned char*>(arena->reallocate(p, next));
    REQUIRE(q != nullptr);
    CHECK(q[0] == 0x11);
    CHECK(q[size - 1] == 0x11);  // the contents came along
    std::memset(q, 0x11, next);
    p = q;
    size = next;
  }
  const std::size_t held = arena->stats().allocated - base;
  INFO("allocated grew by " << held << "; the block is " << numarena::usable_size(p)
                            << ", the outgrown blocks were " << outgrown);
  CHECK(held >= numarena::usable_size(p));
  CHECK(held < numarena::usable_size(p) + outgrown / 4);
  numarena::deallocate(p);
  arena->purge();
}

TEST_CASE("medium and large caches never hand out an object smaller than asked") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 11}}));
  const std::vector<std::size_t> sizes = BoundarySizes();
  for (int round = 0; round < 3; ++round) {
    std::vector<std::pair<void*, std::size_t>> live;
    for (std::size_t size : sizes) {
      void* p = arena->allocate(size);
      REQUIRE(p != nullptr);
      REQUIRE(numarena::usable_size(p) >= size);
      live.emplace_back(p, size);
    }
    for (std::size_t i = 0; i < live.size(); ++i) {
      if ((i + round) % 2 == 0) {
        numarena::deallocate(live[i].first, live[i].second);
      } else {
        numarena::deallocate(live[i].first);
      }
    }
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
      const std::size_t size = *it;
      auto* p = static_cast<unsigned char*>(arena->allocate(size));
      REQUIRE(p != nullptr);
      INFO("size " << size << " usable " << numarena::usable_size(p));
      REQUIRE(numarena::usable_size(p) >= size);
      if (size >= 2 * kMiB) REQUIRE(reinterpret_cast<std::uintptr_t>(p) % (2 * kMiB) == 0);
      p[0] = 1;
      p[size - 1] = 2;
      numarena::deallocate(p);
    }
  }
  arena->purge();
}

TEST_CASE("objects allocated with a larger alignment and freed unsized keep every promise") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 12}}));
  for (std::size_t alignment : {std::size_t{64}, std::size_t{4096}, std::size_t{64} << 10,
                                std::size_t{1} << 20}) {
    for (std::size_t size : {std::size_t{100}, 5 * kKiB, 96 * kKiB, 1900 * kKiB, 2 * kMiB,
                             3 * kMiB}) {
      INFO("alignment " << alignment << " size " << size);
      void* p = arena->allocate(size, alignment);
      REQUIRE(p != nullptr);
      REQUIRE(reinterpret_cast<std::uintptr_t>(p) % alignment == 0);
      numarena::deallocate(p);  // into the caches by its recorded class
      // The default-aligned request of that class: at least as large, and 2 MiB aligned
      // from 2 MiB on (an extent kept from a 1 MiB aligned request must not come back here).
      auto* q = static_cast<unsigned char*>(arena->allocate(size));
      REQUIRE(q != nullptr);
      REQUIRE(numarena::usable_size(q) >= size);
      if (size >= 2 * kMiB) REQUIRE(reinterpret_cast<std::uintptr_t>(q) % (2 * kMiB) == 0);
      std::memset(q, 0x11, size);
      numarena::deallocate(q, size);
    }
  }
  arena->purge();
}

TEST_CASE("a thread's medium cache goes back to the arena when the thread exits") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 13}}));
  const std::size_t before = arena->stats().allocated;
  numarena::ArenaStats while_alive;
  std::thread thread([&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 32; ++i) blocks.push_back(arena->allocate(64 * kKiB));
    for (void* p : blocks) numarena::deallocate(p);
    while_alive = arena->stats();
  });
  thread.join();
  // While the thread lived its 64 KiB list held 256 KiB (the medium bound) and the heap's
  // depot the rest; the list went back when it exited, the depot keeps its part for the
  // arena's other threads.
  CHECK(while_alive.allocated - while_alive.cached >= before + 4 * 64 * kKiB);
  CHECK(while_alive.cached >= 8 * 64 * kKiB);
  const numarena::ArenaStats after = arena->stats();
  CHECK(after.cached == while_alive.cached);
  CHECK(after.allocated <= before + after.cached);
  arena->purge();
  CHECK(arena->stats().cached == 0);
  CHECK(arena->stats().allocated <= before);
}

TEST_CASE("purge() returns what the large cache holds, and a refusal purges it first") {
  LimitGate gate(72 * kMiB);
  GateScope scope(&gate);
  // Two fresh heaps on node 0, made under the gate (each charges its 2 MiB metadata block).
  Arena* first = Get(Policy::WeightedInterleave({{0, 14}}));
  Arena* second = Get(Policy::WeightedInterleave({{0, 15}}));

  void* p = first->allocate(40 * kMiB);
  REQUIRE(p != nullptr);
  std::memset(p, 1, 40 * kMiB);
  numarena::deallocate(p);  // kept by the first heap's large cache, still charged
  CHECK(gate.used() >= 40 * kMiB);
  void* again = first->allocate(40 * kMiB);
  CHECK(again == p);  // handed out again from the cache
  numarena::deallocate(again, 40 * kMiB);
  first->purge();
  CHECK(gate.used() < 8 * kMiB);

  // Cached again; the second heap's request does not fit next to it, so the purge before
  // the refusal must empty the first heap's large cache.
  p = first->allocate(40 * kMiB);
  REQUIRE(p != nullptr);
  std::memset(p, 1, 40 * kMiB);
  numarena::deallocate(p);
  CHECK(gate.used() >= 40 * kMiB);
  void* q = second->allocate(40 * kMiB);
  INFO(numarena::last_allocation_error().ToString());
  REQUIRE(q != nullptr);
  std::memset(q, 2, 40 * kMiB);
  numarena::deallocate(q);
  second->purge();
  first->purge();
  CHECK(gate.used() < 8 * kMiB);
}

TEST_CASE("a refusal moments after another still takes back what was just freed") {
  // A refusal that purged nothing, then frees into the caches: the next refusal hands them
  // back before it stands.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 36}}));
  numarena::deallocate(arena->allocate(4 * kKiB));  // the heap, made before the gate
  LimitGate gate(64 * kMiB);
  GateScope scope(&gate);
  std::vector<void*> blocks;
  while (void* p = arena->allocate(4 * kMiB)) blocks.push_back(p);
  REQUIRE(blocks.size() >= 8);
  for (int round = 0; round < 3; ++round) {
    CHECK(arena->allocate(4 * kMiB) == nullptr);  // refused, nothing to purge
    for (int i = 0; i < 4; ++i) {
      numarena::deallocate(blocks.back());
      blocks.pop_back();
    }
    CHECK(arena->stats().cached >= 12 * kMiB);  // still committed and charged
    void* p = arena->allocate(12 * kMiB);
    INFO("round " << round << ": " << numarena::last_allocation_error().ToString());
    REQUIRE(p != nullptr);
    numarena::deallocate(p);
    arena->purge();
    while (void* q = arena->allocate(4 * kMiB)) blocks.push_back(q);  // full again
  }
  for (void* p : blocks) numarena::deallocate(p);
  arena->purge();
}

TEST_CASE("a refusal takes back the large object another thread keeps while it sleeps") {
  // A thread frees a 2 MiB block (with a gate, its front cache keeps one of 2 MiB) and sleeps;
  // the node is then full. Another thread's 2 MiB allocation must not be refused while that
  // block sits charged in the sleeper's cache: the refusal's purge takes it back first.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 38}}));
  numarena::deallocate(arena->allocate(4 * kKiB));  // the heap, made before the gate
  LimitGate gate(64 * kMiB);
  GateScope scope(&gate);
  numarena::testing::SleepingThread sleeper([&](numarena::testing::SleepingThread& self) {
    void* p = arena->allocate(2 * kMiB);
    if (p != nullptr) std::memset(p, 1, 2 * kMiB);
    numarena::deallocate(p);
    self.Wait(p);
  });
  void* kept = sleeper.Reached();
  REQUIRE(kept != nullptr);
  REQUIRE(arena->stats().cached == 0);  // in the sleeper's own cache, not the heap's
  arena->purge();                        // the calling thread's caches and dirty pages only
  REQUIRE(gate.used() >= 2 * kMiB);
  // No room for 2 MiB beside the kept block; 64 KiB for what a new extent needs besides its
  // pages (numarena's page table, jemalloc's metadata).
  gate.set_limit(gate.used() + 64 * kKiB);
  void* q = arena->allocate(2 * kMiB);
  INFO(numarena::last_allocation_error().ToString());
  REQUIRE(q != nullptr);
  std::memset(q, 2, 2 * kMiB);
  CHECK(gate.refused() >= 1);            // it was refused once, then fitted
  numarena::deallocate(q);
  sleeper.Join();
  arena->purge();
}

TEST_CASE("a full quota, everything freed at once, then filled again: all of it fits") {
  // The objects a thread freed go partly to its caches and partly (overflow) straight to
  // jemalloc, whose dirty pages stay charged until purged. Refilling at once must get them
  // back: every refusal purges, including one moments after a refusal that purged nothing.
  for (const std::size_t size : {std::size_t{16} * kKiB, std::size_t{1} * kKiB,
                                 std::size_t{200} * kKiB}) {
    Arena* arena = Get(Policy::WeightedInterleave({{0, 43}}));
    numarena::deallocate(arena->allocate(4 * kKiB));  // the heap, made before the budget
    // A quota budget, as `numarena run --budget quota:32M`: once tripped it stays closed to
    // normal work until usage falls back below 85 %, so only a purge reopens it.
    numarena::BudgetOptions options;
    options.mode = numarena::BudgetMode::kQuota;
    options.quotas = {{0, 32 * kMiB}};
    auto budget = numarena::Budget::Create(options, std::vector<int>{0});
    REQUIRE(budget.ok());
    REQUIRE(numarena::InstallProcessBudget(budget->get()).ok());
    struct Uninstall {
      ~Uninstall() { (void)numarena::InstallProcessBudget(nullptr); }
    } uninstall;
    std::size_t first_fill = 0;
    for (int round = 0; round < 3; ++round) {
      std::vector<void*> blocks;
      while (void* p = arena->allocate(size)) {
        std::memset(p, round, size);
        blocks.push_back(p);
      }
      INFO("size " << size << ", round " << round << ": " << blocks.size() << " objects, first "
                   << first_fill << "; " << numarena::last_allocation_error().ToString());
      if (round == 0) {
        first_fill = blocks.size();
        REQUIRE(first_fill * size >= 16 * kMiB);
      } else {
        CHECK(blocks.size() * 10 >= first_fill * 9);
      }
      for (void* p : blocks) numarena::deallocate(p);
    }
    // Full again and freed: the small sizes a program asks for next are given at once.
    std::vector<void*> blocks;
    while (void* p = arena->allocate(size)) blocks.push_back(p);
    for (void* p : blocks) numarena::deallocate(p);
    for (std::size_t small = 128; small <= 4 * kKiB; small *= 2) {
      void* p = arena->allocate(small);
      INFO("size " << size << ", then " << small << ": "
                   << numarena::last_allocation_error().ToString());
      CHECK(p != nullptr);
      numarena::deallocate(p);
    }
    arena->purge();
  }
}

TEST_CASE("medium and large objects freed on other threads (producer/consumer)") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 16}}));
  std::mutex mutex;
  std::deque<std::pair<void*, std::size_t>> queue;
  std::atomic<bool> done{false};
  // Catch2's assertions are not thread-safe: the consumer counts, the main thread checks.
  std::atomic<int> corrupted{0}, failed{0};
  const std::size_t sizes[] = {6 * kKiB, 64 * kKiB, 300 * kKiB, 1 * kMiB, 2 * kMiB, 6 * kMiB};
  std::thread consumer([&] {
    std::size_t freed = 0;
    while (true) {
      std::pair<void*, std::size_t> item{nullptr, 0};
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!queue.empty()) {
          item = queue.front();
          queue.pop_front();
        }
      }
      if (item.first == nullptr) {
        if (done.load()) break;
        std::this_thread::yield();
        continue;
      }
      auto* bytes = static_cast<unsigned char*>(item.first);
      if (bytes[0] != static_cast<unsigned char>(item.second)) corrupted.fetch_add(1);
      if (++freed % 2 == 0) {
        numarena::deallocate(item.first, item.second);
      } else {
        numarena::deallocate(item.first);
      }
      // The consumer's own allocations reuse what it freed (its caches for the heap).
      void* own = arena->allocate(item.second);
      if (own == nullptr) {
        failed.fetch_add(1);
        continue;
      }
      std::memset(own, 0x22, 64);
      numarena::deallocate(own);
    }
  });
  for (int i = 0; i < 600; ++i) {
    const std::size_t size = sizes[i % 6];
    auto* p = static_cast<unsigned char*>(arena->allocate(size));
    REQUIRE(p != nullptr);
    p[0] = static_cast<unsigned char>(size);
    std::lock_guard<std::mutex> lock(mutex);
    queue.emplace_back(p, size);
  }
  done.store(true);
  consumer.join();
  CHECK(corrupted.load() == 0);
  CHECK(failed.load() == 0);
  arena->purge();
}

TEST_CASE("a batch larger than the thread's cache comes back from the heap's medium depot") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 25}}));
  const std::size_t before = arena->stats().allocated;
  // 256 objects of 4-256 KiB (about 33 MiB, far more than a front cache's 256 KiB), freed in
  // an order unlike the allocation's.
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < 256; ++i) sizes.push_back(4 * kKiB + (i * 7919 * kKiB) % (252 * kKiB));
  std::vector<void*> first(sizes.size());
  std::size_t live = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    first[i] = arena->allocate(sizes[i]);
    REQUIRE(first[i] != nullptr);
    std::memset(first[i], static_cast<int>(i), sizes[i]);
    live += numarena::usable_size(first[i]);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::size_t j = (i * 101) % sizes.size();
    if (i % 2 == 0) {
      numarena::deallocate(first[j], sizes[j]);
    } else {
      numarena::deallocate(first[j]);
    }
  }
  const numarena::ArenaStats freed = arena->stats();
  CHECK(freed.cached >= live - 5 * kMiB);  // all but the front cache's part
  CHECK(freed.allocated - freed.cached <= before + 5 * kMiB);
  // The same batch again: every object is one of the first batch's (no call into jemalloc
  // needed), of a class that holds the request, and the depot is empty again.
  std::multiset<void*> old(first.begin(), first.end());
  std::size_t reused = 0;
  std::vector<void*> second(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    second[i] = arena->allocate(sizes[i]);
    REQUIRE(second[i] != nullptr);
    REQUIRE(numarena::usable_size(second[i]) >= sizes[i]);
    std::memset(second[i], 0x5a, sizes[i]);
    if (auto it = old.find(second[i]); it != old.end()) {
      old.erase(it);
      ++reused;
    }
  }
  CHECK(reused == sizes.size());
  CHECK(arena->stats().cached == 0);
  for (void* p : second) numarena::deallocate(p);
  arena->purge();
  CHECK(arena->stats().cached == 0);
  CHECK(arena->stats().allocated <= before);
}

TEST_CASE("what one thread frees, another thread of the heap takes back from the depot") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 26}}));
  constexpr int kObjects = 200;  // 200 x 160 KiB = 31 MiB
  std::vector<void*> made(kObjects);
  for (void*& p : made) {
    p = arena->allocate(160 * kKiB);
    REQUIRE(p != nullptr);
    std::memset(p, 0x33, 160 * kKiB);
  }
  // A consumer frees them all and exits; its front cache goes back to jemalloc, the depot
  // keeps the rest for the heap.
  std::thread consumer([&] {
    for (void* p : made) numarena::deallocate(p);
  });
  consumer.join();
  const std::size_t cached = arena->stats().cached;
  CHECK(cached >= (kObjects - 8) * 160 * kKiB);
  std::set<void*> old(made.begin(), made.end());
  int reused = 0;
  for (void*& p : made) {
    p = arena->allocate(160 * kKiB);
    REQUIRE(p != nullptr);
    reused += old.count(p) ? 1 : 0;
  }
  CHECK(static_cast<std::size_t>(reused) * 160 * kKiB >= cached);
  for (void* p : made) numarena::deallocate(p, 160 * kKiB);
  arena->purge();
}

TEST_CASE("a thread takes its own objects back from the depot before another thread's") {
  // Two threads on two shards each free more objects of one class than their lists hold, so
  // both have chains in the heap's depot; then one allocates them again and gets its own
  // objects back: had it taken the other's, it would write into cache lines that the other
  // thread's objects share (neighbours in the other shard's slabs), and the other shard's
  // arena would get them back at the end while this one's allocated anew.
  numarena::ArenaOptions options;
  options.shards = 2;
  auto made_arena = Arena::ForPolicy(Policy::WeightedInterleave({{0, 47}}), options);
  REQUIRE(made_arena.ok());
  Arena* arena = *made_arena;
  // Medium objects: a small list would grow to hold the whole batch (it filled by frees).
  constexpr std::size_t kBytes = 64 * kKiB;
  constexpr int kObjects = 128;  // 8 MiB; the thread's 64 KiB list holds 16
  void* probe = arena->allocate(kBytes);
  const int heap = numarena::arena_internal::HeapOf(probe);
  numarena::deallocate(probe);
  REQUIRE(heap >= 0);
  arena->purge();  // an empty depot: what thread 0 gets back is from the two threads
  struct Worker {
    std::set<void*> own;
    std::set<void*> again;  // what thread 0 allocated after the frees
    bool has_cache = false;
    unsigned home = 0;  // its depot home slot
    int reused_own = 0;
    int reused_other = 0;
  };
  // The two threads' front caches are made one after the other, so their homes differ.
  Worker worker[2];
  std::atomic<int> allocated{0};
  std::atomic<int> step{0};
  auto run = [&](int id) {
    Worker& me = worker[id];
    std::vector<void*> made(kObjects);
    for (void*& p : made) {
      p = arena->allocate(kBytes);
      if (p != nullptr) std::memset(p, id, kBytes);
      me.own.insert(p);
    }
    const numarena::arena_internal::FrontCache* cache =
        numarena::arena_internal::front_caches[heap];
    me.has_cache = cache != nullptr;
    me.home = cache != nullptr ? cache->depot_home % 8 : 0;  // 8 slots per class
    allocated.fetch_add(1);
    while (allocated.load() < 2) std::this_thread::yield();
    // Thread 0 frees first, then thread 1, so a depot that kept one pile per class (or took
    // the newest chain first) would give thread 0 thread 1's objects.
    while (step.load() != id) std::this_thread::yield();
    for (void* p : made) numarena::deallocate(p);
    step.fetch_add(1);
    while (step.load() < 2) std::this_thread::yield();
    if (id == 0) {
      for (void*& p : made) {
        p = arena->allocate(kBytes);
        me.again.insert(p);
        me.reused_own += me.own.count(p) != 0 ? 1 : 0;
        me.reused_other += worker[1].own.count(p) != 0 ? 1 : 0;
      }
      for (void* p : made) numarena::deallocate(p);
    }
    step.fetch_add(1);
    while (step.load() < 4) std::this_thread::yield();  // both caches live until here
  };
  std::thread second(run, 1);
  std::thread first(run, 0);
  first.join();
  second.join();
  REQUIRE(worker[0].has_cache);
  REQUIRE(worker[1].has_cache);
  REQUIRE(worker[0].own.count(nullptr) == 0);
  REQUIRE(worker[1].own.count(nullptr) == 0);
  CHECK(worker[0].home != worker[1].home);
  INFO("thread 0 reused " << worker[0].reused_own << " of its own objects and "
                          << worker[0].reused_other << " of the other thread's");
  CHECK(worker[0].again.size() == kObjects);
  CHECK(worker[0].reused_other == 0);
  CHECK(worker[0].reused_own == kObjects);
  arena->purge();
}

TEST_CASE("a depot class nobody takes from for a second goes back to jemalloc") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 27}}));
  auto batch = [&](std::size_t size, int count) {
    std::vector<void*> blocks;
    for (int i = 0; i < count; ++i) blocks.push_back(arena->allocate(size));
    for (void* p : blocks) REQUIRE(p != nullptr);
    for (void* p : blocks) numarena::deallocate(p);
  };
  batch(128 * kKiB, 64);  // 8 MiB: 256 KiB stays in the front cache, the rest in the depot
  const std::size_t idle = arena->stats().cached;
  CHECK(idle >= 3 * kMiB);
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  // The next put (a batch of another class) sweeps the idle 128 KiB class first.
  batch(320 * kKiB, 8);  // above the front cache's medium bound: all to the depot
  const std::size_t after = arena->stats().cached;
  INFO("idle " << idle << " after " << after);
  // The 320 KiB objects, and at most the 256 KiB of 128 KiB ones the front cache keeps.
  CHECK(after <= 8 * 320 * kKiB + 256 * kKiB);
  arena->purge();
  CHECK(arena->stats().cached == 0);
}

TEST_CASE("a class freed for longer than a second is not swept while the frees go on") {
  // A sweep returns the classes nobody took from, once a second, at a put. A thread that
  // frees a long batch slowly (a server draining a queue, or any thread on a loaded host)
  // puts chains all the while: what it put a moment ago is no idle memory. Before, the sweep
  // that came during the batch returned the class whole (CI: TSan, two test processes).
  Arena* arena = Get(Policy::WeightedInterleave({{0, 44}}));
  constexpr std::size_t kSize = 256;
  constexpr int kObjects = 80000;
  std::vector<void*> blocks;
  for (int i = 0; i < kObjects; ++i) blocks.push_back(arena->allocate(kSize));
  for (void* p : blocks) REQUIRE(p != nullptr);
  // 1.5 s of frees, 2000 objects every 37 ms or so: sweeps fall due in the middle of them.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kObjects; ++i) {
    numarena::deallocate(blocks[i]);
    if (i % 2000 == 1999) std::this_thread::sleep_for(std::chrono::milliseconds(37));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("frees took " << seconds << " s");
  REQUIRE(seconds > 1.2);
  // The thread's list holds at most 8192 objects; the depot the rest.
  CHECK(arena->stats().cached >= (kObjects - 10000) * kSize);
  arena->purge();
  CHECK(arena->stats().cached == 0);
}

TEST_CASE("medium and large objects stay usable and counted across fork() from a busy process") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 28}}));
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      std::vector<void*> blocks;
      const std::size_t medium = 8 * kKiB * static_cast<std::size_t>(t + 1);
      const std::size_t large = (2 + static_cast<std::size_t>(t)) * kMiB;
      while (!stop.load()) {
        for (int i = 0; i < 64; ++i) {
          void* p = arena->allocate(i % 16 == 0 ? large : medium);
          if (p == nullptr) failed.fetch_add(1);
          else blocks.push_back(p);
        }
        for (void* p : blocks) numarena::deallocate(p);
        blocks.clear();
      }
    });
  }
  // Forks land anywhere in the workers' puts and takes of the depot and the large cache,
  // including between a byte count and its slot: 40 of them caught that 5 to 7 times without
  // the child's recount (ArenaStats::cached stayed above 0 after purge()).
  for (int round = 0; round < 40; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child has only this thread; the slots are whole whatever the workers were
      // doing, so the same sizes still come and go, and purge() leaves nothing cached.
      int bad = 0;
      for (int i = 0; i < 200; ++i) {
        const std::size_t size =
            i % 20 == 0 ? 3 * kMiB : 8 * kKiB * static_cast<std::size_t>(1 + i % 3);
        void* p = arena->allocate(size);
        if (p == nullptr) {
          ++bad;
          continue;
        }
        std::memset(p, 1, 8 * kKiB);
        numarena::deallocate(p);
      }
      arena->purge();
      if (arena->stats().cached != 0) {
        std::fprintf(stderr, "fork child: %zu bytes cached after purge()\n", arena->stats().cached);
        _exit(2);
      }
      _exit(bad == 0 ? 0 : 1);
    }
    CheckChildExitedZero(child, round);
  }
  stop.store(true);
  for (std::thread& w : workers) w.join();
  CHECK(failed.load() == 0);
  arena->purge();
}

namespace {

// A gate that charges nothing and says whether caches should shrink.
class PressureGate : public numarena::CapacityGate {
 public:
  explicit PressureGate(bool pressed) : pressed_(pressed) {}
  numarena::Status Charge(int, std::size_t, Priority) override { return absl::OkStatus(); }
  void Release(int, std::size_t, Priority) override {}
  bool CachesShouldShrink(int) override { return pressed_; }

 private:
  bool pressed_;
};

// What this thread's own caches hold of `arena`: allocated bytes that are neither `in_use`
// nor in the heap's shared caches.
std::size_t ThreadKept(Arena* arena, std::size_t in_use) {
  const numarena::ArenaStats now = arena->stats();
  return now.allocated > in_use + now.cached ? now.allocated - in_use - now.cached : 0;
}

// On a fresh thread: allocates `count` objects of each size in `sizes`, frees them all
// (unsized), and returns how many bytes the arena's statistics still count as allocated
// beyond `before` while the thread lives, outside the heap's shared caches, i.e. what the
// thread's own caches kept. `depot` (when given) receives what the shared caches kept.
std::size_t KeptAfterBatch(Arena* arena, const std::vector<std::size_t>& sizes, int count,
                           std::size_t* depot = nullptr) {
  const std::size_t before = arena->stats().allocated;
  std::size_t kept = 0, shared = 0;
  std::thread thread([&] {
    std::vector<void*> blocks;
    for (std::size_t size : sizes) {
      for (int i = 0; i < count; ++i) blocks.push_back(arena->allocate(size));
    }
    for (void* p : blocks) REQUIRE(p != nullptr);
    for (void* p : blocks) numarena::deallocate(p);
    shared = arena->stats().cached;
    kept = ThreadKept(arena, before);
  });
  thread.join();
  // All of the thread's own caches are back when it exits; purge() empties the shared ones.
  CHECK(arena->stats().allocated <= before + arena->stats().cached);
  arena->purge();
  CHECK(arena->stats().allocated <= before);
  if (depot != nullptr) *depot = shared;
  return kept;
}

}  // namespace

// jemalloc's own thread cache keeps up to a few hundred small objects per class beside the
// front cache; the bounds below leave room for it.
constexpr std::size_t kJemallocTcacheSlack = 256 * kKiB;

TEST_CASE("a small list grows for a batch freed together, within the cache's bound") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 21}}));
  // 4000 objects of 256 B (1 MiB) freed together: the list grows to hold them (it starts
  // at 16 KiB), so the next batch comes from the cache instead of jemalloc.
  CHECK(KeptAfterBatch(arena, {256}, 4000) >= 4000 * 256);
  // 8192 each of 256, 512, 1024 and 2048 B (30 MiB): the growth stops at 8 MiB.
  const std::size_t kept = KeptAfterBatch(arena, {256, 512, 1024, 2048}, 8192);
  CHECK(kept >= 8 * kMiB);
  CHECK(kept <= 8 * kMiB + 4 * 16 * kKiB + kJemallocTcacheSlack);
}

TEST_CASE("a small list that wanders up and down with remote frees does not grow") {
  // Larson-like: a thread replaces its own live objects in random order and also frees one
  // object another thread made for every 32 of its own. Its 256 B list fills again and again,
  // but never by frees alone, so it keeps its start limit (16 KiB); the surplus goes to the
  // depot.
  // When every full list grew, the list ratcheted up to the growth bound (8 MiB).
  Arena* arena = Get(Policy::WeightedInterleave({{0, 29}}));
  constexpr std::size_t kSize = 256;
  constexpr int kLive = 1000, kSteps = 200000;
  std::vector<void*> foreign;
  for (int i = 0; i < kSteps / 32; ++i) {
    foreign.push_back(arena->allocate(kSize));
    REQUIRE(foreign.back() != nullptr);
  }
  const std::size_t before = arena->stats().allocated - foreign.size() * kSize;
  std::size_t kept = 0;
  bool failed = false;
  std::thread thread([&] {
    std::vector<void*> live;
    std::uint64_t random = 0x9E3779B97F4A7C15ULL;
    auto next = [&] {
      random ^= random << 13;
      random ^= random >> 7;
      random ^= random << 17;
      return random;
    };
    for (int i = 0; i < kLive; ++i) live.push_back(arena->allocate(kSize));
    for (int step = 0; step < kSteps; ++step) {
      void*& slot = live[next() % live.size()];
      numarena::deallocate(slot);
      slot = arena->allocate(kSize);
      if (slot == nullptr) failed = true;
      if (step % 32 == 0 && !foreign.empty()) {
        numarena::deallocate(foreign.back());
        foreign.pop_back();
      }
    }
    kept = ThreadKept(arena, before + (live.size() + foreign.size()) * kSize);
    for (void* p : live) numarena::deallocate(p);
  });
  thread.join();
  CHECK_FALSE(failed);
  CHECK(kept <= 16 * kKiB + kJemallocTcacheSlack);
  for (void* p : foreign) numarena::deallocate(p);
  arena->purge();
}

TEST_CASE("a thread that only frees a class does not grow its list") {
  // Producer/consumer: one thread allocates, the consumer frees batches of 4000 objects of
  // 256 B it never allocated. Its list fills by frees alone, but the thread takes nothing
  // from it, so it keeps its start limit (16 KiB) and the surplus goes to the depot, where
  // the producer takes it back. When it grew, each consumer held up to the growth bound
  // (8 MiB) of objects that only the producer wanted (override producer-consumer: 24 MiB
  // peak against mimalloc's 5.5, bench/RESULTS.md).
  Arena* arena = Get(Policy::WeightedInterleave({{0, 46}}));
  constexpr std::size_t kSize = 256;
  constexpr int kBatch = 4000, kRounds = 4;
  arena->purge();
  const std::size_t before = arena->stats().allocated;
  std::size_t consumer_kept = 0;
  int rounds_with_surplus_in_depot = 0;
  std::vector<void*> batch;
  std::mutex mutex;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kBatch; ++i) {
      batch.push_back(arena->allocate(kSize));
      REQUIRE(batch.back() != nullptr);
    }
    const std::size_t cached_before = arena->stats().cached;
    std::thread consumer([&] {
      for (void* p : batch) numarena::deallocate(p);
      std::lock_guard<std::mutex> lock(mutex);
      consumer_kept = std::max(consumer_kept, ThreadKept(arena, before));
    });
    consumer.join();  // its front cache goes back at exit; what it overflowed is in the depot
    if (arena->stats().cached > cached_before) ++rounds_with_surplus_in_depot;
    batch.clear();
  }
  CHECK(consumer_kept <= 16 * kKiB + kJemallocTcacheSlack);
  CHECK(rounds_with_surplus_in_depot == kRounds);
  // The same batch freed by the thread that allocated it still grows its list (measured
  // from an empty depot: KeptAfterBatch counts the thread's caches as allocated bytes
  // outside the shared caches).
  arena->purge();
  CHECK(KeptAfterBatch(arena, {kSize}, kBatch) >= kBatch * kSize);
  arena->purge();
}

TEST_CASE("a list refilled from the depot is not grown by the free that fills it") {
  // A list that runs empty takes a chain from the depot and is full again; the next free
  // overflows it. That is no batch of frees: counted as one, every refill doubled the list,
  // and a thread that allocates about as much as it frees ratcheted up to the growth bound.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 32}}));
  constexpr std::size_t kSize = 256;
  const std::size_t before = arena->stats().allocated;
  // Another thread frees 80000 objects: its list grows to its most (8192 objects) and the
  // rest goes to the depot as chains of 4096, enough for every round below even if each
  // doubled the list.
  std::thread([&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 80000; ++i) blocks.push_back(arena->allocate(kSize));
    for (void* p : blocks) REQUIRE(p != nullptr);
    for (void* p : blocks) numarena::deallocate(p);
  }).join();
  REQUIRE(arena->stats().cached >= 60000 * kSize);
  std::size_t kept = 0;
  std::thread([&] {
    // Each round allocates until the list ran empty and the depot refilled it to its limit,
    // 64 objects (the depot's bytes drop), then frees one object, which overflows the list.
    std::vector<void*> live;
    for (int round = 0; round < 12; ++round) {
      std::size_t depot = arena->stats().cached;
      for (int i = 0; i < 10000; ++i) {
        live.push_back(arena->allocate(kSize));
        const std::size_t now = arena->stats().cached;
        if (now < depot) break;
        depot = now;
      }
      numarena::deallocate(live.back());
      live.pop_back();
    }
    for (void* p : live) REQUIRE(p != nullptr);
    kept = ThreadKept(arena, before + live.size() * kSize);
    for (void* p : live) numarena::deallocate(p);
  }).join();
  CHECK(kept <= 16 * kKiB);
  arena->purge();
}

TEST_CASE("a grown list halves back once allocations come between its frees") {
  // A batch freed together grows the 256 B list to 8192 objects (2 MiB). Then the thread
  // frees two objects for every one it allocates: each overflow came with allocations in
  // between, so the list halves at each until it is back at its start limit (64 objects).
  Arena* arena = Get(Policy::WeightedInterleave({{0, 33}}));
  constexpr std::size_t kSize = 256;
  const std::size_t before = arena->stats().allocated;
  std::size_t grown = 0, after = 0;
  bool failed = false;
  std::thread([&] {
    std::vector<void*> live;
    for (int i = 0; i < 8192; ++i) live.push_back(arena->allocate(kSize));
    for (void* p : live) numarena::deallocate(p);
    live.clear();
    grown = ThreadKept(arena, before);
    for (int i = 0; i < 14000; ++i) live.push_back(arena->allocate(kSize));
    while (live.size() >= 2) {
      numarena::deallocate(live.back());
      live.pop_back();
      numarena::deallocate(live.back());
      live.pop_back();
      live.push_back(arena->allocate(kSize));
      if (live.back() == nullptr) failed = true;
    }
    after = ThreadKept(arena, before + live.size() * kSize);
    for (void* p : live) numarena::deallocate(p);
  }).join();
  CHECK_FALSE(failed);
  CHECK(grown >= 8000 * kSize);
  CHECK(after <= 64 * kSize);
  arena->purge();
}

namespace {
// Allocates four objects of each of `sizes` (large classes; the large cache has four slots
// per class) from `arena`, frees them in that order and returns what the arena's shared caches
// hold then; purges first unless told not to.
std::size_t LargeCachedAfterBatch(Arena* arena, std::vector<std::size_t> sizes, bool purge = true) {
  if (purge) arena->purge();
  std::vector<void*> blocks;
  for (int i = 0; i < 4 * static_cast<int>(sizes.size()); ++i) {
    void* p = arena->allocate(sizes[static_cast<std::size_t>(i / 4)]);
    REQUIRE(p != nullptr);
    blocks.push_back(p);
  }
  for (void* p : blocks) numarena::deallocate(p);
  return arena->stats().cached;
}
}  // namespace

TEST_CASE("with a capacity gate the caches are smaller, and smaller again under pressure") {
  {
    PressureGate gate(false);
    GateScope scope(&gate);
    Arena* arena = Get(Policy::WeightedInterleave({{0, 22}}));
    // Small lists grow by at most 1 MiB; medium lists hold at most 256 KiB together.
    const std::size_t small = KeptAfterBatch(arena, {256, 512, 1024}, 8192);
    CHECK(small >= 1 * kMiB);
    CHECK(small <= 1 * kMiB + 3 * 16 * kKiB + kJemallocTcacheSlack);
    std::size_t depot = 0;
    const std::size_t medium = KeptAfterBatch(arena, {64 * kKiB, 128 * kKiB}, 16, &depot);
    CHECK(medium >= 128 * kKiB);
    CHECK(medium <= 256 * kKiB);
    CHECK(medium + depot == 16 * (64 + 128) * kKiB);  // the rest waits in the depot
    // The depot holds at most 32 MiB with a gate: 48 MiB freed keep at most 33 MiB.
    KeptAfterBatch(arena, {96 * kKiB}, 512, &depot);
    CHECK(depot >= 16 * kMiB);
    CHECK(depot <= 32 * kMiB);
    // The large cache holds at most 64 MiB with a gate: of 4 x 12 MiB and 4 x 14 MiB freed,
    // 4 x 12 MiB and one 14 MiB stay.
    CHECK(LargeCachedAfterBatch(arena, {12 * kMiB, 14 * kMiB}) == (4 * 12 + 14) * kMiB);
  }
  {
    // Ungated, the same batch stays whole (256 MiB per heap); a gate that presses the heap's
    // node empties the cache at its next put and keeps nothing.
    Arena* arena = Get(Policy::WeightedInterleave({{0, 37}}));
    CHECK(LargeCachedAfterBatch(arena, {12 * kMiB, 14 * kMiB}, /*purge=*/false) ==
          4 * (12 + 14) * kMiB);
    PressureGate gate(true);
    GateScope scope(&gate);
    CHECK(LargeCachedAfterBatch(arena, {12 * kMiB}, /*purge=*/false) == 0);
  }
  {
    PressureGate gate(true);
    GateScope scope(&gate);
    Arena* arena = Get(Policy::WeightedInterleave({{0, 23}}));
    // No growth: each small list keeps its start limit (16 KiB).
    CHECK(KeptAfterBatch(arena, {256, 512, 1024}, 8192) <= 3 * 16 * kKiB + kJemallocTcacheSlack);
    std::size_t depot = 0;
    CHECK(KeptAfterBatch(arena, {32 * kKiB, 64 * kKiB}, 16, &depot) <= 64 * kKiB);
    CHECK(depot == 0);  // nothing in the depot while the gate presses the heap's node
    // A medium object larger than the pressed bound is not kept at all.
    CHECK(KeptAfterBatch(arena, {1 * kMiB}, 4, &depot) == 0);
    CHECK(depot == 0);
    CHECK(LargeCachedAfterBatch(arena, {12 * kMiB}) == 0);  // nor a large one
  }
}

namespace {
// AnonHugePages in KiB of the mappings of /proc/self/smaps that overlap [begin, end), -1 when
// the file cannot be read. Only numarena's range: a sanitizer's runtime maps its own memory
// with huge pages at any time.
long AnonHugePagesKiB(std::uintptr_t begin, std::uintptr_t end) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  char line[512];
  long kib = 0;
  bool inside = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, ':') != nullptr &&
        std::strncmp(line, "AnonHugePages:", 14) != 0) {
      inside = lo < end && hi > begin;
    } else if (inside && std::strncmp(line, "AnonHugePages:", 14) == 0) {
      kib += std::strtol(line + 14, nullptr, 10);
    }
  }
  std::fclose(f);
  return kib;
}
}  // namespace

TEST_CASE("a new heap's jemalloc metadata block is not made of huge pages") {
  // jemalloc commits a 2 MiB metadata block per arena and writes a few KiB of it; as a
  // transparent huge page the whole block was resident: 2 MiB of RSS per heap and shard.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 24}}));
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(arena->allocate(256));
  for (void* p : blocks) REQUIRE(p != nullptr);
  // The heap's address space: the 64 GiB granule of its objects.
  constexpr std::uintptr_t kGranule = std::uintptr_t{1} << 36;
  const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(blocks[0]) & ~(kGranule - 1);
  const long huge = AnonHugePagesKiB(begin, begin + kGranule);
  if (huge < 0) {
    WARN("no /proc/self/smaps: nothing to check");
  } else {
    CHECK(huge == 0);
  }
  for (void* p : blocks) numarena::deallocate(p);
}

TEST_CASE("a Local arena's allocations come from the front cache its frees fill") {
  // Local picks the heap of the calling thread's node on each call; once that heap and this
  // thread's front cache for it exist, the object freed last is the next one handed out, as
  // in a Bind arena, instead of every allocation going to jemalloc while the frees pile up
  // in a cache nothing takes from.
  Arena* local = Get(Policy::Local());
  for (std::size_t bytes : {std::size_t{48}, std::size_t{1000}, 4 * kKiB, 64 * kKiB, kMiB}) {
    INFO(bytes << " bytes");
    numarena::deallocate(local->allocate(bytes));  // the node's heap and this thread's cache
    void* p = local->allocate(bytes);
    REQUIRE(p != nullptr);
    CHECK(numarena::node_of(p) == 0);
    numarena::deallocate(p);
    void* q = local->allocate(bytes);
    CHECK(q == p);
    numarena::deallocate(q);
  }
}

TEST_CASE("aligned requests of up to 4 KiB alignment come from the caches, always aligned") {
  // posix_memalign(64) is how PyTorch and most tensor runtimes allocate. A request whose
  // alignment the size class guarantees (64 bytes for every cached size; up to 4 KiB for
  // sizes up to 4 KiB) is served by the caches like a default-aligned one: the object freed
  // last, sized or unsized, is the next one handed out. Larger alignments, and 128 bytes or
  // more above 4 KiB, still go to jemalloc's aligned path; every object is checked.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 31}}));
  Arena* local = Get(Policy::Local());
  std::vector<std::size_t> sizes = {0, 1, 15, 16, 17, 40, 48, 63, 64, 65, 100, 127, 129, 200,
                                    1000, 2047, 2049, 4095, 4096, 4097, 5000, 14337, 96 * kKiB,
                                    kMiB + 1, 1792 * kKiB - 1, 1792 * kKiB, 1792 * kKiB + 1};
  for (Arena* a : {arena, local}) {
    for (std::size_t alignment = 32; alignment <= 8192; alignment *= 2) {
      for (std::size_t size : sizes) {
        INFO("alignment " << alignment << " size " << size << (a == local ? " (Local)" : ""));
        const bool cached = alignment <= 4096 && size <= 1792 * kKiB &&
                            (alignment <= 64 || (size + alignment - 1) / alignment * alignment <=
                                                    4 * kKiB);
        for (int sized = 0; sized < 2; ++sized) {
          auto* p = static_cast<unsigned char*>(a->allocate(size, alignment));
          REQUIRE(p != nullptr);
          REQUIRE(reinterpret_cast<std::uintptr_t>(p) % alignment == 0);
          REQUIRE(numarena::usable_size(p) >= size);
          if (size > 0) std::memset(p, 0x5c, size);
          if (sized) {
            numarena::deallocate(p, size, alignment);
          } else {
            numarena::deallocate(p);
          }
          auto* q = static_cast<unsigned char*>(a->allocate(size, alignment));
          REQUIRE(q != nullptr);
          REQUIRE(reinterpret_cast<std::uintptr_t>(q) % alignment == 0);
          if (cached) CHECK(q == p);
          if (size > 0) std::memset(q, 0x5d, size);
          numarena::deallocate(q, size, alignment);
        }
      }
    }
  }
  // Sizes whose rounding up to the alignment would overflow are refused, not wrapped to a
  // small class.
  for (std::size_t size : {SIZE_MAX, SIZE_MAX - 63, SIZE_MAX / 2 + 1}) {
    INFO("size " << size);
    CHECK(arena->allocate(size, 64) == nullptr);
    CHECK(numarena::last_allocation_error().code() == absl::StatusCode::kInvalidArgument);
  }
  // A default-aligned object of a class that is not 64-aligned (48 bytes) is never handed to
  // a 32-aligned request of that size: the request is served from the 64-byte class.
  std::vector<void*> small;
  for (int i = 0; i < 64; ++i) small.push_back(arena->allocate(48));
  for (void* p : small) numarena::deallocate(p);
  for (int i = 0; i < 64; ++i) {
    void* p = arena->allocate(40, 32);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 32 == 0);
    CHECK(numarena::usable_size(p) >= 64);
    small[i] = p;
  }
  for (void* p : small) numarena::deallocate(p, 40, 32);
  arena->purge();
  local->purge();
}

TEST_CASE("a thread keeps one freed 2-4 MiB object for itself, within the gate's bounds") {
  // Two threads that each free and allocate a 2 MiB buffer met in the heap's shared large
  // cache on every call (two threads had a quarter of one thread's throughput); each thread
  // now keeps one such object, not counted in ArenaStats::cached, given back at purge() and
  // at thread exit.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 34}}));
  arena->purge();
  const std::size_t before = arena->stats().allocated;
  void* p = arena->allocate(3 * kMiB);
  REQUIRE(p != nullptr);
  std::memset(p, 1, 3 * kMiB);
  numarena::deallocate(p);
  CHECK(arena->stats().cached == 0);        // kept by this thread, not the heap
  CHECK(ThreadKept(arena, before) == 3 * kMiB);
  void* other = nullptr;
  std::thread([&] {
    other = arena->allocate(3 * kMiB);  // not this thread's object
    REQUIRE(other != nullptr);
    numarena::deallocate(other);        // kept by that thread, returned when it exits
  }).join();
  CHECK(other != p);
  CHECK(arena->stats().allocated == before + 3 * kMiB);
  CHECK(arena->allocate(3 * kMiB) == p);    // back to the thread that freed it
  // A second object while the thread holds one goes to the heap's shared cache; a sized
  // free takes the same path.
  void* q = arena->allocate(2 * kMiB);
  REQUIRE(q != nullptr);
  numarena::deallocate(p, 3 * kMiB);
  numarena::deallocate(q, 2 * kMiB);
  CHECK(arena->stats().cached == 2 * kMiB);
  CHECK(arena->allocate(3 * kMiB) == p);
  CHECK(arena->allocate(2 * kMiB) == q);
  numarena::deallocate(q);
  // Larger than 4 MiB: the heap's cache.
  void* big = arena->allocate(5 * kMiB);
  REQUIRE(big != nullptr);
  numarena::deallocate(big);
  CHECK(arena->stats().cached == 5 * kMiB);
  arena->purge();                           // this thread's object too
  CHECK(arena->stats().allocated == before + 3 * kMiB);  // p, still live
  CHECK(arena->stats().cached == 0);

  SECTION("with a capacity gate: one object of 2 MiB, none under pressure") {
    PressureGate calm(false);
    numarena::SetCapacityGate(&calm);
    numarena::deallocate(p);                // 3 MiB: larger than a gated cache keeps
    CHECK(arena->stats().cached == 3 * kMiB);
    void* two = arena->allocate(2 * kMiB);
    REQUIRE(two != nullptr);
    numarena::deallocate(two);
    // The 2 MiB allocation missed the large cache, which handed its 3 MiB object back to
    // jemalloc for the allocation to be carved from; the 2 MiB object stayed with the thread.
    CHECK(arena->stats().cached == 0);
    CHECK(ThreadKept(arena, before) == 2 * kMiB);
    arena->purge();
    PressureGate pressed(true);
    numarena::SetCapacityGate(&pressed);
    two = arena->allocate(2 * kMiB);
    REQUIRE(two != nullptr);
    numarena::deallocate(two);
    // Under pressure neither the thread nor the heap's large cache keeps it: back to jemalloc.
    CHECK(arena->stats().cached == 0);
    CHECK(ThreadKept(arena, before) == 0);
    numarena::SetCapacityGate(nullptr);
  }
  SECTION("an exiting thread gives its object back") {
    numarena::deallocate(p);
    std::thread([&] {
      void* mine = arena->allocate(4 * kMiB);
      REQUIRE(mine != nullptr);
      numarena::deallocate(mine);
      // p sits freed in the main thread's cache: counted as in use here.
      CHECK(ThreadKept(arena, before + 3 * kMiB) == 4 * kMiB);
    }).join();
    CHECK(arena->stats().allocated == before + 3 * kMiB);  // only this thread's p
  }
  arena->purge();
  CHECK(arena->stats().allocated == before);
}

TEST_CASE("a larger allocation grows the largest cached block in place") {
  // A loop of random large sizes: the freed 6 MiB block is in the heap's large cache when
  // 12 MiB is asked for. The address space after it is free (the rest of a 32 MiB range the
  // heap has given back), so the block is grown in place: the same address, its pages not
  // sent back to the kernel and faulted in again, only the new 6 MiB committed.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 53}}));  // a heap of its own
  void* range = arena->allocate(32 * kMiB);
  REQUIRE(range != nullptr);
  numarena::deallocate(range);
  arena->purge();  // the 32 MiB are free address space of the heap now
  const std::size_t before = arena->stats().resident;
  auto* small = static_cast<unsigned char*>(arena->allocate(6 * kMiB));
  REQUIRE(small != nullptr);
  std::memset(small, 0x11, 6 * kMiB);
  numarena::deallocate(small);  // into the large cache
  auto* large = static_cast<unsigned char*>(arena->allocate(12 * kMiB));
  REQUIRE(large != nullptr);
  CHECK(large == small);
  CHECK(numarena::usable_size(large) >= 12 * kMiB);
  const numarena::testing::ResidentPages kept = numarena::testing::CountResident(large, 6 * kMiB);
  INFO(kept.resident << " of the old block's " << kept.pages << " pages are resident");
  REQUIRE(kept.pages == 6 * kMiB / static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  CHECK(kept.resident == kept.pages);
  CHECK(large[0] == 0x11);  // kept, not purged (a purged page reads back as zero)
  CHECK(large[6 * kMiB - 1] == 0x11);
  std::memset(large, 0x22, 12 * kMiB);
  // The class map has its new class: freed without a size, it is kept as a 12 MiB block (the
  // heap's shared caches grow by 12 MiB, not by the old 6), and a 12 MiB request takes it back.
  const std::size_t cached = arena->stats().cached;
  numarena::deallocate(large);
  CHECK(arena->stats().cached == cached + 12 * kMiB);
  void* again = arena->allocate(12 * kMiB);
  CHECK(again == large);
  numarena::deallocate(again);
  arena->purge();
  CHECK(arena->stats().resident <= before + 2 * kMiB);
}

namespace {
// A heap of its own in base pages: with huge pages a fresh block faults once per 2 MiB, and
// the faults a copy takes would not show.
Arena* BasePagesArena(int shards) {
  numarena::ArenaOptions options;
  options.transparent_huge_pages = false;
  options.shards = shards;  // a shard count no other test of this kind uses
  auto arena = Arena::ForPolicy(Policy::Bind(0), options);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  return *arena;
}


// A block of `bytes` and a live block of the same size right after it, so that the first
// cannot grow to `grow_to` where it lies; the neighbour is written with 0x12.
struct Blocked {
  unsigned char* block;
  unsigned char* neighbour;
};
Blocked BlockedBlock(Arena* arena, std::size_t bytes, std::size_t grow_to) {
  auto* block = static_cast<unsigned char*>(arena->allocate(bytes));
  auto* neighbour = static_cast<unsigned char*>(arena->allocate(bytes));
  REQUIRE(block != nullptr);
  REQUIRE(neighbour != nullptr);
  REQUIRE(neighbour > block);
  REQUIRE(static_cast<std::size_t>(neighbour - block) < grow_to);  // in the way
  std::memset(neighbour, 0x12, bytes);
  return {block, neighbour};
}
}  // namespace

TEST_CASE("a cached block that cannot grow far enough first grows over its freed neighbour") {
  // A loop of random large sizes: jemalloc carved a 6 MiB allocation from a freed 12 MiB
  // block, whose other 6 MiB (freed, still resident) follow it among jemalloc's dirty extents.
  // When 16 MiB is asked for, the 6 MiB block cannot grow that far (a live block follows the
  // 12 MiB), so it grows over those 6 MiB first and all 12 MiB of pages move to the new block;
  // before, only its own 6 MiB moved and the rest was purged and faulted in again (1,400
  // pages of the random 5-25 MiB loop's 7,800; tcmalloc 7,200).
  Arena* arena = BasePagesArena(8);
  auto [block, neighbour] = BlockedBlock(arena, 12 * kMiB, 16 * kMiB);
  std::memset(block, 0x11, 12 * kMiB);
  numarena::deallocate(block);  // into the large cache
  auto* half = static_cast<unsigned char*>(arena->allocate(6 * kMiB));
  REQUIRE(half == block);  // carved from the cached block: its first 6 MiB
  std::memset(half, 0x44, 6 * kMiB);
  numarena::deallocate(half);
  auto* large = static_cast<unsigned char*>(arena->allocate(16 * kMiB));
  REQUIRE(large != nullptr);
  CHECK(large != block);
  CHECK(numarena::usable_size(large) >= 16 * kMiB);
  const numarena::testing::ResidentPages moved = numarena::testing::CountResident(large, 12 * kMiB);
  INFO(moved.resident << " of the new block's first " << moved.pages << " pages are resident");
  CHECK(moved.resident == moved.pages);
  CHECK(large[0] == 0x44);                // the 6 MiB block's own bytes
  CHECK(large[8 * kMiB] == 0x11);         // the neighbour's, moved with them
  CHECK(numarena::testing::CountResident(block, 12 * kMiB).resident == 0);
  std::memset(large, 0x22, 16 * kMiB);
  CHECK(neighbour[0] == 0x12);
  CHECK(neighbour[12 * kMiB - 1] == 0x12);
  numarena::deallocate(large);
  numarena::deallocate(neighbour);
  arena->purge();
}

TEST_CASE("a larger allocation takes the pages of a cached block that cannot grow") {
  // The freed 6 MiB block is in the heap's large cache when 13 MiB is asked for, but the
  // block after it is live, so it cannot grow in place. Its resident pages move to the front
  // of the new block (mremap) instead of being purged while the new block is faulted in: a
  // loop of random 5-25 MiB blocks faulted in 17,000 pages where tcmalloc took 7,300.
  Arena* arena = BasePagesArena(7);
  auto [block, neighbour] = BlockedBlock(arena, 6 * kMiB, 13 * kMiB);
  std::memset(block, 0x11, 6 * kMiB);
  numarena::deallocate(block);  // into the large cache
  auto* large = static_cast<unsigned char*>(arena->allocate(13 * kMiB));
  REQUIRE(large != nullptr);
  CHECK(large != block);
  CHECK(numarena::usable_size(large) >= 13 * kMiB);
  // Resident before anything touches them: the old block's pages (a fresh block's would
  // fault in one by one). Not a count of page faults: a sanitizer's shadow memory faults too.
  const numarena::testing::ResidentPages kept = numarena::testing::CountResident(large, 6 * kMiB);
  INFO(kept.resident << " of the new block's first " << kept.pages << " pages are resident");
  CHECK(kept.resident == kept.pages);
  CHECK(numarena::testing::CountResident(large + 6 * kMiB, 6 * kMiB).resident == 0);
  // The old range is a span of the heap again: purged, and usable by the next allocation.
  CHECK(numarena::testing::CountResident(block, 6 * kMiB).resident == 0);
  std::memset(large, 0x22, 13 * kMiB);
  CHECK(neighbour[0] == 0x12);
  CHECK(neighbour[6 * kMiB - 1] == 0x12);
  void* again = arena->allocate(6 * kMiB);
  REQUIRE(again != nullptr);
  std::memset(again, 0x33, 6 * kMiB);
  CHECK(large[0] == 0x22);
  numarena::deallocate(again);
  numarena::deallocate(large);
  numarena::deallocate(neighbour);
  arena->purge();
}

TEST_CASE("reallocate moves a large block that cannot grow without copying its pages") {
  // As glibc's realloc moves an mmap()ed block: mremap, so no page of the old block is
  // faulted in again in the new one, and every byte arrives.
  Arena* arena = BasePagesArena(5);
  auto [block, neighbour] = BlockedBlock(arena, 4 * kMiB, 9 * kMiB);
  for (std::size_t i = 0; i < 4 * kMiB; ++i)
    block[i] = static_cast<unsigned char>(i * 7 + (i >> 12));
  auto* grown = static_cast<unsigned char*>(arena->reallocate(block, 9 * kMiB));
  REQUIRE(grown != nullptr);
  CHECK(grown != block);
  // The pages moved: none is left in the old block (freed, and kept by the caches: a copy
  // would leave all 1024 there), every one is in the new block.
  CHECK(numarena::testing::CountResident(block, 4 * kMiB).resident == 0);
  const numarena::testing::ResidentPages moved = numarena::testing::CountResident(grown, 4 * kMiB);
  CHECK(moved.resident == moved.pages);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < 4 * kMiB; ++i) {
    wrong += grown[i] != static_cast<unsigned char>(i * 7 + (i >> 12));
  }
  CHECK(wrong == 0);
  std::memset(grown + 4 * kMiB, 0x44, 5 * kMiB);
  CHECK(neighbour[4 * kMiB - 1] == 0x12);
  numarena::deallocate(grown);
  numarena::deallocate(neighbour);
  arena->purge();
}

TEST_CASE("fork() while other threads move large blocks' pages leaves no hole in the child") {
  // A move leaves its source range unmapped for a moment (mremap, then a fresh mapping):
  // a fork() in that moment would give the child a hole inside a live extent. The move holds
  // the lock fork()'s prepare takes whole, so the child's heap is whole: every large block it
  // carves is mapped and writable, and so is the block a worker was moving. (The moment is a
  // few microseconds: without the lock this test fails only now and then.)
  Arena* arena = BasePagesArena(3);
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0};
  // Each worker's block being moved, for the child to write: in the child it belongs to a
  // thread that is gone, so only this makes the child touch the range a move empties.
  std::atomic<unsigned char*> moving[2] = {nullptr, nullptr};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      while (!stop.load()) {
        auto* block = static_cast<unsigned char*>(arena->allocate(2 * kMiB));
        auto* neighbour = static_cast<unsigned char*>(arena->allocate(2 * kMiB));
        if (block == nullptr || neighbour == nullptr) {
          failed.fetch_add(1);
          break;
        }
        std::memset(block, 0x61, 2 * kMiB);
        moving[t].store(block);
        void* grown = arena->reallocate(block, 5 * kMiB);
        moving[t].store(nullptr);
        if (grown == nullptr) {
          failed.fetch_add(1);
          break;
        }
        numarena::deallocate(grown);
        numarena::deallocate(neighbour);
      }
    });
  }
  for (int round = 0; round < 40; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The blocks the workers were moving, and large blocks of every size they used, written
      // whole: a hole is a SIGSEGV.
      for (std::atomic<unsigned char*>& block : moving) {
        if (unsigned char* p = block.load()) std::memset(p, 0x63, 2 * kMiB);
      }
      std::vector<void*> blocks;
      for (int i = 0; i < 24; ++i) {
        const std::size_t size = (2 + static_cast<std::size_t>(i % 4)) * kMiB;
        void* p = arena->allocate(size);
        if (p == nullptr) _exit(1);
        std::memset(p, 0x62, size);
        blocks.push_back(p);
      }
      for (void* p : blocks) numarena::deallocate(p);
      _exit(0);
    }
    CheckChildExitedZero(child, round);
  }
  stop.store(true);
  for (std::thread& w : workers) w.join();
  CHECK(failed.load() == 0);
  arena->purge();
}

TEST_CASE("reallocate grows a large block where it lies when the space after it is free") {
  // Nothing copied and no second copy's pages beside the old ones: the block keeps its
  // address and its resident pages, and only the new part is committed. Freed without a size,
  // it is kept as a block of its new class.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 57}}));  // a heap of its own
  void* range = arena->allocate(32 * kMiB);
  REQUIRE(range != nullptr);
  numarena::deallocate(range);
  arena->purge();  // the 32 MiB are free address space of the heap now
  auto* block = static_cast<unsigned char*>(arena->allocate(4 * kMiB));
  REQUIRE(block != nullptr);
  std::memset(block, 0x33, 4 * kMiB);
  const std::size_t committed = arena->stats().committed;
  auto* grown = static_cast<unsigned char*>(arena->reallocate(block, 9 * kMiB));
  REQUIRE(grown != nullptr);
  CHECK(grown == block);
  const std::size_t usable = numarena::usable_size(grown);
  CHECK(usable >= 9 * kMiB);
  CHECK(grown[0] == 0x33);
  CHECK(grown[4 * kMiB - 1] == 0x33);
  const numarena::testing::ResidentPages kept = numarena::testing::CountResident(grown, 4 * kMiB);
  CHECK(kept.resident == kept.pages);
  // Only the growth was committed, not a whole 9 MiB copy beside the old block.
  CHECK(arena->stats().committed <= committed + (usable - 4 * kMiB) + 2 * kMiB);
  std::memset(grown, 0x44, 9 * kMiB);
  const std::size_t cached = arena->stats().cached;
  numarena::deallocate(grown);
  CHECK(arena->stats().cached == cached + usable);
  void* again = arena->allocate(9 * kMiB);
  CHECK(again == grown);
  numarena::deallocate(again);
  arena->purge();
}

TEST_CASE("reallocate never grows a block below 2 MiB alignment into a large one in place") {
  // A 1.9 MiB request gets the 2 MiB class at its own (small) alignment. Grown in place to
  // 3 MiB it would be a large block off the 2 MiB alignment every allocation of 2 MiB or
  // more has: it must move.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 58}}));  // a heap of its own
  void* range = arena->allocate(32 * kMiB);
  REQUIRE(range != nullptr);
  numarena::deallocate(range);
  arena->purge();
  std::vector<void*> held;
  void* block = nullptr;
  for (int i = 0; i < 8 && block == nullptr; ++i) {  // one off the 2 MiB grid
    void* p = arena->allocate(1900 * 1024);
    REQUIRE(p != nullptr);
    if (reinterpret_cast<std::uintptr_t>(p) % (2 * kMiB) != 0) block = p; else held.push_back(p);
  }
  REQUIRE(block != nullptr);
  static_cast<unsigned char*>(block)[0] = 0x5c;
  auto* grown = static_cast<unsigned char*>(arena->reallocate(block, 3 * kMiB));
  REQUIRE(grown != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(grown) % (2 * kMiB) == 0);
  CHECK(grown[0] == 0x5c);
  numarena::deallocate(grown);
  for (void* p : held) numarena::deallocate(p);
  arena->purge();
}

TEST_CASE("a block grown in place keeps its class's rounding out of huge pages") {
  // 8 MiB + 1 byte (a Python bytearray) takes a 10 MiB class. Grown from a cached 6 MiB block,
  // the commit of the new part starts where the block ended; huge pages must still stop where
  // the request does, or its last byte faults in the class's last 2 MiB whole.
  std::string modes;
  if (!numarena::testing::HugePagesOnRequest(&modes)) {
    WARN("skipped: transparent huge pages are off (" << modes << ")");
    return;
  }
  numarena::ArenaOptions options;
  options.shards = 6;  // a heap of its own (bind heaps advise huge pages; interleaved do not)
  auto made = Arena::ForPolicy(Policy::Bind(0), options);
  REQUIRE(made.ok());
  Arena* arena = *made;
  void* range = arena->allocate(32 * kMiB);
  REQUIRE(range != nullptr);
  numarena::deallocate(range);
  arena->purge();
  auto* small = static_cast<unsigned char*>(arena->allocate(6 * kMiB));
  REQUIRE(small != nullptr);
  std::memset(small, 0x11, 6 * kMiB);
  numarena::deallocate(small);
  const std::size_t request = 8 * kMiB + 1;
  auto* p = static_cast<unsigned char*>(arena->allocate(request));
  REQUIRE(p == small);  // grown in place
  const std::size_t usable = numarena::usable_size(p);
  REQUIRE(usable >= 10 * kMiB);
  std::memset(p, 0x5a, request);
  const numarena::testing::ResidentPages past =
      numarena::testing::CountResidentPastRequest(p, request, usable);
  INFO(past.resident << " of the " << past.pages << " pages past the request are resident");
  REQUIRE(past.pages > 0);
  CHECK(past.resident == 0);
  numarena::deallocate(p);
  arena->purge();
}

TEST_CASE("a large allocation the cached blocks cannot hold sends them back to the kernel first") {
  // A loop of random 5-25 MiB blocks held about 2.3 times its live block resident: each freed
  // block went back to jemalloc at the next miss, and a larger request could not be carved
  // from it (freed extents that are not neighbours do not merge), so the new block's pages
  // came on top. Now a miss whose request is larger than every cached block grows the largest
  // in place where the address space after it is free (the test above), and otherwise purges
  // the heap first (here); one that a cached block can hold leaves it for jemalloc to carve
  // from.
  LimitGate gate(512 * kMiB);
  GateScope scope(&gate);
  Arena* arena = Get(Policy::WeightedInterleave({{0, 45}}));

  auto* small = static_cast<unsigned char*>(arena->allocate(6 * kMiB));
  REQUIRE(small != nullptr);
  std::memset(small, 1, 6 * kMiB);
  // A block after it, live throughout, within the 12 MiB it would need to grow in place: this
  // is the purge path (jemalloc carves the heap's first blocks one after another).
  auto* fence = static_cast<unsigned char*>(arena->allocate(2 * kMiB));
  REQUIRE(fence != nullptr);
  REQUIRE(fence > small);
  REQUIRE(fence < small + 12 * kMiB);
  numarena::deallocate(small);  // kept by the large cache, still committed and charged
  const std::size_t with_small = gate.used();
  void* large = arena->allocate(12 * kMiB);
  REQUIRE(large != nullptr);
  CHECK(large != small);
  std::memset(large, 2, 12 * kMiB);
  // The 6 MiB block's pages went back before the 12 MiB block's were committed: the charge
  // grew by about 12 - 6 MiB, not by 12 MiB.
  CHECK(gate.used() <= with_small + 8 * kMiB);
  CHECK(gate.used() + 4 * kMiB >= with_small + 6 * kMiB);
  numarena::deallocate(fence);

  numarena::deallocate(large);  // cached
  const std::size_t with_large = gate.used();
  void* carved = arena->allocate(5 * kMiB);
  REQUIRE(carved != nullptr);
  std::memset(carved, 3, 5 * kMiB);
  // The 12 MiB block can hold it: not purged, and nothing new committed.
  CHECK(gate.used() >= with_large);
  CHECK(gate.used() <= with_large + 2 * kMiB);
  numarena::deallocate(carved);
  arena->purge();
}
