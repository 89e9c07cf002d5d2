// Tests of the per-process NUMA memory view and the node counters (numarena/stat.hpp) on
// the ops-* fixture trees, and on the live /proc of this test process.
#include "numarena/ops/stat.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "fixture_machine.hpp"
#include "numarena/topology.hpp"

namespace {

constexpr std::uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

using Machine = numarena::testing::FixtureMachine;
Machine Load(const std::string& name) { return numarena::testing::LoadFixtureMachine(name); }

}  // namespace

TEST_CASE("stat: a server bound to node 0", "[stat]") {
  Machine m = Load("ops-good");
  auto stat = numarena::StatProcess(*m.reader, m.topology, "4242");
  INFO(stat.status());
  REQUIRE(stat.ok());
  CHECK(stat->command == "llm-server");
  CHECK(stat->mapping_count == 5);
  REQUIRE(stat->by_node.size() == 2);
  const auto& node0 = stat->by_node.at(0);
  const auto& node1 = stat->by_node.at(1);
  CHECK(node0.anonymous_bytes == kGiB + 33 * 4 * kKiB);  // bind:0 mapping + stack
  CHECK(node0.hugetlb_bytes == 32 * kMiB);               // 16 huge pages of 2 MiB
  CHECK(node0.file_bytes == 512 * kKiB);
  CHECK(node1.anonymous_bytes == kMiB);  // the heap
  CHECK(node1.hugetlb_bytes == 0);
  CHECK(node1.file_bytes == 512 * kKiB);
  CHECK(stat->private_bytes == node0.private_bytes() + node1.private_bytes());
  CHECK(stat->file_bytes == kMiB);
  CHECK(stat->allowed_cpus == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(stat->allowed_mem_nodes == std::vector<int>{0, 1});
  CHECK(stat->running_cpus == std::vector<int>{2, 5});
  CHECK(stat->running_nodes == std::vector<int>{0});
  CHECK(stat->local_fraction ==
        Approx(static_cast<double>(node0.private_bytes()) / stat->private_bytes));
  CHECK(stat->private_bytes_on(1) == kMiB);
  CHECK(stat->private_bytes_on(7) == 0);
}

TEST_CASE("stat: threads on both nodes make both local", "[stat]") {
  Machine m = Load("ops-bad");
  auto stat = numarena::StatProcess(*m.reader, m.topology, "4242");
  REQUIRE(stat.ok());
  CHECK(stat->running_cpus == std::vector<int>{3, 12});
  CHECK(stat->running_nodes == std::vector<int>{0, 1});
  CHECK(stat->local_fraction == 1.0);
  CHECK(stat->private_bytes_on(0) == 600 * kMiB);
  CHECK(stat->private_bytes_on(1) == 400 * kMiB);

  Machine remote = Load("ops-irq-remote");
  auto far = numarena::StatProcess(*remote.reader, remote.topology, "4242");
  REQUIRE(far.ok());
  CHECK(far->running_nodes == std::vector<int>{1});
  CHECK(far->local_fraction == 1.0);  // runs on node 1 and allocates there
  CHECK(far->private_bytes_on(1) == kGiB);
}

TEST_CASE("stat: node counters", "[stat]") {
  Machine m = Load("ops-good");
  auto counters = numarena::ReadNodeCounters(*m.reader, m.topology);
  REQUIRE(counters.ok());
  REQUIRE(counters->size() == 2);
  CHECK(counters->at(0).numa_hit == 996318);
  CHECK(counters->at(0).other_node == 18769);
  CHECK(counters->at(1).numa_foreign == 12451);
  CHECK(counters->at(1).local_node == 400000);
  // The topology fixtures have no numastat files: no counters, no error.
  Machine bare = Load("xeon-2s");
  auto none = numarena::ReadNodeCounters(*bare.reader, bare.topology);
  REQUIRE(none.ok());
  CHECK(none->empty());
}

namespace {
// The fixture's process, whose thread 4243 exits after the task directory is listed: reading
// its stat file then fails as the kernel's does, with ESRCH (or ENOENT at open).
class ThreadExitsReader : public numarena::SystemReader {
 public:
  ThreadExitsReader(const numarena::SystemReader& inner, int err) : inner_(inner), err_(err) {}
  numarena::StatusOr<std::string> Read(const std::string& path) const override {
    if (path == "/proc/4242/task/4243/stat") {
      return numarena::ErrnoToStatus(err_, "read " + path);
    }
    return inner_.Read(path);
  }
  numarena::StatusOr<std::vector<std::string>> List(const std::string& path) const override {
    return inner_.List(path);
  }

 private:
  const numarena::SystemReader& inner_;
  int err_;
};
}  // namespace

TEST_CASE("stat: a thread that exits while it is read is left out", "[stat]") {
  Machine m = Load("ops-good");
  for (int err : {ESRCH, ENOENT}) {
    INFO("errno " << err);
    ThreadExitsReader reader(*m.reader, err);
    auto stat = numarena::StatProcess(reader, m.topology, "4242");
    INFO(stat.status());
    REQUIRE(stat.ok());
    CHECK(stat->running_cpus.size() == 1);  // 4242's CPU; 4243's (the other) is gone
    CHECK(stat->by_node.size() == 2);
  }
}

TEST_CASE("stat: errors name the process and the file", "[stat]") {
  Machine m = Load("ops-good");
  auto gone = numarena::StatProcess(*m.reader, m.topology, "31337");
  CHECK(gone.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(gone.status().message()).rfind("no process 31337: ", 0) == 0);
  CHECK(numarena::StatProcess(*m.reader, m.topology, "-1").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(numarena::StatProcess(*m.reader, m.topology, "../etc").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("stat: this process on the live system", "[stat]") {
  auto reader = numarena::MakeRootedReader();
  auto topology = numarena::Topology::discover(*reader);
  REQUIRE(topology.ok());
  // 32 MiB touched by this thread must show up as private memory of this process.
  auto before = numarena::StatProcess(*reader, *topology, "self");
  REQUIRE(before.ok());
  std::vector<char> buffer(32 * kMiB);
  std::memset(buffer.data(), 1, buffer.size());
  auto after = numarena::StatProcess(*reader, *topology, "self");
  REQUIRE(after.ok());
  CHECK(after->private_bytes >= before->private_bytes + 30 * kMiB);
  CHECK_FALSE(after->running_cpus.empty());
  CHECK_FALSE(after->running_nodes.empty());
  CHECK(buffer[12345] == 1);
}
