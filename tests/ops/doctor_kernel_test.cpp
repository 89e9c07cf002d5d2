// Doctor's checks of what keeps numarena's placement from holding (numarena/doctor.hpp):
// memory policy calls refused (a seccomp filter installed here makes mbind fail with EPERM),
// a policy naming nodes outside the cpuset, NUMA balancing in tiering mode, demotion, and
// the kernel's memory tiers against the KV pool's cold tier, on trees recorded in the NUMA
// lab on Linux 6.12 (tests/fixtures/record-lab-kernel.sh) and on the ops-* trees.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "deny_mbind.hpp"
#include "fixture_machine.hpp"
#include "numarena/ops/doctor.hpp"
#include "numarena/topology.hpp"

namespace {

using numarena::DoctorOptions;
using numarena::DoctorReport;
using numarena::Finding;
using numarena::Severity;

DoctorReport Run(const std::string& name, const DoctorOptions& options = {}) {
  numarena::testing::FixtureMachine m = numarena::testing::LoadFixtureMachine(name);
  auto report = numarena::RunDoctor(*m.reader, m.topology, options);
  INFO(report.status());
  REQUIRE(report.ok());
  return *std::move(report);
}

const Finding* FindOrNull(const DoctorReport& report, const std::string& id) {
  for (const Finding& f : report.findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

bool Passed(const DoctorReport& report, const std::string& id) {
  return std::find(report.passed.begin(), report.passed.end(), id) != report.passed.end();
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

DoctorOptions KvTiers(std::vector<int> home, std::vector<int> cold) {
  DoctorOptions options;
  options.kv_home_nodes = std::move(home);
  options.kv_cold_nodes = std::move(cold);
  return options;
}

TEST_CASE("doctor on 6.12 as booted: tiers listed, nothing wrong, cold node 2 is lower") {
  DoctorReport report = Run("linux-6.12-cxl", KvTiers({0, 1}, {2}));
  const Finding* tiers = FindOrNull(report, "memory_tiers");
  REQUIRE(tiers != nullptr);
  CHECK(tiers->severity == Severity::kInfo);
  CHECK(tiers->observed == "tier 4: nodes 0-1; tier 72: node 2");
  CHECK(Passed(report, "numa_balancing"));
  CHECK(Passed(report, "demotion_enabled"));
  CHECK(Passed(report, "kv_cold_tier"));
  CHECK(report.healthy());
  // A recorded tree has no kernel to probe: no verdict either way.
  CHECK(FindOrNull(report, "placement_calls") == nullptr);
  CHECK_FALSE(Passed(report, "placement_calls"));
}

TEST_CASE("doctor on 6.12 with tiering: balancing mode 2, demotion on, a cold node in the top tier") {
  DoctorReport report = Run("linux-6.12-cxl-tiering", KvTiers({0}, {1}));
  const Finding* balancing = FindOrNull(report, "numa_balancing");
  REQUIRE(balancing != nullptr);
  CHECK(balancing->observed == "2");
  CHECK(Has(balancing->explanation, "memory tiering mode"));
  CHECK(balancing->fix.rfind("sysctl -w kernel.numa_balancing=0", 0) == 0);
  const Finding* demotion = FindOrNull(report, "demotion_enabled");
  REQUIRE(demotion != nullptr);
  CHECK(demotion->severity == Severity::kWarning);  // two tiers: there is somewhere to go
  CHECK(demotion->fix == "echo false > /sys/kernel/mm/numa/demotion_enabled");
  CHECK(Has(demotion->explanation, "KvPool::AuditPlacement"));
  const Finding* cold = FindOrNull(report, "kv_cold_tier");
  REQUIRE(cold != nullptr);
  CHECK(cold->severity == Severity::kWarning);
  CHECK(cold->observed == "node 1 in tier 4, home nodes 0 in tier 4 or faster");
  CHECK(Has(cold->fix, "use a cold node of a lower tier: 2"));
  CHECK(report.problem_count() == 3);
}

TEST_CASE("doctor: kv tiers need home and cold nodes together") {
  numarena::testing::FixtureMachine m = numarena::testing::LoadFixtureMachine("linux-6.12-cxl");
  auto report = numarena::RunDoctor(*m.reader, m.topology, KvTiers({0}, {}));
  REQUIRE_FALSE(report.ok());
  CHECK(report.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("doctor: a policy naming nodes outside the cpuset") {
  DoctorOptions options;
  options.pid = "4242";  // ops-good: Mems_allowed_list 0-1
  options.policy = "interleave(0-3)";
  DoctorReport strict = Run("ops-good", options);
  const Finding* narrow = FindOrNull(strict, "cpuset_mems_narrow");
  REQUIRE(narrow != nullptr);
  CHECK(narrow->severity == Severity::kCritical);
  CHECK(narrow->subject == "policy interleave(0,1,2,3)");
  CHECK(narrow->observed == "names nodes 2-3, outside cpuset.mems 0-1 of pid 4242");
  CHECK(Has(narrow->fix, "docker run --cpuset-mems=0-3"));
  CHECK(Has(narrow->fix, "AllowedMemoryNodes=0-3"));

  options.policy = "bind(2)/advisory";
  const DoctorReport advisory_report = Run("ops-good", options);
  const Finding* advisory = FindOrNull(advisory_report, "cpuset_mems_narrow");
  REQUIRE(advisory != nullptr);
  CHECK(advisory->severity == Severity::kWarning);

  options.policy = "weighted(0:3,1:1)";
  CHECK(Passed(Run("ops-good", options), "cpuset_mems_narrow"));

  options.policy = "interleave(0-";
  numarena::testing::FixtureMachine m = numarena::testing::LoadFixtureMachine("ops-good");
  auto bad = numarena::RunDoctor(*m.reader, m.topology, options);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
}

// RunDoctor on the live system with mbind refused by a seccomp filter.
bool DoctorWithMbindDenied(DoctorReport* out) {
  auto reader = numarena::MakeRootedReader();
  auto topology = numarena::Topology::discover(*reader);
  REQUIRE(topology.ok());
  numarena::Status status;
  const bool installed = numarena::testing::RunWithMbindRefused([&] {
    auto report = numarena::RunDoctor(*reader, *topology);
    status = report.status();
    if (report.ok()) *out = *std::move(report);
  });
  INFO(status);
  if (installed) REQUIRE(status.ok());
  return installed;
}

TEST_CASE("doctor names a seccomp filter that refuses mbind, and passes without one") {
  auto reader = numarena::MakeRootedReader();
  auto topology = numarena::Topology::discover(*reader);
  REQUIRE(topology.ok());
  auto plain = numarena::RunDoctor(*reader, *topology);
  REQUIRE(plain.ok());
  CHECK(Passed(*plain, "placement_calls"));
  CHECK(FindOrNull(*plain, "placement_calls") == nullptr);

  DoctorReport denied;
  if (!DoctorWithMbindDenied(&denied)) {
    WARN("seccomp filter could not be installed here; the refusal is not exercised");
    return;
  }
  const Finding* refused = FindOrNull(denied, "placement_calls");
  REQUIRE(refused != nullptr);
  CHECK(refused->severity == Severity::kCritical);
  CHECK(refused->observed == "refused: mbind: Operation not permitted (errno 1 EPERM)");
  CHECK(Has(refused->explanation, "seccomp filter (Seccomp: 2"));
  CHECK(Has(refused->explanation, "CAP_SYS_NICE"));
  CHECK(Has(refused->fix, "docker run --cap-add SYS_NICE"));
  CHECK_FALSE(denied.healthy());
}

}  // namespace
