// lab-topologies: 2s
//
// `numarena stat` on a real two-node kernel: a child process pins itself to node 1's CPU,
// then binds 64 MiB to node 1 (mbind before first touch) and touches it. StatProcess of
// that pid, read from the live /proc like `numarena stat PID`, must report the 64 MiB on
// node 1, the child running on node 1, and the growth of its private memory local. The
// assertions are on what changed between a reading before the mapping and one after it:
// what the child already had (inherited from a test binary, which under ASan keeps its
// shadow and allocator pages on node 0) is its own business. The expected nodes and CPUs
// come from the lab's topology description, not from numarena.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include "lab_support.hpp"
#include "numarena/ops/stat.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace {

constexpr std::size_t kBytes = std::size_t{64} << 20;

// The child: pin, report on `pinned`, wait for one byte on `go`, then map, bind and touch,
// report on `ready`, and wait until `release` closes. Exits with a distinct status for
// each step that failed.
[[noreturn]] void Child(int node, std::vector<int> cpus, int pinned, int go, int ready,
                        int release) {
  if (!numarena::os::SetThreadAffinity(cpus).ok()) _exit(12);
  char byte = 1;
  if (write(pinned, &byte, 1) != 1) _exit(14);
  if (read(go, &byte, 1) != 1) _exit(15);
  auto memory = numarena::os::MapAnonymous(kBytes);
  if (!memory.ok()) _exit(10);
  int nodes[] = {node};
  if (!numarena::os::BindRange(*memory, kBytes, numarena::os::PolicyMode::kBind, nodes).ok()) {
    _exit(11);
  }
  std::memset(*memory, 0x5a, kBytes);
  if (write(ready, &byte, 1) != 1) _exit(13);
  (void)!read(release, &byte, 1);  // returns 0 when the parent closes its end
  _exit(0);
}

}  // namespace

TEST_CASE("stat: memory a process bound to node 1 is reported on node 1", "[lab]") {
  const auto& lab = numarena::lab::Expected();
  REQUIRE(lab.nodes.size() >= 2);
  const auto& target = lab.nodes[1];
  REQUIRE_FALSE(target.cpus.empty());

  auto reader = numarena::MakeRootedReader();
  auto topology = numarena::Topology::discover(*reader);
  REQUIRE(topology.ok());
  auto counters_before = numarena::ReadNodeCounters(*reader, *topology);
  REQUIRE(counters_before.ok());
  REQUIRE(counters_before->count(target.id) == 1);

  int pinned[2], go[2], ready[2], release[2];
  REQUIRE(pipe(pinned) == 0);
  REQUIRE(pipe(go) == 0);
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(release) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(pinned[0]);
    close(go[1]);
    close(ready[0]);
    close(release[1]);
    Child(target.id, target.cpus, pinned[1], go[0], ready[1], release[0]);
  }
  close(pinned[1]);
  close(go[0]);
  close(ready[1]);
  close(release[0]);
  char byte = 0;
  REQUIRE(read(pinned[0], &byte, 1) == 1);
  auto before = numarena::StatProcess(*reader, *topology, std::to_string(child));
  REQUIRE(write(go[1], &byte, 1) == 1);
  REQUIRE(read(ready[0], &byte, 1) == 1);
  auto stat = numarena::StatProcess(*reader, *topology, std::to_string(child));
  close(release[1]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  INFO(before.status());
  INFO(stat.status());
  REQUIRE(before.ok());
  REQUIRE(stat.ok());
  const int home = lab.nodes[0].id;
  INFO("before: node " << home << ": " << before->private_bytes_on(home) << " bytes, node "
                       << target.id << ": " << before->private_bytes_on(target.id) << " bytes");
  INFO("after:  node " << home << ": " << stat->private_bytes_on(home) << " bytes, node "
                       << target.id << ": " << stat->private_bytes_on(target.id) << " bytes");
  CHECK(stat->private_bytes_on(target.id) >= kBytes);
  CHECK(stat->private_bytes_on(target.id) >= before->private_bytes_on(target.id) + kBytes);
  // The mapping, binding and touching put (almost) nothing on node 0: a few page-table and
  // stack pages at most.
  CHECK(stat->private_bytes_on(home) < before->private_bytes_on(home) + kBytes / 16);
  CHECK(stat->running_cpus == target.cpus);
  CHECK(stat->running_nodes == std::vector<int>{target.id});
  // local_fraction is the node-1 share of all private bytes, so the 64 MiB must raise it to
  // at least what adding 64 MiB of local memory to the first reading gives.
  const double local_before = static_cast<double>(before->private_bytes_on(target.id));
  const double total_before = static_cast<double>(before->private_bytes);
  CHECK(stat->local_fraction > before->local_fraction);
  CHECK(stat->local_fraction >= (local_before + kBytes) / (total_before + kBytes + kBytes / 16));
  CHECK(stat->local_fraction ==
        Approx(static_cast<double>(stat->private_bytes_on(target.id)) /
               static_cast<double>(stat->private_bytes)));

  auto counters = numarena::ReadNodeCounters(*reader, *topology);
  REQUIRE(counters.ok());
  REQUIRE(counters->count(target.id) == 1);
  // The child's allocations on node 1 count as node 1 hits: at least one event per 2 MiB
  // (kernels count a huge page as one allocation event, or as 512 pages).
  CHECK(counters->at(target.id).numa_hit - counters_before->at(target.id).numa_hit >=
        kBytes / (std::size_t{2} << 20));
}
