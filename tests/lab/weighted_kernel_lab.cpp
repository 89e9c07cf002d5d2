// lab-topologies: 2s
// lab-kernel-6.12: 2s
//
// Weighted interleave through the kernel or through numarena's emulation, on the kernel the
// lab booted. On 6.12 (MPOL_WEIGHTED_INTERLEAVE, 6.9+) the test plays the operator: it writes
// the kernel's system-wide weights (/sys/kernel/mm/mempolicy/weighted_interleave/nodeN, root
// in the VM), which numarena itself never writes. With the kernel's weights at 3:1 a 3:1
// policy is placed by the kernel (get_mempolicy(MPOL_F_ADDR) says MPOL_WEIGHTED_INTERLEAVE);
// with them at 1:1 by the emulation (the first chunk is MPOL_BIND); on 6.1, which has no
// weights, always by the emulation. Either way 72-78 % of a 64 MiB buffer's pages are on node
// 0, and with base pages every page is where ExpectedNode says. Pages are written from node
// 1's CPU, so node 0's pages prove the policy.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "lab_support.hpp"
#include "numarena/interleave.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/policy.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

constexpr int kMpolBind = 2;
constexpr int kMpolWeightedInterleave = 6;
constexpr const char* kWeightsDir = "/sys/kernel/mm/mempolicy/weighted_interleave";
const std::size_t kPage = os::PageSize();

bool KernelHasWeights() {
  struct stat info;
  return stat(kWeightsDir, &info) == 0;
}

bool On612() {
  const char* series = std::getenv("NUMARENA_LAB_KERNEL_SERIES");
  return series != nullptr && std::string(series) == "6.12";
}

// The operator's step: set the kernel's weight of `node`.
void SetKernelWeight(int node, unsigned weight) {
  const std::string path = std::string(kWeightsDir) + "/node" + std::to_string(node);
  std::ofstream file(path);
  file << weight << "\n";
  file.close();
  if (!file) throw std::runtime_error("cannot write " + path);
  auto settings = ReadKernelMemorySettings();
  if (!settings.ok() || settings->interleave_weight(node) != weight) {
    throw std::runtime_error("the kernel did not take weight " + std::to_string(weight) + " in " +
                             path);
  }
}

double FractionOn(const std::vector<int>& nodes, int node) {
  std::size_t on = 0;
  for (int n : nodes) on += n == node ? 1 : 0;
  return static_cast<double>(on) / static_cast<double>(nodes.size());
}

struct Placed {
  bool kernel_weighted = false;
  int first_page_mode = -1;
  double on_node0 = 0;
  std::string summary;
};

// A 64 MiB buffer placed by `policy` and written from node 1.
Placed Place64MiB(const Policy& policy) {
  lab::PinnedTo pin(lab::Expected().node(1).cpus);
  auto buffer = AllocateInterleaved(std::size_t{64} << 20, policy);
  if (!buffer.ok()) throw std::runtime_error(std::string(buffer.status().message()));
  Placed placed;
  placed.kernel_weighted = buffer->stats().kernel_weighted;
  placed.first_page_mode = os::KernelPolicyModeOfAddress(buffer->data()).value_or(-1);
  std::memset(buffer->data(), 0x5a, buffer->size());
  auto nodes = page_node_list(buffer->data(), buffer->size());
  if (!nodes.ok()) throw std::runtime_error(std::string(nodes.status().message()));
  placed.on_node0 = FractionOn(*nodes, 0);
  placed.summary = lab::SummarizePageNodes(*nodes);
  return placed;
}

// Base pages only, 4 MiB + 5 pages: the node of every page against ExpectedNode.
long FirstPageOffExpected(const Policy& policy, bool want_kernel) {
  lab::PinnedTo pin(lab::Expected().node(1).cpus);
  InterleaveOptions options;
  options.huge_pages = false;
  options.populate = true;
  auto buffer = AllocateInterleaved((std::size_t{4} << 20) + 5 * kPage, policy, options);
  if (!buffer.ok()) throw std::runtime_error(std::string(buffer.status().message()));
  if (buffer->stats().kernel_weighted != want_kernel) return -2;
  auto nodes = page_node_list(buffer->data(), buffer->size());
  if (!nodes.ok()) throw std::runtime_error(std::string(nodes.status().message()));
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    const int expected = buffer->ExpectedNode(i * kPage);
    if (expected < 0 || (*nodes)[i] != expected) return static_cast<long>(i);
  }
  return -1;
}

const Policy kThreeToOne = Policy::WeightedInterleave({{0, 3}, {1, 1}});

TEST_CASE("6.12 has the kernel's weights, 6.1 does not") {
  INFO("kernel series " << (On612() ? "6.12" : "6.1"));
  CHECK(KernelHasWeights() == On612());
}

TEST_CASE("kernel weights 3:1: a 3:1 policy is placed by MPOL_WEIGHTED_INTERLEAVE") {
  if (!KernelHasWeights()) return;  // 6.1: the next test cases cover it
  SetKernelWeight(0, 3);
  SetKernelWeight(1, 1);
  Placed placed = Place64MiB(kThreeToOne);
  INFO(placed.summary);
  CHECK(placed.kernel_weighted);
  CHECK(placed.first_page_mode == kMpolWeightedInterleave);
  CHECK(placed.on_node0 >= 0.72);
  CHECK(placed.on_node0 <= 0.78);
  CHECK(FirstPageOffExpected(kThreeToOne, true) == -1);

  // weighted(auto): the kernel's weights over every node, the same placement.
  Placed automatic = Place64MiB(Policy::KernelWeightedInterleave());
  INFO(automatic.summary);
  CHECK(automatic.kernel_weighted);
  CHECK(automatic.first_page_mode == kMpolWeightedInterleave);
  CHECK(automatic.on_node0 >= 0.72);
  CHECK(automatic.on_node0 <= 0.78);
}

TEST_CASE("kernel weights 6:2 express 3:1; the kernel deals six pages and two") {
  if (!KernelHasWeights()) return;
  SetKernelWeight(0, 6);
  SetKernelWeight(1, 2);
  CHECK(FirstPageOffExpected(kThreeToOne, true) == -1);
  SetKernelWeight(0, 1);
  SetKernelWeight(1, 1);
}

TEST_CASE("kernel weights 1:1 (or none): a 3:1 policy is placed by the emulation") {
  if (KernelHasWeights()) {
    SetKernelWeight(0, 1);
    SetKernelWeight(1, 1);
  }
  Placed placed = Place64MiB(kThreeToOne);
  INFO(placed.summary);
  CHECK_FALSE(placed.kernel_weighted);
  CHECK(placed.first_page_mode == kMpolBind);
  CHECK(placed.on_node0 >= 0.72);
  CHECK(placed.on_node0 <= 0.78);
  CHECK(FirstPageOffExpected(Policy::WeightedInterleave({{0, 3}, {1, 1}}, BindMode::kStrict,
                                                        16 * kPage),
                             false) == -1);
  // The kernel's weights were read, not written: still 1:1.
  if (KernelHasWeights()) {
    auto settings = ReadKernelMemorySettings();
    REQUIRE(settings.ok());
    CHECK(settings->interleave_weight(0) == 1);
    CHECK(settings->interleave_weight(1) == 1);
  }
}

TEST_CASE("weighted(auto) without kernel weights fails and says why") {
  if (KernelHasWeights()) return;
  auto buffer = AllocateInterleaved(std::size_t{4} << 20, Policy::KernelWeightedInterleave());
  REQUIRE_FALSE(buffer.ok());
  INFO(buffer.status().message());
  CHECK(buffer.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(buffer.status().message()).find("Linux before 6.9") != std::string::npos);
}

}  // namespace
}  // namespace numarena
