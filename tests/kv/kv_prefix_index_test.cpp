// KV prefix index (lib/kv/kv_prefix_index.hpp) on its own: the span hash, indexing, the
// cached list, and eviction order, eligibility and claims across shards, plus lock-free
// lookups racing with writers.
#include "kv/kv_prefix_index.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace {

using numarena::kv::HashSpan;
using numarena::kv::PrefixIndex;
using numarena::kv::ReadMostlyMap;

// A hash that lands in shard `shard` (the index shards by the hash's top bits).
std::uint64_t InShard(std::size_t shard, std::uint64_t low) {
  return (static_cast<std::uint64_t>(shard) << 59) | (low + ReadMostlyMap::kFirstKey);
}

void Index(PrefixIndex& index, std::uint64_t hash, std::uint32_t span) {
  std::lock_guard lock(index.mutex_for(hash));
  REQUIRE(index.InsertLocked(hash, span));
}

void Cache(PrefixIndex& index, std::uint64_t hash, std::uint32_t span) {
  std::lock_guard lock(index.mutex_for(hash));
  index.CacheLocked(hash, span);
}

const auto kAny = [](std::uint32_t) { return true; };

}  // namespace

TEST_CASE("prefix hash: deterministic, and sensitive to parent, order, length and every token") {
  const std::vector<std::int32_t> a = {1, 2, 3, 4};
  const std::uint64_t root = numarena::kv::kRootPrefixHash;
  const std::uint64_t h = HashSpan(root, a);
  CHECK(h == HashSpan(root, std::vector<std::int32_t>{1, 2, 3, 4}));
  // Pinned values: the hash is documented as the same in every process and build, and a
  // change of the function must be a deliberate one.
  CHECK(h == 7039920141325953417ull);
  CHECK(HashSpan(0, std::vector<std::int32_t>{7}) == 15862417977533417887ull);
  CHECK(h != HashSpan(root + 1, a));
  CHECK(h != HashSpan(root, std::vector<std::int32_t>{2, 1, 3, 4}));
  CHECK(h != HashSpan(root, std::vector<std::int32_t>{1, 2, 3}));
  CHECK(h != HashSpan(root, std::vector<std::int32_t>{1, 2, 3, 4, 0}));
  CHECK(HashSpan(root, std::vector<std::int32_t>{1, 2, 3}) !=
        HashSpan(root, std::vector<std::int32_t>{1, 2, 3, 0}));  // odd length vs padded
  CHECK(HashSpan(root, std::vector<std::int32_t>{-1}) !=
        HashSpan(root, std::vector<std::int32_t>{0}));
  std::set<std::uint64_t> seen;
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::vector<std::int32_t> b = a;
    b[i] ^= 1;
    CHECK(seen.insert(HashSpan(root, b)).second);
  }
  CHECK_FALSE(seen.count(h));
}

TEST_CASE("prefix hash: never one of the map's reserved keys") {
  // Over many inputs the hash is never below kFirstKey (0 and 1 mark empty and erased
  // slots in the lock-free map).
  for (std::int32_t t = -5000; t < 5000; ++t) {
    const std::int32_t tokens[] = {t};
    REQUIRE(HashSpan(static_cast<std::uint64_t>(t), tokens) >= ReadMostlyMap::kFirstKey);
  }
}

TEST_CASE("prefix index: insert, find, and a duplicate keeps the first span") {
  PrefixIndex index;
  const std::uint64_t h = InShard(3, 10);
  CHECK(index.Find(h) == PrefixIndex::kNone);
  Index(index, h, 7);
  CHECK(index.Find(h) == 7);
  {
    std::lock_guard lock(index.mutex_for(h));
    CHECK(index.FindLocked(h) == 7);
    CHECK_FALSE(index.InsertLocked(h, 8));
    CHECK(index.FindLocked(h) == 7);
  }
  CHECK(index.indexed() == 1);
  CHECK(index.cached() == 0);
  // Hashes in one shard share its mutex; other shards have their own.
  CHECK(&index.mutex_for(InShard(3, 99)) == &index.mutex_for(h));
  CHECK(&index.mutex_for(InShard(4, 10)) != &index.mutex_for(h));
}

TEST_CASE("prefix index: cache and uncache count, and uncaching an uncached span is a no-op") {
  PrefixIndex index;
  const std::uint64_t h = InShard(0, 1);
  Index(index, h, 1);
  Cache(index, h, 1);
  CHECK(index.cached() == 1);
  {
    std::lock_guard lock(index.mutex_for(h));
    index.UncacheLocked(h, 1);
    index.UncacheLocked(h, 1);  // no longer cached: nothing happens
    index.UncacheLocked(h, 42);
  }
  CHECK(index.cached() == 0);
  CHECK(index.Find(h) == 1);  // owned again, still indexed
  // An uncached span is never evicted.
  CHECK(index.EvictOldest(kAny, kAny) == PrefixIndex::kNone);
}

TEST_CASE("prefix index: eviction takes the oldest cached span across shards") {
  PrefixIndex index;
  // Cached in this order, spread over shards 5, 1, 9, 1.
  const std::uint64_t hashes[] = {InShard(5, 0), InShard(1, 1), InShard(9, 2), InShard(1, 3)};
  for (std::uint32_t s = 0; s < 4; ++s) {
    Index(index, hashes[s], s);
    Cache(index, hashes[s], s);
  }
  REQUIRE(index.cached() == 4);
  for (std::uint32_t s = 0; s < 4; ++s) {
    CHECK(index.EvictOldest(kAny, kAny) == s);
    CHECK(index.Find(hashes[s]) == PrefixIndex::kNone);  // gone from the index too
    CHECK(index.cached() == 3 - s);
    CHECK(index.indexed() == 3 - s);
  }
  CHECK(index.EvictOldest(kAny, kAny) == PrefixIndex::kNone);
}

TEST_CASE("prefix index: a re-cached span goes to the young end") {
  PrefixIndex index;
  const std::uint64_t a = InShard(2, 0), b = InShard(7, 1);
  Index(index, a, 10);
  Index(index, b, 11);
  Cache(index, a, 10);
  Cache(index, b, 11);
  {  // 10 is shared again, then released again: now younger than 11
    std::lock_guard lock(index.mutex_for(a));
    index.UncacheLocked(a, 10);
  }
  Cache(index, a, 10);
  CHECK(index.EvictOldest(kAny, kAny) == 11);
  CHECK(index.EvictOldest(kAny, kAny) == 10);
}

TEST_CASE("prefix index: eviction skips ineligible spans and ones whose claim fails") {
  PrefixIndex index;
  for (std::uint32_t s = 0; s < 6; ++s) {
    const std::uint64_t h = InShard(s % 3, s);
    Index(index, h, s);
    Cache(index, h, s);
  }
  // Only even spans are eligible (memory on the node asked for).
  auto even = [](std::uint32_t s) { return s % 2 == 0; };
  CHECK(index.EvictOldest(even, kAny) == 0);
  // Span 2's claim fails (a block pinned meanwhile): it stays cached and the next eligible
  // one is taken.
  int claims_of_2 = 0;
  auto refuse_2 = [&claims_of_2](std::uint32_t s) {
    if (s != 2) return true;
    ++claims_of_2;
    return false;
  };
  CHECK(index.EvictOldest([&](std::uint32_t s) { return even(s) && !(s == 2 && claims_of_2 > 0); },
                          refuse_2) == 4);
  CHECK(claims_of_2 == 1);
  CHECK(index.cached() == 4);  // 1, 2, 3, 5
  CHECK(index.Find(InShard(2, 2)) == 2);
  // Nothing eligible: kNone, nothing removed.
  CHECK(index.EvictOldest([](std::uint32_t) { return false; }, kAny) == PrefixIndex::kNone);
  CHECK(index.cached() == 4);
  CHECK(index.EvictOldest(kAny, kAny) == 1);
  CHECK(index.EvictOldest(kAny, kAny) == 2);
}

TEST_CASE("prefix index: lock-free lookups see a stable entry while writers churn") {
  PrefixIndex index;
  const std::uint64_t stable = InShard(6, 12345);
  Index(index, stable, 99);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> misses{0}, lookups{0};
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (index.Find(stable) != 99) misses.fetch_add(1, std::memory_order_relaxed);
      lookups.fetch_add(1, std::memory_order_relaxed);
    }
  });
  // The writer fills the stable entry's shard (growing its table) and evicts everything
  // else again, many times over.
  for (std::uint32_t round = 0; round < 20; ++round) {
    for (std::uint32_t s = 0; s < 200; ++s) {
      const std::uint64_t h = InShard(6, round * 1000 + s);
      Index(index, h, s);
      Cache(index, h, s);
    }
    for (std::uint32_t s = 0; s < 200; ++s) REQUIRE(index.EvictOldest(kAny, kAny) == s);
  }
  while (lookups.load() < 1000) std::this_thread::yield();
  stop = true;
  reader.join();
  CHECK(misses.load() == 0);
  CHECK(index.Find(stable) == 99);
  CHECK(index.indexed() == 1);
}
