// Interleaved buffers on the host: sizes, alignment, huge-page advice, ExpectedNode on a
// one-node set (every page must be on that node), policy validation naming the bad node,
// move-only ownership, and the Strict/Advisory contract under a seccomp filter that makes
// the kernel refuse mbind (all of it, or all but MPOL_PREFERRED). Spreading over several
// nodes is proven in tests/lab/interleave_lab.cpp.
#include "numarena/interleave.hpp"

#include <numaif.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "deny_mbind.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

const std::size_t kPage = os::PageSize();
constexpr std::size_t kHugePage = std::size_t{2} << 20;

const Topology& System() {
  auto topology = Topology::system();
  REQUIRE(topology.ok());
  return **topology;
}

int HostNode() { return System().nodes().front().id; }
int MissingNode() { return System().nodes().back().id + 1; }

bool Contains(const Status& status, const std::string& needle) {
  return std::string(status.message()).find(needle) != std::string::npos;
}

// Every page of the buffer is resident on the node ExpectedNode names.
void CheckEveryPageWhereExpected(const InterleavedBuffer& buffer) {
  auto nodes = page_node_list(buffer.data(), buffer.size());
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == buffer.mapped_bytes() / kPage);
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    INFO("page " << i);
    REQUIRE(buffer.ExpectedNode(i * kPage) >= 0);
    REQUIRE((*nodes)[i] == buffer.ExpectedNode(i * kPage));
  }
}

// Runs `body` on a thread where mbind fails with EPERM (as under a seccomp profile), except
// mbind(MPOL_PREFERRED) when `allow_preferred`. Returns false when the filter cannot be
// installed here.
bool RunWithMbindDenied(bool allow_preferred, const std::function<void()>& body) {
  (void)Topology::system();  // discover outside the filtered thread
  const unsigned mode_arg = offsetof(seccomp_data, args) + 2 * sizeof(std::uint64_t);
  const bool installed = numarena::testing::RunUnderSeccomp(
      {BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mbind, 1, 0), numarena::testing::kAllow,
       BPF_STMT(BPF_LD | BPF_W | BPF_ABS, mode_arg),  // low word of mbind's `mode`
       BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, allow_preferred ? MPOL_PREFERRED : 0xffffffffu, 0, 1),
       numarena::testing::kAllow, numarena::testing::kRefuse},
      body);
  if (!installed) WARN("seccomp filter could not be installed here; refusal paths not exercised");
  return installed;
}

TEST_CASE("page interleave over one node puts every page there") {
  InterleaveOptions options;
  options.populate = true;
  auto buffer = AllocateInterleaved(10 * kPage - 7, Policy::Interleave({HostNode()}), options);
  REQUIRE(buffer.ok());
  CHECK(buffer->size() == 10 * kPage - 7);
  CHECK(buffer->mapped_bytes() == 10 * kPage);
  CHECK(buffer->policy() == Policy::Interleave({HostNode()}));
  CHECK(buffer->stats().applied == AppliedPlacement::kAsRequested);
  CHECK(buffer->stats().ranges == 1);
  CHECK_FALSE(buffer->stats().huge_pages);  // below 2 MiB
  CheckEveryPageWhereExpected(*buffer);
  CHECK(buffer->ExpectedNode(buffer->size()) == -1);
  CHECK(buffer->ExpectedNode(buffer->size() - 1) == HostNode());
}

TEST_CASE("large buffers are 2 MiB aligned, huge pages make page interleave unpredictable") {
  const std::size_t bytes = 2 * kHugePage + 5;
  auto huge = AllocateInterleaved(bytes, Policy::Interleave({HostNode()}));
  REQUIRE(huge.ok());
  CHECK(reinterpret_cast<std::uintptr_t>(huge->data()) % kHugePage == 0);
  CHECK(huge->mapped_bytes() == 2 * kHugePage + kPage);
  CHECK(huge->stats().huge_pages);
  CHECK(huge->ExpectedNode(0) == -1);  // the kernel's unit may be 4 KiB or 2 MiB
  // Not populated: nothing is resident until written, then it is on the node.
  auto before = page_nodes(huge->data(), huge->size());
  REQUIRE(before.ok());
  CHECK(before->resident() == 0);
  std::memset(huge->data(), 7, huge->size());
  auto after = page_nodes(huge->data(), huge->size());
  REQUIRE(after.ok());
  CHECK(after->on(HostNode()) == after->total_pages);

  InterleaveOptions base_pages;
  base_pages.huge_pages = false;
  base_pages.populate = true;
  auto small_pages = AllocateInterleaved(bytes, Policy::Interleave({HostNode()}), base_pages);
  REQUIRE(small_pages.ok());
  CHECK(reinterpret_cast<std::uintptr_t>(small_pages->data()) % kHugePage == 0);
  CHECK_FALSE(small_pages->stats().huge_pages);
  CheckEveryPageWhereExpected(*small_pages);
}

TEST_CASE("weighted interleave binds runs of chunks to their nodes") {
  InterleaveOptions options;
  options.populate = true;
  const std::size_t chunk = 16 * kPage;
  auto policy = Policy::WeightedInterleave({{HostNode(), 3}}, BindMode::kStrict, chunk);
  auto buffer = AllocateInterleaved(10 * chunk + kPage, policy, options);
  REQUIRE(buffer.ok());
  // One node: all eleven chunks form one run, so one mbind.
  CHECK(buffer->stats().ranges == 1);
  CHECK(buffer->stats().applied == AppliedPlacement::kAsRequested);
  CheckEveryPageWhereExpected(*buffer);

  auto defaults = AllocateInterleaved(3 * kHugePage, Policy::WeightedInterleave({{HostNode(), 1}}));
  REQUIRE(defaults.ok());
  CHECK(defaults->policy().chunk_bytes() == Policy::kDefaultWeightedChunk);
  CHECK(defaults->ExpectedNode(3 * kHugePage - 1) == HostNode());
  CHECK(defaults->ExpectedNode(3 * kHugePage) == -1);
}

TEST_CASE("bad sizes and policies are InvalidArgument naming the problem") {
  const int missing = MissingNode();
  const std::string named = "node " + std::to_string(missing);
  struct Case {
    std::size_t bytes;
    std::optional<Policy> policy;
    std::string needle;
  };
  const Case cases[] = {
      {0, Policy::Interleave({HostNode()}), "size is 0"},
      {kPage, Policy::Bind(HostNode()), "bind is not an interleave policy"},
      {kPage, Policy::Local(), "local is not an interleave policy"},
      {kPage, Policy::Preferred(HostNode()), "preferred is not an interleave policy"},
      {kPage, Policy::Interleave({HostNode(), missing}), named},
      {kPage, Policy::Interleave({}), "node set is empty"},
      {kPage, Policy::WeightedInterleave({{HostNode(), 1}, {missing, 2}}), named},
      {kPage, Policy::WeightedInterleave({{HostNode(), 0}}), "has weight 0"},
      {kPage, Policy::WeightedInterleave({{HostNode(), 1}, {HostNode(), 1}}), "weighted twice"},
      {kPage, Policy::WeightedInterleave({{HostNode(), 1}}, BindMode::kStrict, kPage + 1),
       "not a multiple of the page size"},
      {kPage, Policy::WeightedInterleave({{HostNode(), 1}}, BindMode::kStrict, 0),
       "not a multiple of the page size"},
  };
  for (const Case& c : cases) {
    INFO(c.policy->ToString() << " " << c.bytes << " bytes");
    auto buffer = AllocateInterleaved(c.bytes, *c.policy);
    CHECK(buffer.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(buffer.status(), c.needle));
    CHECK(Contains(buffer.status(), "AllocateInterleaved("));
  }
}

TEST_CASE("buffers are move-only owners") {
  auto first = AllocateInterleaved(4 * kPage, Policy::Interleave({HostNode()}));
  auto second = AllocateInterleaved(8 * kPage, Policy::Interleave({HostNode()}));
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  std::memset(first->data(), 3, first->size());
  InterleavedBuffer owner = std::move(*first);
  CHECK(first->data() == nullptr);
  CHECK(first->size() == 0);
  CHECK(first->ExpectedNode(0) == -1);
  CHECK(static_cast<unsigned char*>(owner.data())[4 * kPage - 1] == 3);
  owner = std::move(*second);  // unmaps the first mapping
  CHECK(owner.size() == 8 * kPage);
  CHECK(second->data() == nullptr);
  static_assert(!std::is_copy_constructible_v<InterleavedBuffer>);
}

TEST_CASE("strict policies fail with the kernel's EPERM, advisory ones fall back and say so") {
  const std::size_t bytes = 64 * kPage;
  const auto chunked = [](BindMode mode) {
    return Policy::WeightedInterleave({{HostNode(), 1}}, mode, 16 * kPage);
  };
  Status strict_interleave, strict_weighted;
  std::optional<InterleavedBuffer> advisory_interleave, advisory_weighted;
  bool ran = RunWithMbindDenied(/*allow_preferred=*/false, [&] {
    strict_interleave = AllocateInterleaved(bytes, Policy::Interleave({HostNode()})).status();
    strict_weighted = AllocateInterleaved(bytes, chunked(BindMode::kStrict)).status();
    auto a = AllocateInterleaved(bytes, Policy::Interleave({HostNode()}, BindMode::kAdvisory));
    if (a.ok()) advisory_interleave.emplace(*std::move(a));
    auto w = AllocateInterleaved(bytes, chunked(BindMode::kAdvisory));
    if (w.ok()) advisory_weighted.emplace(*std::move(w));
  });
  if (!ran) return;
  for (const Status& s : {strict_interleave, strict_weighted}) {
    CHECK(s.code() == absl::StatusCode::kPermissionDenied);
    CHECK(Contains(s, "errno 1 EPERM"));
    CHECK(Contains(s, "mbind("));
  }
  CHECK(Contains(strict_interleave, "MPOL_INTERLEAVE"));
  CHECK(Contains(strict_weighted, "MPOL_BIND"));
  for (auto* buffer : {&advisory_interleave, &advisory_weighted}) {
    REQUIRE(buffer->has_value());
    const InterleaveStats& stats = (*buffer)->stats();
    CHECK(stats.applied == AppliedPlacement::kNone);
    CHECK(stats.ranges == 1);
    CHECK(stats.fallbacks_to_none == 1);
    CHECK(stats.fallbacks_to_preferred == 0);
    CHECK(stats.first_fallback_error.find("EPERM") != std::string::npos);
    CHECK((*buffer)->ExpectedNode(0) == -1);               // no promise after a fallback
    std::memset((*buffer)->data(), 1, (*buffer)->size());  // still usable memory
  }
}

TEST_CASE("advisory policies fall back to preferred when only that is allowed") {
  const std::size_t bytes = 64 * kPage;
  std::optional<InterleavedBuffer> interleaved, weighted;
  bool ran = RunWithMbindDenied(/*allow_preferred=*/true, [&] {
    auto a = AllocateInterleaved(bytes, Policy::Interleave({HostNode()}, BindMode::kAdvisory));
    if (a.ok()) interleaved.emplace(*std::move(a));
    auto w = AllocateInterleaved(
        bytes, Policy::WeightedInterleave({{HostNode(), 1}}, BindMode::kAdvisory, 16 * kPage));
    if (w.ok()) weighted.emplace(*std::move(w));
  });
  if (!ran) return;
  for (auto* buffer : {&interleaved, &weighted}) {
    REQUIRE(buffer->has_value());
    const InterleaveStats& stats = (*buffer)->stats();
    CHECK(stats.applied == AppliedPlacement::kPreferred);
    CHECK(stats.fallbacks_to_preferred == 1);
    CHECK(stats.fallbacks_to_none == 0);
    CHECK(stats.first_fallback_error.find("EPERM") != std::string::npos);
    std::memset((*buffer)->data(), 1, (*buffer)->size());
    auto counts = page_nodes((*buffer)->data(), (*buffer)->size());
    REQUIRE(counts.ok());
    CHECK(counts->on(HostNode()) == 64);
  }
  CHECK(std::string(AppliedPlacementName(AppliedPlacement::kPreferred)) == "preferred");
}

TEST_CASE("the kernel's interleave index: 32 bits before Linux 6.7, all 64 bits from 6.7") {
  CHECK(InterleaveIndexBits(5, 15) == 32);
  CHECK(InterleaveIndexBits(6, 1) == 32);
  CHECK(InterleaveIndexBits(6, 6) == 32);
  CHECK(InterleaveIndexBits(6, 7) == 64);
  CHECK(InterleaveIndexBits(6, 12) == 64);
  CHECK(InterleaveIndexBits(7, 0) == 64);
  const std::vector<int> three = {0, 2, 5};  // sparse ids: the n-th node of the set
  // 2^32 + 1: cut to 32 bits it is 1 (node 2); whole it is 2 mod 3 (node 5).
  const std::uint64_t page = (std::uint64_t{1} << 32) + 1;
  CHECK(InterleavePageNode(page, three, 32) == 2);
  CHECK(InterleavePageNode(page, three, 64) == 5);
  CHECK(InterleavePageNode(page, three, 0) == -1);  // unknown kernel, rules differ
  CHECK(InterleavePageNode(6, three, 0) == 0);      // unknown kernel, rules agree
  // A power-of-two node count: both rules agree for every page.
  const std::vector<int> two = {1, 3};
  CHECK(InterleavePageNode(page, two, 32) == 3);
  CHECK(InterleavePageNode(page, two, 64) == 3);
  CHECK(InterleavePageNode(page, two, 0) == 3);
  CHECK(InterleavePageNode(page, {}, 64) == -1);
}

TEST_CASE("kernel weights express a policy when the proportions over its nodes are equal") {
  const std::vector<NodeWeight> three_to_one = {{0, 3}, {1, 1}};
  CHECK(KernelWeightsExpress(three_to_one, {{0, 3}, {1, 1}}));
  CHECK(KernelWeightsExpress(three_to_one, {{0, 6}, {1, 2}}));
  CHECK(KernelWeightsExpress(three_to_one, {{0, 3}, {1, 1}, {2, 7}}));  // node 2 not used
  CHECK(KernelWeightsExpress({{1, 1}, {0, 3}}, {{0, 3}, {1, 1}}));     // order of the policy
  CHECK(KernelWeightsExpress({{0, 2}, {1, 2}}, {{0, 1}, {1, 1}}));
  CHECK_FALSE(KernelWeightsExpress(three_to_one, {{0, 1}, {1, 1}}));
  CHECK_FALSE(KernelWeightsExpress(three_to_one, {{0, 1}, {1, 3}}));
  CHECK_FALSE(KernelWeightsExpress(three_to_one, {{0, 3}}));  // no weight for node 1
  CHECK_FALSE(KernelWeightsExpress(three_to_one, {}));        // kernel without weights
  CHECK_FALSE(KernelWeightsExpress({}, {{0, 1}}));
}

TEST_CASE("the command that sets the kernel's weights for a policy") {
  auto command = KernelWeightsCommand({{1, 2}, {0, 6}});
  REQUIRE(command.ok());
  CHECK(*command ==
        "echo 3 > /sys/kernel/mm/mempolicy/weighted_interleave/node0; "
        "echo 1 > /sys/kernel/mm/mempolicy/weighted_interleave/node1");
  auto too_fine = KernelWeightsCommand({{0, 256}, {1, 1}});
  REQUIRE_FALSE(too_fine.ok());
  CHECK(too_fine.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(too_fine.status(), "node 0's weight is 256"));
}

TEST_CASE("weighted interleave reads the kernel's weights and never writes them") {
  auto before = ReadKernelMemorySettings();
  REQUIRE(before.ok());
  auto buffer = AllocateInterleaved(3 * kHugePage, Policy::WeightedInterleave({{HostNode(), 5}}));
  REQUIRE(buffer.ok());
  auto after = ReadKernelMemorySettings();
  REQUIRE(after.ok());
  CHECK(after->interleave_weights == before->interleave_weights);
  // Through the kernel exactly when it has weighted interleave (one node expresses 5:0).
  CHECK(buffer->stats().kernel_weighted == before->has_weighted_interleave());
  CHECK(buffer->ExpectedNode(0) == HostNode());
  if (buffer->stats().kernel_weighted) {
    CHECK(os::KernelPolicyModeOfAddress(buffer->data()).value_or(-1) == 6);
  }
}

}  // namespace
}  // namespace numarena
