// First-touch correction on the host: report counts are exact (every page is on the one
// node, so touched pages are already local and untouched ones are counted apart), bad input
// gets InvalidArgument naming it, and a kernel that refuses the policy calls (a seccomp
// filter returning EPERM for mbind and move_pages) gives PermissionDenied with the errno.
// Migration between nodes is proven in tests/lab/first_touch_lab.cpp.
#include "numarena/first_touch.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "deny_mbind.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

const std::size_t kPage = os::PageSize();

const Topology& System() {
  auto topology = Topology::system();
  REQUIRE(topology.ok());
  return **topology;
}

int HostNode() { return System().nodes().front().id; }
int MissingNode() { return System().nodes().back().id + 1; }

// An anonymous mapping owned by a test (nothing touched).
struct Mapping {
  explicit Mapping(std::size_t pages) : bytes(pages * kPage) {
    auto p = os::MapAnonymous(bytes);
    REQUIRE(p.ok());
    data = static_cast<char*>(*p);
  }
  ~Mapping() { os::Unmap(data, bytes); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* page(std::size_t i) const { return data + i * kPage; }

  std::size_t bytes;
  char* data = nullptr;
};

void CheckBalanced(const PlacementReport& r) {
  CHECK(r.already_local + r.moved + r.not_resident + r.failed == r.pages_checked);
}

bool Contains(const Status& status, const std::string& needle) {
  return std::string(status.message()).find(needle) != std::string::npos;
}

// Runs `body` on a thread whose mbind and move_pages calls fail with EPERM, as under a
// container's seccomp profile. Returns false when this kernel or sandbox cannot install it.
bool RunWithPolicyCallsDenied(const std::function<void()>& body) {
  (void)Topology::system();  // discover outside the filtered thread
  const bool installed = numarena::testing::RunUnderSeccomp(
      {BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mbind, 2, 0),
       BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_move_pages, 1, 0), numarena::testing::kAllow,
       numarena::testing::kRefuse},
      body);
  if (!installed) WARN("seccomp filter could not be installed here; EPERM paths not exercised");
  return installed;
}

TEST_CASE("correct counts every touched page as already local") {
  Mapping m(64);
  std::memset(m.data, 0x5a, m.bytes);
  auto report = correct(m.data, m.bytes, HostNode());
  REQUIRE(report.ok());
  CHECK(report->node == HostNode());
  CHECK(report->pages_checked == 64);
  CHECK(report->already_local == 64);
  CHECK(report->moved == 0);
  CHECK(report->not_resident == 0);
  CHECK(report->failed == 0);
  CHECK(report->failures_by_reason.empty());
  CHECK(report->all_local());
  CheckBalanced(*report);
}

TEST_CASE("correct counts untouched pages apart and does not fault them in") {
  Mapping m(64);
  for (std::size_t i = 0; i < 64; i += 2) m.page(i)[0] = 1;
  auto report = correct(m.data, m.bytes, HostNode());
  REQUIRE(report.ok());
  CHECK(report->pages_checked == 64);
  CHECK(report->already_local == 32);
  CHECK(report->not_resident == 32);
  CHECK_FALSE(report->all_local());
  CheckBalanced(*report);
  auto after = page_nodes(m.data, m.bytes);
  REQUIRE(after.ok());
  CHECK(after->resident() == 32);
}

TEST_CASE("correct gives the same counts for any batch size") {
  Mapping m(64);
  for (std::size_t i = 0; i < 40; ++i) m.page(i * 64 / 40)[1] = 1;
  auto whole = correct(m.data, m.bytes, HostNode());
  REQUIRE(whole.ok());
  for (std::size_t batch : {1, 5, 63, 64, 1000}) {
    CorrectOptions options;
    options.batch_pages = batch;
    auto batched = correct(m.data, m.bytes, HostNode(), options);
    REQUIRE(batched.ok());
    CHECK(batched->pages_checked == 64);
    CHECK(batched->already_local == whole->already_local);
    CHECK(batched->not_resident == whole->not_resident);
    CHECK(batched->already_local + batched->not_resident == 64);
  }
}

TEST_CASE("unaligned ranges are widened to the pages they touch") {
  Mapping m(4);
  std::memset(m.data, 1, m.bytes);
  struct Case {
    std::size_t offset, len, pages;
  };
  for (Case c : {Case{100, kPage, 2}, Case{kPage - 1, 2, 2}, Case{10, 1, 1},
                 Case{kPage + 1, 2 * kPage, 3}, Case{0, 4 * kPage, 4}}) {
    auto report = correct(m.data + c.offset, c.len, HostNode());
    REQUIRE(report.ok());
    CHECK(report->pages_checked == c.pages);
    CHECK(report->already_local == c.pages);
  }
  auto prefaulted = prefault(m.data + 100, kPage, HostNode());
  REQUIRE(prefaulted.ok());
  CHECK(prefaulted->pages_checked == 2);
}

TEST_CASE("zero length does nothing and succeeds") {
  Mapping m(1);
  for (void* p : {static_cast<void*>(m.data), static_cast<void*>(nullptr)}) {
    auto corrected = correct(p, 0, HostNode());
    REQUIRE(corrected.ok());
    CHECK(corrected->pages_checked == 0);
    CHECK(corrected->node == HostNode());
    auto prefaulted = prefault(p, 0, HostNode());
    REQUIRE(prefaulted.ok());
    CHECK(prefaulted->pages_checked == 0);
    CHECK(prefaulted->populated_from_node == -1);
  }
  auto page = page_nodes(m.data, kPage);
  REQUIRE(page.ok());
  CHECK(page->resident() == 0);  // prefault of zero bytes touched nothing
}

TEST_CASE("bad input is InvalidArgument naming what was wrong") {
  Mapping m(2);
  for (int node : {MissingNode(), -1}) {
    auto corrected = correct(m.data, m.bytes, node);
    CHECK(corrected.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(corrected.status(), "node " + std::to_string(node)));
    auto prefaulted = prefault(m.data, m.bytes, node);
    CHECK(prefaulted.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(prefaulted.status(), "node " + std::to_string(node)));
    auto buffer = AllocateOnNode(kPage, node);
    CHECK(buffer.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(buffer.status(), "node " + std::to_string(node)));
  }
  auto null_range = correct(nullptr, kPage, HostNode());
  CHECK(null_range.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(null_range.status(), "null pointer"));

  CorrectOptions no_batch;
  no_batch.batch_pages = 0;
  auto zero_batch = correct(m.data, m.bytes, HostNode(), no_batch);
  CHECK(zero_batch.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(zero_batch.status(), "batch_pages"));
  // The untouched mapping was never touched by the failed calls.
  auto untouched = page_nodes(m.data, m.bytes);
  REQUIRE(untouched.ok());
  CHECK(untouched->resident() == 0);
}

TEST_CASE("unmapped pages are failures with EFAULT, and prefault refuses them") {
  // Map three pieces and unmap the middle one, so the hole is ours and stays a hole.
  Mapping m(24);
  char* hole = m.page(8);
  os::Unmap(hole, 8 * kPage);
  auto report = correct(hole, 8 * kPage, HostNode());
  REQUIRE(report.ok());
  CHECK(report->pages_checked == 8);
  CHECK(report->failed == 8);
  CHECK(report->failures_by_reason.at(-EFAULT) == 8);
  CHECK(report->ToString().find("EFAULT not mapped: 8") != std::string::npos);
  CheckBalanced(*report);

  auto prefaulted = prefault(hole, 8 * kPage, HostNode());
  CHECK(prefaulted.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(prefaulted.status(), "EFAULT"));
  CHECK(Contains(prefaulted.status(), "prefault("));
}

TEST_CASE("prefault faults every page in on the node from its CPUs and keeps contents") {
  Mapping m(48);
  for (std::size_t i = 0; i < 48; i += 3) std::memset(m.page(i), static_cast<int>(i), 16);
  auto report = prefault(m.data, m.bytes, HostNode());
  REQUIRE(report.ok());
  CHECK(report->pages_checked == 48);
  CHECK(report->already_local == 48);
  CHECK(report->moved == 0);
  CHECK(report->not_resident == 0);
  CHECK(report->failed == 0);
  CHECK(report->all_local());
  // The host may run on the node's CPUs, so the populating thread ran there.
  CHECK(report->populated_from_node == HostNode());
  auto counts = page_nodes(m.data, m.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->on(HostNode()) == 48);
  for (std::size_t i = 0; i < 48; ++i) {
    const char expected = (i % 3 == 0) ? static_cast<char>(i) : 0;
    CHECK(m.page(i)[0] == expected);
    CHECK(m.page(i)[15] == expected);
  }
}

TEST_CASE("AllocateOnNode returns page-verified memory and unmaps it") {
  const std::size_t bytes = (std::size_t{3} << 20) + 123;
  auto buffer = AllocateOnNode(bytes, HostNode());
  REQUIRE(buffer.ok());
  REQUIRE(buffer->data() != nullptr);
  CHECK(buffer->size() == bytes);
  CHECK(buffer->node() == HostNode());
  CHECK(reinterpret_cast<std::uintptr_t>(buffer->data()) % (std::size_t{2} << 20) == 0);
  const std::size_t pages = (bytes + kPage - 1) / kPage;
  CHECK(buffer->report().pages_checked == pages);
  CHECK(buffer->report().all_local());
  auto nodes = page_node_list(buffer->data(), buffer->size());
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == pages);
  for (int node : *nodes) REQUIRE(node == HostNode());
  std::memset(buffer->data(), 0x11, buffer->size());

  NodeBuffer moved = std::move(*buffer);
  CHECK(buffer->data() == nullptr);
  CHECK(buffer->size() == 0);
  CHECK(moved.size() == bytes);
  CHECK(static_cast<unsigned char*>(moved.data())[bytes - 1] == 0x11);

  auto small = AllocateOnNode(100, HostNode());
  REQUIRE(small.ok());
  CHECK(small->report().pages_checked == 1);
  moved = std::move(*small);  // releases the 3 MiB mapping
  CHECK(moved.size() == 100);

  auto empty = AllocateOnNode(0, HostNode());
  CHECK(empty.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(empty.status(), "size is 0"));
}

TEST_CASE("FirstTouchAllocator allocates verified memory per node") {
  FirstTouchAllocator allocator(HostNode());
  CHECK(allocator.node() == HostNode());
  auto p = allocator.allocate(5 * kPage + 1);
  REQUIRE(p.ok());
  auto counts = page_nodes(*p, 5 * kPage + 1);
  REQUIRE(counts.ok());
  CHECK(counts->total_pages == 6);
  CHECK(counts->on(HostNode()) == 6);
  allocator.deallocate(*p, 5 * kPage + 1);
  CHECK(allocator.allocate(0).status().code() == absl::StatusCode::kInvalidArgument);

  FirstTouchAllocator nowhere(MissingNode());
  auto refused = nowhere.allocate(kPage);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(refused.status(), "node " + std::to_string(MissingNode())));
}

TEST_CASE("allocations and corrections from several threads at once") {
  // One allocator shared by all threads, each also prefaulting and correcting its own range.
  // (Catch2 assertions are not thread-safe: the threads only record, the main thread checks.)
  const int node = HostNode();
  FirstTouchAllocator allocator(node);
  constexpr int kThreads = 4;
  constexpr std::size_t kPages = 32;
  std::vector<std::size_t> local(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        auto p = allocator.allocate(kPages * kPage);
        if (!p.ok()) return;
        std::memset(*p, t, kPages * kPage);
        auto prefaulted = prefault(*p, kPages * kPage, node);
        auto corrected = correct(*p, kPages * kPage, node);
        if (prefaulted.ok() && corrected.ok()) {
          local[t] += prefaulted->already_local + corrected->already_local;
        }
        allocator.deallocate(*p, kPages * kPage);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) CHECK(local[t] == 5 * 2 * kPages);
}

TEST_CASE("reports name their failure reasons") {
  CHECK(PlacementFailureName(-EBUSY) == "EBUSY pinned page");
  CHECK(PlacementFailureName(-ENOMEM) == "ENOMEM target node full");
  CHECK(PlacementFailureName(-EACCES) == "EACCES page shared with another process");
  CHECK(PlacementFailureName(-EFAULT) == "EFAULT not mapped");
  CHECK(PlacementFailureName(-9999) == "errno 9999");

  PlacementReport report;
  report.node = 1;
  report.pages_checked = 10;
  report.already_local = 4;
  report.moved = 2;
  report.not_resident = 1;
  report.failed = 3;
  report.failures_by_reason = {{-EBUSY, 2}, {-ENOMEM, 1}};
  CHECK(report.ToString() ==
        "node 1: 10 pages checked, 4 already local, 2 moved, 1 not resident, 3 failed "
        "(EBUSY pinned page: 2, ENOMEM target node full: 1)");
}

TEST_CASE("a kernel refusing mbind or move_pages gives PermissionDenied with the errno") {
  Mapping m(8);
  std::memset(m.data, 1, m.bytes);
  Status prefaulted, corrected, allocated;
  bool ran = RunWithPolicyCallsDenied([&] {
    prefaulted = prefault(m.data, m.bytes, HostNode()).status();
    corrected = correct(m.data, m.bytes, HostNode()).status();
    allocated = AllocateOnNode(kPage, HostNode()).status();
  });
  if (!ran) return;
  for (const Status& s : {prefaulted, corrected, allocated}) {
    CHECK(s.code() == absl::StatusCode::kPermissionDenied);
    CHECK(Contains(s, "errno 1 EPERM"));
  }
  CHECK(Contains(prefaulted, "mbind("));
  CHECK(Contains(corrected, "move_pages"));
  CHECK(Contains(allocated, "AllocateOnNode("));
}

}  // namespace
}  // namespace numarena
