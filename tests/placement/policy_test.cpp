// Placement policy values: construction, printing, equality/hashing, validation errors against
// fixture machines (two sockets, and the EPYC 9654 in SNC4 mode), and weighted chunk order.
#include "numarena/policy.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "numarena/arena.hpp"
#include "numarena/topology.hpp"

namespace {

using numarena::BindMode;
using numarena::NodeWeight;
using numarena::Policy;
using numarena::PolicyKind;

const numarena::Topology& Fixture(const std::string& name) {
  static std::map<std::string, numarena::Topology> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::string root = std::string(NUMARENA_FIXTURES) + "/" + name;
    auto reader = numarena::MakeRootedReader(root + "/sys", root + "/proc");
    auto topology = numarena::Topology::discover(*reader);
    REQUIRE(topology.ok());
    it = cache.emplace(name, *std::move(topology)).first;
  }
  return it->second;
}

std::string Message(const numarena::Status& s) { return std::string(s.message()); }

}  // namespace

TEST_CASE("policies print in their documented form") {
  CHECK(Policy::Bind(1).ToString() == "bind(1)");
  CHECK(Policy::Bind({1, 0, 1}).ToString() == "bind(0,1)");
  CHECK(Policy::Bind(0, BindMode::kAdvisory).ToString() == "bind(0)/advisory");
  CHECK(Policy::Preferred(2).ToString() == "preferred(2)");
  CHECK(Policy::Preferred(2, BindMode::kStrict).ToString() == "preferred(2)/strict");
  CHECK(Policy::Interleave({3, 1}).ToString() == "interleave(1,3)");
  CHECK(Policy::WeightedInterleave({{0, 3}, {1, 1}}).ToString() == "weighted(0:3,1:1)");
  CHECK(Policy::Local().ToString() == "local");
  CHECK(Policy::Local(BindMode::kStrict).ToString() == "local/strict");
}

TEST_CASE("policy accessors") {
  Policy bind = Policy::Bind({2, 0});
  CHECK(bind.kind() == PolicyKind::kBind);
  CHECK(bind.mode() == BindMode::kStrict);
  CHECK(bind.nodes() == std::vector<int>{0, 2});
  CHECK(bind.single_node() == -1);
  CHECK(Policy::Bind(3).single_node() == 3);
  CHECK(Policy::Preferred(1).single_node() == 1);
  CHECK(Policy::Preferred(1).mode() == BindMode::kAdvisory);
  CHECK(Policy::Interleave({0, 1}).single_node() == -1);
  Policy weighted = Policy::WeightedInterleave({{1, 1}, {0, 3}});
  CHECK(weighted.nodes() == std::vector<int>{1, 0});  // in the order given
  CHECK(weighted.chunk_bytes() == Policy::kDefaultWeightedChunk);
  CHECK(Policy::Local().nodes().empty());
}

TEST_CASE("policies compare and hash by value") {
  CHECK(Policy::Bind(1) == Policy::Bind(std::vector<int>{1}));
  CHECK_FALSE(Policy::Bind(1) == Policy::Bind(1, BindMode::kAdvisory));
  CHECK_FALSE(Policy::Bind(1) == Policy::Preferred(1, BindMode::kStrict));
  CHECK_FALSE(Policy::WeightedInterleave({{0, 3}, {1, 1}}) ==
              Policy::WeightedInterleave({{0, 1}, {1, 3}}));
  absl::flat_hash_set<Policy> set = {Policy::Bind(0), Policy::Bind(0), Policy::Interleave({0, 1}),
                                     Policy::WeightedInterleave({{0, 3}, {1, 1}}),
                                     Policy::WeightedInterleave({{0, 3}, {1, 1}})};
  CHECK(set.size() == 3);
}

TEST_CASE("valid policies pass validation on the SNC4 machine") {
  const auto& topo = Fixture("epyc9654-snc4");
  CHECK(Policy::Bind(0).Validate(topo).ok());
  CHECK(Policy::Bind({0, 1}).Validate(topo).ok());
  CHECK(Policy::Preferred(1).Validate(topo).ok());
  CHECK(Policy::Interleave({0, 1}).Validate(topo).ok());
  CHECK(Policy::WeightedInterleave({{0, 3}, {1, 1}}).Validate(topo).ok());
  CHECK(Policy::Local().Validate(topo).ok());
}

TEST_CASE("validation names a node outside the process's cpuset") {
  // This machine's container cgroup allows memory on node 0 only.
  const auto& topo = Fixture("xeon-2s");
  CHECK(Policy::Bind(0).Validate(topo).ok());
  auto s = Policy::Interleave({0, 1}).Validate(topo);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(s), Catch::Contains("node 1 is outside"));
  CHECK_THAT(Message(s), Catch::Contains("cpuset"));
}

TEST_CASE("validation names an unknown node and lists the online ones") {
  const auto& topo = Fixture("epyc9654-snc4");
  auto s = Policy::Bind(7).Validate(topo);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(s), Catch::Contains("node 7"));
  CHECK_THAT(Message(s), Catch::Contains("online: 0,1,2,3"));
  CHECK(Policy::Interleave({0, 5}).Validate(topo).code() == absl::StatusCode::kInvalidArgument);
  CHECK(Policy::Preferred(-1).Validate(topo).code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(Policy::WeightedInterleave({{0, 1}, {9, 1}}).Validate(topo)),
             Catch::Contains("node 9"));
}

TEST_CASE("validation rejects an empty node set") {
  const auto& topo = Fixture("epyc9654-snc4");
  for (const Policy& p :
       {Policy::Bind(std::vector<int>{}), Policy::Interleave({}), Policy::WeightedInterleave({})}) {
    auto s = p.Validate(topo);
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(s), Catch::Contains("empty"));
  }
}

TEST_CASE("validation rejects zero weights and a node weighted twice") {
  const auto& topo = Fixture("epyc9654-snc4");
  auto zero = Policy::WeightedInterleave({{0, 3}, {1, 0}}).Validate(topo);
  REQUIRE(zero.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(zero), Catch::Contains("node 1 has weight 0"));
  auto all_zero = Policy::WeightedInterleave({{0, 0}, {1, 0}}).Validate(topo);
  CHECK(all_zero.code() == absl::StatusCode::kInvalidArgument);
  auto twice = Policy::WeightedInterleave({{0, 3}, {1, 1}, {0, 2}}).Validate(topo);
  REQUIRE(twice.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(twice), Catch::Contains("node 0 is weighted twice"));
}

TEST_CASE("validation rejects a weighted chunk that is not whole pages") {
  const auto& topo = Fixture("epyc9654-snc4");
  auto odd = Policy::WeightedInterleave({{0, 1}, {1, 1}}, BindMode::kStrict, 1000).Validate(topo);
  REQUIRE(odd.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(odd), Catch::Contains("1000 bytes"));
  CHECK(Policy::WeightedInterleave({{0, 1}, {1, 1}}, BindMode::kStrict, 0).Validate(topo).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(Policy::WeightedInterleave({{0, 1}, {1, 1}}, BindMode::kStrict, 64 << 10)
            .Validate(topo)
            .ok());
}

TEST_CASE("validation on the SNC4 machine accepts all four nodes") {
  const auto& topo = Fixture("epyc9654-snc4");
  CHECK(Policy::Interleave({0, 1, 2, 3}).Validate(topo).ok());
  CHECK(Policy::WeightedInterleave({{3, 2}, {0, 1}}).Validate(topo).ok());
  CHECK(Policy::Bind(4).Validate(topo).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("weighted chunks go to nodes in runs: 3:1") {
  std::vector<NodeWeight> weights = {{0, 3}, {1, 1}};
  std::vector<int> expected = {0, 0, 0, 1, 0, 0, 0, 1};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(numarena::WeightedChunkNode(weights, i) == expected[i]);
  }
  std::map<int, int> counts;
  for (std::size_t i = 0; i < 400; ++i) ++counts[numarena::WeightedChunkNode(weights, i)];
  CHECK(counts[0] == 300);
  CHECK(counts[1] == 100);
  CHECK(numarena::WeightedChunkNode({{2, 1}, {5, 2}}, 2) == 5);
  CHECK(numarena::WeightedChunkNode({}, 0) == -1);
  CHECK(numarena::WeightedChunkNode({{0, 0}}, 0) == -1);
}

TEST_CASE("policy kind names") {
  CHECK(std::string(numarena::PolicyKindName(PolicyKind::kBind)) == "bind");
  CHECK(std::string(numarena::PolicyKindName(PolicyKind::kWeightedInterleave)) == "weighted");
}

TEST_CASE("Policy::Parse reads every kind, mode and chunk") {
  CHECK(Policy::Parse("bind(1)").value() == Policy::Bind(1));
  CHECK(Policy::Parse("membind(0-1)").value() == Policy::Bind({0, 1}));
  CHECK(Policy::Parse("bind(0,2-3)/advisory").value() ==
        Policy::Bind({0, 2, 3}, BindMode::kAdvisory));
  CHECK(Policy::Parse("preferred(2)").value() == Policy::Preferred(2));
  CHECK(Policy::Parse("preferred(2)/strict").value() == Policy::Preferred(2, BindMode::kStrict));
  CHECK(Policy::Parse("interleave(0-3)").value() == Policy::Interleave({0, 1, 2, 3}));
  CHECK(Policy::Parse("weighted(0:3,1:1)").value() == Policy::WeightedInterleave({{0, 3}, {1, 1}}));
  CHECK(Policy::Parse("weighted(1:1,0:2)/chunk=64K/advisory").value() ==
        Policy::WeightedInterleave({{1, 1}, {0, 2}}, BindMode::kAdvisory, 65536));
  CHECK(Policy::Parse("local").value() == Policy::Local());
  CHECK(Policy::Parse("local/strict").value() == Policy::Local(BindMode::kStrict));
}

TEST_CASE("Policy::Parse reads back what ToString writes") {
  const Policy policies[] = {
      Policy::Bind(0),
      Policy::Bind({0, 1}, BindMode::kAdvisory),
      Policy::Preferred(3, BindMode::kStrict),
      Policy::Interleave({0, 1, 2, 3}),
      Policy::WeightedInterleave({{0, 3}, {1, 1}}),
      Policy::WeightedInterleave({{2, 1}, {0, 7}}, BindMode::kAdvisory, 4096),
      Policy::Local(),
      Policy::Local(BindMode::kStrict),
  };
  for (const Policy& policy : policies) {
    INFO(policy.ToString());
    auto parsed = Policy::Parse(policy.ToString());
    REQUIRE(parsed.ok());
    CHECK(*parsed == policy);
  }
  // The longest list a policy can hold: every node id Linux allows, which a Preferred policy
  // prints node by node (1024 pieces; the fuzzer once spent 87 s on 55554 of them).
  auto widest = Policy::Parse("preferred(0-1023)");
  REQUIRE(widest.ok());
  auto again = Policy::Parse(widest->ToString());
  REQUIRE(again.ok());
  CHECK(*again == *widest);
}

TEST_CASE("Policy::Parse refuses malformed text with the syntax in the message") {
  for (const char* bad : {"",
                          "bind",
                          "bind()",
                          "bind(",
                          "bind(1",
                          "bind(x)",
                          "bind(-1)",
                          "bind(1)/",
                          "bind(1)/fast",
                          "bind(1)/strict/advisory",
                          "bind(1)/chunk=4K",
                          "preferred(0,,1)",
                          "preferred()",
                          "preferred(,)",
                          "preferred(1-)",
                          "preferred(2-55555)/strict",  // ids past Linux's 1024 nodes
                          "bind(1024)",
                          "interleave()",
                          "weighted()",
                          "weighted(0)",
                          "weighted(0:)",
                          "weighted(0:1:2)",
                          "weighted(0:-1)",
                          "weighted(0:4294967296)",
                          "weighted(0:1)/chunk=0",
                          "weighted(0:1)/chunk=1Q",
                          "weighted(0:1)/chunk=4K/chunk=8K",
                          "local(0)",
                          "Bind(1)",
                          "bind (1)",
                          "bind((1))",
                          "bind(99999999999)",
                          "random(0)",
                          "bind(\n\n)",
                          "interleave(\n)"}) {
    INFO(bad);
    auto parsed = Policy::Parse(bad);
    REQUIRE(!parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(parsed.status().message()).find("policy '") == 0);
    CHECK(std::string(parsed.status().message()).find("expected bind(NODES)") != std::string::npos);
  }
}

TEST_CASE("a Preferred list keeps its order: parsed, printed, validated and walked") {
  const Policy two_then_zero = Policy::Preferred(std::vector<int>{2, 0});
  CHECK(two_then_zero.nodes() == std::vector<int>{2, 0});
  CHECK(two_then_zero.single_node() == 2);  // where memory goes first
  CHECK(two_then_zero.ToString() == "preferred(2,0)");
  CHECK(Policy::Parse("preferred(2,0)").value() == two_then_zero);
  CHECK(Policy::Parse("preferred(3,0-1)").value().nodes() == std::vector<int>{3, 0, 1});
  CHECK(Policy::Parse("preferred(1)").value() == Policy::Preferred(1));
  CHECK_FALSE(two_then_zero == Policy::Preferred(std::vector<int>{0, 2}));

  // EPYC 9654 SNC4: nodes 0-3; 0,1 and 2,3 at distance 12, across at 32.
  const numarena::Topology& epyc = Fixture("epyc9654-snc4");
  CHECK(two_then_zero.Validate(epyc).ok());
  // The rest by distance from node 2: 3 in its socket (12), then 1 (32).
  CHECK(two_then_zero.FallbackOrder(epyc) == std::vector<int>{2, 0, 3, 1});
  CHECK(Policy::Preferred(std::vector<int>{3, 1}).FallbackOrder(epyc) ==
        std::vector<int>{3, 1, 2, 0});
  CHECK(Policy::Preferred(1).FallbackOrder(epyc) == epyc.nodes_by_distance(1));
  CHECK(Policy::Bind(1).FallbackOrder(epyc).empty());

  auto twice = Policy::Preferred(std::vector<int>{1, 0, 1}).Validate(epyc);
  CHECK(twice.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(twice) ==
        "policy preferred(1,0,1): node 1 is listed twice; a preference lists each node once, "
        "most preferred first");
  auto offline = Policy::Preferred(std::vector<int>{1, 9}).Validate(epyc);
  CHECK(offline.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(offline).find("node 9") != std::string::npos);
}

TEST_CASE("weighted(auto): the kernel's weights, parsed, printed and refused by arenas") {
  auto automatic = Policy::Parse("weighted(auto)");
  REQUIRE(automatic.ok());
  CHECK(*automatic == Policy::KernelWeightedInterleave());
  CHECK(automatic->kind() == PolicyKind::kWeightedInterleave);
  CHECK(automatic->uses_kernel_weights());
  CHECK(automatic->weights().empty());
  CHECK(automatic->ToString() == "weighted(auto)");
  CHECK_FALSE(Policy::WeightedInterleave({{0, 1}}).uses_kernel_weights());
  CHECK(*automatic != Policy::WeightedInterleave({{0, 1}}));
  auto advisory = Policy::Parse("weighted(auto)/advisory");
  REQUIRE(advisory.ok());
  CHECK(advisory->mode() == BindMode::kAdvisory);
  CHECK(advisory->ToString() == "weighted(auto)/advisory");
  // It names no node, so any machine validates it.
  CHECK(automatic->Validate(Fixture("xeon-2s")).ok());
  auto chunked = Policy::Parse("weighted(auto)/chunk=4K");
  REQUIRE_FALSE(chunked.ok());
  CHECK(Message(chunked.status()).find("weighted(auto) has no chunk") != std::string::npos);
  auto arena = numarena::Arena::ForPolicy(*automatic);
  REQUIRE_FALSE(arena.ok());
  CHECK(arena.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(arena.status()).find("numarena::AllocateInterleaved") != std::string::npos);
}
