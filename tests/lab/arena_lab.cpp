// Arenas in the NUMA lab: every page of every size from each node's arena is on that node
// (memory-only nodes included), a node's arena never hands out objects freed into another
// node's arena, threads on the arena's other jemalloc arena shards place their pages on the
// node too, reallocate into another node's arena moves every page there, interleave spreads
// pages evenly and weighted interleave 3:1 gives 3:1.
// Memory is written (faulted in) from a CPU on the farthest other node wherever one exists,
// so a page on the right node proves the binding, not first-touch locality. Expectations come
// from the topology QEMU was given (lab_support.hpp), not from numarena's discovery.
// lab-topologies: 2s snc4 cxl
// lab-kernel-6.12: cxl
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "lab_support.hpp"
#include "numarena/arena.hpp"
#include "numarena/page_nodes.hpp"

namespace numarena {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Every page of [p, p+size) is on `node`; prints a summary on failure.
void CheckAllOn(const void* p, std::size_t size, int node) {
  auto nodes = page_node_list(p, size);
  REQUIRE(nodes.ok());
  INFO(lab::SummarizePageNodes(*nodes));
  std::size_t wrong = 0;
  for (int n : *nodes) wrong += n != node;
  CHECK(wrong == 0);
}

TEST_CASE("each node's arena puts every page of every size on that node") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name);
  for (const auto& target : lab.nodes) {
    DYNAMIC_SECTION("node " << target.id << (target.memory_only() ? " (memory only)" : "")) {
      std::optional<lab::PinnedTo> pin;
      if (std::optional<int> toucher = lab.farthest_cpu_node(target.id)) {
        pin.emplace(lab.node(*toucher).cpus);
      }
      auto arena = Arena::ForNode(target.id);
      INFO(arena.status().ToString());
      REQUIRE(arena.ok());
      for (std::size_t size : {std::size_t{8}, std::size_t{64}, std::size_t{4096},
                               std::size_t{64} << 10, 2 * kMiB, 64 * kMiB}) {
        INFO("size " << size);
        void* p = (*arena)->allocate(size);
        INFO(last_allocation_error().ToString());
        REQUIRE(p != nullptr);
        std::memset(p, 0x3c, size);
        CHECK(node_of(p) == target.id);
        CheckAllOn(p, size, target.id);
        deallocate(p);
      }
    }
  }
}

TEST_CASE("objects freed into node A's arena are never returned by node B's arena") {
  const auto& lab = lab::Expected();
  for (const auto& a : lab.nodes) {
    for (const auto& b : lab.nodes) {
      if (a.id == b.id) continue;
      DYNAMIC_SECTION("A = node " << a.id << ", B = node " << b.id) {
        Arena* arena_a = *Arena::ForNode(a.id);
        Arena* arena_b = *Arena::ForNode(b.id);
        for (std::size_t size :
             {std::size_t{8}, std::size_t{64}, std::size_t{1024}, std::size_t{16} << 10}) {
          INFO("size " << size);
          std::vector<void*> objects;
          for (int i = 0; i < 256; ++i) {
            void* p = arena_a->allocate(size);
            REQUIRE(p != nullptr);
            std::memset(p, 1, size);
            objects.push_back(p);
          }
          for (void* p : objects) deallocate(p);  // same thread: into this thread's caches
          objects.clear();
          for (int i = 0; i < 256; ++i) {
            void* p = arena_b->allocate(size);
            REQUIRE(p != nullptr);
            std::memset(p, 2, size);
            objects.push_back(p);
          }
          std::size_t wrong_owner = 0;
          for (void* p : objects) {
            wrong_owner += node_of(p) != b.id;
            CheckAllOn(p, size, b.id);
          }
          CHECK(wrong_owner == 0);
          for (void* p : objects) deallocate(p);
        }
      }
    }
  }
}

TEST_CASE("reallocate into node B's arena moves every page to B, and growth in A stays on A") {
  const auto& lab = lab::Expected();
  for (const auto& a : lab.nodes) {
    for (const auto& b : lab.nodes) {
      if (a.id == b.id) continue;
      DYNAMIC_SECTION("A = node " << a.id << ", B = node " << b.id) {
        // The copy into B is written from a CPU far from B, so pages on B prove the binding.
        std::optional<lab::PinnedTo> pin;
        if (std::optional<int> toucher = lab.farthest_cpu_node(b.id)) {
          pin.emplace(lab.node(*toucher).cpus);
        }
        Arena* arena_a = *Arena::ForNode(a.id);
        Arena* arena_b = *Arena::ForNode(b.id);
        // Small (front cache), medium, and large (2 MiB classes and the large cache).
        for (std::size_t size : {std::size_t{256}, std::size_t{64} << 10, 2 * kMiB, 6 * kMiB}) {
          INFO("size " << size);
          void* p = arena_a->allocate(size);
          REQUIRE(p != nullptr);
          std::memset(p, 0x5a, size);
          void* grown = arena_a->reallocate(p, 2 * size);  // another class: moved within A
          INFO(last_allocation_error().ToString());
          REQUIRE(grown != nullptr);
          std::memset(static_cast<char*>(grown) + size, 0x5a, size);
          CHECK(arena_a->contains(grown));
          CheckAllOn(grown, 2 * size, a.id);
          void* moved = arena_b->reallocate(grown, 2 * size);
          REQUIRE(moved != nullptr);
          CHECK(moved != grown);
          CHECK(arena_b->contains(moved));
          CHECK(node_of(moved) == b.id);
          CheckAllOn(moved, 2 * size, b.id);
          const auto* bytes = static_cast<const unsigned char*>(moved);
          std::size_t changed = 0;
          for (std::size_t i = 0; i < 2 * size; ++i) changed += bytes[i] != 0x5a;
          CHECK(changed == 0);
          deallocate(moved);
        }
      }
    }
  }
}

TEST_CASE("threads on different shards of a node's arena place every page on that node") {
  // Each live thread joins the least used of the heap's jemalloc arenas (shards); all share
  // the node's page provider. Two workers alive together, beside the main thread that used
  // the arena first, must get two different shards of an arena with 3 (ArenaOptions::shards),
  // and every page either allocates, touched from the farthest node's CPUs, must be on the
  // arena's node.
  const auto& lab = lab::Expected();
  ArenaOptions three_shards;
  three_shards.shards = 3;
  for (const auto& target : lab.nodes) {
    DYNAMIC_SECTION("node " << target.id) {
      auto arena = Arena::ForPolicy(Policy::Bind(target.id), three_shards);
      REQUIRE(arena.ok());
      deallocate((*arena)->allocate(64));  // the main thread takes its shard first
      std::optional<int> toucher = lab.farthest_cpu_node(target.id);
      struct Result {
        int jemalloc_arena = -1;
        std::size_t pages = 0, wrong = 0, failures = 0;
      } results[2];
      std::atomic<int> allocated{0};
      auto worker = [&](Result& out) {
        std::optional<lab::PinnedTo> pin;
        if (toucher) pin.emplace(lab.node(*toucher).cpus);
        std::vector<std::pair<void*, std::size_t>> blocks;
        for (std::size_t size : {std::size_t{64}, std::size_t{64} << 10, 2 * kMiB, 8 * kMiB}) {
          void* p = (*arena)->allocate(size);
          if (p == nullptr) {
            ++out.failures;
            continue;
          }
          std::memset(p, 0x5a, size);
          blocks.emplace_back(p, size);
        }
        if (!blocks.empty()) {
          int heap = arena_internal::HeapOf(blocks.front().first);
          out.jemalloc_arena = arena_internal::ArenaIndexOf(arena_internal::thread_flags[heap]);
        }
        allocated.fetch_add(1);
        while (allocated.load() < 2) std::this_thread::yield();  // both alive when joining
        for (auto [p, size] : blocks) {
          auto nodes = page_node_list(p, size);
          if (!nodes.ok()) {
            ++out.failures;
            continue;
          }
          for (int n : *nodes) {
            ++out.pages;
            out.wrong += n != target.id;
          }
          deallocate(p);
        }
      };
      std::thread first(worker, std::ref(results[0])), second(worker, std::ref(results[1]));
      first.join();
      second.join();
      for (const Result& r : results) {
        CHECK(r.failures == 0);
        CHECK(r.pages >= (2 + 8) * kMiB / 4096);
        CHECK(r.wrong == 0);
        CHECK(r.jemalloc_arena >= 0);
      }
      CHECK(results[0].jemalloc_arena != results[1].jemalloc_arena);
      CHECK((*arena)->stats().jemalloc_arenas >= 2);
    }
  }
}

TEST_CASE("an interleaved arena spreads pages evenly over its nodes") {
  const auto& lab = lab::Expected();
  std::vector<int> all;
  for (const auto& n : lab.nodes) all.push_back(n.id);
  auto arena = Arena::ForPolicy(Policy::Interleave(all));
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  const std::size_t size = 16 * kMiB;
  void* p = (*arena)->allocate(size);
  REQUIRE(p != nullptr);
  std::memset(p, 7, size);
  CHECK(node_of(p) == kNodeMixed);
  auto counts = page_nodes(p, size);
  REQUIRE(counts.ok());
  REQUIRE(counts->resident() == counts->total_pages);
  std::size_t even = counts->total_pages / all.size();
  for (int node : all) {
    INFO("node " << node << ": " << counts->on(node) << " of " << counts->total_pages);
    CHECK(counts->on(node) + 1 >= even);
    CHECK(counts->on(node) <= even + 1);
  }
  deallocate(p);
}

TEST_CASE("weighted interleave {0:3, 1:1} gives 3:1 within one chunk") {
  const auto& lab = lab::Expected();
  REQUIRE(lab.nodes.size() >= 2);
  int n0 = lab.nodes[0].id, n1 = lab.nodes[1].id;
  auto arena = Arena::ForPolicy(Policy::WeightedInterleave({{n0, 3}, {n1, 1}}));
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  const std::size_t size = 32 * kMiB;  // 16 chunks of 2 MiB
  void* p = (*arena)->allocate(size);
  REQUIRE(p != nullptr);
  std::memset(p, 9, size);
  auto counts = page_nodes(p, size);
  REQUIRE(counts.ok());
  REQUIRE(counts->resident() == counts->total_pages);
  const std::size_t chunk_pages = Policy::kDefaultWeightedChunk / os::PageSize();
  INFO("node " << n0 << ": " << counts->on(n0) << ", node " << n1 << ": " << counts->on(n1));
  CHECK(counts->on(n0) + counts->on(n1) == counts->total_pages);
  long long diff =
      static_cast<long long>(counts->on(n0)) - 3 * static_cast<long long>(counts->on(n1));
  // n0 = 3/4 total and n1 = 1/4 total, each to within one chunk.
  CHECK(std::llabs(static_cast<long long>(counts->on(n1)) -
                   static_cast<long long>(counts->total_pages / 4)) <=
        static_cast<long long>(chunk_pages));
  CHECK(std::llabs(diff) <= static_cast<long long>(4 * chunk_pages));
  deallocate(p);
}

}  // namespace
}  // namespace numarena
