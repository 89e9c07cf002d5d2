// Capacity in the NUMA lab (`tiny`: node 1 has only 256 MiB). MPOL_BIND memory past a node's
// capacity makes the kernel OOM-kill the process when the pages are touched; numarena's
// provider checks the node's free memory before it commits, so a Bind/Strict arena returns
// nullptr with ResourceExhausted and the process lives on. A Preferred arena moves on to the
// nearest node instead and counts the fallback. Every block is written as soon as it is
// allocated, as a real user would, and its pages are checked with move_pages.
// lab-topologies: tiny
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "lab_support.hpp"
#include "numarena/arena.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"

namespace numarena {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kBlock = 16 * kMiB;

// The smallest node of the lab machine.
const lab::ExpectedNode& SmallNode() {
  const auto& lab = lab::Expected();
  const lab::ExpectedNode* small = &lab.nodes.front();
  for (const auto& n : lab.nodes) {
    if (n.mem_mib < small->mem_mib) small = &n;
  }
  return *small;
}

TEST_CASE("Bind/Strict past the small node's capacity returns nullptr, not an OOM kill") {
  const auto& small = SmallNode();
  INFO("node " << small.id << " has " << small.mem_mib << " MiB");
  auto arena = Arena::ForNode(small.id);
  REQUIRE(arena.ok());
  // What the node has free before we start (the kernel, init and, under ASan, its runtime
  // already hold part of a 256 MiB node).
  auto before = numarena::Topology::discover();
  REQUIRE(before.ok());
  REQUIRE(before->node(small.id) != nullptr);
  const std::uint64_t free_at_start = before->node(small.id)->mem_free_bytes;
  INFO("free at start: " << (free_at_start >> 20) << " MiB");
  std::vector<void*> blocks;
  const std::size_t limit = 2 * small.mem_mib * kMiB / kBlock;  // twice the node: must stop
  void* p = nullptr;
  for (std::size_t i = 0; i < limit; ++i) {
    p = (*arena)->allocate(kBlock);
    if (p == nullptr) break;
    std::memset(p, 0xee, kBlock);  // fault it in now: this is where an OOM kill would happen
    blocks.push_back(p);
  }
  REQUIRE(p == nullptr);
  Status error = last_allocation_error();
  INFO(error.ToString());
  CHECK(error.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(error.message()), Catch::Contains("node " + std::to_string(small.id)));
  // It used most of the node before refusing, and every page is on it.
  CHECK(blocks.size() * kBlock >= free_at_start / 2);
  CHECK(blocks.size() * kBlock <= small.mem_mib * kMiB);
  for (void* b : blocks) {
    auto counts = page_nodes(b, kBlock);
    REQUIRE(counts.ok());
    CHECK(counts->on(small.id) == counts->total_pages);
  }
  CHECK((*arena)->stats().refusals >= 1);
  // try_allocate says why. The node's free memory moves meanwhile (the kernel reclaims page
  // cache as the node fills, and the guard counts half of it), so a block or two may fit
  // again first (CI, 2026-12-07: refused at 32 MiB free, then admitted on a fresh reading).
  auto reason = (*arena)->try_allocate(kBlock);
  for (int i = 0; i < 4 && reason.ok(); ++i) {
    std::memset(*reason, 0xee, kBlock);
    blocks.push_back(*reason);
    reason = (*arena)->try_allocate(kBlock);
  }
  CHECK(reason.status().code() == absl::StatusCode::kResourceExhausted);

  // Freed and purged, the memory is usable again.
  for (void* b : blocks) deallocate(b);
  (*arena)->purge();
  void* again = (*arena)->allocate(kBlock);
  INFO(last_allocation_error().ToString());
  REQUIRE(again != nullptr);
  std::memset(again, 1, kBlock);
  deallocate(again);
  (*arena)->purge();
}

TEST_CASE("Preferred falls back to the nearest node when the small node is full") {
  const auto& lab = lab::Expected();
  const auto& small = SmallNode();
  int nearest = -1;
  for (const auto& n : lab.nodes) {
    if (n.id == small.id) continue;
    if (nearest < 0 || small.distance_to.at(n.id) < small.distance_to.at(nearest)) nearest = n.id;
  }
  REQUIRE(nearest >= 0);
  auto arena = Arena::ForPolicy(Policy::Preferred(small.id));
  REQUIRE(arena.ok());
  std::vector<void*> blocks;
  std::size_t on_small = 0, on_nearest = 0;
  const std::size_t count = (small.mem_mib + 128) * kMiB / kBlock;  // past the small node
  for (std::size_t i = 0; i < count; ++i) {
    void* p = (*arena)->allocate(kBlock);
    INFO("block " << i << ": " << last_allocation_error().ToString());
    REQUIRE(p != nullptr);
    std::memset(p, 0x11, kBlock);
    int node = node_of(p);
    auto counts = page_nodes(p, kBlock);
    REQUIRE(counts.ok());
    CHECK(counts->on(node) == counts->total_pages);  // node_of tells the truth
    on_small += node == small.id;
    on_nearest += node == nearest;
    blocks.push_back(p);
  }
  CHECK(on_small >= 1);
  CHECK(on_nearest >= 1);
  CHECK(on_small + on_nearest == blocks.size());
  ArenaStats stats = (*arena)->stats();
  CHECK(stats.fallbacks >= on_nearest);
  CHECK(stats.jemalloc_arenas == 2);
  for (void* p : blocks) deallocate(p);
  (*arena)->purge();
}

}  // namespace
}  // namespace numarena
