// KV placement (lib/kv/kv_placement.hpp) on its own: home nodes and the cold tier from the
// options or from a synthetic topology view, every refusal, the farthest-node tie breaks,
// and views of recorded machines (tests/fixtures).
#include "kv/kv_placement.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "fixture_machine.hpp"

namespace {

using numarena::KvColdTier;
using numarena::KvPoolOptions;
using numarena::kv::NodeFacts;
using numarena::kv::ResolvePlacement;
using numarena::kv::TopologyView;

// snc-like: 0,1 one socket (12), 2,3 the other (32); 4 a memory-only CXL node.
TopologyView SncWithCxl() {
  TopologyView view;
  view.nodes = {{0, true, true, 0},
                {1, true, true, 0},
                {2, true, true, 0},
                {3, true, true, 0},
                {4, false, true, 5000}};
  view.distance = [](int a, int b) {
    if (a == b) return 10;
    if (a == 4 || b == 4) return 40;
    return (a / 2 == b / 2) ? 12 : 32;
  };
  view.node_of_cpu = [](int cpu) -> numarena::StatusOr<int> {
    if (cpu < 0 || cpu >= 32) return absl::NotFoundError("no such CPU");
    return cpu / 8;
  };
  view.node_of_device = [](const std::string& bus) -> numarena::StatusOr<int> {
    if (bus == "0000:41:00.0") return 2;
    return absl::NotFoundError("unknown PCI device " + bus);
  };
  return view;
}

absl::StatusCode CodeOf(const KvPoolOptions& o, const TopologyView* view) {
  return ResolvePlacement(o, view).status().code();
}

std::string MessageOf(const KvPoolOptions& o, const TopologyView* view) {
  return std::string(ResolvePlacement(o, view).status().message());
}

}  // namespace

TEST_CASE("placement: defaults from the topology") {
  const TopologyView view = SncWithCxl();
  KvPoolOptions o;
  o.cold_tier = KvColdTier::Farthest();
  auto p = ResolvePlacement(o, &view);
  REQUIRE(p.ok());
  CHECK(p->home_nodes == std::vector<int>{0, 1, 2, 3});
  CHECK(p->cold_nodes == std::vector<int>{4});

  o.near_device = "0000:41:00.0";  // on node 2: its socket is {2, 3}
  p = ResolvePlacement(o, &view);
  REQUIRE(p.ok());
  CHECK(p->home_nodes == std::vector<int>{2, 3});

  o.near_device.clear();
  o.near_cpus = {1, 2};  // node 0
  p = ResolvePlacement(o, &view);
  REQUIRE(p.ok());
  CHECK(p->home_nodes == std::vector<int>{0});
  CHECK(p->cold_nodes == std::vector<int>{4});  // distance 40 beats 32

  o.near_cpus = {20, 1};  // nodes 2 and 0, in ascending node order
  p = ResolvePlacement(o, &view);
  REQUIRE(p.ok());
  CHECK(p->home_nodes == std::vector<int>{0, 2});

  o.near_cpus.clear();
  o.home_nodes = {0, 1, 2, 3, 4};  // every node is home: no node is left for the cold tier
  CHECK(CodeOf(o, &view) == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(MessageOf(o, &view),
             Catch::Contains("found no allowed node outside the home nodes (0,1,2,3,4)"));
}

TEST_CASE("placement: default homes leave out memory-only, disallowed and cold nodes") {
  TopologyView view;
  view.nodes = {{0, true, true, 0}, {1, true, false, 0}, {2, false, true, 0}, {3, true, true, 0}};
  view.distance = [](int a, int b) { return a == b ? 10 : 20; };
  KvPoolOptions o;
  auto p = ResolvePlacement(o, &view);
  REQUIRE(p.ok());
  CHECK(p->home_nodes == std::vector<int>{0, 3});
  CHECK(p->cold_nodes.empty());
  o.cold_tier = KvColdTier::Node(3);
  p = ResolvePlacement(o, &view);
  REQUIRE(p.ok());
  CHECK(p->home_nodes == std::vector<int>{0});
  CHECK(p->cold_nodes == std::vector<int>{3});
  o.cold_tier = KvColdTier::Interleave({0, 3});  // no CPU node left for the homes
  CHECK(CodeOf(o, &view) == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(MessageOf(o, &view), Catch::Contains("set KvPoolOptions::home_nodes"));
}

TEST_CASE("placement: explicit nodes without a topology are taken as given") {
  KvPoolOptions o;
  o.home_nodes = {5, 0};
  o.cold_tier = KvColdTier::Interleave({9, 7, 9});
  auto p = ResolvePlacement(o, nullptr);
  REQUIRE(p.ok());
  CHECK(p->home_nodes == std::vector<int>{5, 0});  // group order is the caller's
  CHECK(p->cold_nodes == std::vector<int>{7, 9});  // ascending, once each
}

TEST_CASE("placement: refusals name the node and what to do") {
  const TopologyView view = SncWithCxl();
  KvPoolOptions o;
  o.home_nodes = {0, 1};
  SECTION("negative node") {
    o.home_nodes = {0, -1};
    CHECK(CodeOf(o, nullptr) == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(o, nullptr), Catch::Contains("home node -1 is negative"));
  }
  SECTION("node id beyond what numarena supports") {
    o.cold_tier = KvColdTier::Node(1 << 30);
    CHECK(CodeOf(o, nullptr) == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(o, nullptr),
               Catch::Contains("cold tier node 1073741824") && Catch::Contains("largest node id"));
  }
  SECTION("home listed twice") {
    o.home_nodes = {1, 0, 1};
    CHECK(CodeOf(o, &view) == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(o, &view), Catch::Contains("home node 1 is listed twice"));
  }
  SECTION("not an online node") {
    o.cold_tier = KvColdTier::Node(7);
    CHECK(CodeOf(o, &view) == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(o, &view), Catch::Contains("node 7 is not an online NUMA node"));
  }
  SECTION("a node the process may not use") {
    TopologyView limited = view;
    limited.nodes[4].allowed = false;
    o.cold_tier = KvColdTier::Node(4);
    CHECK(CodeOf(o, &limited) == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(o, &limited),
               Catch::Contains("cold tier node 4 is not in the process's allowed memory nodes"));
  }
  SECTION("cold node that is also a home node") {
    o.cold_tier = KvColdTier::Node(1);
    CHECK(CodeOf(o, &view) == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(o, &view), Catch::Contains("node 1 is both a home node"));
  }
  SECTION("cold tier shapes") {
    o.cold_tier = {KvColdTier::Kind::kNone, {3}};
    CHECK_THAT(MessageOf(o, &view), Catch::Contains("kNone must not name nodes"));
    o.cold_tier = {KvColdTier::Kind::kNode, {2, 3}};
    CHECK_THAT(MessageOf(o, &view), Catch::Contains("kNode needs exactly one node, got 2"));
    o.cold_tier = {KvColdTier::Kind::kNode, {}};
    CHECK_THAT(MessageOf(o, &view), Catch::Contains("kNode needs exactly one node, got 0"));
    o.cold_tier = KvColdTier::Interleave({});
    CHECK_THAT(MessageOf(o, &view), Catch::Contains("interleaved cold tier has no nodes"));
    CHECK(CodeOf(o, &view) == absl::StatusCode::kInvalidArgument);
  }
  SECTION("defaults need a topology") {
    o.home_nodes.clear();
    CHECK(CodeOf(o, nullptr) == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(MessageOf(o, nullptr), Catch::Contains("set home_nodes or topology"));
    o.home_nodes = {0};
    o.cold_tier = KvColdTier::Farthest();
    CHECK(CodeOf(o, nullptr) == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(MessageOf(o, nullptr), Catch::Contains("Farthest needs a topology"));
  }
  SECTION("near_cpus") {
    o.home_nodes.clear();
    o.near_cpus = {3, 99};
    CHECK(CodeOf(o, &view) == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(o, &view), Catch::Contains("near_cpus names CPU 99"));
    TopologyView no_map = view;
    no_map.node_of_cpu = nullptr;
    o.near_cpus = {3};
    CHECK(CodeOf(o, &no_map) == absl::StatusCode::kInvalidArgument);
    // CPUs whose nodes the process may not use leave nothing.
    TopologyView limited = view;
    limited.nodes[0].allowed = false;
    CHECK(CodeOf(o, &limited) == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("near_device") {
    o.home_nodes.clear();
    o.near_device = "0000:99:00.0";
    CHECK(CodeOf(o, &view) == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(o, &view),
               Catch::Contains("near_device 0000:99:00.0: unknown PCI device 0000:99:00.0"));
    TopologyView no_map = view;
    no_map.node_of_device = nullptr;
    CHECK(CodeOf(o, &no_map) == absl::StatusCode::kFailedPrecondition);
  }
}

TEST_CASE("placement: the farthest node's tie breaks") {
  // Homes {0}; nodes 1..3 all at distance 30 from it.
  TopologyView view;
  view.distance = [](int a, int b) { return a == b ? 10 : 30; };
  KvPoolOptions o;
  o.home_nodes = {0};
  o.cold_tier = KvColdTier::Farthest();
  SECTION("a memory-only node beats CPU nodes") {
    view.nodes = {{0, true, true, 0}, {1, true, true, 0}, {2, false, true, 0}, {3, true, true, 0}};
    CHECK(ResolvePlacement(o, &view)->cold_nodes == std::vector<int>{2});
  }
  SECTION("then the lowest known read bandwidth") {
    view.nodes = {
        {0, true, true, 0}, {1, false, true, 9000}, {2, false, true, 3000}, {3, false, true, 6000}};
    CHECK(ResolvePlacement(o, &view)->cold_nodes == std::vector<int>{2});
  }
  SECTION("then the lowest id (an unknown bandwidth decides nothing)") {
    view.nodes = {
        {0, true, true, 0}, {1, false, true, 9000}, {2, false, true, 0}, {3, false, true, 3000}};
    // 1 vs 2: unknown, keep 1; 1 vs 3: 3000 < 9000, take 3.
    CHECK(ResolvePlacement(o, &view)->cold_nodes == std::vector<int>{3});
    view.nodes = {{0, true, true, 0}, {1, true, true, 0}, {2, true, true, 0}};
    CHECK(ResolvePlacement(o, &view)->cold_nodes == std::vector<int>{1});
  }
  SECTION("distance first, and disallowed nodes never") {
    view.nodes = {
        {0, true, true, 0}, {1, false, true, 100}, {2, true, true, 0}, {3, true, false, 0}};
    view.distance = [](int a, int b) {
      if (a == b) return 10;
      return (a == 3 || b == 3) ? 50 : (a == 2 || b == 2) ? 40 : 20;
    };
    CHECK(ResolvePlacement(o, &view)->cold_nodes == std::vector<int>{2});
  }
}

TEST_CASE("placement: views of recorded machines") {
  SECTION("EPYC 9654 in SNC mode: four CPU nodes, two per socket") {
    numarena::testing::FixtureMachine m = numarena::testing::LoadFixtureMachine("epyc9654-snc4");
    const TopologyView view = numarena::kv::ViewOf(m.topology);
    REQUIRE(view.nodes.size() == 4);
    for (const NodeFacts& n : view.nodes) {
      CHECK(n.has_cpus);
      CHECK(n.allowed);
    }
    CHECK(view.distance(0, 1) == 12);
    CHECK(view.distance(0, 2) == 32);
    KvPoolOptions o;
    o.near_device = "0000:c1:00.0";  // a device on node 2: homes are its socket
    o.cold_tier = KvColdTier::Farthest();
    auto p = ResolvePlacement(o, &view);
    REQUIRE(p.ok());
    CHECK(p->home_nodes == std::vector<int>{2, 3});
    CHECK(p->cold_nodes == std::vector<int>{0});  // 0 and 1 tie at 64: the lower id
    o.near_device.clear();
    o.near_cpus = {48};  // node 1
    p = ResolvePlacement(o, &view);
    REQUIRE(p.ok());
    CHECK(p->home_nodes == std::vector<int>{1});
    CHECK(p->cold_nodes == std::vector<int>{2});
  }
  SECTION("two CPU nodes and a CXL memory node with HMAT bandwidth") {
    numarena::testing::FixtureMachine m = numarena::testing::LoadFixtureMachine("cxl-hmat");
    const TopologyView view = numarena::kv::ViewOf(m.topology);
    REQUIRE(view.nodes.size() == 3);
    CHECK_FALSE(view.nodes[2].has_cpus);
    CHECK(view.nodes[2].read_bandwidth_mbps == 25600);
    KvPoolOptions o;
    o.cold_tier = KvColdTier::Farthest();
    auto p = ResolvePlacement(o, &view);
    REQUIRE(p.ok());
    CHECK(p->home_nodes == std::vector<int>{0, 1});
    CHECK(p->cold_nodes == std::vector<int>{2});
  }
}

TEST_CASE("placement: a cold tier chosen by memory attribute") {
  numarena::testing::FixtureMachine m = numarena::testing::LoadFixtureMachine("cxl-hmat");
  const TopologyView view = numarena::kv::ViewOf(m.topology);
  KvPoolOptions o;
  SECTION("the largest capacity outside the homes is the CXL node") {
    o.cold_tier = KvColdTier::Target(numarena::MemoryAttribute::kCapacity);
    auto p = ResolvePlacement(o, &view);
    REQUIRE(p.ok());
    CHECK(p->home_nodes == std::vector<int>{0, 1});
    CHECK(p->cold_nodes == std::vector<int>{2});
  }
  SECTION("ranked from the first home node: the best non-home node near it") {
    o.home_nodes = {0};
    o.cold_tier = KvColdTier::Target(numarena::MemoryAttribute::kBandwidth);
    auto p = ResolvePlacement(o, &view);
    REQUIRE(p.ok());
    CHECK(p->cold_nodes == std::vector<int>{2});  // near 0: 0 (home), then 2
  }
  SECTION("nothing near the home node qualifies: ranked over the whole machine") {
    o.home_nodes = {1};  // HMAT: only node 1 itself is near node 1
    o.cold_tier = KvColdTier::Target(numarena::MemoryAttribute::kBandwidth);
    auto p = ResolvePlacement(o, &view);
    REQUIRE(p.ok());
    CHECK(p->cold_nodes == std::vector<int>{0});  // 0 and 1 tie on bandwidth; 1 is home
  }
  SECTION("refused without a topology, and with nodes named") {
    const TopologyView bare = SncWithCxl();  // no resolver
    o.cold_tier = KvColdTier::Target(numarena::MemoryAttribute::kCapacity);
    CHECK(CodeOf(o, &bare) == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(MessageOf(o, &bare), Catch::Contains("Target needs a topology"));
    o.cold_tier.nodes = {2};
    CHECK(CodeOf(o, &view) == absl::StatusCode::kInvalidArgument);
  }
}
