// KV hotness policies (lib/kv/kv_hotness.hpp): victim searches look at a bounded window of the
// hot list and rotate it, so a search costs the same on a node with 100 hot blocks as on one
// with 100,000, and successive searches still reach every block.
#include "kv/kv_hotness.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <vector>

namespace {

using numarena::KvHotnessPolicy;
using numarena::kv::HotList;
using numarena::kv::HotMeta;
using numarena::kv::kNil;
using numarena::kv::ScanWindow;

// A hot list over `n` blocks whose metadata accesses are counted.
struct Fixture {
  explicit Fixture(std::size_t n)
      : metas(n), list([this](std::uint32_t id) -> HotMeta& {
          ++meta_reads;
          return metas[id];
        }) {
    for (std::uint32_t id = 0; id < n; ++id) list.PushBack(id);
  }
  std::deque<HotMeta> metas;  // HotMeta holds atomics: not movable, so not a vector
  std::size_t meta_reads = 0;
  HotList list;
};

bool Any(std::uint32_t) { return true; }

TEST_CASE("LRU on a short list chooses exactly, oldest access first") {
  Fixture f(100);
  for (std::uint32_t id = 0; id < 100; ++id) f.metas[id].last_access = 1000 - id * 7 % 100;
  auto policy = numarena::kv::MakeHotnessPolicy(KvHotnessPolicy::kLru);
  std::vector<std::uint32_t> victims;
  policy->SelectVictims(f.list, 3, Any, victims);
  // last_access is 1000 - (7 id mod 100): largest (7 id mod 100) first: 99, 98, 97.
  REQUIRE(victims.size() == 3);
  CHECK(victims == std::vector<std::uint32_t>{57, 14, 71});
  CHECK(f.list.size() == 100);  // nothing removed
}

TEST_CASE("LRU on a long list reads a bounded window, and rotation reaches every block") {
  constexpr std::size_t kBlocks = 100000;
  Fixture f(kBlocks);
  // The oldest access is at the very back of the list.
  for (std::uint32_t id = 0; id < kBlocks; ++id) f.metas[id].last_access = kBlocks + 10 - id;
  auto policy = numarena::kv::MakeHotnessPolicy(KvHotnessPolicy::kLru);
  std::vector<std::uint32_t> victims;
  f.meta_reads = 0;
  policy->SelectVictims(f.list, 1, Any, victims);
  // Window, keys, and the rotation's unlink and relink: a few reads per member looked at.
  CHECK(f.meta_reads <= 10 * ScanWindow(1));
  REQUIRE(victims.size() == 1);
  CHECK(victims[0] == ScanWindow(1) - 1);  // the oldest of the first window
  // The caller demotes each victim (removes it); the hand moves on, and the oldest block
  // of the whole list is chosen once the window reaches it.
  bool reached_oldest = false;
  for (std::size_t search = 0; search < kBlocks / (ScanWindow(1) - 1) + 2 && !reached_oldest;
       ++search) {
    for (std::uint32_t id : victims) f.list.Remove(id);
    victims.clear();
    policy->SelectVictims(f.list, 1, Any, victims);
    reached_oldest = victims.at(0) == kBlocks - 1;
  }
  CHECK(reached_oldest);
}

TEST_CASE("a window of pinned blocks does not end the search") {
  // A demotion that finds nothing tells Reclaim there is nothing to demote, so a run of
  // ineligible blocks (pinned, or of free spans) longer than the window must be passed.
  constexpr std::uint32_t kBlocks = 1000, kPinned = 600;
  for (auto kind : {KvHotnessPolicy::kLru, KvHotnessPolicy::kClock, KvHotnessPolicy::kTwoQueue}) {
    Fixture f(kBlocks);
    for (std::uint32_t id = 0; id < kBlocks; ++id) f.metas[id].last_access = id;
    auto policy = numarena::kv::MakeHotnessPolicy(kind);
    std::vector<std::uint32_t> victims;
    policy->SelectVictims(
        f.list, 8, [](std::uint32_t id) { return id >= kPinned; }, victims);
    INFO(numarena::KvHotnessPolicyName(kind));
    REQUIRE(victims.size() == 8);
    for (std::uint32_t id : victims) CHECK(id >= kPinned);
    CHECK(f.list.size() == kBlocks);
  }
}

TEST_CASE("CLOCK and 2Q read a bounded number of blocks on a long list too") {
  constexpr std::size_t kBlocks = 100000;
  for (auto kind : {KvHotnessPolicy::kClock, KvHotnessPolicy::kTwoQueue}) {
    Fixture f(kBlocks);
    auto policy = numarena::kv::MakeHotnessPolicy(kind);
    std::vector<std::uint32_t> victims;
    f.meta_reads = 0;
    policy->SelectVictims(f.list, 8, Any, victims);
    INFO(numarena::KvHotnessPolicyName(kind));
    CHECK(victims.size() == 8);
    CHECK(f.meta_reads <= 20 * ScanWindow(8));
  }
}

TEST_CASE("2Q on a short list takes once-used blocks (oldest entry first) before reused ones") {
  Fixture f(8);
  for (std::uint32_t id = 0; id < 8; ++id) {
    f.metas[id].entered = 100 + id;
    f.metas[id].last_access = 200 + id;
    f.metas[id].accesses = id < 4 ? 2 : 1;  // 0..3 reused (Am), 4..7 once (A1in)
  }
  auto policy = numarena::kv::MakeHotnessPolicy(KvHotnessPolicy::kTwoQueue);
  std::vector<std::uint32_t> victims;
  policy->SelectVictims(f.list, 3, Any, victims);
  // A1in holds half the list, more than its quarter: its oldest entries go first, until it
  // is down to its share; then Am by last access.
  CHECK(victims == std::vector<std::uint32_t>{4, 5, 0});
}

}  // namespace
