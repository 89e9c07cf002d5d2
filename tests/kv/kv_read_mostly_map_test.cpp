// The prefix index's lock-free-lookup map (lib/kv/kv_read_mostly_map.hpp).
#include "kv/kv_read_mostly_map.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using numarena::kv::ReadMostlyMap;

std::uint32_t ValueOf(std::uint64_t key) { return static_cast<std::uint32_t>(key * 7 + 1); }

TEST_CASE("read-mostly map inserts, finds and erases") {
  ReadMostlyMap map;
  CHECK(map.Find(2) == ReadMostlyMap::kAbsent);
  CHECK(map.Insert(2, 20));
  CHECK_FALSE(map.Insert(2, 21));  // present: unchanged
  CHECK(map.Find(2) == 20);
  CHECK(map.Insert(0xffffffffffffffffull, 5));
  CHECK(map.Find(0xffffffffffffffffull) == 5);
  CHECK(map.size() == 2);
  CHECK(map.Erase(2));
  CHECK_FALSE(map.Erase(2));
  CHECK(map.Find(2) == ReadMostlyMap::kAbsent);
  CHECK(map.Insert(2, 22));  // a key comes back with its new value
  CHECK(map.Find(2) == 22);
  CHECK(map.size() == 2);
}

TEST_CASE("read-mostly map keeps every key through growth") {
  ReadMostlyMap map;
  constexpr std::uint64_t kKeys = 20000;
  for (std::uint64_t k = ReadMostlyMap::kFirstKey; k < kKeys; ++k)
    REQUIRE(map.Insert(k, ValueOf(k)));
  CHECK(map.size() == kKeys - ReadMostlyMap::kFirstKey);
  CHECK(map.capacity() >= 2 * map.size());
  for (std::uint64_t k = ReadMostlyMap::kFirstKey; k < kKeys; ++k)
    REQUIRE(map.Find(k) == ValueOf(k));
  CHECK(map.Find(kKeys) == ReadMostlyMap::kAbsent);
  // Erase every other key: the rest stay findable past the tombstones.
  for (std::uint64_t k = ReadMostlyMap::kFirstKey; k < kKeys; k += 2) REQUIRE(map.Erase(k));
  for (std::uint64_t k = ReadMostlyMap::kFirstKey; k < kKeys; ++k) {
    REQUIRE(map.Find(k) == (k % 2 == 0 ? ReadMostlyMap::kAbsent : ValueOf(k)));
  }
}

TEST_CASE("read-mostly map churn purges tombstones instead of growing") {
  // A long-running server inserts and evicts forever with few entries live: the table must
  // not grow (outgrown tables are kept until the map dies).
  ReadMostlyMap map;
  for (std::uint64_t k = 0; k < 100000; ++k) {
    const std::uint64_t key = ReadMostlyMap::kFirstKey + k;
    REQUIRE(map.Insert(key, ValueOf(key)));
    if (k >= 8) REQUIRE(map.Erase(key - 8));
  }
  CHECK(map.size() == 8);
  CHECK(map.capacity() <= 64);
  for (std::uint64_t k = 100000 - 8; k < 100000; ++k)
    CHECK(map.Find(ReadMostlyMap::kFirstKey + k) == ValueOf(ReadMostlyMap::kFirstKey + k));
}

TEST_CASE("read-mostly map lookups during writes see whole entries") {
  // One writer grows, churns and purges; readers must always find the keys that never
  // leave, and never see a key with another key's value.
  ReadMostlyMap map;
  constexpr std::uint64_t kStable = 64;
  for (std::uint64_t k = ReadMostlyMap::kFirstKey; k < kStable; ++k) map.Insert(k, ValueOf(k));
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bad{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::uint64_t k = r;
      while (!stop.load(std::memory_order_relaxed)) {
        const std::uint64_t stable = ReadMostlyMap::kFirstKey + k % (kStable - 2);
        if (map.Find(stable) != ValueOf(stable)) bad.fetch_add(1);
        const std::uint64_t churned = kStable + k % 5000;
        const std::uint32_t v = map.Find(churned);
        if (v != ReadMostlyMap::kAbsent && v != ValueOf(churned)) bad.fetch_add(1);
        ++k;
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  while (reads.load() == 0) std::this_thread::yield();  // the readers overlap the writes
  for (int round = 0; round < 50; ++round) {
    for (std::uint64_t k = kStable; k < kStable + 5000; ++k) map.Insert(k, ValueOf(k));
    for (std::uint64_t k = kStable; k < kStable + 5000; ++k) map.Erase(k);
  }
  stop = true;
  for (auto& t : readers) t.join();
  CHECK(reads.load() > 0);
  CHECK(bad.load() == 0);
}

}  // namespace
