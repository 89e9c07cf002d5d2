// `numarena run` in the NUMA lab: heap_probe (tests/preload/heap_probe.c, plain C built without
// numarena) runs under the malloc override and reports, page by page, the node the kernel put
// its heap on (move_pages with no target, from inside the program). The placement is asserted
// for every page; the program also says whether numarena_owns() (dlsym) claims every block.
//
// Python too: Debian's python3, run with -S, needs only its encodings package, which
// tests/CMakeLists.txt copies into the VM with it (NUMARENA_LAB_EXTRA_FILES_preload_lab); it
// allocates a bytearray and reports the growth of its per-node page counts from
// /proc/self/numa_maps (the kernel's count per mapping: Python cannot name the buffer's
// address without ctypes, whose extension module the VM lacks).
//
// lab-files: numarena_cli numarena_preload heap_probe
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lab_support.hpp"

namespace {

using numarena::lab::Expected;

struct Run {
  bool exited = false;
  int status = -1;  // exit status, or the signal when !exited
  std::string output;
};

using Environment = std::vector<std::pair<std::string, std::string>>;

// `numarena run RUN_ARGS... -- PROGRAM...`, optionally pinned to `cpu` (the affinity survives
// exec, so the program runs there: placement must come from the policy, not from where the
// first touch happened), with `environment` set for it.
Run RunUnder(const std::vector<std::string>& run_args, const std::vector<std::string>& program,
             int cpu = -1, const Environment& environment = {}) {
  std::vector<std::string> args = {NUMARENA_LAB_CLI, "run"};
  args.insert(args.end(), run_args.begin(), run_args.end());
  args.push_back("--");
  args.insert(args.end(), program.begin(), program.end());
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(120);
    }
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(121);
  }
  close(fds[1]);
  Run run;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) run.output.append(buffer, n);
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  run.exited = WIFEXITED(status);
  run.status = run.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  UNSCOPED_INFO("numarena run " << absl::StrJoin(run_args, " ") << " -- "
                                << absl::StrJoin(program, " ") << " (cpu " << cpu << "):\n"
                                << run.output);
  return run;
}

Run RunProbe(const std::vector<std::string>& run_args, const std::vector<std::string>& probe_args,
             int cpu = -1, const Environment& environment = {}) {
  std::vector<std::string> program = {NUMARENA_LAB_PROBE};
  program.insert(program.end(), probe_args.begin(), probe_args.end());
  return RunUnder(run_args, program, cpu, environment);
}

// python3 -S bytearray_probe.py ARGS (see tests/preload/bytearray_probe.py).
Run RunPython(const std::vector<std::string>& run_args, const std::string& mode, int cpu = -1,
              const char* return_idle_ms = nullptr) {
  Environment environment;
  if (return_idle_ms != nullptr) environment.emplace_back("NUMARENA_RETURN_IDLE_MS", return_idle_ms);
  return RunUnder(run_args, {NUMARENA_LAB_PYTHON, "-S", NUMARENA_LAB_PYTHON_PROBE, mode}, cpu,
                  environment);
}

// "key=value" numbers of the line that starts with `prefix`.
std::map<std::string, long> Fields(const std::string& output, const std::string& prefix) {
  std::map<std::string, long> fields;
  std::size_t at = output.find(prefix);
  if (at == std::string::npos) return fields;
  std::string line = output.substr(at, output.find('\n', at) - at);
  static const std::regex field(R"(([a-z_]+[0-9]*)=([0-9]+))");
  for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it) {
    fields[(*it)[1]] = std::stol((*it)[2]);
  }
  return fields;
}

}  // namespace

TEST_CASE("numarena run --membind N: an unmodified program's heap pages are all on N",
          "[lab][preload]") {
  const auto& lab = Expected();
  for (const auto& node : lab.nodes) {
    // Run from the CPU farthest from N (any CPU for a memory-only node's test is remote).
    const int from_node = lab.farthest_cpu_node(node.id).value_or(lab.cpu_node_ids().front());
    const int cpu = lab.node(from_node).cpus.front();
    Run run = RunProbe({"--membind", std::to_string(node.id)}, {"place"}, cpu);
    REQUIRE(run.exited);
    REQUIRE(run.status == 0);
    auto fields = Fields(run.output, "pages=");
    INFO("node " << node.id);
    REQUIRE(fields["pages"] > 8192);
    CHECK(fields[absl::StrCat("node", node.id)] == fields["pages"]);
    CHECK(fields["errors"] == 0);
    CHECK(fields["owned"] == 1);
  }
}

TEST_CASE("numarena run --interleave ALL: the heap's pages are spread over every node",
          "[lab][preload]") {
  const auto& lab = Expected();
  const std::vector<int> nodes = lab.node_ids();
  Run run = RunProbe({"--interleave", absl::StrJoin(nodes, ",")}, {"place"});
  REQUIRE(run.exited);
  REQUIRE(run.status == 0);
  auto fields = Fields(run.output, "pages=");
  const long pages = fields["pages"];
  REQUIRE(pages > 8192);
  long sum = 0;
  for (int node : nodes) {
    const long on = fields[absl::StrCat("node", node)];
    INFO("node " << node << ": " << on << " of " << pages << " pages");
    // Page interleave gives each node about 1/n; at least half of that share is a clear
    // spread and leaves room for the small blocks' shared pages.
    CHECK(on >= pages / static_cast<long>(nodes.size()) / 2);
    sum += on;
  }
  CHECK(sum == pages);
  CHECK(fields["errors"] == 0);
  CHECK(fields["owned"] == 1);
}

TEST_CASE("numarena run --local: each pinned thread's allocation is on its own node",
          "[lab][preload]") {
  const auto& lab = Expected();
  std::vector<std::string> pairs;
  for (int node : lab.cpu_node_ids()) {
    pairs.push_back(absl::StrCat(node, ":", lab.node(node).cpus.front()));
  }
  std::vector<std::string> probe_args = {"local"};
  probe_args.insert(probe_args.end(), pairs.begin(), pairs.end());
  Run run = RunProbe({"--local"}, probe_args);
  REQUIRE(run.exited);
  REQUIRE(run.status == 0);
  for (int node : lab.cpu_node_ids()) {
    auto fields = Fields(run.output, absl::StrCat("thread node=", node, " "));
    INFO("thread pinned to node " << node);
    REQUIRE(fields["pages"] >= 4096);
    CHECK(fields["on_node"] == fields["pages"]);
    CHECK(fields["errors"] == 0);
  }
}

TEST_CASE("numarena run --local: a thread's allocations follow it when it moves to another node",
          "[lab][preload]") {
  // One thread, its blocks kept: on a CPU of the first node, then moved (sched_setaffinity,
  // mid-run) to a CPU of the other, then back. Each phase's pages must all be on the node the
  // thread ran on then: the node is learnt per allocation (rseq's CPU id and a CPU -> node
  // table where glibc registered rseq), never cached for the thread. And where glibc did not
  // register rseq (its tunable off, as on kernels before 4.18 or under valgrind): the fast
  // path's CPU read finds no CPU there, and every allocation asks getcpu.
  const auto& lab = Expected();
  const std::vector<int> cpu_nodes = lab.cpu_node_ids();
  if (cpu_nodes.size() < 2) {
    SUCCEED("one node with CPUs: nowhere to move to");
    return;
  }
  const int first = cpu_nodes.front();
  for (const bool rseq : {true, false}) {
    const Environment environment =
        rseq ? Environment{} : Environment{{"GLIBC_TUNABLES", "glibc.pthread.rseq=0"}};
    for (std::size_t k = 1; k < cpu_nodes.size(); ++k) {
      const int other = cpu_nodes[k];
      Run run = RunProbe({"--local"},
                         {"migrate", absl::StrCat(first, ":", lab.node(first).cpus.front()),
                          absl::StrCat(other, ":", lab.node(other).cpus.front())},
                         -1, environment);
      REQUIRE(run.exited);
      REQUIRE(run.status == 0);
      for (int phase = 0; phase < 3; ++phase) {
        const int node = phase % 2 == 0 ? first : other;
        auto fields = Fields(run.output, absl::StrCat("phase=", phase, " "));
        INFO((rseq ? "rseq" : "no rseq") << ", phase " << phase << ": thread on a CPU of node "
                                         << node);
        REQUIRE(fields["node"] == node);
        REQUIRE(fields["pages"] >= 4096);  // 16 MiB + 1 MiB + 750 KiB written
        CHECK(fields["on_node"] == fields["pages"]);
        CHECK(fields["errors"] == 0);
      }
    }
  }
}

TEST_CASE("numarena run --budget system: a full node makes malloc fail with ENOMEM, no OOM kill",
          "[lab][preload]") {
  const auto& lab = Expected();
  if (lab.name != "tiny") {
    SUCCEED("the tiny topology's 256 MiB node 1 is filled; other topologies skip it");
    return;
  }
  const std::uint64_t node_mib = lab.node(1).mem_mib;
  Run run = RunProbe({"--membind", "1", "--budget", "system"}, {"exhaust", "16"},
                     lab.node(0).cpus.front());
  // Exited by itself (an OOM kill is SIGKILL), after malloc said ENOMEM.
  REQUIRE(run.exited);
  CHECK(run.status == 0);
  CHECK(run.output.find("errno=ENOMEM") != std::string::npos);
  auto fields = Fields(run.output, "refused after=");
  // It did fill the node: most of its memory went to the program before the refusal.
  CHECK(fields["after"] >= static_cast<long>(node_mib / 4));
  CHECK(fields["after"] < static_cast<long>(node_mib));
}

TEST_CASE("numarena run --budget quota:64M: malloc fails with ENOMEM at the quota",
          "[lab][preload]") {
  // The quota, not the node's free memory, stops it (without a budget, numarena's own
  // free-memory check refuses only when the node is nearly full; on tiny's node 1 at 192 MiB).
  const auto& lab = Expected();
  const int node = lab.node_ids().back();
  Run run =
      RunProbe({"--membind", std::to_string(node), "--budget", "quota:64M"}, {"exhaust", "16"});
  REQUIRE(run.exited);
  CHECK(run.status == 0);
  CHECK(run.output.find("errno=ENOMEM") != std::string::npos);
  auto fields = Fields(run.output, "refused after=");
  CHECK(fields["after"] >= 32);
  CHECK(fields["after"] < 64);
}

TEST_CASE("numarena run with a budget: memory a program just freed is given again at once",
          "[lab][preload]") {
  // The program fills the node (tiny: --budget system on the 256 MiB node 1) or a quota
  // (elsewhere: quota:32M on the last node) until malloc says no, frees everything and fills
  // again at once, then frees and asks for 128 B-4 KiB: everything it freed must be there.
  const auto& lab = Expected();
  const bool tiny = lab.name == "tiny";
  const int node = tiny ? 1 : lab.node_ids().back();
  for (const char* kib : {"16", "64"}) {
    Run run = RunProbe({"--membind", std::to_string(node), "--budget",
                        tiny ? "system" : "quota:32M"},
                       {"refill", kib}, lab.node(lab.node_ids().front()).cpus.front());
    REQUIRE(run.exited);
    CHECK(run.status == 0);
    auto fields = Fields(run.output, "refill first=");
    INFO(kib << " KiB blocks: " << run.output);
    CHECK(fields["first"] * std::stol(kib) >= (tiny ? 64 : 16) * 1024);
    CHECK(fields["small_refused"] == 0);
    CHECK(fields["second"] * 10 >= fields["first"] * 9);
  }
}

TEST_CASE("python3 under numarena run --membind N: its bytearray's pages are on N",
          "[lab][preload][python]") {
  if (std::string(NUMARENA_LAB_PYTHON).empty()) {
    WARN("no /usr/bin/python3 with its encodings package on the build machine: skipped");
    return;
  }
  const auto& lab = Expected();
  for (const auto& node : lab.nodes) {
    const int from_node = lab.farthest_cpu_node(node.id).value_or(lab.cpu_node_ids().front());
    // The probe counts the growth of the whole process's pages per node, so memory the
    // process gives back meanwhile counts against it: the returner thread is off here (its
    // pass returned 3 pages of Python's start-up garbage in one run: 16381 of 16384), and a
    // little of jemalloc's own decay at the bytearray's calls is allowed for.
    Run run = RunPython({"--membind", std::to_string(node.id)}, "place",
                        lab.node(from_node).cpus.front(), "0");
    INFO("node " << node.id << ": " << run.output);
    REQUIRE(run.exited);
    REQUIRE(run.status == 0);
    auto fields = Fields(run.output, "pages ");
    const long on = fields[absl::StrCat("node", node.id)];
    CHECK(on >= 16384 - 16);  // the 64 MiB, less 64 KiB the process may have given back
    for (const auto& [name, pages] : fields) {
      // Python's own small objects (pymalloc maps its arenas itself, first touch) may land
      // elsewhere; the bytearray may not.
      if (name != absl::StrCat("node", node.id)) CHECK(pages < 1024);
    }
  }
}

TEST_CASE("python3 under numarena run --interleave ALL: its bytearray is spread",
          "[lab][preload][python]") {
  if (std::string(NUMARENA_LAB_PYTHON).empty()) {
    WARN("no /usr/bin/python3 with its encodings package on the build machine: skipped");
    return;
  }
  const auto& lab = Expected();
  const std::vector<int> nodes = lab.node_ids();
  Run run = RunPython({"--interleave", absl::StrJoin(nodes, ",")}, "place");
  REQUIRE(run.exited);
  REQUIRE(run.status == 0);
  auto fields = Fields(run.output, "pages ");
  for (int node : nodes) {
    INFO("node " << node);
    CHECK(fields[absl::StrCat("node", node)] >= 16384 / static_cast<long>(nodes.size()) / 2);
  }
}

TEST_CASE("python3 under numarena run --budget system: MemoryError, not an OOM kill",
          "[lab][preload][python]") {
  const auto& lab = Expected();
  if (std::string(NUMARENA_LAB_PYTHON).empty() || lab.name != "tiny") {
    SUCCEED("only on the tiny topology, with python3");
    return;
  }
  Run run = RunPython({"--membind", "1", "--budget", "system"}, "exhaust",
                      lab.node(0).cpus.front());
  REQUIRE(run.exited);
  CHECK(run.status == 0);
  auto fields = Fields(run.output, "MemoryError after=");
  CHECK(fields["after"] >= static_cast<long>(lab.node(1).mem_mib / 4));
  CHECK(fields["after"] < static_cast<long>(lab.node(1).mem_mib));
}
