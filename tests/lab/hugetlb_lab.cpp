// Per-node hugetlbfs pools in the NUMA lab. A mapping bound to a node takes its huge pages
// from that node's own pool (/sys/devices/system/node/nodeN/hugepages/), not the machine's:
// numarena must say so when the node's pool is empty or runs out, instead of letting the
// caller's first write die of SIGBUS because pages reserved on another node made the mmap
// succeed. The test reserves pools itself (root in the VM), so each case starts from known
// numbers, and checks every page of every block with move_pages.
// lab-topologies: 2s
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "lab_support.hpp"
#include "numarena/arena.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"

namespace numarena {
namespace {

constexpr std::size_t kHuge = ArenaOptions::kHugetlb2M;

std::string PoolFile(int node, const char* file) { return NodeHugePagePoolFile(node, kHuge, file); }

long ReadCount(int node, const char* file) {
  std::ifstream in(PoolFile(node, file));
  long value = -1;
  in >> value;
  return value;
}

// Sets node `node`'s pool of 2 MiB pages to `count` for the scope (0 again afterwards; pages
// still in use then become surplus and go back when the process exits).
class NodePool {
 public:
  NodePool(int node, long count) : node_(node) { Set(count); }
  ~NodePool() { Set(0); }
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;

 private:
  void Set(long count) { std::ofstream(PoolFile(node_, "nr_hugepages")) << count << "\n"; }
  int node_;
};

TEST_CASE("a node with no huge pages refuses, naming its own pool, while another node has some") {
  NodePool empty(0, 0);
  NodePool other(1, 8);
  REQUIRE(ReadCount(1, "nr_hugepages") == 8);
  auto topology = Topology::discover();
  REQUIRE(topology.ok());
  const NodeInfo* one = topology->node(1);
  REQUIRE(one != nullptr);
  REQUIRE(!one->huge_pages.empty());
  CHECK(one->huge_pages.front().page_bytes == kHuge);
  CHECK(one->huge_pages.front().total == 8);
  CHECK(topology->node(0)->huge_pages.front().total == 0);

  ArenaOptions options;
  options.hugetlb_page_bytes = kHuge;
  auto arena = Arena::ForPolicy(Policy::Bind(0), options);
  REQUIRE_FALSE(arena.ok());
  INFO(arena.status().ToString());
  CHECK(absl::IsFailedPrecondition(arena.status()));
  CHECK_THAT(std::string(arena.status().message()), Catch::Contains(PoolFile(0, "nr_hugepages")));
}

TEST_CASE("a hugetlb arena takes its node's pages, then refuses instead of SIGBUS") {
  // Node 0 holds more pages than node 1, so the machine-wide reservation the mmap makes keeps
  // succeeding after node 1's pool is used up: only the node's own count can stop it.
  NodePool plenty(0, 16);
  NodePool few(1, 4);
  REQUIRE(ReadCount(0, "nr_hugepages") == 16);
  REQUIRE(ReadCount(1, "nr_hugepages") == 4);
  ArenaOptions options;
  options.hugetlb_page_bytes = kHuge;
  auto arena = Arena::ForPolicy(Policy::Bind(1), options);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());

  std::vector<void*> blocks;
  void* p = nullptr;
  while (blocks.size() < 16 && (p = (*arena)->allocate(kHuge)) != nullptr) {
    std::memset(p, 0x6b, kHuge);  // without the fix: SIGBUS here once node 1 is empty
    auto nodes = page_node_list(p, kHuge);
    REQUIRE(nodes.ok());
    INFO("block " << blocks.size() << ": " << lab::SummarizePageNodes(*nodes));
    for (int n : *nodes) REQUIRE(n == 1);
    blocks.push_back(p);
  }
  INFO(blocks.size() << " blocks before the refusal");
  CHECK(p == nullptr);
  CHECK_FALSE(blocks.empty());
  CHECK(blocks.size() <= 4);
  Status error = last_allocation_error();
  INFO(error.ToString());
  CHECK(absl::IsFailedPrecondition(error));
  CHECK_THAT(std::string(error.message()), Catch::Contains("node 1's pool"));
  CHECK_THAT(std::string(error.message()), Catch::Contains(PoolFile(1, "nr_hugepages")));
  CHECK(ReadCount(0, "free_hugepages") == 16);  // nothing was taken from node 0
  for (void* b : blocks) deallocate(b);
}

}  // namespace
}  // namespace numarena
