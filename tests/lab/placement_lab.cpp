// Placement in the NUMA lab: the kernel puts pages where the OS layer's policies say, page by
// page, on every node of every lab topology.
//
// These are the foundation the rest of numarena's placement claims stand on: node pages,
// arenas and first-touch correction all end in os::BindRange before first touch. Each
// check reads the node of every page back with move_pages (numarena::page_node_list) and
// compares it with the topology QEMU was given (lab_support.hpp), not with what numarena
// discovered. Memory is touched from a CPU on ANOTHER node wherever one exists, so a page on
// the right node proves the policy, not first-touch locality.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "lab_support.hpp"
#include "numarena/page_nodes.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

// 16 MiB per check: thousands of pages, yet quick to fault in under TCG and well inside the
// smallest lab node (tiny's 256 MiB).
constexpr std::size_t kBytes = std::size_t{16} << 20;

// The first page whose node differs from `want(i)`, or -1.
template <typename Want>
long FirstMismatch(const std::vector<int>& nodes, Want want) {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] != want(i)) return static_cast<long>(i);
  }
  return -1;
}

TEST_CASE("the lab machine is what QEMU was given: the kernel sees every node") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name << ": " << lab.summary);
  REQUIRE(os::PossibleNodeCount() >= static_cast<int>(lab.nodes.size()));
  for (const auto& node : lab.nodes) {
    auto meminfo =
        os::ReadFile("/sys/devices/system/node/node" + std::to_string(node.id) + "/meminfo");
    INFO("node " << node.id);
    CHECK(meminfo.ok());
  }
}

TEST_CASE("default policy: first touch lands on the touching CPU's node") {
  // The control experiment: without any policy the kernel allocates on the node of the CPU
  // that faults the page. If this fails, the lab is not NUMA and nothing below proves anything.
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name);
  for (int node : lab.cpu_node_ids()) {
    DYNAMIC_SECTION("touched from node " << node) {
      lab::PinnedTo pin(lab.node(node).cpus);
      REQUIRE(os::CurrentCpuAndNode().node == node);
      lab::Mapping map(kBytes);
      std::memset(map.data(), 0x5a, map.size());
      auto nodes = page_node_list(map.data(), map.size());
      REQUIRE(nodes.ok());
      INFO(lab::SummarizePageNodes(*nodes));
      CHECK(FirstMismatch(*nodes, [&](std::size_t) { return node; }) == -1);
    }
  }
}

TEST_CASE("MPOL_BIND before first touch puts every page on the bound node") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name);
  for (const auto& target : lab.nodes) {
    DYNAMIC_SECTION("bound to node " << target.id) {
      // Touch from the farthest CPU node; with a single node, from wherever we run.
      std::optional<int> toucher = lab.farthest_cpu_node(target.id);
      std::optional<lab::PinnedTo> pin;
      if (toucher) pin.emplace(lab.node(*toucher).cpus);
      INFO("touching from node " << (toucher ? *toucher : target.id));

      lab::Mapping map(kBytes);
      const int bound[] = {target.id};
      REQUIRE(os::BindRange(map.data(), map.size(), os::PolicyMode::kBind, bound).ok());

      // Binding does not allocate: no page is on any node before the first touch. (Linux 6.1
      // reports those pages as -EFAULT, newer kernels as -ENOENT; either way none resident.)
      auto before = page_nodes(map.data(), map.size());
      REQUIRE(before.ok());
      CHECK(before->total_pages == map.pages());
      CHECK(before->resident() == 0);

      std::memset(map.data(), 0xa5, map.size());

      auto nodes = page_node_list(map.data(), map.size());
      REQUIRE(nodes.ok());
      REQUIRE(nodes->size() == map.pages());
      INFO(lab::SummarizePageNodes(*nodes));
      long mismatch = FirstMismatch(*nodes, [&](std::size_t) { return target.id; });
      INFO("first page not on node "
           << target.id << ": "
           << (mismatch < 0 ? std::string("none")
                            : std::to_string(mismatch) + " (on " +
                                  std::to_string((*nodes)[mismatch]) + ")"));
      CHECK(mismatch == -1);

      // The page counts agree with the per-page answer.
      auto counts = page_nodes(map.data(), map.size());
      REQUIRE(counts.ok());
      CHECK(counts->on(target.id) == map.pages());
      CHECK(counts->not_resident == 0);
      CHECK(counts->unmapped == 0);
    }
  }
}

TEST_CASE("MPOL_INTERLEAVE over all nodes deals pages round-robin") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name);
  const std::vector<int> all = lab.node_ids();

  lab::Mapping map(kBytes);
  // Transparent huge pages (Debian's kernel: THP=always) would be interleaved 2 MiB at a time;
  // this checks the page-granular policy, so keep the range on base pages.
  REQUIRE(os::AdviseNoHugePages(map.data(), map.size()).ok());
  REQUIRE(os::BindRange(map.data(), map.size(), os::PolicyMode::kInterleave, all).ok());
  std::memset(map.data(), 0x3c, map.size());

  auto nodes = page_node_list(map.data(), map.size());
  REQUIRE(nodes.ok());
  INFO(lab::SummarizePageNodes(*nodes));

  auto counts = page_nodes(map.data(), map.size());
  REQUIRE(counts.ok());
  REQUIRE(counts->resident() == map.pages());
  std::size_t fewest = map.pages(), most = 0;
  for (int node : all) {
    fewest = std::min(fewest, counts->on(node));
    most = std::max(most, counts->on(node));
  }
  CHECK(most - fewest <= 1);
  CHECK(counts->pages_on_node.size() == all.size());

  // Round-robin: each page is on the node after its predecessor's, in node-id order.
  auto next_after = [&](int node) {
    auto it = std::find(all.begin(), all.end(), node);
    return it == all.end() || it + 1 == all.end() ? all.front() : *(it + 1);
  };
  const int first = (*nodes)[0];
  REQUIRE(std::find(all.begin(), all.end(), first) != all.end());
  std::vector<int> want(nodes->size());
  want[0] = first;
  for (std::size_t i = 1; i < want.size(); ++i) want[i] = next_after(want[i - 1]);
  long mismatch = FirstMismatch(*nodes, [&](std::size_t i) { return want[i]; });
  INFO("first page out of round-robin order: " << mismatch);
  CHECK(mismatch == -1);
}

TEST_CASE("MPOL_INTERLEAVE over a subset never uses the other nodes") {
  const auto& lab = lab::Expected();
  const std::vector<int> all = lab.node_ids();
  if (all.size() < 3) {
    SUCCEED("topology " << lab.name << " has fewer than 3 nodes; the full set is tested above");
    return;
  }
  // Every node but the first: pages must avoid it even when touched from it.
  std::vector<int> subset(all.begin() + 1, all.end());
  lab::PinnedTo pin(lab.node(all.front()).cpus);
  lab::Mapping map(kBytes);
  REQUIRE(os::AdviseNoHugePages(map.data(), map.size()).ok());
  REQUIRE(os::BindRange(map.data(), map.size(), os::PolicyMode::kInterleave, subset).ok());
  std::memset(map.data(), 0x11, map.size());
  auto counts = page_nodes(map.data(), map.size());
  REQUIRE(counts.ok());
  INFO("topology " << lab.name);
  CHECK(counts->on(all.front()) == 0);
  CHECK(counts->resident() == map.pages());
  std::size_t fewest = map.pages(), most = 0;
  for (int node : subset) {
    fewest = std::min(fewest, counts->on(node));
    most = std::max(most, counts->on(node));
  }
  CHECK(most - fewest <= 1);
}

TEST_CASE("a node id the machine does not have is InvalidArgument naming it") {
  const auto& lab = lab::Expected();
  const std::vector<int> all = lab.node_ids();
  struct Case {
    int node;
    std::vector<os::PolicyMode> modes;
  };
  // Just past the last node (a possible node on no lab machine), far beyond the kernel's
  // node limit (CONFIG_NODES_SHIFT=10), and a negative id. A negative id with MPOL_PREFERRED
  // is a known OS-layer bug (an empty mask means "local" to the kernel), see os_test.cpp.
  const Case cases[] = {
      {all.back() + 1,
       {os::PolicyMode::kBind, os::PolicyMode::kInterleave, os::PolicyMode::kPreferred}},
      {4096,
       {os::PolicyMode::kBind, os::PolicyMode::kInterleave, os::PolicyMode::kPreferred}},
      // Negative ids never reach the kernel (a node mask cannot hold them, and an empty mask
      // would mean "local" to MPOL_PREFERRED): the OS layer refuses them itself.
      {-1, {os::PolicyMode::kBind, os::PolicyMode::kInterleave, os::PolicyMode::kPreferred}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION("node " << c.node) {
      lab::Mapping map(std::size_t{1} << 20);
      const int nodes[] = {c.node};
      for (auto mode : c.modes) {
        Status s = os::BindRange(map.data(), map.size(), mode, nodes);
        INFO(os::PolicyModeName(mode) << ": " << s);
        CHECK(s.code() == absl::StatusCode::kInvalidArgument);
        CHECK(std::string(s.message()).find("nodes=" + std::to_string(c.node)) !=
              std::string::npos);
        const char* expected = c.node < 0 ? "is negative" : "EINVAL";
        CHECK(std::string(s.message()).find(expected) != std::string::npos);
      }
      // The refused range keeps its default policy: touching it works and lands locally.
      std::memset(map.data(), 1, map.size());
      auto counts = page_nodes(map.data(), map.size());
      REQUIRE(counts.ok());
      CHECK(counts->resident() == map.pages());
    }
  }
}

}  // namespace
}  // namespace numarena
