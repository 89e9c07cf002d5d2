// os::CurrentNodeFast (lib/os/current_node.hpp): the node of the caller's CPU without a
// system call where glibc registered rseq. On the host (one node) it shows that the answer is
// getcpu's, that a CPU's node is recorded in the table the first time it is asked, and that
// with rseq the table is what answers (a planted entry is returned as is), while a CPU id the
// table does not know goes to getcpu. That a thread's allocations follow it across nodes is
// proven in the NUMA lab (tests/lab/preload_lab.cpp, "follow it when it moves").
#include "os/current_node.hpp"

#include <sched.h>

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace numarena {
namespace {

using os::current_node_internal::cpu_node_plus_one;
using os::current_node_internal::kTableCpus;
using os::current_node_internal::RseqCpuId;

// Runs `body` on a thread pinned to `cpu` (a new thread: the test's own affinity stays);
// false if the thread could not be pinned. The body only records: the checks run on the
// test's thread (Catch2 is not thread-safe).
template <typename Body>
bool OnCpu(int cpu, Body body) {
  bool pinned = false;
  std::thread([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pinned = sched_setaffinity(0, sizeof set, &set) == 0;
    if (pinned) body();
  }).join();
  return pinned;
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// What getcpu says on the calling thread.
struct GetcpuAnswer {
  unsigned cpu = ~0u, node = ~0u;
  int rc = -1;
};
GetcpuAnswer AskGetcpu() {
  GetcpuAnswer answer;
  answer.rc = getcpu(&answer.cpu, &answer.node);
  return answer;
}

bool HaveRseq() {
  unsigned cpu = ~0u;
  std::thread([&] { cpu = RseqCpuId(); }).join();
  return cpu != ~0u;
}

TEST_CASE("CurrentNodeFast is getcpu's node, and records each CPU's node once asked") {
  for (int cpu : AllowedCpus()) {
    if (cpu >= static_cast<int>(kTableCpus)) continue;
    GetcpuAnswer truth;
    int first = -2, second = -2;
    std::uint16_t recorded = 0;
    REQUIRE(OnCpu(cpu, [&] {
      truth = AskGetcpu();
      first = os::CurrentNodeFast();
      recorded = cpu_node_plus_one[cpu].load();
      second = os::CurrentNodeFast();  // from the table now, where rseq is registered
    }));
    INFO("CPU " << cpu);
    REQUIRE(truth.rc == 0);
    REQUIRE(truth.cpu == static_cast<unsigned>(cpu));
    CHECK(first == static_cast<int>(truth.node));
    CHECK(recorded == truth.node + 1);
    CHECK(second == static_cast<int>(truth.node));
  }
}

TEST_CASE("with rseq the CPU id is the kernel's and the table answers without getcpu") {
  if (!HaveRseq()) {
    SUCCEED(
        "glibc did not register rseq here (old glibc, valgrind, or the tunable): "
        "every call is getcpu's");
    return;
  }
  const int cpu = AllowedCpus().front();
  REQUIRE(cpu < static_cast<int>(kTableCpus));
  unsigned rseq_cpu = ~0u;
  int planted = -2;
  REQUIRE(OnCpu(cpu, [&] {
    rseq_cpu = RseqCpuId();
    const std::uint16_t kept = cpu_node_plus_one[cpu].load();
    cpu_node_plus_one[cpu].store(43);  // a node no machine here has: 42
    planted = os::CurrentNodeFast();
    cpu_node_plus_one[cpu].store(kept);
  }));
  CHECK(rseq_cpu == static_cast<unsigned>(cpu));
  CHECK(planted == 42);
}

TEST_CASE("a CPU the table does not know is asked of getcpu and then recorded") {
  const int cpu = AllowedCpus().front();
  GetcpuAnswer truth;
  int answer = -2;
  std::uint16_t recorded = 0;
  REQUIRE(OnCpu(cpu, [&] {
    truth = AskGetcpu();
    cpu_node_plus_one[cpu].store(0);  // as after a hotplug: never seen
    answer = os::CurrentNodeFast();
    recorded = cpu_node_plus_one[cpu].load();
  }));
  REQUIRE(truth.rc == 0);
  CHECK(answer == static_cast<int>(truth.node));
  CHECK(recorded == truth.node + 1);
}

}  // namespace
}  // namespace numarena
