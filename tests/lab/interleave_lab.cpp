// lab-topologies: 2s snc4 cxl
// lab-kernel-6.12: 2s cxl
//
// Interleaved buffers in the NUMA lab: page interleave over every node deals pages evenly
// (and exactly where ExpectedNode says), huge-page interleave stays within one huge page of
// even, and weighted interleave puts every chunk on the node WeightedChunkNode names, so
// {0:3, 1:1} is exactly 3:1. The node of every page comes from move_pages (page_node_list)
// and the node set from the topology QEMU was given (lab_support.hpp). Buffers are written
// from one CPU node, so a page elsewhere proves the policy set before first touch.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "lab_support.hpp"
#include "numarena/interleave.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/policy.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

const std::size_t kPage = os::PageSize();
constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Discover before any pinning (see first_touch_lab.cpp).
void DiscoverFirst() {
  auto t = Topology::system();
  if (!t.ok()) throw std::runtime_error(std::string(t.status().message()));
}

std::map<int, std::size_t> PagesPerNode(const std::vector<int>& nodes) {
  std::map<int, std::size_t> per_node;
  for (int n : nodes) ++per_node[n];
  return per_node;
}

// max - min of the per-node page counts over `set` (absent nodes count 0).
std::size_t Spread(const std::map<int, std::size_t>& per_node, const std::vector<int>& set) {
  std::size_t fewest = SIZE_MAX, most = 0;
  for (int node : set) {
    auto it = per_node.find(node);
    std::size_t count = it == per_node.end() ? 0 : it->second;
    fewest = std::min(fewest, count);
    most = std::max(most, count);
  }
  return most - fewest;
}

// Every page is where ExpectedNode says; returns the first page that is not, or -1.
long FirstUnexpected(const InterleavedBuffer& buffer, const std::vector<int>& nodes) {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] != buffer.ExpectedNode(i * kPage)) return static_cast<long>(i);
  }
  return -1;
}

TEST_CASE("page interleave over every node deals pages evenly, as ExpectedNode predicts") {
  const auto& lab = lab::Expected();
  DiscoverFirst();
  INFO("topology " << lab.name);
  const std::vector<int> all = lab.node_ids();
  lab::PinnedTo pin(lab.node(lab.cpu_node_ids().front()).cpus);

  InterleaveOptions options;
  options.huge_pages = false;
  auto buffer =
      AllocateInterleaved((std::size_t{8} << 20) + 3 * kPage + 1, Policy::Interleave(all), options);
  REQUIRE(buffer.ok());
  CHECK(buffer->stats().applied == AppliedPlacement::kAsRequested);
  std::memset(buffer->data(), 0x2b, buffer->size());  // first touch from one node

  auto nodes = page_node_list(buffer->data(), buffer->size());
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == buffer->mapped_bytes() / kPage);
  INFO(lab::SummarizePageNodes(*nodes));
  auto per_node = PagesPerNode(*nodes);
  CHECK(per_node.size() == all.size());
  CHECK(Spread(per_node, all) <= 1);
  long unexpected = FirstUnexpected(*buffer, *nodes);
  INFO("first page off ExpectedNode: " << unexpected);
  CHECK(unexpected == -1);
}

TEST_CASE("huge-page interleave stays within one huge page of even") {
  const auto& lab = lab::Expected();
  DiscoverFirst();
  INFO("topology " << lab.name);
  const std::vector<int> all = lab.node_ids();
  lab::PinnedTo pin(lab.node(lab.cpu_node_ids().front()).cpus);

  InterleaveOptions options;
  options.populate = true;
  auto buffer = AllocateInterleaved(16 * kHugePage, Policy::Interleave(all), options);
  REQUIRE(buffer.ok());
  CHECK(buffer->stats().huge_pages);
  CHECK(buffer->ExpectedNode(0) == -1);
  auto nodes = page_node_list(buffer->data(), buffer->size());
  REQUIRE(nodes.ok());
  INFO(lab::SummarizePageNodes(*nodes));
  auto per_node = PagesPerNode(*nodes);
  CHECK(per_node.size() == all.size());
  // Each 2 MiB unit is one huge page on one node or 512 base pages dealt round-robin.
  CHECK(Spread(per_node, all) <= kHugePage / kPage);
}

TEST_CASE("weighted {0:3, 1:1} puts exactly three chunks on node 0 for each on node 1") {
  const auto& lab = lab::Expected();
  DiscoverFirst();
  INFO("topology " << lab.name);
  // Written from node 1's CPU: node 0's chunks prove the binding.
  lab::PinnedTo pin(lab.node(1).cpus);
  const auto policy = Policy::WeightedInterleave({{0, 3}, {1, 1}});
  const std::size_t chunk = policy.chunk_bytes();
  const std::size_t chunks = 8;  // two full periods of 3 + 1
  auto buffer = AllocateInterleaved(chunks * chunk, policy);
  REQUIRE(buffer.ok());
  CHECK(buffer->stats().applied == AppliedPlacement::kAsRequested);
  CHECK(buffer->stats().ranges == 4);  // runs: 0,0,0 | 1 | 0,0,0 | 1
  std::memset(buffer->data(), 0x6d, buffer->size());

  auto nodes = page_node_list(buffer->data(), buffer->size());
  REQUIRE(nodes.ok());
  INFO(lab::SummarizePageNodes(*nodes));
  const std::size_t pages_per_chunk = chunk / kPage;
  for (std::size_t c = 0; c < chunks; ++c) {
    const int want = WeightedChunkNode(policy.weights(), c);
    CHECK(want == (c % 4 == 3 ? 1 : 0));
    std::size_t on_want = 0;
    for (std::size_t p = 0; p < pages_per_chunk; ++p) {
      const std::size_t page = c * pages_per_chunk + p;
      REQUIRE(buffer->ExpectedNode(page * kPage) == want);
      on_want += (*nodes)[page] == want ? 1 : 0;
    }
    INFO("chunk " << c << " wants node " << want);
    CHECK(on_want == pages_per_chunk);
  }
  auto per_node = PagesPerNode(*nodes);
  CHECK(per_node[0] == 3 * per_node[1]);
  CHECK(per_node[1] == 2 * pages_per_chunk);
}

TEST_CASE("weighted interleave over every node with small chunks, page by page") {
  const auto& lab = lab::Expected();
  DiscoverFirst();
  INFO("topology " << lab.name);
  lab::PinnedTo pin(lab.node(lab.cpu_node_ids().front()).cpus);
  // Weights 1, 2, 3, ... in node order, 64 KiB chunks, base pages, a ragged last chunk.
  std::vector<NodeWeight> weights;
  unsigned weight = 1;
  unsigned period = 0;
  for (int node : lab.node_ids()) {
    weights.push_back({node, weight});
    period += weight++;
  }
  const std::size_t chunk = 16 * kPage;
  const auto policy = Policy::WeightedInterleave(weights, BindMode::kStrict, chunk);
  InterleaveOptions options;
  options.huge_pages = false;
  options.populate = true;
  const std::size_t bytes = 3 * period * chunk + 5 * kPage + 17;
  auto buffer = AllocateInterleaved(bytes, policy, options);
  REQUIRE(buffer.ok());
  CHECK(buffer->stats().ranges == 3 * weights.size() + 1);
  auto nodes = page_node_list(buffer->data(), buffer->size());
  REQUIRE(nodes.ok());
  INFO(lab::SummarizePageNodes(*nodes));
  long unexpected = FirstUnexpected(*buffer, *nodes);
  INFO("first page off ExpectedNode: " << unexpected);
  CHECK(unexpected == -1);
  // Three full periods: node with weight w holds 3 * w chunks; the ragged tail is node 0's.
  auto per_node = PagesPerNode(*nodes);
  for (const NodeWeight& w : weights) {
    const std::size_t tail = w.node == weights.front().node ? 6 : 0;
    CHECK(per_node[w.node] == 3 * w.weight * (chunk / kPage) + tail);
  }
}

}  // namespace
}  // namespace numarena
