// Topology discovery in the NUMA lab: Topology::discover() on a real multi-node kernel
// reports exactly the machine QEMU was given.
//
// The unit tests (tests/topology/topology_test.cpp) prove the parsing rules on fixture trees; this
// proves the fixtures were right about the kernel: node ids, the CPUs of each node, the SLIT
// distance matrix, CPU-less nodes, HMAT access attributes (kernel units: MB/s and ns) and
// each node's MemTotal, all compared with /lab/topology.txt (lab_support.hpp), which run.sh
// wrote from the same definition it built QEMU's -numa options from.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "lab_support.hpp"
#include "numarena/topology.hpp"

namespace numarena {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

const Topology& Discovered() {
  static const StatusOr<Topology> topology = Topology::discover();
  if (!topology.ok()) FAIL("Topology::discover() failed: " << topology.status());
  return *topology;
}

std::string Join(const std::vector<int>& ids) { return absl::StrJoin(ids, ","); }

TEST_CASE("discover() finds exactly the nodes QEMU was given") {
  const auto& lab = lab::Expected();
  const Topology& topo = Discovered();
  INFO("topology " << lab.name << ": " << lab.summary);
  for (const auto& w : topo.warnings()) UNSCOPED_INFO("discovery warning: " << w);
  CHECK(Join(topo.node_ids()) == Join(lab.node_ids()));
  for (const auto& expected : lab.nodes) {
    INFO("node " << expected.id);
    REQUIRE(topo.has_node(expected.id));
    const NodeInfo& node = *topo.node(expected.id);
    CHECK(Join(node.cpus) == Join(expected.cpus));
    CHECK(Join(topo.cpus_of_node(expected.id)) == Join(expected.cpus));
    CHECK(node.memory_only() == expected.memory_only());
    for (int cpu : expected.cpus) {
      auto owner = topo.node_of_cpu(cpu);
      REQUIRE(owner.ok());
      CHECK(*owner == expected.id);
    }
  }
  // A CPU the machine does not have belongs to no node.
  int cpu_count = 0;
  for (const auto& n : lab.nodes) cpu_count += static_cast<int>(n.cpus.size());
  CHECK(topo.node_of_cpu(cpu_count).status().code() == absl::StatusCode::kNotFound);
  CHECK_FALSE(topo.has_node(lab.nodes.back().id + 1));
}

TEST_CASE("each node's memory is the size QEMU gave it") {
  const auto& lab = lab::Expected();
  const Topology& topo = Discovered();
  INFO("topology " << lab.name);
  for (const auto& expected : lab.nodes) {
    INFO("node " << expected.id << ": " << expected.mem_mib << " MiB configured");
    const NodeInfo* node = topo.node(expected.id);
    REQUIRE(node != nullptr);
    const std::uint64_t configured = expected.mem_mib * kMiB;
    // MemTotal excludes what the kernel reserved at boot (its image on node 0, struct pages,
    // per-node boot allocations, firmware holes): 2-5 % on large nodes, but a near-fixed
    // 30-40 MiB on tiny's 256 MiB node (14 % seen). Allow 12 % or 64 MiB, whichever is more,
    // and never more than configured.
    const std::uint64_t reserved_allowance =
        std::max<std::uint64_t>(configured / 100 * 12, 64 * kMiB);
    CHECK(node->mem_total_bytes <= configured);
    CHECK(node->mem_total_bytes + reserved_allowance >= configured);
    CHECK(node->mem_free_bytes <= node->mem_total_bytes);
    CHECK(node->mem_free_bytes > 0);
  }
}

TEST_CASE("the distance matrix is the one QEMU was given") {
  const auto& lab = lab::Expected();
  const Topology& topo = Discovered();
  INFO("topology " << lab.name);
  for (const auto& from : lab.nodes) {
    for (const auto& to : lab.nodes) {
      INFO("distance " << from.id << " -> " << to.id);
      CHECK(topo.distance(from.id, to.id) == lab.distance(from.id, to.id));
    }
  }
  CHECK(topo.distance(lab.nodes.front().id, lab.nodes.back().id + 1) == -1);
}

TEST_CASE("nodes_by_distance orders the nodes by the given distances") {
  const auto& lab = lab::Expected();
  const Topology& topo = Discovered();
  INFO("topology " << lab.name);
  for (const auto& from : lab.nodes) {
    std::vector<int> want = lab.node_ids();
    std::stable_sort(want.begin(), want.end(), [&](int a, int b) {
      if ((a == from.id) != (b == from.id)) return a == from.id;
      return lab.distance(from.id, a) < lab.distance(from.id, b);
    });
    INFO("from node " << from.id);
    CHECK(Join(topo.nodes_by_distance(from.id)) == Join(want));
  }
}

TEST_CASE("HMAT access attributes are the ones QEMU was given") {
  const auto& lab = lab::Expected();
  const Topology& topo = Discovered();
  INFO("topology " << lab.name);
  for (const auto& expected : lab.nodes) {
    INFO("node " << expected.id);
    const NodeInfo* node = topo.node(expected.id);
    REQUIRE(node != nullptr);
    auto want = lab.expected_access0(expected.id);
    if (!want) {
      // No HMAT table: the kernel has no access0 directory and discovery reports nothing.
      CHECK_FALSE(node->access.has_value());
      continue;
    }
    REQUIRE(node->access.has_value());
    const AccessAttributes& got = *node->access;
    CHECK(got.read_latency_ns == want->latency_ns);
    CHECK(got.write_latency_ns == want->latency_ns);
    CHECK(got.read_bandwidth_mbps == want->bandwidth_mbps);
    CHECK(got.write_bandwidth_mbps == want->bandwidth_mbps);
    CHECK(Join(got.initiators) == Join({*expected.hmat_initiator}));
  }
}

TEST_CASE("a memory-only node is the slow tier the HMAT describes") {
  const auto& lab = lab::Expected();
  const Topology& topo = Discovered();
  std::vector<int> memory_only;
  for (const auto& n : lab.nodes)
    if (n.memory_only()) memory_only.push_back(n.id);
  if (memory_only.empty()) {
    // Every node of this topology has CPUs, and discovery must agree.
    for (const auto& node : topo.nodes()) CHECK_FALSE(node.memory_only());
    return;
  }
  INFO("topology " << lab.name);
  for (int slow : memory_only) {
    const NodeInfo* node = topo.node(slow);
    REQUIRE(node != nullptr);
    CHECK(node->memory_only());
    CHECK(topo.cpus_of_node(slow).empty());
    if (!lab.hmat) continue;
    REQUIRE(node->access.has_value());
    for (int fast : lab.cpu_node_ids()) {
      const NodeInfo* dram = topo.node(fast);
      REQUIRE(dram != nullptr);
      REQUIRE(dram->access.has_value());
      INFO("memory-only node " << slow << " vs CPU node " << fast);
      CHECK(node->access->read_latency_ns > dram->access->read_latency_ns);
      CHECK(node->access->read_bandwidth_mbps < dram->access->read_bandwidth_mbps);
    }
  }
}

TEST_CASE("the process may use every CPU and node of the lab machine") {
  const auto& lab = lab::Expected();
  const Topology& topo = Discovered();
  INFO("topology " << lab.name);
  std::vector<int> cpus;
  for (const auto& n : lab.nodes) cpus.insert(cpus.end(), n.cpus.begin(), n.cpus.end());
  std::sort(cpus.begin(), cpus.end());
  CHECK(Join(topo.process().allowed_cpus) == Join(cpus));
  CHECK(Join(topo.process().allowed_mem_nodes) == Join(lab.node_ids()));
  for (int id : lab.node_ids()) CHECK(topo.memory_allowed(id));
  CHECK(Join(topo.nodes_of_cpus(cpus)) == Join(lab.cpu_node_ids()));
}

TEST_CASE("current_node() follows the thread from node to node") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name);
  for (int node : lab.cpu_node_ids()) {
    lab::PinnedTo pin(lab.node(node).cpus);
    INFO("pinned to the CPUs of node " << node);
    CHECK(Topology::current_node() == node);
  }
}

TEST_CASE("Topology::system() is the discovered machine") {
  const auto& lab = lab::Expected();
  auto system = Topology::system();
  REQUIRE(system.ok());
  CHECK(Join((*system)->node_ids()) == Join(lab.node_ids()));
  auto again = Topology::system();
  REQUIRE(again.ok());
  CHECK(*again == *system);  // discovered once, shared
}

}  // namespace
}  // namespace numarena
