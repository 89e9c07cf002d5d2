// `numarena doctor` as operators run it: the built binary on the ops-* fixture trees.
// Exit codes (0 healthy or report, 1 problems under --check, 2 errors), the exact
// one-line-per-problem output of --check, and the --json shape.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cli_run.hpp"

using numarena::testing::FixtureRoot;
using numarena::testing::RunCli;

TEST_CASE("doctor --check: healthy machine exits 0", "[cli][doctor]") {
  auto run = RunCli("doctor --check --gpu 0000:41:00.0 --pid 4242 " + FixtureRoot("ops-good"));
  CHECK(run.exit_code == 0);
  CHECK(run.out == "numarena doctor: ok (13 checks passed)\n");
  CHECK(run.err.empty());
}

TEST_CASE("doctor --check: one line per problem, exit 1", "[cli][doctor]") {
  auto run = RunCli("doctor --check " + FixtureRoot("ops-bad"));
  CHECK(run.exit_code == 1);
  CHECK(run.lines() ==
        std::vector<std::string>{
            "warning numa_balancing: kernel.numa_balancing: 1 (expected 0); fix: sysctl -w "
            "kernel.numa_balancing=0   # persist in /etc/sysctl.d/90-numa.conf",
            "warning zone_reclaim_mode: vm.zone_reclaim_mode: 1 (expected 0); fix: sysctl -w "
            "vm.zone_reclaim_mode=0   # persist in /etc/sysctl.d/90-numa.conf",
            "warning thp_enabled: transparent_hugepage/enabled: never (expected always or "
            "madvise); fix: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
            "warning thp_defrag: transparent_hugepage/defrag: always (expected defer+madvise or "
            "madvise); fix: echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag"});
}

TEST_CASE("doctor --check: unknown device node and remote IRQs", "[cli][doctor]") {
  auto unknown = RunCli("doctor --check " + FixtureRoot("ops-unknown-node"));
  CHECK(unknown.exit_code == 1);
  REQUIRE(unknown.lines().size() == 1);
  CHECK(unknown.lines()[0].rfind(
            "warning device_node_unknown: 0000:41:00.0: gpu numa_node = -1 (expected the node "
            "of the socket the device is attached to); fix: echo <node> > "
            "/sys/bus/pci/devices/0000:41:00.0/numa_node",
            0) == 0);

  auto irq = RunCli("doctor --check --gpu c1:00.0 --pid 4242 " + FixtureRoot("ops-irq-remote"));
  CHECK(irq.exit_code == 1);
  REQUIRE(irq.lines().size() == 1);
  CHECK(irq.lines()[0].rfind(
            "warning nic_irq_remote: 0000:21:00.0: 2 of 4 IRQs (120,121) may run on CPUs 8-15 "
            "outside node 0 (expected every IRQ on CPUs of node 0 (0-7)); fix: for irq in 120 "
            "121; do echo 0-7 > /proc/irq/$irq/smp_affinity_list; done",
            0) == 0);
}

TEST_CASE("doctor --check: a server far from its GPU", "[cli][doctor]") {
  auto run = RunCli("doctor --check --gpu 41:00.0 --pid 4242 " + FixtureRoot("ops-irq-remote"));
  CHECK(run.exit_code == 1);
  auto lines = run.lines();
  REQUIRE(lines.size() == 4);
  CHECK(lines[1].rfind("critical process_cpus_remote: pid 4242 (llm-server): may run on CPUs "
                       "8-15 (node 1) (expected CPUs of node 0 (0-7), next to GPU 0000:41:00.0 "
                       "on node 0); fix: taskset -a -p -c 0-7 4242",
                       0) == 0);
  CHECK(lines[2].rfind("critical process_mems_exclude: ", 0) == 0);
  CHECK(lines[3].rfind("warning process_memory_remote: pid 4242 (llm-server): 0.0% of 1.0 GiB",
                       0) == 0);
}

TEST_CASE("doctor: the report exits 0 and explains, --json is one object", "[cli][doctor]") {
  auto run = RunCli("doctor " + FixtureRoot("ops-bad"));
  CHECK(run.exit_code == 0);
  CHECK(run.out.rfind("numarena doctor: 4 problems, 2 notes, 4 checks passed\n", 0) == 0);
  CHECK(run.out.find("\n[warning] numa_balancing: kernel.numa_balancing: 1 (expected 0)\n") !=
        std::string::npos);
  CHECK(run.out.find("    fix: sysctl -w vm.watermark_scale_factor=300\n") != std::string::npos);

  auto json = RunCli("doctor --json --check " + FixtureRoot("ops-bad"));
  CHECK(json.exit_code == 1);
  CHECK(json.out.rfind("{\"schema\":\"numarena.doctor/1\",\"healthy\":false,\"problems\":4,"
                       "\"findings\":[{\"id\":\"numa_balancing\",\"severity\":\"warning\","
                       "\"subject\":\"kernel.numa_balancing\",\"observed\":\"1\",\"expected\":"
                       "\"0\",",
                       0) == 0);
  CHECK(json.out.back() == '\n');
}

TEST_CASE("doctor: errors exit 2 with one line on stderr", "[cli][doctor]") {
  auto gpu = RunCli("doctor --gpu 0000:99:00.0 " + FixtureRoot("ops-good"));
  CHECK(gpu.exit_code == 2);
  CHECK(gpu.err.rfind("numarena doctor: no GPU, NIC or InfiniBand device at PCI address "
                      "'0000:99:00.0'",
                      0) == 0);
  auto option = RunCli("doctor --frobnicate");
  CHECK(option.exit_code == 2);
  CHECK(option.err ==
        "numarena doctor: unknown option '--frobnicate' (numarena help doctor "
        "lists the options)\n");
  auto pid = RunCli("doctor --pid 4242 " + FixtureRoot("ops-good"));
  CHECK(pid.exit_code == 2);
  auto missing = RunCli("doctor --sysfs-root /nonexistent");
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("/nonexistent") != std::string::npos);
}
