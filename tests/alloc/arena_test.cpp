// Arenas on the host (one node): creation and lookup, every size class from 8 B to 64 MiB,
// alignment, bad input, pointer queries (node_of, usable_size, owns), frees from other
// threads, per-(thread, arena) caches that never hand one arena's objects to another,
// thread-cache cleanup at thread exit, the capacity gate (refusal, priorities, release on
// purge), Preferred's error when no node has room, Local, and statistics.
#include "numarena/arena.hpp"

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "alloc/jemalloc_heap.hpp"
#include "limit_gate.hpp"
#include "resident_pages.hpp"
#include "numarena/budget.hpp"
#include "numarena/page_nodes.hpp"
#include "os/os.hpp"

namespace {

using numarena_test::GateScope;
using numarena_test::LimitGate;

using numarena::Arena;
using numarena::Policy;
using numarena::Priority;

constexpr std::size_t kMiB = std::size_t{1} << 20;

Arena* Get(const Policy& policy) {
  auto arena = Arena::ForPolicy(policy);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  return *arena;
}

// The kernel's THPeligible for the mapping that holds `address` (/proc/self/smaps): 1 when
// the range may get transparent huge pages; -1 when no mapping holds it.
int ThpEligible(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(':') > 8) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::atoi(line.c_str() + 12);
    }
  }
  return -1;
}

}  // namespace

TEST_CASE("ForNode gives one arena per node, created once") {
  auto a = Arena::ForNode(0);
  REQUIRE(a.ok());
  auto b = Arena::ForNode(0);
  REQUIRE(b.ok());
  CHECK(*a == *b);
  CHECK((*a)->policy() == Policy::Bind(0));
  CHECK(*Arena::ForPolicy(Policy::Bind(0)) == *a);
  CHECK(*Arena::ForPolicy(Policy::Bind(0, numarena::BindMode::kAdvisory)) != *a);
}

TEST_CASE("bad arena requests name the problem") {
  auto unknown = Arena::ForNode(77);
  REQUIRE(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(unknown.status().message()), Catch::Contains("node 77"));
  CHECK(Arena::ForPolicy(Policy::Interleave({})).status().code() ==
        absl::StatusCode::kInvalidArgument);
  numarena::ArenaOptions odd;
  odd.hugetlb_page_bytes = 12345;
  auto bad = Arena::ForPolicy(Policy::Bind(0), odd);
  REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("hugetlb_page_bytes"));
}

TEST_CASE("every size from 8 B to 64 MiB is writable, owned and resident on the node") {
  Arena* arena = Get(Policy::Bind(0));
  for (std::size_t size : {std::size_t{8}, std::size_t{64}, std::size_t{4096},
                           std::size_t{64} << 10, 2 * kMiB, 64 * kMiB}) {
    INFO("size " << size);
    void* p = arena->allocate(size);
    REQUIRE(p != nullptr);
    std::memset(p, 0x5a, size);
    CHECK(numarena::owns(p));
    CHECK(numarena::node_of(p) == 0);
    CHECK(numarena::usable_size(p) >= size);
    if (size >= 2 * kMiB) CHECK(reinterpret_cast<std::uintptr_t>(p) % (2 * kMiB) == 0);
    auto counts = numarena::page_nodes(p, size);
    REQUIRE(counts.ok());
    CHECK(counts->on(0) == counts->total_pages);
    numarena::deallocate(p);
  }
}

TEST_CASE("alignment is honoured and bad alignment is InvalidArgument") {
  Arena* arena = Get(Policy::Bind(0));
  for (std::size_t alignment : {std::size_t{32}, std::size_t{4096}, std::size_t{1} << 16}) {
    void* p = arena->allocate(100, alignment);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % alignment == 0);
    arena->deallocate(p, 100, alignment);
  }
  CHECK(arena->allocate(64, 48) == nullptr);
  auto error = numarena::last_allocation_error();
  CHECK(error.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(error.message()), Catch::Contains("alignment 48"));
  auto result = arena->try_allocate(64, 3);
  CHECK(result.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("size 0 and sized frees") {
  Arena* arena = Get(Policy::Bind(0));
  void* a = arena->allocate(0);
  void* b = arena->allocate(0);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(a != b);
  numarena::deallocate(a, 0);
  numarena::deallocate(b);
  for (std::size_t size : {std::size_t{24}, std::size_t{5000}, 3 * kMiB}) {
    void* p = arena->allocate(size);
    REQUIRE(p != nullptr);
    numarena::deallocate(p, size);
  }
  numarena::deallocate(nullptr);
  numarena::deallocate(nullptr, 16);
}

TEST_CASE("pointer queries on foreign pointers") {
  void* foreign = std::malloc(64);
  CHECK_FALSE(numarena::owns(foreign));
  CHECK(numarena::node_of(foreign) == numarena::kNodeNone);
  CHECK(numarena::usable_size(foreign) == 0);
  CHECK(numarena::node_of(nullptr) == numarena::kNodeNone);
  std::free(foreign);
}

TEST_CASE("interleaved and multi-node arenas report kNodeMixed") {
  Arena* interleave = Get(Policy::Interleave({0}));
  void* p = interleave->allocate(4096);
  REQUIRE(p != nullptr);
  CHECK(numarena::node_of(p) == numarena::kNodeMixed);
  numarena::deallocate(p);
  Arena* weighted = Get(Policy::WeightedInterleave({{0, 1}}));
  void* q = weighted->allocate(3 * kMiB);
  REQUIRE(q != nullptr);
  std::memset(q, 1, 3 * kMiB);
  CHECK(numarena::node_of(q) == numarena::kNodeMixed);
  numarena::deallocate(q);
}

TEST_CASE("objects freed into one arena are never handed out by another") {
  Arena* a = Get(Policy::Bind(0));
  Arena* b = Get(Policy::Bind(0, numarena::BindMode::kAdvisory));
  for (std::size_t size :
       {std::size_t{8}, std::size_t{64}, std::size_t{512}, std::size_t{4096}, std::size_t{20000}}) {
    std::vector<void*> from_a;
    for (int i = 0; i < 200; ++i) from_a.push_back(a->allocate(size));
    int heap_a = numarena::arena_internal::HeapOf(from_a[0]);
    std::set<void*> freed(from_a.begin(), from_a.end());
    for (void* p : from_a) numarena::deallocate(p);
    for (int i = 0; i < 200; ++i) {
      void* p = b->allocate(size);
      REQUIRE(p != nullptr);
      CHECK(freed.count(p) == 0);
      CHECK(numarena::arena_internal::HeapOf(p) != heap_a);
      numarena::deallocate(p);
    }
  }
}

TEST_CASE("frees from other threads, two threads across arenas") {
  Arena* arenas[] = {Get(Policy::Bind(0)), Get(Policy::Interleave({0})), Get(Policy::Local())};
  std::mutex mutex;
  std::deque<std::pair<void*, std::size_t>> handoff;
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};  // Catch assertions are not thread-safe: count, check after
  auto producer = [&](int seed) {
    for (int i = 0; i < 20000; ++i) {
      std::size_t size = 8u << ((i + seed) % 12);  // 8 B .. 16 KiB
      Arena* arena = arenas[(i + seed) % 3];
      auto* p = static_cast<unsigned char*>(arena->allocate(size));
      if (p == nullptr) {
        ++failures;
        continue;
      }
      p[0] = static_cast<unsigned char>(i);
      p[size - 1] = static_cast<unsigned char>(i);
      if (i % 2 == 0) {
        numarena::deallocate(p, size);  // own free
      } else {
        std::lock_guard<std::mutex> lock(mutex);
        handoff.emplace_back(p, size);
      }
    }
  };
  auto consumer = [&] {
    for (;;) {
      std::pair<void*, std::size_t> item{nullptr, 0};
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!handoff.empty()) {
          item = handoff.front();
          handoff.pop_front();
        }
      }
      if (item.first == nullptr) {
        if (done.load()) {
          std::lock_guard<std::mutex> lock(mutex);
          if (handoff.empty()) return;
          continue;
        }
        std::this_thread::yield();
        continue;
      }
      auto* p = static_cast<unsigned char*>(item.first);
      if (p[0] != p[item.second - 1]) ++failures;
      numarena::deallocate(p);
    }
  };
  std::thread t1(producer, 0), t2(producer, 1), c(consumer);
  t1.join();
  t2.join();
  done.store(true);
  c.join();
  CHECK(handoff.empty());
  CHECK(failures.load() == 0);
}

TEST_CASE("thread caches are destroyed when threads exit") {
  // Each thread's caches for a heap: its front cache, or in checked mode (no front cache) an
  // explicit jemalloc thread cache, of which jemalloc has about 4k; 2,500 threads x 2 arenas
  // would exhaust them, or pile up front caches, if exiting threads leaked theirs.
  Arena* a = Get(Policy::Bind(0));
  Arena* b = Get(Policy::Interleave({0}));
  int heap_a = numarena::arena_internal::HeapOf(a->allocate(8));
  const int front_caches_before = numarena::HeapById(heap_a)->front_caches.load();
  std::atomic<int> uncached{0};
  for (int t = 0; t < 2500; ++t) {
    std::thread thread([&] {
      void* p = a->allocate(32);
      void* q = b->allocate(32);
      int flags = numarena::ThreadFlags(heap_a);  // in checked mode too
      const bool has_cache = numarena::arena_internal::front_caches[heap_a] != nullptr ||
                             numarena::arena_internal::TcacheIdOf(flags) >= 0;
      if (!has_cache) ++uncached;
      numarena::deallocate(p);
      numarena::deallocate(q);
    });
    thread.join();
  }
  CHECK(uncached.load() == 0);
  CHECK(numarena::HeapById(heap_a)->front_caches.load() == front_caches_before);
}

TEST_CASE("the front cache never hands out an object smaller than asked") {
  // Every request size up to the front cache's limit, freed sized and unsized, then asked for
  // again at every size: a list that mixed size classes would return too small an object.
  Arena* arena = Get(Policy::Bind(0));
  for (int round = 0; round < 2; ++round) {
    std::vector<std::pair<void*, std::size_t>> live;
    for (std::size_t size = 1; size <= numarena::arena_internal::kFrontMaxSize + 64; ++size) {
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
    for (std::size_t size = numarena::arena_internal::kFrontMaxSize + 64; size >= 1; --size) {
      auto* p = static_cast<unsigned char*>(arena->allocate(size));
      REQUIRE(p != nullptr);
      INFO("size " << size << " usable " << numarena::usable_size(p));
      REQUIRE(numarena::usable_size(p) >= size);
      std::memset(p, 0xA5, size);
      numarena::deallocate(p, size);
    }
  }
}

TEST_CASE("a full front cache list hands objects back and keeps working") {
  Arena* arena = Get(Policy::WeightedInterleave({{0, 5}}));
  std::vector<void*> blocks;
  for (int i = 0; i < 5000; ++i) blocks.push_back(arena->allocate(48));
  std::set<void*> distinct(blocks.begin(), blocks.end());
  CHECK(distinct.size() == blocks.size());
  for (void* p : blocks) numarena::deallocate(p);  // overflows its list many times
  blocks.clear();
  for (int i = 0; i < 5000; ++i) blocks.push_back(arena->allocate(48));
  distinct = std::set<void*>(blocks.begin(), blocks.end());
  CHECK(distinct.size() == blocks.size());
  for (void* p : blocks) numarena::deallocate(p, 48);
}

TEST_CASE("purge and thread exit return front-cached objects to jemalloc") {
  // Objects in a front cache count as allocated until they go back to jemalloc; purge() must
  // return this thread's, and a thread's exit all of its own.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 7}}));
  arena->purge();
  std::size_t baseline = arena->stats().allocated;
  for (std::size_t size : {std::size_t{16}, std::size_t{256}, std::size_t{4096}}) {
    void* p = arena->allocate(size);
    void* q = arena->allocate(size);
    numarena::deallocate(p);
    numarena::deallocate(q, size);
  }
  CHECK(arena->stats().allocated > baseline);
  arena->purge();
  CHECK(arena->stats().allocated == baseline);

  std::thread worker([&] {
    for (int i = 0; i < 100; ++i) {
      void* p = arena->allocate(64 + 64 * (i % 8));
      numarena::deallocate(p);
    }
  });
  worker.join();
  CHECK(arena->stats().allocated == baseline);
}

Arena* WithShards(const Policy& policy, int shards) {
  numarena::ArenaOptions options;
  options.shards = shards;
  auto arena = Arena::ForPolicy(policy, options);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  return *arena;
}

TEST_CASE("live threads get their own jemalloc arena shard while the arena has shards for it") {
  // Large allocations take their jemalloc arena's lock: two busy threads on an arena with two
  // shards must not share one. Both threads stay alive until both have been assigned.
  Arena* arena = WithShards(Policy::WeightedInterleave({{0, 9}}), 2);
  int heap = numarena::arena_internal::HeapOf(arena->allocate(64));
  std::atomic<int> assigned{0};
  int jemalloc_arena[2] = {-1, -1};
  auto worker = [&](int i) {
    void* p = arena->allocate(std::size_t{1} << 20);  // large: served by the shard itself
    jemalloc_arena[i] = numarena::arena_internal::ArenaIndexOf(numarena::ThreadFlags(heap));
    assigned.fetch_add(1);
    while (assigned.load() < 2) std::this_thread::yield();
    numarena::deallocate(p);
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  CHECK(jemalloc_arena[0] >= 0);
  CHECK(jemalloc_arena[1] >= 0);
  CHECK(jemalloc_arena[0] != jemalloc_arena[1]);
  CHECK(arena->stats().jemalloc_arenas == 2);
}

TEST_CASE("an arena has one shard per 4 CPUs by default, and the shards option is checked") {
  // Default: threads beyond the shard count share; here every live thread joins a shard. The
  // CPUs are those the process may run on (os::AllowedCpuCount), not every online one.
  Arena* arena = Get(Policy::WeightedInterleave({{0, 17}}));
  const int heap = numarena::arena_internal::HeapOf(arena->allocate(64));
  const unsigned cpus = numarena::os::AllowedCpuCount();
  const int expected = std::clamp<int>(static_cast<int>(cpus / 4), 1,
                                       numarena::ArenaOptions::kMaxShards);
  CHECK(numarena::DefaultShardCount(cpus) == expected);
  constexpr int kThreads = 12;
  std::atomic<int> assigned{0};
  std::set<int> seen;
  std::mutex seen_mutex;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      numarena::deallocate(arena->allocate(std::size_t{1} << 20));
      {
        std::lock_guard<std::mutex> lock(seen_mutex);
        seen.insert(numarena::arena_internal::ArenaIndexOf(numarena::ThreadFlags(heap)));
      }
      assigned.fetch_add(1);
      while (assigned.load() < kThreads) std::this_thread::yield();
    });
  }
  for (auto& t : threads) t.join();
  CHECK(static_cast<int>(seen.size()) == expected);
  CHECK(arena->stats().jemalloc_arenas == expected);
  // The option keys the arena: the same policy with 3 shards is another arena.
  Arena* three = WithShards(Policy::WeightedInterleave({{0, 17}}), 3);
  CHECK(three != arena);
  for (int shards : {-1, numarena::ArenaOptions::kMaxShards + 1}) {
    numarena::ArenaOptions options;
    options.shards = shards;
    auto refused = Arena::ForPolicy(Policy::Bind(0), options);
    CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(refused.status().message()), Catch::Contains("shards"));
  }
}

TEST_CASE("the capacity gate refuses, is charged by priority and released on purge") {
  Arena* arena = Get(Policy::Bind({0}, numarena::BindMode::kAdvisory));  // fresh heap? shared ok
  Arena* fresh = Get(Policy::WeightedInterleave({{0, 2}}));
  (void)arena;
  LimitGate gate(96 * kMiB);
  GateScope scope(&gate);
  std::vector<void*> blocks;
  {
    numarena::PriorityScope high(Priority::kHigh);
    for (int i = 0; i < 10; ++i) {
      void* p = fresh->allocate(16 * kMiB);
      if (p == nullptr) break;
      blocks.push_back(p);
    }
  }
  CHECK(blocks.size() >= 4);
  CHECK(blocks.size() < 10);
  auto error = numarena::last_allocation_error();
  CHECK(error.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(error.message()), Catch::Contains("capacity gate refused"));
  CHECK_THAT(std::string(error.message()), Catch::Contains("limit gate"));
  CHECK(gate.by(Priority::kHigh) >= static_cast<long long>(blocks.size() * 16 * kMiB));
  auto stats = fresh->stats();
  CHECK(stats.refusals >= 1);
  CHECK(stats.committed >= blocks.size() * 16 * kMiB);
  // try_allocate reports the same reason.
  auto more = fresh->try_allocate(64 * kMiB);
  CHECK(more.status().code() == absl::StatusCode::kResourceExhausted);
  // Freed and purged from another thread: the high-priority charges come back.
  std::thread other([&] {
    for (void* p : blocks) numarena::deallocate(p);
  });
  other.join();
  fresh->purge();
  CHECK(gate.by(Priority::kHigh) < static_cast<long long>(4 * kMiB));
  // What stays committed is jemalloc's metadata: one 2 MiB base block per jemalloc arena
  // (the heap's first, plus the shard the other thread was assigned), far below one block,
  // numarena's page tables for those blocks (a few pages), and the slab page that holds
  // this thread's front cache, which lives in the heap.
  auto after = fresh->stats();
  INFO("committed " << after.committed << " in " << after.jemalloc_arenas
                    << " jemalloc arenas, of which page tables " << after.tables);
  CHECK(after.committed <=
        static_cast<std::size_t>(after.jemalloc_arenas) * 2 * kMiB + after.tables + 16 * 1024);
  CHECK(after.tables <= 64 * 1024);
}

TEST_CASE("a large request rounded up to its class leaves the rounding out of huge pages") {
  // 8 MiB + 1 byte takes a 10 MiB class. Written in full, the request must not make the
  // class's last 2 MiB resident, which a transparent huge page over it would (every page of
  // that 2 MiB would count for the request's last byte). THP must be on for madvise() ranges,
  // else base pages hide the difference.
  std::string modes;
  if (!numarena::testing::HugePagesOnRequest(&modes)) {
    WARN("skipped: transparent huge pages are off (" << modes << ")");
    return;
  }
  // A heap of its own (a shard count no other test uses), so its large class is carved fresh.
  Arena* arena = WithShards(Policy::Bind(0), 7);
  const std::size_t request = 8 * kMiB + 1;
  auto* p = static_cast<unsigned char*>(arena->allocate(request));
  REQUIRE(p != nullptr);
  const std::size_t usable = numarena::usable_size(p);
  REQUIRE(usable >= 10 * kMiB);
  std::memset(p, 0x5a, request);
  const numarena::testing::ResidentPages past =
      numarena::testing::CountResidentPastRequest(p, request, usable);
  INFO(past.resident << " of the " << past.pages << " pages past the request are resident");
  REQUIRE(past.pages > 0);
  CHECK(past.resident == 0);
  const long page = sysconf(_SC_PAGESIZE);
  CHECK(ThpEligible(p + request + page) == 0);
  // A request that goes a quarter into its last huge page keeps huge pages to its end: its
  // last 2 MiB faulted in 4 KiB at a time would cost more than the page.
  auto* deeper = static_cast<unsigned char*>(arena->allocate(9 * kMiB));
  REQUIRE(deeper != nullptr);
  CHECK(ThpEligible(deeper + 9 * kMiB - page) == 1);
  numarena::deallocate(deeper);
  numarena::deallocate(p);
}

TEST_CASE("an arena without transparent huge pages keeps large blocks in base pages") {
  std::string modes;
  if (!numarena::testing::HugePagesOnRequest(&modes)) {
    WARN("skipped: transparent huge pages are off (" << modes << ")");
    return;
  }
  numarena::ArenaOptions options;
  options.transparent_huge_pages = false;
  options.shards = 6;  // a heap of its own (a shard count no other test uses)
  auto arena = Arena::ForPolicy(Policy::Bind(0), options);
  REQUIRE(arena.ok());
  // A different arena from the one with huge pages, whatever else the options share.
  numarena::ArenaOptions with_huge = options;
  with_huge.transparent_huge_pages = true;
  auto huge = Arena::ForPolicy(Policy::Bind(0), with_huge);
  REQUIRE(huge.ok());
  CHECK(*huge != *arena);
  const long page = sysconf(_SC_PAGESIZE);
  for (int round = 0; round < 2; ++round) {  // fresh pages, then a freed block's pages
    auto* p = static_cast<unsigned char*>((*arena)->allocate(9 * kMiB));
    REQUIRE(p != nullptr);
    std::memset(p, 0x5a, 9 * kMiB);
    for (std::size_t at = 0; at < 9 * kMiB; at += 2 * kMiB) {
      INFO("round " << round << ", offset " << at);
      CHECK(ThpEligible(p + at) == 0);
    }
    CHECK(ThpEligible(p + 9 * kMiB - page) == 0);
    numarena::deallocate(p);
  }
  auto* q = static_cast<unsigned char*>((*huge)->allocate(9 * kMiB));
  REQUIRE(q != nullptr);
  CHECK(ThpEligible(q + 4 * kMiB) == 1);  // the default, for contrast
  numarena::deallocate(q);
}

TEST_CASE("bin shards give each CPU's thread a pair of arena shard and bin of its own") {
  // Threads take shards least used first (thread k: shard k % shards) and jemalloc gives them
  // bins in turn (thread k: bin k % bins): on a host with `cpus` CPUs the first `cpus` threads
  // must all get different pairs, so no two refill from the same slabs (heap_table.hpp).
  for (unsigned cpus = 0; cpus <= 1024; ++cpus) {
    INFO("cpus " << cpus);
    const int shards = numarena::DefaultShardCount(cpus);
    const unsigned bins = numarena::BinShardCount(cpus);
    REQUIRE(shards >= 1);
    REQUIRE(shards <= numarena::ArenaOptions::kMaxShards);
    REQUIRE(bins >= 1);
    REQUIRE(bins <= 64);  // jemalloc's limit: a larger bin_shards option is refused
    const unsigned pairs = static_cast<unsigned>(shards) * bins;
    std::set<std::pair<unsigned, unsigned>> taken;
    for (unsigned thread = 0; thread < std::min(cpus, pairs); ++thread) {
      CHECK(taken.emplace(thread % shards, thread % bins).second);
    }
    // Up to 504 CPUs (8 shards x 63 bins, the largest count coprime to 8 within 64).
    if (cpus <= 63 * static_cast<unsigned>(shards)) CHECK(pairs >= cpus);
  }
  CHECK(numarena::BinShardCount(1) == 1);
  CHECK(numarena::BinShardCount(2) == 2);
  CHECK(numarena::BinShardCount(16) == 5);  // 4 shards: 4 bins would pair thread k with k+4
  CHECK(numarena::BinShardCount(128) == 17);
}

TEST_CASE("memory freed into one shard makes room for another thread before a refusal") {
  // With a 512 MiB quota, thread A allocates and frees 400 MiB: the pages stay dirty (and
  // charged) in A's jemalloc arena shard, idle, with no purge. Thread B, on another shard
  // of the same arena, then needs 200 MiB. Before numarena purged its own dirty pages on a
  // refusal, B got 52 MiB and then nullptr.
  Arena* arena = WithShards(Policy::WeightedInterleave({{0, 5}}), 2);
  numarena::deallocate(arena->allocate(64));  // the main thread takes the first shard
  numarena::BudgetOptions options;
  options.mode = numarena::BudgetMode::kQuota;
  options.quotas = {{0, 512 * kMiB}};
  auto budget = numarena::Budget::Create(options, std::vector<int>{0});
  REQUIRE(budget.ok());
  REQUIRE(numarena::InstallProcessBudget(budget->get()).ok());
  struct Uninstall {
    ~Uninstall() { (void)numarena::InstallProcessBudget(nullptr); }
  } uninstall;
  const int heap = numarena::arena_internal::HeapOf(arena->allocate(64));

  constexpr std::size_t kBlock = 4 * kMiB;
  std::atomic<int> phase{0};
  int shard_a = -1, shard_b = -1;
  std::thread a([&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 100; ++i) {
      void* p = arena->allocate(kBlock);
      REQUIRE(p != nullptr);
      blocks.push_back(p);
    }
    shard_a = numarena::arena_internal::ArenaIndexOf(numarena::ThreadFlags(heap));
    for (void* p : blocks) numarena::deallocate(p);
    phase.store(1);
    while (phase.load() < 2) std::this_thread::yield();  // alive: B gets another shard
  });
  while (phase.load() < 1) std::this_thread::yield();
  std::size_t got = 0;
  numarena::Status refusal;
  std::thread b([&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 50; ++i) {
      void* p = arena->allocate(kBlock);
      if (p == nullptr) {
        refusal = numarena::last_allocation_error();
        break;
      }
      blocks.push_back(p);
    }
    shard_b = numarena::arena_internal::ArenaIndexOf(numarena::ThreadFlags(heap));
    got = blocks.size() * kBlock;
    for (void* p : blocks) numarena::deallocate(p);
  });
  b.join();
  phase.store(2);
  a.join();
  INFO("B got " << (got >> 20) << " MiB; " << refusal.ToString() << "; shards " << shard_a
                << " and " << shard_b);
  CHECK(got == 200 * kMiB);
  CHECK(shard_a != shard_b);
  arena->purge();
  CHECK((*budget)->usage(0) <= 8 * kMiB);  // jemalloc's metadata blocks of the shards
}

TEST_CASE("Preferred with no node left says so") {
  Arena* preferred = Get(Policy::Preferred(0));
  void* small = preferred->allocate(128);
  REQUIRE(small != nullptr);
  CHECK(numarena::node_of(small) == 0);
  numarena::deallocate(small);
  LimitGate gate(0);
  GateScope scope(&gate);
  CHECK(preferred->allocate(256 * kMiB) == nullptr);
  auto error = numarena::last_allocation_error();
  CHECK(error.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(error.message()), Catch::Contains("no other node had room"));
}

TEST_CASE("Local places on the calling thread's node") {
  Arena* local = Get(Policy::Local());
  void* p = local->allocate(1000);
  REQUIRE(p != nullptr);
  CHECK(numarena::node_of(p) == 0);
  numarena::deallocate(p);
}

TEST_CASE("stats count live bytes") {
  Arena* arena = Get(Policy::Interleave({0}, numarena::BindMode::kAdvisory));
  auto before = arena->stats();
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(arena->allocate(64 << 10));
  auto during = arena->stats();
  CHECK(during.allocated >= before.allocated + 16 * (64 << 10));
  CHECK(during.active >= during.allocated);
  CHECK(during.mapped >= during.active);
  CHECK(during.committed >= 16 * (64 << 10));
  CHECK(during.jemalloc_arenas == 1);
  for (void* p : blocks) numarena::deallocate(p);
  // Freed objects count as allocated while they sit in this thread's front cache (up to
  // 1 MiB of 64 KiB objects); purge() hands them back.
  CHECK(arena->stats().allocated <= before.allocated + 16 * (64 << 10));
  arena->purge();
  auto after = arena->stats();
  CHECK(after.allocated <= before.allocated);
}
