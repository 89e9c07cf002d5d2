// The front cache's medium classes (above 4 KiB, below 2 MiB), the heaps' medium depot behind
// them, the heaps' large cache (2 MiB and more) and each thread's one object of 2-4 MiB in the
// NUMA lab: an object one thread allocated from node A's arena and
// another thread, running on a CPU of another node, freed, is handed out again only by node A's
// arena, never by node B's; and every page of every object either arena hands out is on that
// arena's node, as the kernel (move_pages) reports it. The freeing thread faults in what it
// allocates itself, so a page on the arena's node proves the binding, not first touch. The
// test also checks that the caches were used (some freed addresses come back from A), so it
// cannot pass by leaving them out.
// lab-topologies: 2s snc4 cxl tiny
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "alloc/node_pages.hpp"
#include "lab_support.hpp"
#include "numarena/arena.hpp"
#include "numarena/page_nodes.hpp"
#include "resident_pages.hpp"

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

// `count` objects of `size` from `arena`, each written with `fill`; how many of their pages
// are not on `node`, and how many of them are in `freed`. Failed allocations are left out.
struct Taken {
  std::vector<void*> objects;
  std::size_t pages_off_node = 0;
  std::size_t from_freed = 0;
};
// Objects not aligned to `alignment` count as off their node.
Taken TakeAndWrite(Arena* arena, std::size_t size, int count, int node,
                   const std::set<void*>& freed, int fill,
                   std::size_t alignment = alignof(std::max_align_t)) {
  Taken taken;
  for (int i = 0; i < count; ++i) {
    void* p = arena->allocate(size, alignment);
    if (p == nullptr) continue;
    if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) ++taken.pages_off_node;
    std::memset(p, fill, size);
    taken.pages_off_node += PagesOffNode(p, size, node);
    taken.from_freed += freed.count(p);
    taken.objects.push_back(p);
  }
  return taken;
}

// What one round of the cross-node case saw: `count` objects of `size` (aligned to
// `alignment`) allocated from arena A, freed by a thread pinned to node B's CPUs (alternately
// unsized and sized), which then takes as many from B's arena and from A's.
struct CrossNodeRound {
  std::size_t wrong_a = 0;      // pages (or objects misaligned) off A's node, of A's objects
  std::size_t wrong_b = 0;      // the same for B
  std::size_t a_reused = 0;     // freed objects A handed out again
  std::size_t b_got_freed = 0;  // freed objects B handed out: must be none
};
CrossNodeRound FreeOnOtherNode(Arena* arena_a, const lab::ExpectedNode& a, Arena* arena_b,
                               const lab::ExpectedNode& b, std::size_t size,
                               std::size_t alignment, int count) {
  std::vector<void*> freed;
  for (int i = 0; i < count; ++i) {
    void* p = arena_a->allocate(size, alignment);
    INFO(last_allocation_error().ToString());
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % alignment == 0);
    std::memset(p, 0x5a, size);
    CHECK(PagesOffNode(p, size, a.id) == 0);
    freed.push_back(p);
  }
  CrossNodeRound round;
  std::thread remote([&] {
    lab::PinnedTo pin(b.cpus);
    // The thread's caches for A exist first (its first request makes them), so that the
    // frees below go into them.
    deallocate(arena_a->allocate(size, alignment));
    for (std::size_t i = 0; i < freed.size(); ++i) {
      if (i % 2 == 0) {
        deallocate(freed[i]);
      } else {
        deallocate(freed[i], size, alignment);
      }
    }
    const std::set<void*> freed_set(freed.begin(), freed.end());
    const Taken from_b = TakeAndWrite(arena_b, size, count, b.id, freed_set, 0x6b, alignment);
    const Taken from_a = TakeAndWrite(arena_a, size, count, a.id, freed_set, 0x7c, alignment);
    round.wrong_b = from_b.pages_off_node;
    round.b_got_freed = from_b.from_freed;
    round.wrong_a = from_a.pages_off_node;
    round.a_reused = from_a.from_freed;
    for (void* p : from_b.objects) deallocate(p, size, alignment);
    for (void* p : from_a.objects) deallocate(p);
    // This thread's caches go back when it exits; the shared caches when purged.
    arena_a->purge();
    arena_b->purge();
  });
  remote.join();
  return round;
}

// Every page on its arena's node, B never handed out A's objects, A at least `min_reused`.
void CheckOnlyAReused(const CrossNodeRound& round, std::size_t min_reused) {
  CHECK(round.wrong_b == 0);
  CHECK(round.b_got_freed == 0);
  CHECK(round.wrong_a == 0);
  CHECK(round.a_reused >= min_reused);
}

// Runs `round(a, arena_a, b, arena_b)` in a section per ordered pair of nodes: A any node,
// B another node with CPUs (the freeing thread's).
template <typename Round>
void ForEachNodePair(Round round) {
  const auto& lab = lab::Expected();
  for (const auto& a : lab.nodes) {
    for (const auto& b : lab.nodes) {
      if (a.id == b.id || b.memory_only()) continue;
      DYNAMIC_SECTION("A = node " << a.id << ", B = node " << b.id << " (the freeing thread's)") {
        round(a, *Arena::ForNode(a.id), b, *Arena::ForNode(b.id));
      }
    }
  }
}

TEST_CASE("medium and large objects freed on another node's CPU return only to their arena") {
  ForEachNodePair([](const auto& a, Arena* arena_a, const auto& b, Arena* arena_b) {
    // 2 MiB and 4 MiB: the freeing thread keeps its first one for itself (its own object of
    // 2-4 MiB per heap), the rest wait in A's large cache.
    for (std::size_t size : {8 * kKiB, 64 * kKiB, 256 * kKiB, 1 * kMiB, 1792 * kKiB, 2 * kMiB,
                             4 * kMiB, 8 * kMiB, 24 * kMiB}) {
      INFO("size " << size);
      const CrossNodeRound round = FreeOnOtherNode(
          arena_a, a, arena_b, b, size, alignof(std::max_align_t), size >= 8 * kMiB ? 2 : 4);
      CheckOnlyAReused(round, 1);  // the freed objects were cached and came back from A
    }
  });
}

TEST_CASE("aligned objects freed on another node's CPU return only to their arena") {
  // Aligned requests the caches serve (64 bytes up to 1.75 MiB, up to 4 KiB for small sizes:
  // posix_memalign for tensors) use the same per-(thread, heap) caches.
  const std::pair<std::size_t, std::size_t> kRequests[] = {
      {256, 64}, {4 * kKiB, 4 * kKiB}, {1000, 512}, {64 * kKiB, 64}, {1792 * kKiB - 100, 64}};
  ForEachNodePair([&](const auto& a, Arena* arena_a, const auto& b, Arena* arena_b) {
    for (const auto& [size, alignment] : kRequests) {
      INFO("size " << size << " alignment " << alignment);
      constexpr int kCount = 4;
      const CrossNodeRound round =
          FreeOnOtherNode(arena_a, a, arena_b, b, size, alignment, kCount);
      // The freed objects were cached and came back from A: all four up to 64 KiB; of
      // 1.75 MiB objects (above a thread's 256 KiB of medium objects) at least one comes back
      // through A's depot, and what overflows may go to jemalloc.
      CheckOnlyAReused(round, size <= 64 * kKiB ? std::size_t{kCount} : 1);
    }
  });
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
          const Taken from_b = TakeAndWrite(arena_b, kSize, kCount, b.id, freed, 0x6b);
          wrong_b = from_b.pages_off_node;
          b_got_freed = from_b.from_freed;
          for (void* p : from_b.objects) deallocate(p);
          arena_b->purge();
        });
        remote.join();  // the remote thread's own caches go back to jemalloc as it exits
        CHECK(wrong_b == 0);
        CHECK(b_got_freed == 0);
        const std::size_t cached = arena_a->stats().cached;
        CHECK(cached >= (kCount - 8) * kSize);
        const Taken again = TakeAndWrite(arena_a, kSize, kCount, a.id, freed, 0x7c);
        REQUIRE(again.objects.size() == static_cast<std::size_t>(kCount));
        CHECK(again.pages_off_node == 0);
        // Everything the depot kept came back from A.
        CHECK(again.from_freed * kSize >= cached);
        for (void* p : again.objects) deallocate(p);
        arena_a->purge();
        CHECK(arena_a->stats().cached == 0);
      }
    }
  }
}

// Runs `body(a, b, index)` in a section per ordered pair of nodes: A any node, B another node
// with CPUs (the thread's); `index` counts the sections.
template <typename Body>
void ForEachRemotePair(Body body) {
  const auto& lab = lab::Expected();
  int section = 0;
  for (const auto& a : lab.nodes) {
    for (const auto& b : lab.nodes) {
      if (a.id == b.id || b.memory_only()) continue;
      const int index = section++;
      DYNAMIC_SECTION("A = node " << a.id << ", B = node " << b.id << " (the thread's)") {
        body(a, b, index);
      }
    }
  }
}

// A 6 MiB block of a Bind(A) arena, written, grown to 12 MiB by `grow` (which returns the
// 12 MiB block), for every node A and every other node B with CPUs, on a thread pinned to B's
// CPUs (a heap of its own in each section, as far as the shard counts go; free address space
// after the block). The growth must keep the block's address and bytes, and every page of the
// 12 MiB must be on A: a page of the new part that first touch placed would be on B.
template <typename Grow>
void ForEachRemoteGrowth(Grow grow) {
  ForEachRemotePair([&](const lab::ExpectedNode& a, const lab::ExpectedNode& b, int section) {
    ArenaOptions options;
    options.shards = 1 + section % ArenaOptions::kMaxShards;
    auto made = Arena::ForPolicy(Policy::Bind(a.id), options);
    REQUIRE(made.ok());
    Arena* arena = *made;
    bool in_place = false;
    bool kept = false;
    std::size_t off_node = 0;
    std::thread remote([&] {
      lab::PinnedTo pin(b.cpus);
      void* range = arena->allocate(32 * kMiB);
      REQUIRE(range != nullptr);
      deallocate(range);
      arena->purge();  // free address space of the heap now
      auto* block = static_cast<unsigned char*>(arena->allocate(6 * kMiB));
      REQUIRE(block != nullptr);
      std::memset(block, 0x11, 6 * kMiB);
      auto* grown = static_cast<unsigned char*>(grow(arena, block));
      INFO(last_allocation_error().ToString());
      REQUIRE(grown != nullptr);
      in_place = grown == block;
      kept = grown[0] == 0x11 && grown[6 * kMiB - 1] == 0x11;
      std::memset(grown, 0x22, 12 * kMiB);
      off_node = PagesOffNode(grown, 12 * kMiB, a.id);
      deallocate(grown);
      arena->purge();
    });
    remote.join();
    CHECK(in_place);
    CHECK(kept);
    CHECK(off_node == 0);
  });
}

TEST_CASE("a large block grown in place keeps every page on its arena's node") {
  // A 12 MiB request meets the freed 6 MiB block in the heap's large cache: grown in place.
  ForEachRemoteGrowth([](Arena* arena, void* block) {
    deallocate(block);  // into the large cache
    return arena->allocate(12 * kMiB);
  });
}

TEST_CASE("a large block grown by reallocate keeps every page on its arena's node") {
  ForEachRemoteGrowth(
      [](Arena* arena, void* block) { return arena->reallocate(block, 12 * kMiB); });
}

// Pages that move (a large block that cannot grow, NodePages::MovePages) stay on their
// arena's node A, wherever the thread runs, and so do the pages that fault in later where
// they were. In each section a thread pinned to node B's CPUs works on a heap bound to A, in
// base pages (as under `numarena run`; a heap of its own in each section, as far as the
// shard counts go).
template <typename Move>
void ForEachRemoteMove(Move move) {
  ForEachRemotePair([&](const lab::ExpectedNode& a, const lab::ExpectedNode& b, int section) {
    ArenaOptions options;
    options.transparent_huge_pages = false;
    options.shards = 1 + section % ArenaOptions::kMaxShards;
    auto made = Arena::ForPolicy(Policy::Bind(a.id), options);
    REQUIRE(made.ok());
    Arena* arena = *made;
    bool moved = false, kept = false;
    std::size_t off_node = 0, refaulted_off_node = 0;
    std::thread remote([&] {
      lab::PinnedTo pin(b.cpus);
      auto* block = static_cast<unsigned char*>(arena->allocate(6 * kMiB));
      auto* neighbour = static_cast<unsigned char*>(arena->allocate(6 * kMiB));
      REQUIRE(block != nullptr);
      REQUIRE(neighbour != nullptr);
      REQUIRE(neighbour > block);
      REQUIRE(static_cast<std::size_t>(neighbour - block) < 12 * kMiB);  // in the way
      std::memset(block, 0x11, 6 * kMiB);
      auto* grown = static_cast<unsigned char*>(move(arena, block));
      INFO(last_allocation_error().ToString());
      REQUIRE(grown != nullptr);
      moved = grown != block;
      kept = grown[0] == 0x11 && grown[6 * kMiB - 1] == 0x11;
      std::memset(grown, 0x22, 12 * kMiB);
      off_node = PagesOffNode(grown, 12 * kMiB, a.id);
      // The old block's range is a span of the heap again: what the next allocations
      // carve from it faults in on A, not where this thread runs.
      std::vector<void*> again;
      for (int i = 0; i < 4; ++i) {
        void* p = arena->allocate(3 * kMiB);
        REQUIRE(p != nullptr);
        std::memset(p, 0x33, 3 * kMiB);
        refaulted_off_node += PagesOffNode(p, 3 * kMiB, a.id);
        again.push_back(p);
      }
      for (void* p : again) deallocate(p);
      deallocate(grown);
      deallocate(neighbour);
      arena->purge();
    });
    remote.join();
    CHECK(moved);
    CHECK(kept);
    CHECK(off_node == 0);
    CHECK(refaulted_off_node == 0);
  });
}

TEST_CASE("a cached large block's pages moved into a larger allocation stay on the node") {
  ForEachRemoteMove([](Arena* arena, void* block) {
    deallocate(block);  // into the large cache; 12 MiB cannot grow it past its neighbour
    return arena->allocate(12 * kMiB);
  });
}

TEST_CASE("a large block moved by reallocate keeps every page on its arena's node") {
  ForEachRemoteMove([](Arena* arena, void* block) { return arena->reallocate(block, 12 * kMiB); });
}

// For a section of ForEachRemotePair: a provider bound to A (heap id `owner`: the arenas above
// use low ids), and on a thread pinned to B's CPUs a committed 4 MiB span `from` (with
// `split_source`, its first half advised for huge pages and its second not: two mappings) and
// a committed 8 MiB span `to`; runs body(pages, from, to) on that thread, then decommits both
// and discards the provider.
template <typename Body>
void WithRemoteSpans(const lab::ExpectedNode& a, const lab::ExpectedNode& b, int owner,
                     bool split_source, Body body) {
  auto made = NodePages::Create(Policy::Bind(a.id), ArenaOptions{}, owner);
  REQUIRE(made.ok());
  NodePages* pages = *made;
  std::thread remote([&] {
    lab::PinnedTo pin(b.cpus);
    bool zero = false, commit = !split_source;
    auto* from = static_cast<unsigned char*>(
        pages->AllocateSpan(nullptr, 4 * kMiB, 2 * kMiB, &zero, &commit));
    commit = true;
    auto* to = static_cast<unsigned char*>(
        pages->AllocateSpan(nullptr, 8 * kMiB, 2 * kMiB, &zero, &commit));
    REQUIRE(from != nullptr);
    REQUIRE(to != nullptr);
    if (split_source) {
      REQUIRE(pages->Commit(from, 2 * kMiB, /*advise_huge=*/true));
      REQUIRE(pages->Commit(from + 2 * kMiB, 2 * kMiB, /*advise_huge=*/false));
    }
    body(pages, from, to);
    REQUIRE(pages->Decommit(from, 4 * kMiB));
    REQUIRE(pages->Decommit(to, 8 * kMiB));
  });
  remote.join();
  NodePages::Discard(pages);
}

TEST_CASE("the span pages moved out of is bound again: it faults in on the node") {
  // Both ways NodePages::MovePages leaves the source: mapped as it was (MREMAP_DONTUNMAP, which
  // must keep its memory policy) or, as before Linux 5.7 and in a process with locked memory,
  // mapped afresh and bound again. Either way a thread on B writing it afterwards must place
  // its pages on A, not on B by first touch.
  for (const bool keep_source : {true, false}) {
    NodePages::SetKeepSourceMovesForTesting(keep_source);
    ForEachRemotePair([&](const lab::ExpectedNode& a, const lab::ExpectedNode& b, int section) {
      INFO("MREMAP_DONTUNMAP tried first: " << keep_source);
      std::size_t moved_off = 0, source_off = 0;
      NodePages::MoveResult result = NodePages::MoveResult::kNotMoved;
      WithRemoteSpans(a, b, (keep_source ? 230 : 170) + section, /*split_source=*/false,
                      [&](NodePages* pages, unsigned char* from, unsigned char* to) {
                        std::memset(from, 0x44, 4 * kMiB);
                        result = pages->MovePages(from, to, 4 * kMiB);
                        moved_off = PagesOffNode(to, 4 * kMiB, a.id);
                        std::memset(from, 0x55, 4 * kMiB);
                        source_off = PagesOffNode(from, 4 * kMiB, a.id);
                      });
      CHECK(result == NodePages::MoveResult::kMoved);
      CHECK(moved_off == 0);
      CHECK(source_off == 0);
    });
  }
  NodePages::SetKeepSourceMovesForTesting(true);
}

TEST_CASE("a cached block grown over its freed neighbour moves every page, on the node") {
  // jemalloc carves a 6 MiB allocation from a freed 12 MiB block of a Bind(A) arena; the other
  // 6 MiB stay resident among its dirty extents. A 16 MiB request cannot grow the 6 MiB block
  // in place (a live block follows the 12 MiB), so it grows over those 6 MiB first and all
  // 12 MiB of pages move (arena.cpp, GrowLargeTowards). From a thread on B: every byte kept,
  // the 12 MiB resident before they are written again, and every page of the block on A.
  ForEachRemotePair([](const lab::ExpectedNode& a, const lab::ExpectedNode& b, int section) {
    ArenaOptions options;
    options.transparent_huge_pages = false;
    options.shards = 1 + section % ArenaOptions::kMaxShards;
    options.return_idle_ms = 60'000;  // a heap of its own: no other test here sets it
    auto made = Arena::ForPolicy(Policy::Bind(a.id), options);
    REQUIRE(made.ok());
    Arena* arena = *made;
    bool kept = false, resident = false;
    std::size_t off_node = 0;
    std::string setup_failure;  // Catch's REQUIRE may not run on another thread
    std::thread remote([&] {
      lab::PinnedTo pin(b.cpus);
      auto* block = static_cast<unsigned char*>(arena->allocate(12 * kMiB));
      auto* neighbour = static_cast<unsigned char*>(arena->allocate(12 * kMiB));
      if (block == nullptr || neighbour == nullptr || neighbour < block ||
          static_cast<std::size_t>(neighbour - block) >= 16 * kMiB) {  // in the way
        setup_failure = "the two 12 MiB blocks are not allocated one right after the other";
        return;
      }
      std::memset(block, 0x11, 12 * kMiB);
      deallocate(block);  // into the large cache
      auto* half = static_cast<unsigned char*>(arena->allocate(6 * kMiB));
      if (half != block) {  // carved from the cached block
        setup_failure = "the 6 MiB block is not carved from the cached 12 MiB one";
        return;
      }
      std::memset(half, 0x44, 6 * kMiB);
      deallocate(half);
      auto* large = static_cast<unsigned char*>(arena->allocate(16 * kMiB));
      if (large == nullptr) {
        setup_failure = "allocate(16 MiB): " + last_allocation_error().ToString();
        return;
      }
      const numarena::testing::ResidentPages moved =
          numarena::testing::CountResident(large, 12 * kMiB);
      resident = moved.resident == moved.pages;
      kept = large[0] == 0x44 && large[8 * kMiB] == 0x11;
      std::memset(large, 0x22, 16 * kMiB);
      off_node = PagesOffNode(large, 16 * kMiB, a.id);
      deallocate(large);
      deallocate(neighbour);
      arena->purge();
    });
    remote.join();
    INFO(setup_failure);
    REQUIRE(setup_failure.empty());
    CHECK(kept);
    CHECK(resident);
    CHECK(off_node == 0);
  });
}

TEST_CASE("a move the kernel refuses leaves the destination mapped and bound") {
  // A source over two mappings (half advised for huge pages): Linux before 6.17 refuses to
  // move it after it has unmapped the destination (mremap_to), which NodePages::MovePages
  // maps and binds again. Written from a CPU of B, every page of it must be on A; and a kernel
  // that moves it must have moved every byte.
  ForEachRemotePair([](const lab::ExpectedNode& a, const lab::ExpectedNode& b, int section) {
    NodePages::MoveResult result = NodePages::MoveResult::kMovedLeftHole;
    bool kept = false;
    std::size_t off_node = 0;
    WithRemoteSpans(a, b, 200 + section, /*split_source=*/true,
                    [&](NodePages* pages, unsigned char* from, unsigned char* to) {
                      std::memset(from, 0x66, 4 * kMiB);
                      result = pages->MovePages(from, to, 4 * kMiB);
                      const bool moved = result == NodePages::MoveResult::kMoved;
                      unsigned char* holder = moved ? to : from;
                      unsigned char* other = moved ? from : to;
                      kept = holder[0] == 0x66 && holder[4 * kMiB - 1] == 0x66;
                      std::memset(other, 0x67, 4 * kMiB);  // a hole would be SIGSEGV
                      off_node = PagesOffNode(other, 4 * kMiB, a.id) +
                                 PagesOffNode(holder, 4 * kMiB, a.id);
                    });
    INFO("result " << static_cast<int>(result));
    CHECK((result == NodePages::MoveResult::kMoved || result == NodePages::MoveResult::kNotMoved));
    CHECK(kept);
    CHECK(off_node == 0);
  });
}

}  // namespace
}  // namespace numarena
