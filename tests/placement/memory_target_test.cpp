// Memory targets (numarena/memory_target.hpp): which node "the highest bandwidth", "the lowest
// latency" and "the largest capacity" resolve to, from HMAT numbers and, without them, from
// SLIT distances; the tie-breaks; the cpuset; and the policy syntax that names them. On the
// recorded cxl-hmat machine and on in-memory machines built for one rule each.
#include "numarena/memory_target.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "fixture_machine.hpp"
#include "map_reader.hpp"
#include "numarena/policy.hpp"
#include "numarena/topology.hpp"

namespace {

using numarena::BindMode;
using numarena::MemoryAttribute;
using numarena::MemoryTarget;
using numarena::Policy;
using numarena::PolicyKind;
using numarena::Status;
using numarena::TargetBasis;
using numarena::TargetChoice;
using numarena::Topology;
using numarena::testing::MapReader;
using Ids = std::vector<int>;

constexpr int kAny = MemoryTarget::kAnyInitiator;
constexpr int kThread = MemoryTarget::kCallingThread;

Topology Discover(const MapReader& r) {
  auto topology = Topology::discover(r);
  INFO(topology.status());
  REQUIRE(topology.ok());
  return *std::move(topology);
}

TargetChoice Resolve(const Topology& t, MemoryAttribute a, int from, int calling_node = 0) {
  auto choice = numarena::ResolveMemoryTarget(t, {a, from}, calling_node);
  INFO(choice.status());
  REQUIRE(choice.ok());
  UNSCOPED_INFO(choice->explanation);
  return *std::move(choice);
}

// Two CPU nodes and a 4 GiB memory-only node 2 nearer node 0 (14) than node 1 (24); no HMAT.
MapReader TwoSocketsAndExpander() {
  MapReader r;
  r.files["/sys/devices/system/node/online"] = "0-2\n";
  r.AddNode(0, "0-3", "10 21 14");
  r.AddNode(1, "4-7", "21 10 24");
  r.AddNode(2, "", "14 24 10", 4 * 1048576);
  return r;
}

}  // namespace

TEST_CASE("memory targets on the recorded CXL machine (HMAT)") {
  numarena::testing::FixtureMachine m = numarena::testing::LoadFixtureMachine("cxl-hmat");
  const Topology& t = m.topology;
  // node 0, 1: 64 GiB DRAM, read 102400 MB/s, 80 ns; node 2: 128 GiB CXL behind node 0,
  // read 25600 MB/s, 250 ns.
  TargetChoice c = Resolve(t, MemoryAttribute::kBandwidth, 0);
  CHECK(c.basis == TargetBasis::kHmat);
  CHECK(c.initiator == 0);
  CHECK(c.best == Ids{0});
  CHECK(c.ranked == Ids{0, 2});  // node 1 is not near node 0 by HMAT
  CHECK_THAT(c.explanation, Catch::Contains("highest bandwidth near node 0 (HMAT): node 0 "
                                            "(read 102400 MB/s), then 2 (read 25600 MB/s)"));

  CHECK(Resolve(t, MemoryAttribute::kBandwidth, 1).ranked == Ids{1});
  CHECK(Resolve(t, MemoryAttribute::kLatency, 0).best == Ids{0});
  c = Resolve(t, MemoryAttribute::kLatency, kAny);
  CHECK(c.best == Ids{0, 1});  // tied at 80 ns
  CHECK(c.ranked == Ids{0, 1, 2});
  CHECK(c.initiator == kAny);

  c = Resolve(t, MemoryAttribute::kCapacity, 0);
  CHECK(c.best == Ids{2});
  CHECK(c.ranked == Ids{2, 0});
  CHECK(Resolve(t, MemoryAttribute::kCapacity, 1).best == Ids{1});
  CHECK(Resolve(t, MemoryAttribute::kCapacity, kAny).ranked == Ids{2, 0, 1});

  SECTION("the calling thread's node stands in for kCallingThread") {
    CHECK(Resolve(t, MemoryAttribute::kCapacity, kThread, 1).best == Ids{1});
    CHECK(Resolve(t, MemoryAttribute::kCapacity, kThread, 0).best == Ids{2});
  }
  SECTION("an unknown calling node is replaced by the first node the process may run on") {
    c = Resolve(t, MemoryAttribute::kCapacity, kThread, -1);
    CHECK(c.initiator == 0);
    CHECK_THAT(c.explanation, Catch::Contains("the calling thread's node is unknown"));
    CHECK(Resolve(t, MemoryAttribute::kCapacity, kThread, 2).initiator == 0);  // no CPUs
  }
  SECTION("policies resolve: advisory prefers in rank order, strict binds the tied set") {
    auto p = Policy::Target({MemoryAttribute::kCapacity, 0}).Resolve(t, 1);
    REQUIRE(p.ok());
    CHECK(*p == Policy::Preferred(Ids{2, 0}));  // the CXL expander, then node 0's DRAM
    p = Policy::Target({MemoryAttribute::kLatency, kAny}, BindMode::kStrict).Resolve(t, 1);
    REQUIRE(p.ok());
    CHECK(*p == Policy::Bind({0, 1}));
    p = Policy::Target({MemoryAttribute::kLatency, kAny}).Resolve(t, 1);
    REQUIRE(p.ok());
    CHECK(*p == Policy::Preferred(Ids{0, 1, 2}));
    p = Policy::Target({MemoryAttribute::kBandwidth, kThread}).Resolve(t, 1);
    REQUIRE(p.ok());
    CHECK(*p == Policy::Preferred(1));
    CHECK(*Policy::Bind(1).Resolve(t, 0) == Policy::Bind(1));  // other kinds unchanged
  }
}

TEST_CASE("memory targets without HMAT fall back to SLIT distance, memory-only last") {
  MapReader r = TwoSocketsAndExpander();
  Topology t = Discover(r);
  TargetChoice c = Resolve(t, MemoryAttribute::kBandwidth, 0);
  CHECK(c.basis == TargetBasis::kDistance);
  CHECK(c.ranked == Ids{0, 2});  // 2's nearest CPU node is 0: near 0, at distance 14
  CHECK(c.best == Ids{0});
  CHECK_THAT(c.explanation, Catch::Contains("no HMAT: node 0 has no HMAT access0 attributes; "
                                            "by SLIT distance, memory-only nodes last"));
  CHECK(Resolve(t, MemoryAttribute::kLatency, 1).ranked == Ids{1});
  c = Resolve(t, MemoryAttribute::kLatency, kAny);
  CHECK(c.best == Ids{0, 1});  // both at distance 10 from a CPU node
  CHECK(c.ranked == Ids{0, 1, 2});
  CHECK(Resolve(t, MemoryAttribute::kCapacity, 0).best == Ids{2});
  CHECK(Resolve(t, MemoryAttribute::kCapacity, 1).best == Ids{1});

  SECTION("a memory-only node at the same distance ranks after the CPU node") {
    MapReader even;
    even.files["/sys/devices/system/node/online"] = "0-1\n";
    even.AddNode(0, "0-3", "10 10");
    even.AddNode(1, "", "10 10");
    Topology e = Discover(even);
    c = Resolve(e, MemoryAttribute::kBandwidth, 0);
    CHECK(c.ranked == Ids{0, 1});
    CHECK(c.best == Ids{0});
  }
}

TEST_CASE("memory targets: half-described HMAT, ties, cpusets and bad initiators") {
  SECTION("HMAT on only some nodes: distance decides, and the gap is named") {
    MapReader r = TwoSocketsAndExpander();
    r.AddHmat(0, {.initiators = {0}, .read_bandwidth = 100000, .read_latency = 80});
    r.AddHmat(1, {.initiators = {1}, .read_bandwidth = 100000, .read_latency = 80});
    Topology t = Discover(r);
    TargetChoice c = Resolve(t, MemoryAttribute::kBandwidth, 0);
    CHECK(c.basis == TargetBasis::kDistance);
    CHECK_THAT(c.explanation, Catch::Contains("node 2 has no HMAT access0 attributes"));
  }
  SECTION("HMAT with bandwidth but no latency: bandwidth uses it, latency falls back") {
    MapReader r = TwoSocketsAndExpander();
    r.AddHmat(0, {.initiators = {0}, .read_bandwidth = 100000});
    r.AddHmat(1, {.initiators = {1}, .read_bandwidth = 100000});
    r.AddHmat(2, {.initiators = {1}, .read_bandwidth = 200000});  // attached to node 1
    Topology t = Discover(r);
    TargetChoice c = Resolve(t, MemoryAttribute::kBandwidth, 1);
    CHECK(c.basis == TargetBasis::kHmat);
    CHECK(c.ranked == Ids{2, 1});  // HMAT says 2 is near 1, although SLIT puts it nearer 0
    c = Resolve(t, MemoryAttribute::kLatency, 1);
    CHECK(c.basis == TargetBasis::kDistance);
    CHECK_THAT(c.explanation, Catch::Contains("node 0 has no HMAT read latency"));
    CHECK(c.ranked == Ids{1});
  }
  SECTION("equal read bandwidth ties for best; write bandwidth orders them") {
    MapReader r = MapReader::TwoNodes();
    r.AddHmat(0, {.initiators = {0}, .read_bandwidth = 5000, .write_bandwidth = 1000});
    r.AddHmat(1, {.initiators = {0}, .read_bandwidth = 5000, .write_bandwidth = 3000});
    Topology t = Discover(r);
    TargetChoice c = Resolve(t, MemoryAttribute::kBandwidth, 0);
    CHECK(c.best == Ids{0, 1});
    CHECK(c.ranked == Ids{1, 0});
    auto p = Policy::Target({MemoryAttribute::kBandwidth, 0}).Resolve(t, 0);
    REQUIRE(p.ok());
    CHECK(*p == Policy::Preferred(Ids{1, 0}));  // the full order: write bandwidth breaks the tie
  }
  SECTION("the cpuset removes candidates") {
    MapReader r = TwoSocketsAndExpander();
    r.files["/proc/self/status"] = "Cpus_allowed_list:\t0-7\nMems_allowed_list:\t0-1\n";
    Topology t = Discover(r);
    CHECK(Resolve(t, MemoryAttribute::kCapacity, 0).ranked == Ids{0});
    CHECK(Resolve(t, MemoryAttribute::kCapacity, kAny).ranked == Ids{0, 1});
  }
  SECTION("nothing allowed near the initiator: every allowed node, and the note says so") {
    MapReader r = TwoSocketsAndExpander();
    r.files["/proc/self/status"] = "Cpus_allowed_list:\t0-7\nMems_allowed_list:\t1\n";
    Topology t = Discover(r);
    TargetChoice c = Resolve(t, MemoryAttribute::kBandwidth, 0);
    CHECK(c.ranked == Ids{1});
    CHECK_THAT(c.explanation, Catch::Contains("no allowed memory is near node 0"));
  }
  SECTION("an initiator that is not an online node is refused") {
    MapReader r;
    r.files["/sys/devices/system/node/online"] = "0,4\n";
    r.AddNode(0, "0-3", "10 21");
    r.AddNode(4, "4-7", "21 10");
    Topology t = Discover(r);
    auto c = numarena::ResolveMemoryTarget(t, {MemoryAttribute::kLatency, 3}, 0);
    CHECK(absl::IsInvalidArgument(c.status()));
    CHECK_THAT(std::string(c.status().message()), Catch::Contains("node 3: not an online"));
    CHECK(Resolve(t, MemoryAttribute::kLatency, 4).ranked == Ids{4});  // sparse ids
    Status valid = Policy::Target({MemoryAttribute::kLatency, 3}).Validate(t);
    CHECK(absl::IsInvalidArgument(valid));
    CHECK(Policy::Target({MemoryAttribute::kLatency, 4}).Validate(t).ok());
    CHECK(Policy::Target({MemoryAttribute::kLatency, kAny}).Validate(t).ok());
  }
}

TEST_CASE("memory targets in the policy syntax") {
  struct Case {
    const char* text;
    Policy policy;
  };
  const Case cases[] = {
      {"target(bandwidth)", Policy::Target({MemoryAttribute::kBandwidth, kThread})},
      {"target(latency@1)/strict",
       Policy::Target({MemoryAttribute::kLatency, 1}, BindMode::kStrict)},
      {"target(capacity@any)", Policy::Target({MemoryAttribute::kCapacity, kAny})},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto parsed = Policy::Parse(c.text);
    REQUIRE(parsed.ok());
    CHECK(*parsed == c.policy);
    CHECK(parsed->kind() == PolicyKind::kTarget);
    CHECK(parsed->ToString() == c.text);
  }
  CHECK(*Policy::Parse("target(latency)/advisory") ==
        Policy::Target({MemoryAttribute::kLatency, kThread}));
  CHECK(Policy::Target({MemoryAttribute::kLatency, 0}) !=
        Policy::Target({MemoryAttribute::kLatency, 1}));
  for (const char* bad : {"target", "target()", "target(speed)", "target(bandwidth@)",
                          "target(bandwidth@x)", "target(bandwidth@-1)", "target(@1)",
                          "target(capacity)/chunk=2M", "target(bandwidth@1@2)"}) {
    INFO(bad);
    auto parsed = Policy::Parse(bad);
    CHECK(absl::IsInvalidArgument(parsed.status()));
  }
  CHECK_THAT(std::string(Policy::Parse("target(speed)").status().message()),
             Catch::Contains("'speed' is not a memory attribute"));
}
