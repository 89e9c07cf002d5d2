// The kernel's weighted interleave weights, memory tiers and demotion switch
// (ReadKernelMemorySettings): trees recorded in the NUMA lab on Linux 6.12
// (tests/fixtures/record-lab-kernel.sh), a 6.1-like tree without the files, and malformed
// files, which are DataLoss naming the file.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "map_reader.hpp"
#include "numarena/topology.hpp"
#include "topology/topology_parse.hpp"

namespace {

using numarena::KernelMemorySettings;
using numarena::NodeInterleaveWeight;

KernelMemorySettings FromFixture(const std::string& name) {
  const std::string root = std::string(NUMARENA_FIXTURES) + "/" + name;
  auto reader = numarena::MakeRootedReader(root + "/sys", root + "/proc");
  auto settings = numarena::ReadKernelMemorySettings(*reader);
  INFO(settings.status().message());
  REQUIRE(settings.ok());
  return *settings;
}

TEST_CASE("6.12 as booted in the lab's cxl topology: weights 1, two tiers, demotion off") {
  KernelMemorySettings s = FromFixture("linux-6.12-cxl");
  CHECK(s.has_weighted_interleave());
  CHECK(s.interleave_weights ==
        std::vector<NodeInterleaveWeight>{{0, 1}, {1, 1}, {2, 1}});
  CHECK_FALSE(s.interleave_weights_auto.has_value());  // 6.16+
  REQUIRE(s.memory_tiers.size() == 2);
  CHECK(s.memory_tiers[0].id == 4);
  CHECK(s.memory_tiers[0].nodes == std::vector<int>{0, 1});
  CHECK(s.memory_tiers[1].id == 72);  // the HMAT slow node: a lower tier
  CHECK(s.memory_tiers[1].nodes == std::vector<int>{2});
  CHECK(s.tier_of(0) == 4);
  CHECK(s.tier_of(2) == 72);
  CHECK(s.tier_of(3) == -1);
  CHECK(s.demotion_enabled == false);
}

TEST_CASE("6.12 after the operator set weights 3:1:1 and turned demotion on") {
  KernelMemorySettings s = FromFixture("linux-6.12-cxl-tiering");
  CHECK(s.interleave_weight(0) == 3);
  CHECK(s.interleave_weight(1) == 1);
  CHECK(s.interleave_weight(7) == 0);
  CHECK(s.demotion_enabled == true);
}

TEST_CASE("a kernel without the files (6.1's weights, tiers of older kernels) has none") {
  auto reader = numarena::testing::MapReader::TwoNodes();
  auto s = numarena::ReadKernelMemorySettings(reader);
  REQUIRE(s.ok());
  CHECK_FALSE(s->has_weighted_interleave());
  CHECK(s->memory_tiers.empty());
  CHECK_FALSE(s->demotion_enabled.has_value());
  CHECK_FALSE(s->interleave_weights_auto.has_value());
}

TEST_CASE("malformed kernel files are DataLoss naming the file") {
  struct Case {
    std::string path, text, message;
  };
  const std::string weights = "/sys/kernel/mm/mempolicy/weighted_interleave/";
  for (const Case& c : std::vector<Case>{
           {weights + "node1", "300\n", "node1: interleave weight: '300' exceeds the limit 255"},
           {weights + "node1", "x\n", "node1: interleave weight: expected a decimal number"},
           {weights + "auto", "maybe\n", "auto: boolean: expected true or false"},
           {"/sys/devices/virtual/memory_tiering/memory_tier4/nodelist", "1-0\n", "nodelist"},
           {"/sys/kernel/mm/numa/demotion_enabled", "on\n", "demotion_enabled: boolean"},
       }) {
    auto reader = numarena::testing::MapReader::TwoNodes();
    reader.files[weights + "node0"] = "2\n";
    reader.files[c.path] = c.text;
    auto s = numarena::ReadKernelMemorySettings(reader);
    INFO(c.path << ": " << s.status().message());
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == absl::StatusCode::kDataLoss);
    CHECK(std::string(s.status().message()).find(c.message) != std::string::npos);
  }
}

TEST_CASE("Linux 6.18's weighted interleave switch named __auto_type reads as auto") {
  auto reader = numarena::testing::MapReader::TwoNodes();
  reader.files["/sys/kernel/mm/mempolicy/weighted_interleave/node0"] = "0\n";
  reader.files["/sys/kernel/mm/mempolicy/weighted_interleave/__auto_type"] = "true\n";
  auto s = numarena::ReadKernelMemorySettings(reader);
  REQUIRE(s.ok());
  CHECK(s->interleave_weights_auto == true);
  CHECK(s->interleave_weight(0) == 1);  // the kernel uses 1 for 0
}

TEST_CASE("the parsers of the kernel's memory policy files") {
  namespace parse = numarena::parse;
  CHECK(parse::ParseInterleaveWeight("3\n").value() == 3u);
  CHECK(parse::ParseInterleaveWeight("255").value() == 255u);
  CHECK(parse::ParseInterleaveWeight("0").value() == 0u);
  CHECK_FALSE(parse::ParseInterleaveWeight("256").ok());
  CHECK_FALSE(parse::ParseInterleaveWeight("-1").ok());
  CHECK_FALSE(parse::ParseInterleaveWeight("").ok());
  CHECK(parse::ParseSysfsBool("true\n").value());
  CHECK_FALSE(parse::ParseSysfsBool("false").value());
  CHECK(parse::ParseSysfsBool("1").value());
  CHECK_FALSE(parse::ParseSysfsBool("N").value());
  CHECK_FALSE(parse::ParseSysfsBool("yes").ok());
  CHECK(parse::ParseMemoryTierName("memory_tier4") == 4);
  CHECK(parse::ParseMemoryTierName("memory_tier72") == 72);
  CHECK_FALSE(parse::ParseMemoryTierName("memory_tier").has_value());
  CHECK_FALSE(parse::ParseMemoryTierName("power").has_value());
  CHECK_FALSE(parse::ParseMemoryTierName("memory_tierx").has_value());
}

}  // namespace
