// `numarena advise` and `numarena stat` as users run them: the built binary on fixture
// trees, exact lines, exit codes and the --json shape.
#include <catch2/catch.hpp>
#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "cli_run.hpp"

using numarena::testing::FixtureRoot;
using numarena::testing::RunCli;

TEST_CASE("advise --gpu on the EPYC fixture", "[cli][advise]") {
  auto run = RunCli("advise --gpu 0000:41:00.0 " + FixtureRoot("epyc9654-snc4"));
  CHECK(run.exit_code == 0);
  auto lines = run.lines();
  REQUIRE(lines.size() > 8);
  CHECK(lines[0] == "# GPU 0000:41:00.0: memory on node 0, CPUs 0-47,96-143 (node 0)");
  CHECK(lines[1] == "numactl:");
  CHECK(lines[2] == "    numactl --cpunodebind=0 --membind=0 <server command>");
  CHECK(lines[3] == "taskset:");
  CHECK(lines[4] ==
        "    taskset -c 0-47,96-143 <server command>   # CPUs only: memory follows first touch");
  CHECK(lines[5] == "docker:");
  CHECK(lines[6] ==
        "    docker run --cpuset-cpus=0-47,96-143 --cpuset-mems=0 --gpus '\"device=<index or "
        "UUID of 0000:41:00.0>\"' -e CUDA_DEVICE_ORDER=PCI_BUS_ID <image>");
  CHECK(lines[7] == "kubernetes:");
  CHECK(run.out.find("\nnumarena (C++):\n") != std::string::npos);
}

TEST_CASE("advise --json and errors", "[cli][advise]") {
  auto json = RunCli("advise --node 2 --json " + FixtureRoot("epyc9654-snc4"));
  CHECK(json.exit_code == 0);
  CHECK(json.out.rfind("{\"schema\":\"numarena.advise/1\",\"target\":\"node 2\",\"memory_node\":2,"
                       "\"cpu_node\":2,\"cpus\":[192,",
                       0) == 0);
  auto unknown = RunCli("advise --gpu 41:00.0 " + FixtureRoot("ops-unknown-node"));
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.rfind("numarena advise: the kernel does not know the NUMA node of gpu "
                          "0000:41:00.0 (numa_node is -1)",
                          0) == 0);
  auto none = RunCli("advise " + FixtureRoot("epyc9654-snc4"));
  CHECK(none.exit_code == 2);
  auto bad_node = RunCli("advise --node x " + FixtureRoot("epyc9654-snc4"));
  CHECK(bad_node.exit_code == 2);
  CHECK(bad_node.err == "numarena advise: --node needs a node id, not 'x'\n");
}

TEST_CASE("stat PID on a fixture", "[cli][stat]") {
  auto run = RunCli("stat 4242 " + FixtureRoot("ops-good"));
  CHECK(run.exit_code == 0);
  CHECK(run.lines() ==
        std::vector<std::string>{
            "Per-node memory of pid 4242 (llm-server) in MiB, from numa_maps (5 mappings)",
            "                     Node 0     Node 1      Total",
            "Anonymous            1024.1        1.0     1025.1",
            "Hugetlb                32.0        0.0       32.0",
            "Private              1056.1        1.0     1057.1",
            "File (shared)           0.5        0.5        1.0",
            "runs on: CPUs 2,5 (node 0); may use CPUs 0-7, memory nodes 0-1",
            "local: 99.9% of 1.0 GiB private memory is on node 0, where the process runs", "",
            "numastat (pages)         Node 0         Node 1",
            "numa_hit                 996318         500000",
            "numa_miss                 12451           8021",
            "numa_foreign               8021          12451",
            "interleave_hit                4              3",
            "local_node               990000         400000",
            "other_node                18769         108021"});
}

TEST_CASE("stat --json and errors", "[cli][stat]") {
  auto json = RunCli("stat 4242 --json " + FixtureRoot("ops-bad"));
  CHECK(json.exit_code == 0);
  CHECK(json.out.rfind("{\"schema\":\"numarena.stat/2\",\"pid\":4242,\"command\":"
                       "\"llm-server\",\"nodes\":[{\"node\":0,\"anonymous_bytes\":629145600,",
                       0) == 0);
  CHECK(json.out.find("\"running_nodes\":[0,1],\"local_fraction\":1,") != std::string::npos);
  // --pid, as doctor and exporter take it, gives the same; both forms at once is an error.
  CHECK(RunCli("stat --pid 4242 --json " + FixtureRoot("ops-bad")).out == json.out);
  auto both = RunCli("stat --pid 4242 4243 " + FixtureRoot("ops-bad"));
  CHECK(both.exit_code == 2);
  CHECK(both.err == "numarena stat: --pid 4242 and 4243: give one process (numarena stat --pid PID)\n");
  // 'self' on the live system is this process's number.
  auto self_json = RunCli("stat --pid self --json");
  INFO(self_json.err);
  CHECK(self_json.exit_code == 0);
  CHECK(std::regex_search(self_json.out, std::regex("^\\{\"schema\":\"numarena.stat/2\",\"pid\":[1-9][0-9]*,")));
  auto gone = RunCli("stat 31337 " + FixtureRoot("ops-good"));
  CHECK(gone.exit_code == 2);
  CHECK(gone.err.rfind("numarena stat: no process 31337: ", 0) == 0);
  auto missing = RunCli("stat");
  CHECK(missing.exit_code == 2);
  CHECK(missing.err == "numarena stat: give one process id (or 'self'): numarena stat --pid PID\n");
  auto self = RunCli("stat self");
  CHECK(self.exit_code == 0);
  CHECK(self.out.rfind("Per-node memory of pid self (numarena)", 0) == 0);
}

TEST_CASE("report on the EPYC fixture: every section, GPU binding", "[cli][report]") {
  auto run = RunCli("report " + FixtureRoot("epyc9654-snc4"));
  CHECK(run.exit_code == 0);
  for (const char* section :
       {"== topology ==\n", "== devices ==\n", "== this process may use ==\n", "== doctor ==\n",
        "== budget ==\n", "== bandwidth and latency (quick) ==\n", "== recommended binding ==\n"}) {
    INFO(section);
    CHECK(run.out.find(section) != std::string::npos);
  }
  CHECK(run.out.find("gpu        0000:41:00.0  node 0\n") != std::string::npos);
  CHECK(run.out.find("GPU 0000:41:00.0 (memory node 0, CPUs 0-47,96-143)\n"
                     "  numactl --cpunodebind=0 --membind=0 <server command>\n") !=
        std::string::npos);
  CHECK(run.out.find("skipped: a recorded tree is not a machine to measure") != std::string::npos);
  CHECK(run.out.find("        0:   10   12   32   32\n") != std::string::npos);

  auto json = RunCli("report --json " + FixtureRoot("epyc9654-snc4"));
  CHECK(json.exit_code == 0);
  CHECK(json.out.rfind("{\"schema\":\"numarena.report/1\",\"nodes\":[{\"id\":0,", 0) == 0);
  CHECK(json.out.find("\"bindings\":[{\"target\":\"GPU 0000:41:00.0\",\"memory_node\":0,") !=
        std::string::npos);
  CHECK(json.out.find("\"bandwidth\":null") != std::string::npos);
}

TEST_CASE("report on this machine measures and finishes in time", "[cli][report]") {
  auto start = std::chrono::steady_clock::now();
  auto run = RunCli("report");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(run.exit_code == 0);
  CHECK(seconds < 30);
  CHECK(run.out.find("read GB/s (idle latency ns)") != std::string::npos);
  CHECK(run.err.empty());
}

TEST_CASE("budget: the header says how usage is computed, page cache included",
          "[cli][budget]") {
  auto run = RunCli("budget " + FixtureRoot("ops-good"));
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.rfind("budget (system mode: capacity = node MemTotal, or cgroup memory.max when "
                      "lower; used = MemTotal - MemFree - Inactive(file), the inactive page "
                      "cache counted as free)\n",
                      0) == 0);
}

TEST_CASE("run --help lists every policy kind --policy takes, target(...) included",
          "[cli][run]") {
  auto run = RunCli("help run");
  REQUIRE(run.exit_code == 0);
  for (const char* kind : {"bind(NODES)", "preferred(NODES)", "interleave(NODES)",
                           "weighted(N:W,...)", "target(bandwidth|latency|capacity[@NODE|@any])",
                           "local", "--metrics-listen", "P|P-Q"}) {
    INFO(kind);
    CHECK(run.out.find(kind) != std::string::npos);
  }
}
