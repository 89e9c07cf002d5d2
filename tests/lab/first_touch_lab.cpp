// lab-topologies: 2s snc4 cxl
// lab-kernel-6.12: cxl
//
// First-touch correction in the NUMA lab: pages deliberately first-touched on the wrong
// node are found and migrated by correct() and reported as moved, prefault puts every page
// on its node (the memory-only CXL node included), and AllocateOnNode / FirstTouchAllocator
// return memory whose every page is on the node. Each claim is checked page by page with
// move_pages (page_node_list) against the topology QEMU was given (lab_support.hpp), and
// memory is touched from a CPU on another node wherever there is one, so the right node
// proves the binding or the migration, not first-touch locality.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lab_support.hpp"
#include "numarena/first_touch.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

// 8 MiB per check: two thousand pages, quick to fault and migrate under TCG.
constexpr std::size_t kBytes = std::size_t{8} << 20;
const std::size_t kPage = os::PageSize();

// Discover the topology before any test pins the main thread: the process's allowed CPUs
// (which prefault pins its populating thread to) are read from the discovering thread.
const Topology& System() {
  static const Topology* topology = [] {
    auto t = Topology::system();
    if (!t.ok()) throw std::runtime_error(std::string(t.status().message()));
    return *t;
  }();
  return *topology;
}

// The first page not on `node`, or -1.
long FirstNotOn(const std::vector<int>& nodes, int node) {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] != node) return static_cast<long>(i);
  }
  return -1;
}

void CheckEveryPageOn(const void* data, std::size_t bytes, int node) {
  auto nodes = page_node_list(data, bytes);
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == (bytes + kPage - 1) / kPage);
  INFO(lab::SummarizePageNodes(*nodes));
  CHECK(FirstNotOn(*nodes, node) == -1);
}

// A node other than `node` to put pages on first: the next one in id order.
int OtherNode(const lab::ExpectedTopology& lab, int node) {
  const std::vector<int> ids = lab.node_ids();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == node) return ids[(i + 1) % ids.size()];
  }
  return ids.front();
}

// Pins the calling thread to the farthest CPU node from `node` (if any) for its lifetime.
struct TouchFromFarAway {
  TouchFromFarAway(const lab::ExpectedTopology& lab, int node) {
    if (auto far = lab.farthest_cpu_node(node)) {
      from = *far;
      pin.emplace(lab.node(*far).cpus);
    }
  }
  int from = -1;
  std::optional<lab::PinnedTo> pin;
};

TEST_CASE("the lab has the nodes first-touch correction needs") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name << ": " << lab.summary);
  REQUIRE(lab.nodes.size() >= 2);
  CHECK(System().node_ids() == lab.node_ids());
}

TEST_CASE("correct moves pages first-touched on the wrong node and reports them moved") {
  const auto& lab = lab::Expected();
  (void)System();
  for (const auto& target : lab.nodes) {
    const int wrong = OtherNode(lab, target.id);
    DYNAMIC_SECTION("from node " << wrong << " to node " << target.id) {
      lab::Mapping map(kBytes);
      const int first[] = {wrong};
      REQUIRE(os::BindRange(map.data(), map.size(), os::PolicyMode::kBind, first).ok());
      for (std::size_t i = 0; i < map.size(); i += kPage)
        map.data()[i] = static_cast<unsigned char>(i / kPage);
      CheckEveryPageOn(map.data(), map.size(), wrong);  // the deliberate mistake

      CorrectOptions options;
      options.batch_pages = 300;  // several batches, the last one partial
      auto report = correct(map.data(), map.size(), target.id, options);
      REQUIRE(report.ok());
      INFO(report->ToString());
      CHECK(report->pages_checked == map.pages());
      CHECK(report->moved == map.pages());
      CHECK(report->already_local == 0);
      CHECK(report->not_resident == 0);
      CHECK(report->failed == 0);
      CHECK(report->all_local());
      CheckEveryPageOn(map.data(), map.size(), target.id);
      for (std::size_t i = 0; i < map.size(); i += kPage) {
        REQUIRE(map.data()[i] == static_cast<unsigned char>(i / kPage));
      }

      // A second pass finds nothing to do.
      auto again = correct(map.data(), map.size(), target.id);
      REQUIRE(again.ok());
      CHECK(again->already_local == map.pages());
      CHECK(again->moved == 0);
    }
  }
}

TEST_CASE("correct counts local, misplaced and untouched pages apart") {
  const auto& lab = lab::Expected();
  (void)System();
  const int target = lab.node_ids().back();
  const int wrong = OtherNode(lab, target);
  lab::Mapping map(kBytes);
  const std::size_t quarter = map.size() / 4;
  const int wrong_nodes[] = {wrong};
  const int target_nodes[] = {target};
  // Half on the wrong node, a quarter already right, the last quarter never touched.
  REQUIRE(os::BindRange(map.data(), 2 * quarter, os::PolicyMode::kBind, wrong_nodes).ok());
  REQUIRE(os::BindRange(map.data() + 2 * quarter, quarter, os::PolicyMode::kBind, target_nodes)
              .ok());
  std::memset(map.data(), 0x42, 3 * quarter);

  auto report = correct(map.data(), map.size(), target);
  REQUIRE(report.ok());
  INFO(report->ToString());
  const std::size_t pages = quarter / kPage;
  CHECK(report->pages_checked == 4 * pages);
  CHECK(report->moved == 2 * pages);
  CHECK(report->already_local == pages);
  CHECK(report->not_resident == pages);
  CHECK(report->failed == 0);
  CheckEveryPageOn(map.data(), 3 * quarter, target);
  auto tail = page_nodes(map.data() + 3 * quarter, quarter);
  REQUIRE(tail.ok());
  // correct never faults pages in. (Counted via resident(): page_nodes on Linux 6.1 files
  // untouched anonymous pages under `unmapped`, since move_pages says -EFAULT for them.)
  CHECK(tail->resident() == 0);
}

TEST_CASE("prefault puts every page on the node, memory-only nodes included") {
  const auto& lab = lab::Expected();
  (void)System();
  for (const auto& target : lab.nodes) {
    DYNAMIC_SECTION("node " << target.id << (target.memory_only() ? " (memory only)" : "")) {
      TouchFromFarAway caller(lab, target.id);
      lab::Mapping map(kBytes);
      auto report = prefault(map.data(), map.size(), target.id);
      REQUIRE(report.ok());
      INFO(report->ToString() << ", caller on node " << caller.from);
      CHECK(report->pages_checked == map.pages());
      CHECK(report->already_local == map.pages());
      CHECK(report->moved == 0);
      CHECK(report->all_local());
      if (!target.memory_only()) {
        // The populating thread ran on the target node's CPUs, not the caller's.
        CHECK(report->populated_from_node == target.id);
      } else {
        CHECK(report->populated_from_node == os::CurrentCpuAndNode().node);
      }
      CheckEveryPageOn(map.data(), map.size(), target.id);
    }
  }
}

TEST_CASE("prefault migrates pages that were already resident elsewhere") {
  const auto& lab = lab::Expected();
  (void)System();
  for (const auto& target : lab.nodes) {
    DYNAMIC_SECTION("node " << target.id) {
      const int wrong = OtherNode(lab, target.id);
      lab::Mapping map(kBytes);
      const int first[] = {wrong};
      // The first half was written on the wrong node before prefault is called.
      REQUIRE(os::BindRange(map.data(), map.size() / 2, os::PolicyMode::kBind, first).ok());
      std::memset(map.data(), 0x77, map.size() / 2);
      auto report = prefault(map.data(), map.size(), target.id);
      REQUIRE(report.ok());
      INFO(report->ToString());
      CHECK(report->moved == map.pages() / 2);
      CHECK(report->already_local == map.pages() / 2);
      CHECK(report->failed == 0);
      CheckEveryPageOn(map.data(), map.size(), target.id);
      CHECK(map.data()[map.size() / 2 - 1] == 0x77);
      CHECK(map.data()[map.size() / 2] == 0);
    }
  }
}

TEST_CASE("AllocateOnNode and FirstTouchAllocator return memory verified page by page") {
  const auto& lab = lab::Expected();
  (void)System();
  for (const auto& target : lab.nodes) {
    DYNAMIC_SECTION("node " << target.id) {
      TouchFromFarAway caller(lab, target.id);
      // A huge-page sized buffer with a ragged tail, and a small one.
      for (std::size_t bytes : {(std::size_t{6} << 20) + 123, 10 * kPage}) {
        auto buffer = AllocateOnNode(bytes, target.id);
        REQUIRE(buffer.ok());
        INFO(buffer->report().ToString());
        CHECK(buffer->report().all_local());
        CheckEveryPageOn(buffer->data(), buffer->size(), target.id);
        std::memset(buffer->data(), 0x1f, buffer->size());
        CheckEveryPageOn(buffer->data(), buffer->size(), target.id);
      }
      FirstTouchAllocator allocator(target.id);
      auto p = allocator.allocate(kBytes);
      REQUIRE(p.ok());
      CheckEveryPageOn(*p, kBytes, target.id);
      allocator.deallocate(*p, kBytes);
    }
  }
}

}  // namespace
}  // namespace numarena
