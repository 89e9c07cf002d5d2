// The kernel's weighted interleave weights, memory tiers and demotion in `numarena topo`,
// `report`, `advise --policy` and `doctor --kv-tiers/--policy`, on trees recorded in the NUMA
// lab on Linux 6.12 (tests/fixtures/record-lab-kernel.sh) and on a tree without them.
#include <catch2/catch.hpp>
#include <string>

#include "cli_run.hpp"

using numarena::testing::FixtureRoot;
using numarena::testing::RunCli;

namespace {
bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("topo and report show the kernel's weights and tiers", "[cli][kernel]") {
  auto topo = RunCli("topo " + FixtureRoot("linux-6.12-cxl-tiering"));
  CHECK(topo.exit_code == 0);
  CHECK(Has(topo.out, "kernel weighted interleave (MPOL_WEIGHTED_INTERLEAVE, system-wide "
                      "weights): node 0: 3, node 1: 1, node 2: 1\n"));
  CHECK(Has(topo.out, "memory tiers (a lower id is faster): tier 4: nodes 0-1; tier 72: node 2\n"));
  CHECK(Has(topo.out, "demotion to lower tiers on reclaim: on\n"));
  auto json = RunCli("topo --json " + FixtureRoot("linux-6.12-cxl-tiering"));
  CHECK(Has(json.out, "\"kernel_memory\":{\"interleave_weights\":[{\"node\":0,\"weight\":3},"));
  CHECK(Has(json.out, "\"memory_tiers\":[{\"id\":4,\"nodes\":[0,1]},{\"id\":72,\"nodes\":[2]}]"));
  auto old = RunCli("topo " + FixtureRoot("xeon-2s"));
  CHECK(Has(old.out, "kernel weighted interleave (MPOL_WEIGHTED_INTERLEAVE, system-wide "
                     "weights): none (Linux before 6.9)"));
  auto report = RunCli("report " + FixtureRoot("linux-6.12-cxl"));
  CHECK(report.exit_code == 0);
  CHECK(Has(report.out, "== kernel memory policy ==\nkernel weighted interleave"));
}

TEST_CASE("advise --policy: who places a weighted policy, and the command", "[cli][kernel]") {
  auto emulated = RunCli("advise --policy 'weighted(0:6,1:2)' " + FixtureRoot("linux-6.12-cxl"));
  CHECK(emulated.exit_code == 0);
  CHECK(Has(emulated.out, "# weighted(0:6,1:2): placed by numarena's chunks (MPOL_BIND)\n"));
  CHECK(Has(emulated.out,
            "echo 3 > /sys/kernel/mm/mempolicy/weighted_interleave/node0; "
            "echo 1 > /sys/kernel/mm/mempolicy/weighted_interleave/node1\n"));
  auto kernel = RunCli("advise --json --policy 'weighted(0:3,1:1)' " +
                       FixtureRoot("linux-6.12-cxl-tiering"));
  CHECK(kernel.exit_code == 0);
  CHECK(Has(kernel.out, "\"placed_by\":\"kernel\""));
  auto old = RunCli("advise --policy 'weighted(0:3,1:1)' " + FixtureRoot("xeon-2s"));
  CHECK(Has(old.out, "Linux before 6.9"));
  auto not_weighted = RunCli("advise --policy 'bind(0)' " + FixtureRoot("xeon-2s"));
  CHECK(not_weighted.exit_code == 2);
  CHECK(Has(not_weighted.err, "only weighted interleave has kernel weights"));
}

TEST_CASE("doctor --kv-tiers and --policy", "[cli][kernel]") {
  auto tiers = RunCli("doctor --check --kv-tiers 0:1 " + FixtureRoot("linux-6.12-cxl-tiering"));
  CHECK(tiers.exit_code == 1);
  CHECK(Has(tiers.out, "warning kv_cold_tier: KV cold tier 1: node 1 in tier 4"));
  CHECK(Has(tiers.out, "warning demotion_enabled:"));
  auto good = RunCli("doctor --check --kv-tiers 0-1:2 " + FixtureRoot("linux-6.12-cxl"));
  CHECK(good.exit_code == 0);
  auto bad = RunCli("doctor --kv-tiers 0: " + FixtureRoot("linux-6.12-cxl"));
  CHECK(bad.exit_code == 2);
  CHECK(Has(bad.err, "--kv-tiers wants HOME:COLD"));
}
