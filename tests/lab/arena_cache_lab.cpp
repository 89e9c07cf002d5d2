// The front cache's medium classes (above 4 KiB, below 2 MiB), the heaps' medium depot behind
// them, and the heaps' large cache (2 MiB and more) in the NUMA lab: an object one thread allocated from node A's arena and
// another thread, running on a CPU of another node, freed, is handed out again only by node A's
// arena, never by node B's; and every page of every object either arena hands out is on that
// arena's node, as the kernel (move_pages) reports it. The freeing thread faults in what it
// allocates itself, so a page on the arena's node proves the binding, not first touch. The
// test also checks that the caches were used (some freed addresses come back from A), so it
// cannot pass by leaving them out.
// lab-topologies: 2s snc4 cxl tiny
#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "lab_support.hpp"
#include "numarena/arena.hpp"
#include "numarena/page_nodes.hpp"

namespace numarena {
namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = kKiB * 1024;

// How many pages of [p, p+size) are not on `node` (the kernel's answer).
std::size_t PagesOffNode(const void* p, std::size_t size, int node) {
  auto nodes = page_node_list(p, size);
  if (!nodes.ok()) return size;  // counts as wrong: the question must be answerable
  std::size_t wrong = 0;
  for (int n : *nodes) wrong += n != node;
  return wrong;
}

TEST_CASE("medium and large objects freed on another node's CPU return only to their arena") {
  const auto& lab = lab::Expected();
  for (const auto& a : lab.nodes) {
    for (const auto& b : lab.nodes) {
      if (a.id == b.id || b.memory_only()) continue;
      DYNAMIC_SECTION("A = node " << a.id << ", B = node " << b.id << " (the freeing thread's)") {
        Arena* arena_a = *Arena::ForNode(a.id);
        Arena* arena_b = *Arena::ForNode(b.id);
        for (std::size_t size : {8 * kKiB, 64 * kKiB, 256 * kKiB, 1 * kMiB, 1792 * kKiB,
                                 2 * kMiB, 8 * kMiB, 24 * kMiB}) {
          INFO("size " << size);
          const int count = size >= 8 * kMiB ? 2 : 4;
          std::vector<void*> freed;
          for (int i = 0; i < count; ++i) {
            void* p = arena_a->allocate(size);
            INFO(last_allocation_error().ToString());
            REQUIRE(p != nullptr);
            std::memset(p, 0x5a, size);
            CHECK(PagesOffNode(p, size, a.id) == 0);
            freed.push_back(p);
          }
          std::size_t wrong_b = 0, wrong_a = 0, b_got_freed = 0, a_reused = 0;
          std::thread remote([&] {
            lab::PinnedTo pin(b.cpus);
            for (std::size_t i = 0; i < freed.size(); ++i) {
              if (i % 2 == 0) {
                deallocate(freed[i]);
              } else {
                deallocate(freed[i], size);
              }
            }
            const std::set<void*> freed_set(freed.begin(), freed.end());
            std::vector<void*> from_b, from_a;
            for (int i = 0; i < count; ++i) {
              void* p = arena_b->allocate(size);
              if (p == nullptr) continue;
              std::memset(p, 0x6b, size);
              wrong_b += PagesOffNode(p, size, b.id);
              b_got_freed += freed_set.count(p);
              from_b.push_back(p);
            }
            for (int i = 0; i < count; ++i) {
              void* p = arena_a->allocate(size);
              if (p == nullptr) continue;
              std::memset(p, 0x7c, size);
              wrong_a += PagesOffNode(p, size, a.id);
              a_reused += freed_set.count(p);
              from_a.push_back(p);
            }
            for (void* p : from_b) deallocate(p);
            for (void* p : from_a) deallocate(p);
            // This thread's caches go back when it exits; the large cache when purged.
            arena_a->purge();
            arena_b->purge();
          });
          remote.join();
          CHECK(wrong_b == 0);
          CHECK(b_got_freed == 0);
          CHECK(wrong_a == 0);
          CHECK(a_reused >= 1);  // the freed objects were cached and came back from A
        }
      }
    }
  }
}

TEST_CASE("a batch freed on another node's CPU waits in its arena's depot, not the other's") {
  // 96 objects of 160 KiB (15 MiB): far more than the freeing thread's front cache keeps, so
  // most of the batch goes to the medium depot of A's heap. B's arena must never hand them
  // out; A's must hand them all back, on A.
  constexpr std::size_t kSize = 160 * kKiB;
  constexpr int kCount = 96;
  const auto& lab = lab::Expected();
  for (const auto& a : lab.nodes) {
    for (const auto& b : lab.nodes) {
      if (a.id == b.id || b.memory_only()) continue;
      DYNAMIC_SECTION("A = node " << a.id << ", B = node " << b.id << " (the freeing thread's)") {
        Arena* arena_a = *Arena::ForNode(a.id);
        Arena* arena_b = *Arena::ForNode(b.id);
        arena_a->purge();
        std::vector<void*> batch;
        for (int i = 0; i < kCount; ++i) {
          void* p = arena_a->allocate(kSize);
          INFO(last_allocation_error().ToString());
          REQUIRE(p != nullptr);
          std::memset(p, 0x5a, kSize);
          batch.push_back(p);
        }
        std::size_t wrong_b = 0, b_got_freed = 0;
        const std::set<void*> freed(batch.begin(), batch.end());
        std::thread remote([&] {
          lab::PinnedTo pin(b.cpus);
          for (void* p : batch) deallocate(p);
          std::vector<void*> from_b;
          for (int i = 0; i < kCount; ++i) {
            void* p = arena_b->allocate(kSize);
            if (p == nullptr) continue;
            std::memset(p, 0x6b, kSize);
            wrong_b += PagesOffNode(p, kSize, b.id);
            b_got_freed += freed.count(p);
            from_b.push_back(p);
          }
          for (void* p : from_b) deallocate(p);
          arena_b->purge();
        });
        remote.join();  // the remote thread's own caches go back to jemalloc as it exits
        CHECK(wrong_b == 0);
        CHECK(b_got_freed == 0);
        const std::size_t cached = arena_a->stats().cached;
        CHECK(cached >= (kCount - 8) * kSize);
        std::size_t wrong_a = 0, a_reused = 0;
        std::vector<void*> again;
        for (int i = 0; i < kCount; ++i) {
          void* p = arena_a->allocate(kSize);
          REQUIRE(p != nullptr);
          std::memset(p, 0x7c, kSize);
          wrong_a += PagesOffNode(p, kSize, a.id);
          a_reused += freed.count(p);
          again.push_back(p);
        }
        CHECK(wrong_a == 0);
        CHECK(a_reused * kSize >= cached);  // everything the depot kept came back from A
        for (void* p : again) deallocate(p);
        arena_a->purge();
        CHECK(arena_a->stats().cached == 0);
      }
    }
  }
}

}  // namespace
}  // namespace numarena
