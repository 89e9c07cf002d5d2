// Memory return keeps placement (ArenaOptions::return_idle_ms, lib/alloc/memory_return.cpp): a
// node-bound arena's freed blocks, returned to the kernel by a pass of the returner, are no
// longer resident (move_pages answers -ENOENT for their pages), and when the same addresses are
// allocated and written again by a thread running on the farthest node's CPUs, every page of
// them comes back on the arena's node: the purge kept the range's binding, so the binding, not
// first touch, decides where the new pages go. The same holds for what a thread's growth
// returns (ReturnAfterGrowth, every 1 MiB of fresh pages): the depot's buffers, purged, come
// back on the node.
// lab-topologies: 2s snc4 cxl tiny
#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "alloc/memory_return.hpp"
#include "lab_support.hpp"
#include "numarena/arena.hpp"
#include "numarena/page_nodes.hpp"

namespace numarena {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kBlock = 8 * kMiB;
constexpr int kBlocks = 3;
constexpr std::int64_t kHourNanos = std::int64_t{3600} * 1'000'000'000;

struct PageCount {
  std::size_t on_node = 0;
  std::size_t absent = 0;
  std::size_t elsewhere = 0;
};

PageCount Pages(const void* p, std::size_t size, int node) {
  PageCount count;
  auto nodes = page_node_list(p, size);
  INFO(nodes.status().ToString());
  REQUIRE(nodes.ok());
  for (int n : *nodes) {
    if (n == node) {
      ++count.on_node;
    } else if (n == -ENOENT) {
      ++count.absent;
    } else {
      ++count.elsewhere;
    }
  }
  return count;
}

// For every node with a farthest node that has CPUs: `body(arena, node)` on a thread pinned to
// the far node's CPUs, with an arena bound to the node whose returner never runs on its own
// (an hour's idle time): only the returns the test makes happen.
template <typename Body>
void OnEachNodeFromFar(Body body) {
  const auto& lab = lab::Expected();
  for (const auto& node : lab.nodes) {
    const auto far = lab.farthest_cpu_node(node.id);
    if (!far) continue;
    DYNAMIC_SECTION("arena on node " << node.id << ", thread on node " << *far) {
      ArenaOptions options;
      options.return_idle_ms = kHourNanos / 1'000'000;
      auto arena = Arena::ForPolicy(Policy::Bind(node.id), options);
      INFO(arena.status().ToString());
      REQUIRE(arena.ok());
      std::thread far_thread([&] {
        lab::PinnedTo pin(lab.node(*far).cpus);
        body(*arena, node.id);
      });
      far_thread.join();
    }
  }
}

TEST_CASE("pages returned to the kernel come back on the arena's node when written again") {
  OnEachNodeFromFar([](Arena* arena, int node_id) {
    const std::size_t pages = kBlock / static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    std::vector<void*> first;
    for (int i = 0; i < kBlocks; ++i) {
      void* p = arena->allocate(kBlock);
      REQUIRE(p != nullptr);
      std::memset(p, 0x5a, kBlock);
      CHECK(Pages(p, kBlock, node_id).on_node == pages);
      first.push_back(p);
    }
    for (void* p : first) deallocate(p);  // into the heap's large cache
    ReturnIdleMemory(CoarseNanos() + 2 * kHourNanos);
    for (void* p : first) {
      const PageCount returned = Pages(p, kBlock, node_id);
      INFO("after the pass: " << returned.on_node << " on the node, " << returned.elsewhere
                              << " elsewhere");
      CHECK(returned.absent == pages);
    }
    const std::set<void*> before(first.begin(), first.end());
    std::size_t same_address = 0;
    std::vector<void*> again;
    for (int i = 0; i < kBlocks; ++i) {
      void* p = arena->allocate(kBlock);
      REQUIRE(p != nullptr);
      std::memset(p, 0x6b, kBlock);  // faulted in by this thread, far from the node
      const PageCount count = Pages(p, kBlock, node_id);
      INFO("block " << i << ": " << count.elsewhere << " pages elsewhere, " << count.absent
                    << " absent");
      CHECK(count.on_node == pages);
      same_address += before.count(p);
      again.push_back(p);
    }
    // The returned ranges themselves were written again, not fresh ones.
    CHECK(same_address >= 1);
    for (void* p : again) deallocate(p);
    arena->purge();
  });
}

TEST_CASE("objects returned because a thread took fresh pages come back on the arena's node") {
  // No returner pass runs (an hour's idle time): the return under test is the one a thread's
  // growth makes (ReturnAfterGrowth, every 1 MiB of fresh pages). A thread far from the node
  // frees 48 buffers of 160 KiB (most go to the heap's depot), then allocates 2 MiB of 16 KiB
  // objects, which takes fresh pages: the depot's buffers go back to jemalloc and their pages
  // to the kernel. Every page of the new objects, and of the buffers allocated and written
  // again afterwards, is on the arena's node; no page of a returned buffer is anywhere else.
  constexpr std::size_t kBuffer = 160 * 1024, kObject = 16 * 1024;
  constexpr int kBuffers = 48, kObjects = 128;
  OnEachNodeFromFar([&](Arena* arena, int node_id) {
    auto written = [&](std::size_t size, unsigned char fill) {
      void* p = arena->allocate(size);
      REQUIRE(p != nullptr);
      std::memset(p, fill, size);
      const PageCount count = Pages(p, size, node_id);
      INFO(count.elsewhere << " pages elsewhere, " << count.absent << " absent");
      CHECK(count.elsewhere == 0);
      CHECK(count.absent == 0);
      return p;
    };
    std::vector<void*> buffers;
    for (int i = 0; i < kBuffers; ++i) buffers.push_back(written(kBuffer, 0x5a));
    for (void* p : buffers) deallocate(p, kBuffer);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<void*> objects;
    for (int i = 0; i < kObjects; ++i) objects.push_back(written(kObject, 0x33));
    std::size_t absent = 0, total = 0;
    for (void* p : buffers) {
      const PageCount count = Pages(p, kBuffer, node_id);
      CHECK(count.elsewhere == 0);
      absent += count.absent;
      total += count.on_node + count.absent + count.elsewhere;
    }
    INFO(absent << " of the freed buffers' " << total << " pages were returned");
    CHECK(absent >= total / 2);  // the thread's lists keep 1 MiB; new objects reuse some
    for (void* p : objects) deallocate(p, kObject);
    std::vector<void*> again;
    for (int i = 0; i < kBuffers; ++i) again.push_back(written(kBuffer, 0x6b));
    for (void* p : again) deallocate(p, kBuffer);
    arena->purge();
  });
}

}  // namespace
}  // namespace numarena
