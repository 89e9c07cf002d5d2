// Tests of the NUMA health audit (numarena/doctor.hpp) on the ops-* fixture trees
// (tests/fixtures/ops-fixtures.sh): for each case the exact findings, in order, with the
// observed values and fix commands an operator would see.
#include "numarena/ops/doctor.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "fixture_machine.hpp"
#include "map_reader.hpp"
#include "numarena/topology.hpp"

namespace {

using numarena::DoctorOptions;
using numarena::DoctorReport;
using numarena::Finding;
using numarena::Severity;

using Machine = numarena::testing::FixtureMachine;
Machine Load(const std::string& name) { return numarena::testing::LoadFixtureMachine(name); }

DoctorReport Run(const std::string& name, DoctorOptions options = {}) {
  Machine m = Load(name);
  auto report = numarena::RunDoctor(*m.reader, m.topology, options);
  INFO(report.status());
  REQUIRE(report.ok());
  return *std::move(report);
}

// "id/severity/subject/observed" per finding: compact and exact.
std::vector<std::string> Summary(const DoctorReport& report) {
  std::vector<std::string> out;
  for (const Finding& f : report.findings) {
    out.push_back(f.id + "/" + numarena::SeverityName(f.severity) + "/" + f.subject + "/" +
                  f.observed);
  }
  return out;
}

const Finding& Find(const DoctorReport& report, const std::string& id) {
  for (const Finding& f : report.findings) {
    if (f.id == id) return f;
  }
  FAIL("no finding " << id);
  throw;
}

DoctorOptions ForGpu(const char* bus_id) {
  DoctorOptions options;
  options.gpu_bus_id = bus_id;
  options.pid = "4242";
  return options;
}

}  // namespace

TEST_CASE("doctor: seed 000's settings and a bound server give no finding", "[doctor]") {
  DoctorReport report = Run("ops-good", ForGpu("0000:41:00.0"));
  CHECK(Summary(report).empty());
  CHECK(report.healthy());
  CHECK(report.passed ==
        std::vector<std::string>{"numa_balancing", "zone_reclaim_mode", "thp_enabled", "thp_defrag",
                                 "min_free_kbytes", "watermark_scale_factor", "demotion_enabled",
                                 "hugetlb_node_pools",
                                 "device_node_unknown", "nic_irq_remote", "process_cpus",
                                 "process_mems", "process_memory"});
  CHECK(report.skipped.empty());
}

TEST_CASE("doctor: every kernel setting off, an unbound server", "[doctor]") {
  DoctorReport report = Run("ops-bad", ForGpu("41:00.0"));
  CHECK(Summary(report) ==
        std::vector<std::string>{
            "numa_balancing/warning/kernel.numa_balancing/1",
            "zone_reclaim_mode/warning/vm.zone_reclaim_mode/1",
            "thp_enabled/warning/transparent_hugepage/enabled/never",
            "thp_defrag/warning/transparent_hugepage/defrag/always",
            "min_free_kbytes/info/vm.min_free_kbytes/67584",
            "watermark_scale_factor/info/vm.watermark_scale_factor/10",
            "process_cpus_unbound/warning/pid 4242 (llm-server)/may run on CPUs 0-15 (nodes 0,1)",
            "process_memory_remote/warning/pid 4242 (llm-server)/60.0% of 1000.0 MiB private "
            "memory on node 0 (node 1: 400.0 MiB)"});
  CHECK(report.problem_count() == 6);
  CHECK_FALSE(report.healthy());
  CHECK(Find(report, "numa_balancing").fix.rfind("sysctl -w kernel.numa_balancing=0", 0) == 0);
  CHECK(Find(report, "numa_balancing").expected == "0");
  CHECK(Find(report, "min_free_kbytes").expected == ">= 1342177 (1% of memory, at most 2 GiB)");
  CHECK(Find(report, "min_free_kbytes").fix == "sysctl -w vm.min_free_kbytes=1342177");
  CHECK(Find(report, "thp_defrag").fix ==
        "echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag");
  CHECK(Find(report, "process_cpus_unbound").fix.rfind("taskset -a -p -c 0-7 4242", 0) == 0);
  CHECK(Find(report, "process_memory_remote").fix.rfind("migratepages 4242 1 0", 0) == 0);
  for (const Finding& f : report.findings) {
    CHECK_FALSE(f.explanation.empty());
    CHECK_FALSE(f.expected.empty());
  }
}

TEST_CASE("doctor: a device whose node is unknown is reported, never read as node 0", "[doctor]") {
  DoctorReport report = Run("ops-unknown-node", ForGpu("0000:41:00.0"));
  CHECK(Summary(report) ==
        std::vector<std::string>{"device_node_unknown/warning/0000:41:00.0/gpu numa_node = -1"});
  CHECK(Find(report, "device_node_unknown")
            .fix.rfind("echo <node> > /sys/bus/pci/devices/0000:41:00.0/numa_node", 0) == 0);
  // The process checks cannot judge against an unknown node: skipped, not passed.
  CHECK(report.skipped ==
        std::vector<std::string>{
            "process_*: the node of 0000:41:00.0 is unknown (see device_node_unknown)"});
}

TEST_CASE("doctor: NIC IRQs on the wrong node and a server on the GPU's far node", "[doctor]") {
  DoctorReport report = Run("ops-irq-remote", ForGpu("0000:41:00.0"));
  CHECK(Summary(report) ==
        std::vector<std::string>{
            "nic_irq_remote/warning/0000:21:00.0/2 of 4 IRQs (120,121) may run on CPUs 8-15 "
            "outside node 0",
            "process_cpus_remote/critical/pid 4242 (llm-server)/may run on CPUs 8-15 (node 1)",
            "process_mems_exclude/critical/pid 4242 (llm-server)/cpuset allows memory on node 1",
            "process_memory_remote/warning/pid 4242 (llm-server)/0.0% of 1.0 GiB private memory "
            "on node 0 (node 1: 1.0 GiB)"});
  CHECK(Find(report, "nic_irq_remote")
            .fix.rfind("for irq in 120 121; do echo 0-7 > /proc/irq/$irq/smp_affinity_list; done",
                       0) == 0);
  CHECK(Find(report, "nic_irq_remote").expected == "every IRQ on CPUs of node 0 (0-7)");
}

TEST_CASE("doctor: the GPU on the server's own node is fine in the same tree", "[doctor]") {
  // Same process, judged against the node-1 GPU: CPUs and cpuset are right, and all its
  // memory is on node 1.
  DoctorReport report = Run("ops-irq-remote", ForGpu("0000:c1:00.0"));
  CHECK(Summary(report) ==
        std::vector<std::string>{
            "nic_irq_remote/warning/0000:21:00.0/2 of 4 IRQs (120,121) may run on CPUs 8-15 "
            "outside node 0"});
}

TEST_CASE("doctor: bad options are errors that say what to do", "[doctor]") {
  Machine m = Load("ops-good");
  auto unknown_gpu = numarena::RunDoctor(*m.reader, m.topology, ForGpu("0000:99:00.0"));
  REQUIRE_FALSE(unknown_gpu.ok());
  CHECK(unknown_gpu.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(unknown_gpu.status().message()).find("0000:99:00.0") != std::string::npos);

  DoctorOptions bad_pid = ForGpu("0000:41:00.0");
  bad_pid.pid = "42x";
  auto malformed = numarena::RunDoctor(*m.reader, m.topology, bad_pid);
  REQUIRE_FALSE(malformed.ok());
  CHECK(malformed.status().code() == absl::StatusCode::kInvalidArgument);

  DoctorOptions gone = ForGpu("0000:41:00.0");
  gone.pid = "999999";
  auto missing = numarena::RunDoctor(*m.reader, m.topology, gone);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find("no process 999999") != std::string::npos);
}

TEST_CASE("doctor: a kernel without the files skips the checks instead of failing", "[doctor]") {
  // xeon-2s (the topology fixture) has no sysctl, THP or IRQ files.
  Machine m = Load("xeon-2s");
  auto report = numarena::RunDoctor(*m.reader, m.topology);
  REQUIRE(report.ok());
  CHECK(report->skipped.size() >= 6);
  CHECK(report->skipped[0].rfind("numa_balancing: ", 0) == 0);
  CHECK(report->skipped[0].find("/proc/sys/kernel/numa_balancing not found") != std::string::npos);
}

TEST_CASE("doctor: huge pages reserved on one node with CPUs and not the other", "[doctor]") {
  // cxl-hmat: node 0 (CPUs 0-7) has 512 2 MiB and 4 1 GiB pages, node 1 (CPUs 8-15) none,
  // node 2 is a memory-only CXL expander without pools.
  Machine m = Load("cxl-hmat");
  auto report = numarena::RunDoctor(*m.reader, m.topology);
  REQUIRE(report.ok());
  std::vector<std::string> pools;
  for (const std::string& line : Summary(*report)) {
    if (line.rfind("hugetlb_node_pools/", 0) == 0) pools.push_back(line);
  }
  CHECK(pools == std::vector<std::string>{
                     "hugetlb_node_pools/warning/2 MiB huge pages/node 0: 500 free of 512, "
                     "node 1: 0 free of 0, node 2: 0 free of 0",
                     "hugetlb_node_pools/warning/1 GiB huge pages/node 0: 4 free of 4, node 1: "
                     "0 free of 0, node 2: 0 free of 0"});
  const Finding& two_mib = Find(*report, "hugetlb_node_pools");
  // Only node 1 is asked to reserve: node 2 has no CPUs.
  CHECK(two_mib.fix ==
        "echo 512 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages");
  CHECK(two_mib.explanation.find("none on node 1.") != std::string::npos);
  CHECK(report->problem_count() >= 2);
}

// The doctor's report on an in-memory machine.
DoctorReport RunOn(const numarena::testing::MapReader& r) {
  auto topology = numarena::Topology::discover(r);
  REQUIRE(topology.ok());
  auto report = numarena::RunDoctor(r, *topology);
  REQUIRE(report.ok());
  return *std::move(report);
}

bool PassedHugePools(const DoctorReport& report) {
  for (const Finding& f : report.findings) {
    if (f.id == "hugetlb_node_pools") return false;
  }
  return std::count(report.passed.begin(), report.passed.end(), "hugetlb_node_pools") == 1;
}

TEST_CASE("doctor: huge page pools on every node with CPUs, or none anywhere, pass", "[doctor]") {
  numarena::testing::MapReader r = numarena::testing::MapReader::TwoNodes();
  r.AddHugePool(0, 2048, 64, 60);
  r.AddHugePool(1, 2048, 64, 64);
  CHECK(PassedHugePools(RunOn(r)));

  // The same machine with node 1's pool emptied is a warning naming node 1.
  r.AddHugePool(1, 2048, 0, 0);
  DoctorReport uneven = RunOn(r);
  const Finding& warning = Find(uneven, "hugetlb_node_pools");
  CHECK(warning.severity == Severity::kWarning);
  CHECK(warning.observed == "node 0: 60 free of 64, node 1: 0 free of 0");
  CHECK(warning.fix ==
        "echo 64 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages");

  numarena::testing::MapReader empty = numarena::testing::MapReader::TwoNodes();
  empty.AddHugePool(0, 2048, 0, 0);
  empty.AddHugePool(1, 2048, 0, 0);
  CHECK(PassedHugePools(RunOn(empty)));

  // No hugetlbfs at all: skipped and said so.
  DoctorReport skipped = RunOn(numarena::testing::MapReader::TwoNodes());
  CHECK(std::count_if(skipped.skipped.begin(), skipped.skipped.end(), [](const std::string& s) {
          return s.rfind("hugetlb_node_pools: ", 0) == 0;
        }) == 1);
}
