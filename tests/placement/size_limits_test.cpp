// The placement layer at the edges of size_t and of memory: sizes that round past SIZE_MAX
// (once "0 pages, OK" with a pointer into nothing), ranges that wrap the address space,
// ranges far larger than memory that must be walked in fixed memory, holes stepped over in
// one go, and weighted-interleave chunks and weights whose arithmetic would overflow.
#include <sys/mman.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include "numarena/arena.hpp"
#include "numarena/first_touch.hpp"
#include "numarena/interleave.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/policy.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
const std::size_t kPage = os::PageSize();
constexpr std::size_t kGiB = std::size_t{1} << 30;

const Topology& System() {
  auto topology = Topology::system();
  REQUIRE(topology.ok());
  return **topology;
}
int HostNode() { return System().nodes().front().id; }

bool Refused(const Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ||
         status.code() == absl::StatusCode::kResourceExhausted;
}

// Sizes whose page (or huge-page) rounding used to wrap to 0 or a few pages.
const std::size_t kWrappingSizes[] = {kMax,
                                      kMax - 4094,
                                      kMax - 4095,
                                      kMax - (std::size_t{2} << 20),
                                      (std::size_t{1} << 63) + 1,
                                      std::size_t{1} << 62};

long long StatusKilobytes(const char* key) {
  std::ifstream file("/proc/self/status");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size()));
  }
  return -1;
}

// The bound on a call's peak memory below. Under ASan every freed block waits in ASan's
// quarantine (256 MiB by default) instead of being reused, so a walk that allocates and frees
// one small window buffer at a time grows RSS there by design: the bound is ASan's then.
#if defined(__SANITIZE_ADDRESS__)
constexpr long long kPeakBound = 512ll << 20;
#else
constexpr long long kPeakBound = 16ll << 20;
#endif

// Peak resident memory growth of the process while `body` runs, in bytes.
template <typename Body>
long long PeakGrowth(Body&& body) {
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";  // resets VmHWM to the current RSS
  }
  const long long before = StatusKilobytes("VmRSS:");
  const long long anon_before = StatusKilobytes("RssAnon:");
  const long long file_before = StatusKilobytes("RssFile:");
  body();
  // Which kind of memory grew, should a bound fail.
  UNSCOPED_INFO("RssAnon " << anon_before << " -> " << StatusKilobytes("RssAnon:") << " kB, RssFile "
                           << file_before << " -> " << StatusKilobytes("RssFile:") << " kB");
  return (StatusKilobytes("VmHWM:") - before) * 1024;
}

// A PROT_NONE, MAP_NORESERVE reservation: mapped, never resident, costs no memory.
struct Reservation {
  explicit Reservation(std::size_t size) : bytes(size) {
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(p != MAP_FAILED);
    data = static_cast<char*>(p);
  }
  ~Reservation() { ::munmap(data, bytes); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

  std::size_t bytes;
  char* data = nullptr;
};

}  // namespace

TEST_CASE("AllocateOnNode and FirstTouchAllocator refuse sizes that do not fit") {
  FirstTouchAllocator allocator(HostNode());
  for (std::size_t size : kWrappingSizes) {
    INFO("size " << size);
    auto buffer = AllocateOnNode(size, HostNode());
    REQUIRE_FALSE(buffer.ok());
    CHECK(Refused(buffer.status()));
    auto raw = allocator.allocate(size);
    REQUIRE_FALSE(raw.ok());
    CHECK(Refused(raw.status()));
  }
  auto wrapped = AllocateOnNode(kMax - 4094, HostNode());
  CHECK(wrapped.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(wrapped.status().message()), Catch::Contains("does not fit"));
}

TEST_CASE("AllocateInterleaved refuses sizes that do not fit, for both interleave kinds") {
  const int node = HostNode();
  for (const Policy& policy :
       {Policy::Interleave({node}), Policy::WeightedInterleave({{node, 1}})}) {
    for (std::size_t size : kWrappingSizes) {
      INFO(policy.ToString() << " size " << size);
      auto buffer = AllocateInterleaved(size, policy);
      REQUIRE_FALSE(buffer.ok());
      CHECK(Refused(buffer.status()));
    }
  }
}

TEST_CASE("page queries and placement refuse a range that wraps the address space") {
  int object = 0;
  const auto at = reinterpret_cast<std::uintptr_t>(&object);
  // SIZE_MAX wraps; UINTPTR_MAX - at ends on the last byte, whose page end wraps.
  for (std::size_t len : {kMax, kMax - at, static_cast<std::size_t>(UINTPTR_MAX - at)}) {
    INFO("len " << len);
    auto counts = page_nodes(&object, len);
    CHECK(counts.status().code() == absl::StatusCode::kInvalidArgument);
    auto list = page_node_list(&object, len);
    CHECK(list.status().code() == absl::StatusCode::kInvalidArgument);
    auto corrected = correct(&object, len, HostNode());
    CHECK(corrected.status().code() == absl::StatusCode::kInvalidArgument);
    auto prefaulted = prefault(&object, len, HostNode());
    CHECK(prefaulted.status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK_THAT(std::string(page_nodes(&object, kMax).status().message()),
             Catch::Contains("past the end of the address space"));
}

TEST_CASE("correct refuses batch sizes it cannot bound") {
  int object = 0;
  for (std::size_t batch : {std::size_t{0}, CorrectOptions::kMaxBatchPages + 1, kMax}) {
    CorrectOptions options;
    options.batch_pages = batch;
    auto report = correct(&object, sizeof object, HostNode(), options);
    CHECK(report.status().code() == absl::StatusCode::kInvalidArgument);
  }
  CorrectOptions largest;
  largest.batch_pages = CorrectOptions::kMaxBatchPages;
  auto report = correct(&object, sizeof object, HostNode(), largest);
  REQUIRE(report.ok());
  CHECK(report->pages_checked == 1);
}

TEST_CASE("a 64 GiB mapped, untouched range is counted and corrected in fixed memory") {
  // Topology discovery happens before the measured calls: its own (one-time) allocations are
  // not what this test bounds.
  const int node = HostNode();
  Reservation range(64 * kGiB);
  const std::size_t pages = range.bytes / kPage;
  StatusOr<PageNodeCounts> counts;
  const long long counted = PeakGrowth([&] { counts = page_nodes(range.data, range.bytes); });
  REQUIRE(counts.ok());
  CHECK(counts->total_pages == pages);
  CHECK(counts->not_resident == pages);
  CHECK(counts->unmapped == 0);
  CHECK(counted < kPeakBound);  // was 12 bytes a page: 192 MiB

  StatusOr<PlacementReport> report;
  const long long corrected =
      PeakGrowth([&] { report = correct(range.data, range.bytes, node); });
  REQUIRE(report.ok());
  CHECK(report->pages_checked == pages);
  CHECK(report->not_resident == pages);
  CHECK(report->moved == 0);
  CHECK(corrected < kPeakBound);

  // prefault cannot write PROT_NONE pages: an error, and nothing faulted in.
  StatusOr<PlacementReport> prefaulted;
  const long long populated =
      PeakGrowth([&] { prefaulted = prefault(range.data, range.bytes, node); });
  CHECK_FALSE(prefaulted.ok());
  CHECK(populated < kPeakBound);
}

TEST_CASE("a hole in a range is stepped over in one go and counted as unmapped") {
  // 1 TiB of address space of which only the first and the last page stay mapped.
  Reservation range(1024 * kGiB);
  REQUIRE(::munmap(range.data + kPage, range.bytes - 2 * kPage) == 0);
  const std::size_t pages = range.bytes / kPage;
  const auto start = std::chrono::steady_clock::now();

  auto counts = page_nodes(range.data, range.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->total_pages == pages);
  CHECK(counts->unmapped == pages - 2);
  CHECK(counts->not_resident == 2);

  auto report = correct(range.data, range.bytes, HostNode());
  REQUIRE(report.ok());
  CHECK(report->pages_checked == pages);
  CHECK(report->not_resident == 2);
  CHECK(report->failed == pages - 2);
  CHECK(report->failures_by_reason[-EFAULT] == pages - 2);

  // Page by page this would be 2^28 pages; stepping over the hole takes a few reads.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));

  // Listing 2^28 pages would need 1 GiB for the answer alone.
  auto list = page_node_list(range.data, range.bytes);
  CHECK(list.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(list.status().message()), Catch::Contains("use page_nodes"));
  // Remap the hole so the destructor's munmap covers exactly what it reserved.
  REQUIRE(::mmap(range.data + kPage, range.bytes - 2 * kPage, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED);
}

TEST_CASE("weighted interleave chunks and weights are bounded so no chunk arithmetic overflows") {
  const int node = HostNode();
  auto with_chunk = [&](std::size_t chunk) {
    return Policy::WeightedInterleave({{node, 1}}, BindMode::kStrict, chunk);
  };
  Status huge = with_chunk(0xFFFFFFFFFFFFF000).Validate(System());
  CHECK(huge.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(huge.message()), Catch::Contains("kMaxWeightedChunk"));
  CHECK(with_chunk(Policy::kMaxWeightedChunk).Validate(System()).ok());
  CHECK(with_chunk(Policy::kMaxWeightedChunk + kPage).Validate(System()).code() ==
        absl::StatusCode::kInvalidArgument);

  Status heavy = Policy::WeightedInterleave({{node, 0xFFFFFFFFu}}).Validate(System());
  CHECK(heavy.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(heavy.message()), Catch::Contains("kMaxWeightTotal"));
  CHECK(Policy::WeightedInterleave({{node, static_cast<unsigned>(Policy::kMaxWeightTotal)}})
            .Validate(System())
            .ok());

  // The report's case: this once passed Validate and then looped forever creating the arena.
  auto arena = Arena::ForPolicy(with_chunk(0xFFFFFFFFFFFFF000));
  CHECK(arena.status().code() == absl::StatusCode::kInvalidArgument);
  auto buffer = AllocateInterleaved(std::size_t{4} << 20, with_chunk(0xFFFFFFFFFFFFF000));
  CHECK(buffer.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("weighted interleave at the largest weight places a buffer in one range per run") {
  const int node = HostNode();
  // One node: every run merges into one range, however heavy the weight.
  auto buffer = AllocateInterleaved(
      std::size_t{8} << 20,
      Policy::WeightedInterleave({{node, static_cast<unsigned>(Policy::kMaxWeightTotal)}},
                                 BindMode::kStrict, kPage));
  REQUIRE(buffer.ok());
  CHECK(buffer->stats().ranges == 1);
  CHECK(buffer->ExpectedNode(0) == node);
  CHECK(buffer->ExpectedNode(buffer->size() - 1) == node);
}

}  // namespace numarena
