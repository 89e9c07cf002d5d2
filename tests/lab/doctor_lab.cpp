// lab-topologies: cxl
// lab-kernel-6.12: cxl
//
// `numarena doctor`'s placement checks on a real kernel, set up by the test as an operator or
// a container runtime would: on the plain VM it finds no problem (and on 6.12 lists the
// memory tiers, the HMAT slow node 2 below nodes 0-1); NUMA balancing in tiering mode and
// demotion are found once switched on; a cgroup whose cpuset.mems is narrower than the
// policy's nodes is found; a seccomp filter that makes mbind fail with EPERM is named.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <sys/stat.h>

#include "deny_mbind.hpp"
#include "lab_support.hpp"
#include "numarena/ops/doctor.hpp"
#include "numarena/topology.hpp"

namespace numarena {
namespace {

bool On612() {
  const char* series = std::getenv("NUMARENA_LAB_KERNEL_SERIES");
  return series != nullptr && std::string(series) == "6.12";
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text << "\n";
  file.close();
  if (!file) throw std::runtime_error("cannot write '" + text + "' to " + path);
}

DoctorReport Doctor(const DoctorOptions& options = {}) {
  auto reader = MakeRootedReader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) throw std::runtime_error(std::string(topology.status().message()));
  auto report = RunDoctor(*reader, *topology, options);
  if (!report.ok()) throw std::runtime_error(std::string(report.status().message()));
  return *std::move(report);
}

const Finding* FindOrNull(const DoctorReport& report, const std::string& id) {
  for (const Finding& f : report.findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

bool Passed(const DoctorReport& report, const std::string& id) {
  for (const std::string& p : report.passed) {
    if (p == id) return true;
  }
  return false;
}

std::string Problems(const DoctorReport& report) {
  std::string out;
  for (const Finding& f : report.findings) out += f.id + ": " + f.observed + "\n";
  return out;
}

TEST_CASE("the plain VM: no problem, placement calls allowed, tiers as the kernel ranks them") {
  DoctorOptions options;
  options.kv_home_nodes = {0, 1};
  options.kv_cold_nodes = {2};
  DoctorReport report = Doctor(options);
  INFO(Problems(report));
  CHECK(Passed(report, "placement_calls"));
  CHECK(Passed(report, "numa_balancing"));
  CHECK(Passed(report, "demotion_enabled"));
  auto kernel = ReadKernelMemorySettings();
  REQUIRE(kernel.ok());
  if (On612()) {
    // 6.12 ranks the HMAT slow node below the DRAM nodes.
    const Finding* tiers = FindOrNull(report, "memory_tiers");
    REQUIRE(tiers != nullptr);
    CHECK(tiers->observed == "tier 4: nodes 0-1; tier 72: node 2");
    CHECK(Passed(report, "kv_cold_tier"));
    CHECK(report.healthy());
  } else {
    // Whatever 6.1 ranks, doctor says the same as its files.
    const bool lower = kernel->tier_of(2) > std::max(kernel->tier_of(0), kernel->tier_of(1));
    CHECK(Passed(report, "kv_cold_tier") == (lower || kernel->memory_tiers.empty()));
    CHECK(report.problem_count() == (lower || kernel->memory_tiers.empty() ? 0u : 1u));
  }
}

TEST_CASE("NUMA balancing in tiering mode and demotion, switched on") {
  Write("/proc/sys/kernel/numa_balancing", "2");
  Write("/sys/kernel/mm/numa/demotion_enabled", "true");
  DoctorReport report = Doctor();
  Write("/proc/sys/kernel/numa_balancing", "0");
  Write("/sys/kernel/mm/numa/demotion_enabled", "false");
  INFO(Problems(report));
  const Finding* balancing = FindOrNull(report, "numa_balancing");
  REQUIRE(balancing != nullptr);
  CHECK(balancing->observed == "2");
  CHECK(balancing->explanation.find("memory tiering mode") != std::string::npos);
  const Finding* demotion = FindOrNull(report, "demotion_enabled");
  REQUIRE(demotion != nullptr);
  auto kernel = ReadKernelMemorySettings();
  REQUIRE(kernel.ok());
  CHECK(demotion->severity ==
        (kernel->memory_tiers.size() >= 2 ? Severity::kWarning : Severity::kInfo));
}

TEST_CASE("a cgroup whose cpuset.mems is narrower than the policy's nodes") {
  const std::string root = "/sys/fs/cgroup";
  struct stat info;
  REQUIRE(stat((root + "/cgroup.controllers").c_str(), &info) == 0);
  Write(root + "/cgroup.subtree_control", "+cpuset");
  ::mkdir((root + "/narrow").c_str(), 0755);
  Write(root + "/narrow/cpuset.mems", "0");
  Write(root + "/narrow/cgroup.procs", std::to_string(::getpid()));
  DoctorOptions options;
  options.policy = "interleave(0-2)";
  DoctorReport inside = Doctor(options);
  Write(root + "/cgroup.procs", std::to_string(::getpid()));
  DoctorReport outside = Doctor(options);
  INFO(Problems(inside));
  const Finding* narrow = FindOrNull(inside, "cpuset_mems_narrow");
  REQUIRE(narrow != nullptr);
  CHECK(narrow->severity == Severity::kCritical);
  CHECK(narrow->observed == "names nodes 1-2, outside cpuset.mems 0 of pid self");
  CHECK(Passed(outside, "cpuset_mems_narrow"));
}

TEST_CASE("a seccomp filter that refuses mbind is named") {
  auto reader = MakeRootedReader();
  auto topology = Topology::discover(*reader);
  REQUIRE(topology.ok());
  StatusOr<DoctorReport> report = absl::UnknownError("did not run");
  const bool installed = testing::RunWithMbindRefused(
      [&] { report = RunDoctor(*reader, *topology); });
  REQUIRE(installed);  // the lab's kernels have seccomp filters
  REQUIRE(report.ok());
  const Finding* refused = FindOrNull(*report, "placement_calls");
  REQUIRE(refused != nullptr);
  CHECK(refused->observed == "refused: mbind: Operation not permitted (errno 1 EPERM)");
  CHECK(refused->explanation.find("seccomp filter (Seccomp: 2") != std::string::npos);
}

}  // namespace
}  // namespace numarena
