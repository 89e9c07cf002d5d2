// The node page provider on the host (one node): spans are aligned, zero, bound before touch
// and resident on the node; commits are charged once per page against the capacity gate with
// the committing thread's priority and released exactly (from any thread) on decommit;
// decommitted pages stay mapped and fault back in; the free-memory guard refuses what a node
// cannot hold; Strict placements the kernel refuses fail at creation, Advisory ones fall back
// and count it; hugetlb without a pool is a FailedPrecondition naming nr_hugepages; weighted
// interleave charges chunks to nodes 3:1.
#include "alloc/node_pages.hpp"
#include "numarena/arena.hpp"
#include "placement/unwritten.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <cstdio>
#include <cerrno>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "numarena/page_nodes.hpp"
#include "os/os.hpp"
#include "resident_pages.hpp"

namespace {

using numarena::NodePages;
using numarena::Policy;
using numarena::Priority;

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A gate that records what is charged per (node, priority) and refuses past a limit.
class RecordingGate : public numarena::CapacityGate {
 public:
  explicit RecordingGate(std::size_t limit = SIZE_MAX) : limit_(limit) {}
  numarena::Status Charge(int node, std::size_t bytes, Priority priority) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (total_ + bytes > limit_) {
      return absl::ResourceExhaustedError("recording gate: over the test limit");
    }
    total_ += bytes;
    charged_[{node, priority}] += static_cast<long long>(bytes);
    return absl::OkStatus();
  }
  void Release(int node, std::size_t bytes, Priority priority) override {
    std::lock_guard<std::mutex> lock(mutex_);
    total_ -= bytes;
    charged_[{node, priority}] -= static_cast<long long>(bytes);
  }
  long long Charged(int node, Priority priority) {
    std::lock_guard<std::mutex> lock(mutex_);
    return charged_[{node, priority}];
  }
  std::size_t total() {
    std::lock_guard<std::mutex> lock(mutex_);
    return total_;
  }

 private:
  std::mutex mutex_;
  std::size_t limit_;
  std::size_t total_ = 0;
  std::map<std::pair<int, Priority>, long long> charged_;
};

// Installs a gate for one test and removes it after.
struct GateScope {
  explicit GateScope(numarena::CapacityGate* gate) { numarena::SetCapacityGate(gate); }
  ~GateScope() { numarena::SetCapacityGate(nullptr); }
};

int next_owner = 200;  // heap ids these tests tag granules with (the arena tests use low ids)

NodePages* Make(const Policy& policy, numarena::ArenaOptions options = {}) {
  auto pages = NodePages::Create(policy, options, next_owner++);
  INFO(pages.status().ToString());
  REQUIRE(pages.ok());
  return *pages;
}

void* Span(NodePages* pages, std::size_t bytes, std::size_t alignment, bool commit) {
  bool zero = false;
  void* p = pages->AllocateSpan(nullptr, bytes, alignment, &zero, &commit);
  INFO(numarena::ThreadSpanFailure().ToStatus("span").ToString());
  REQUIRE(p != nullptr);
  CHECK(zero);
  return p;
}

// Bytes of committed spans: committed_bytes() less the provider's own page tables, which
// are charged too (to the placement's first node, with the committer's priority).
std::size_t SpanBytes(NodePages* pages) { return pages->committed_bytes() - pages->table_bytes(); }

}  // namespace

TEST_CASE("a committed span is aligned, zero, tagged and resident on its node after touch") {
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, 4 * kMiB, 2 * kMiB, /*commit=*/true);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % (2 * kMiB) == 0);
  CHECK(SpanBytes(pages) == 4 * kMiB);
  CHECK(pages->mapped_bytes() >= 4 * kMiB);
  CHECK(numarena::arena_internal::HeapOf(p) == next_owner - 1);
  CHECK(pages->node() == 0);
  CHECK(pages->CommittedNodeOfPage(p) == 0);
  auto* bytes = static_cast<unsigned char*>(p);
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < 4 * kMiB; ++i) nonzero += bytes[i] != 0;
  CHECK(nonzero == 0);
  std::memset(p, 0xab, 4 * kMiB);
  auto counts = numarena::page_nodes(p, 4 * kMiB);
  REQUIRE(counts.ok());
  CHECK(counts->on(0) == counts->total_pages);
}

TEST_CASE("decommit purges but keeps the range mapped and bound, recommit charges again") {
  RecordingGate gate;
  GateScope scope(&gate);
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, 2 * kMiB, 4096, /*commit=*/true);
  // The range's table header (charged once, kept with the range) and the table pages that
  // describe the span (two at most: 512 states, maybe across a table-page boundary).
  const std::size_t tables = pages->table_bytes();
  CHECK(tables > 0);
  CHECK(gate.Charged(0, Priority::kNormal) == static_cast<long long>(2 * kMiB + tables));
  std::memset(p, 1, 2 * kMiB);
  REQUIRE(pages->Decommit(p, 2 * kMiB));
  CHECK(SpanBytes(pages) == 0);
  const std::size_t header = pages->table_bytes();
  CHECK(tables - header >= 4096);  // the table pages went with the last page they describe
  CHECK(tables - header <= 2 * 4096);
  CHECK(gate.total() == header);
  auto counts = numarena::page_nodes(p, 2 * kMiB);
  REQUIRE(counts.ok());
  CHECK(counts->resident() == 0);
  CHECK(counts->unmapped == 0);
  REQUIRE(pages->Commit(p, 2 * kMiB));
  CHECK(static_cast<unsigned char*>(p)[100] == 0);  // purged pages come back zero
  std::memset(p, 2, 2 * kMiB);
  counts = numarena::page_nodes(p, 2 * kMiB);
  REQUIRE(counts.ok());
  CHECK(counts->on(0) == counts->total_pages);
  CHECK(pages->table_bytes() == tables);
  CHECK(gate.total() == 2 * kMiB + tables);
  REQUIRE(pages->Decommit(p, 2 * kMiB));
  CHECK(gate.total() == header);
}

TEST_CASE("pages are charged once, with the committer's priority, released from any thread") {
  RecordingGate gate;
  GateScope scope(&gate);
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, 8 * kMiB, 4096, /*commit=*/false);
  CHECK(pages->committed_bytes() == 0);
  CHECK(gate.total() == 0);
  {
    numarena::PriorityScope low(Priority::kLow);
    REQUIRE(pages->Commit(p, 4 * kMiB));
    REQUIRE(pages->Commit(p, 4 * kMiB));  // already charged: nothing more
  }
  {
    numarena::PriorityScope high(Priority::kHigh);
    REQUIRE(pages->Commit(p, 8 * kMiB));  // only the second half is new
  }
  // The low committer also charged the table header and the table pages it needed first.
  const auto low_tables = static_cast<long long>(pages->table_bytes());
  CHECK(gate.Charged(0, Priority::kLow) >= static_cast<long long>(4 * kMiB));
  CHECK(gate.Charged(0, Priority::kHigh) >= static_cast<long long>(4 * kMiB));
  CHECK(gate.Charged(0, Priority::kLow) + gate.Charged(0, Priority::kHigh) ==
        static_cast<long long>(8 * kMiB) + low_tables);
  CHECK(SpanBytes(pages) == 8 * kMiB);
  const long long low_before = gate.Charged(0, Priority::kLow);
  const long long high_before = gate.Charged(0, Priority::kHigh);
  std::thread other([&] { REQUIRE(pages->Decommit(static_cast<char*>(p) + 2 * kMiB, 4 * kMiB)); });
  other.join();
  // Pages stay committed in every table page touched: only the span's pages go.
  CHECK(gate.Charged(0, Priority::kLow) == low_before - static_cast<long long>(2 * kMiB));
  CHECK(gate.Charged(0, Priority::kHigh) == high_before - static_cast<long long>(2 * kMiB));
  REQUIRE(pages->Decommit(p, 8 * kMiB));
  CHECK(SpanBytes(pages) == 0);
  CHECK(gate.total() == pages->table_bytes());  // the header only
  CHECK(pages->table_bytes() < static_cast<std::size_t>(low_tables));
}

TEST_CASE("a gate refusal fails the commit with ResourceExhausted and charges nothing") {
  RecordingGate gate(3 * kMiB);
  GateScope scope(&gate);
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, 4 * kMiB, 4096, /*commit=*/false);
  numarena::ThreadSpanFailure().Clear();
  CHECK_FALSE(pages->Commit(p, 4 * kMiB));
  const auto& failure = numarena::ThreadSpanFailure();
  CHECK(failure.kind == numarena::SpanFailure::Kind::kGateRefused);
  auto status = failure.ToStatus("test");
  CHECK(status.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(status.message()), Catch::Contains("node 0"));
  CHECK_THAT(std::string(status.message()), Catch::Contains("over the test limit"));
  CHECK(gate.total() == 0);  // neither the pages nor their tables
  CHECK(pages->committed_bytes() == 0);
  CHECK(pages->table_bytes() == 0);
  CHECK(pages->refusals() == 1);
  REQUIRE(pages->Commit(p, 2 * kMiB));  // within the limit
  CHECK(gate.total() == 2 * kMiB + pages->table_bytes());
  REQUIRE(pages->Decommit(p, 4 * kMiB));
  CHECK(gate.total() == pages->table_bytes());
  numarena::ThreadSpanFailure().Clear();
}

TEST_CASE("the free-memory guard refuses more than the node holds and names the numbers") {
  numarena::SpanFailure failure;
  CHECK(numarena::NodeMemoryGuard::Admit(0, 4096, &failure));
  CHECK_FALSE(failure.failed());
  numarena::NodeMemoryGuard::Invalidate(0);
  std::size_t absurd = std::size_t{1} << 50;  // 1 PiB
  CHECK_FALSE(numarena::NodeMemoryGuard::Admit(0, absurd, &failure));
  REQUIRE(failure.kind == numarena::SpanFailure::Kind::kNodeFull);
  auto status = failure.ToStatus("commit");
  CHECK(status.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(status.message()), Catch::Contains("node 0 cannot take"));
  CHECK_THAT(std::string(status.message()), Catch::Contains("Preferred"));
  CHECK(failure.node_total > 0);

  // Through a provider: a commit past the node is refused before any page is touched.
  // Twice the node's memory (address space only: sanitizers limit how much can be reserved).
  std::size_t twice =
      (static_cast<std::size_t>(failure.node_total) * 2 + 2 * kMiB - 1) & ~(2 * kMiB - 1);
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, twice, 4096, /*commit=*/false);
  numarena::ThreadSpanFailure().Clear();
  CHECK_FALSE(pages->Commit(p, twice));
  CHECK(numarena::ThreadSpanFailure().kind == numarena::SpanFailure::Kind::kNodeFull);
  CHECK(pages->refusals() == 1);
  numarena::ThreadSpanFailure().Clear();
}

TEST_CASE("a Strict placement the kernel refuses fails at creation, Advisory falls back") {
  // Node 1 does not exist on this host: mbind says EINVAL.
  const int offline = 1;
  auto strict = NodePages::Create(Policy::Bind(offline), {}, next_owner++);
  REQUIRE_FALSE(strict.ok());
  CHECK_THAT(std::string(strict.status().message()), Catch::Contains("mbind"));
  CHECK_THAT(std::string(strict.status().message()), Catch::Contains("Advisory"));

  NodePages* advisory = Make(Policy::Bind(offline, numarena::BindMode::kAdvisory));
  CHECK(advisory->fallbacks() == 2);  // membind -> preferred -> none
  void* p = Span(advisory, 2 * kMiB, 4096, /*commit=*/true);
  std::memset(p, 3, 2 * kMiB);
  auto counts = numarena::page_nodes(p, 2 * kMiB);
  REQUIRE(counts.ok());
  CHECK(counts->resident() == counts->total_pages);
}

TEST_CASE("weighted interleave charges chunks to nodes 3:1") {
  RecordingGate gate;
  GateScope scope(&gate);
  // Node 1 is absent here, so binding falls back (Advisory); the charges follow the chunk
  // order WeightedChunkNode gives, which is what the lab checks page by page.
  NodePages* pages =
      Make(Policy::WeightedInterleave({{0, 3}, {1, 1}}, numarena::BindMode::kAdvisory, 2 * kMiB));
  void* p = Span(pages, 16 * kMiB, 8 * kMiB, /*commit=*/true);
  // The page tables are charged to the first node.
  CHECK(gate.Charged(0, Priority::kNormal) ==
        static_cast<long long>(12 * kMiB + pages->table_bytes()));
  CHECK(gate.Charged(1, Priority::kNormal) == static_cast<long long>(4 * kMiB));
  auto* base = static_cast<char*>(p);
  CHECK(pages->CommittedNodeOfPage(base) == 0);
  CHECK(pages->CommittedNodeOfPage(base + 5 * kMiB) == 0);
  CHECK(pages->CommittedNodeOfPage(base + 6 * kMiB) == 1);
  CHECK(pages->CommittedNodeOfPage(base + 14 * kMiB) == 1);
  CHECK(pages->node() == numarena::kNodeMixed);
  REQUIRE(pages->Decommit(p, 16 * kMiB));
  CHECK(gate.total() == pages->table_bytes());
}

TEST_CASE("interleave charges pages round-robin over its nodes") {
  RecordingGate gate;
  GateScope scope(&gate);
  NodePages* pages = Make(Policy::Interleave({0, 1}, numarena::BindMode::kAdvisory));
  void* p = Span(pages, 64 * 4096, 4096, /*commit=*/true);
  CHECK(gate.Charged(0, Priority::kNormal) ==
        static_cast<long long>(32 * 4096 + pages->table_bytes()));
  CHECK(gate.Charged(1, Priority::kNormal) == 32 * 4096);
  REQUIRE(pages->Decommit(p, 64 * 4096));
}

TEST_CASE("spans grow in place only at the bump pointer") {
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, 64 * 4096, 4096, /*commit=*/false);
  bool zero = false, commit = false;
  void* next = static_cast<char*>(p) + 64 * 4096;
  CHECK(pages->AllocateSpan(next, 4096, 4096, &zero, &commit) == next);
  CHECK(pages->AllocateSpan(p, 4096, 4096, &zero, &commit) == nullptr);
  CHECK(pages->SameRange(p, next));
  int on_stack = 0;
  CHECK_FALSE(pages->SameRange(p, &on_stack));
}

TEST_CASE("moved pages keep their bytes and fault nothing, and the source is a bound span again") {
  // A large block that cannot grow moves into a larger one (arena.cpp, AllocateOverLargest
  // and reallocate): its written pages must arrive whole, without a fault, and its own range
  // must stay a committed span of zero pages that can be written again and purged. Both
  // ways: MREMAP_DONTUNMAP (the source stays mapped) and, as on kernels before 5.7, a plain
  // move after which the source is mapped and bound again.
  const bool keep_source = GENERATE(true, false);
  INFO("MREMAP_DONTUNMAP tried first: " << keep_source);
  NodePages::SetKeepSourceMovesForTesting(keep_source);
  struct Restore {
    ~Restore() { NodePages::SetKeepSourceMovesForTesting(true); }
  } restore;
  NodePages* pages = Make(Policy::Bind(0));
  constexpr std::size_t kBytes = 4 * kMiB;
  auto* from = static_cast<unsigned char*>(Span(pages, kBytes, 2 * kMiB, /*commit=*/true));
  auto* to = static_cast<unsigned char*>(Span(pages, 2 * kBytes, 2 * kMiB, /*commit=*/true));
  for (std::size_t at = 0; at < kBytes; at += 4096) from[at] = static_cast<unsigned char>(at >> 12);
  const std::size_t committed = SpanBytes(pages);
  REQUIRE(pages->MovePages(from, to, kBytes) == NodePages::MoveResult::kMoved);
  // The way asked for (every kernel this runs on, host and lab, has MREMAP_DONTUNMAP).
  CHECK(NodePages::LastMoveKeptSourceForTesting() == keep_source);
  // Resident before anything reads them: they came with their page table entries. (Not a
  // count of page faults: a sanitizer's shadow memory faults too.)
  const numarena::testing::ResidentPages arrived = numarena::testing::CountResident(to, kBytes);
  CHECK(arrived.resident == arrived.pages);
  std::size_t wrong = 0;
  for (std::size_t at = 0; at < kBytes; at += 4096) {
    wrong += to[at] != static_cast<unsigned char>(at >> 12);
  }
  CHECK(wrong == 0);
  auto moved = numarena::page_nodes(to, kBytes);
  REQUIRE(moved.ok());
  CHECK(moved->on(0) == moved->total_pages);
  // The source: still mapped and bound, zero, nothing resident, charged as before.
  auto source = numarena::page_nodes(from, kBytes);
  REQUIRE(source.ok());
  CHECK(source->resident() == 0);
  CHECK(source->unmapped == 0);
  CHECK(SpanBytes(pages) == committed);
  std::size_t nonzero = 0;
  for (std::size_t at = 0; at < kBytes; at += 4096) nonzero += from[at] != 0;
  CHECK(nonzero == 0);
  std::memset(from, 7, kBytes);
  source = numarena::page_nodes(from, kBytes);
  REQUIRE(source.ok());
  CHECK(source->on(0) == source->total_pages);
  REQUIRE(pages->Decommit(from, kBytes));
  REQUIRE(pages->Decommit(to, 2 * kBytes));
}

namespace {
// Whether the mapping that holds `addr` is locked (VmFlags "lo" in /proc/self/smaps); nullopt
// when it is not found.
std::optional<bool> MappingLocked(const void* addr) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return std::nullopt;
  const auto at = reinterpret_cast<std::uintptr_t>(addr);
  char line[512];
  bool inside = false;
  std::optional<bool> locked;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, ':') != nullptr &&
        std::strncmp(line, "VmFlags:", 8) != 0) {
      inside = lo <= at && at < hi;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      locked = std::strstr(line, " lo") != nullptr;
      break;
    }
  }
  std::fclose(f);
  return locked;
}
}  // namespace

TEST_CASE("a move in a process with locked memory leaves the rest of the heap's mapping locked") {
  // MREMAP_DONTUNMAP clears VM_LOCKED on the whole mapping its source lies in: a server that
  // locked its memory (mlockall) would find the rest of the heap unlocked after one move. So a
  // process with locked memory moves the plain way, which splits only the moved range out.
  NodePages* pages = Make(Policy::Bind(0));
  // 32 KiB locked in all: within the 64 KiB RLIMIT_MEMLOCK most containers give (a move only
  // needs whole pages).
  constexpr std::size_t kHalf = 16 * 1024;
  auto* both = static_cast<unsigned char*>(Span(pages, 2 * kHalf, 2 * kMiB, /*commit=*/true));
  auto* to = static_cast<unsigned char*>(Span(pages, kHalf, 2 * kMiB, /*commit=*/true));
  unsigned char* rest = both + kHalf;
  // As system calls: the sanitizers' interceptors turn mlock into a no-op.
  auto lock = [](void* p, std::size_t n) { return syscall(SYS_mlock, p, n) == 0; };
  auto unlock = [](void* p, std::size_t n) { (void)syscall(SYS_munlock, p, n); };
  if (!lock(both, 2 * kHalf)) {
    WARN("mlock refused (" << std::strerror(errno) << "): nothing to check");
    REQUIRE(pages->Decommit(both, 2 * kHalf));
    REQUIRE(pages->Decommit(to, kHalf));
    return;
  }
  std::memset(both, 5, 2 * kHalf);
  REQUIRE(MappingLocked(rest) == std::optional<bool>(true));
  REQUIRE(numarena::os::LockedMemoryBytesNoAlloc() >= 2 * kHalf);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the cached answer
  REQUIRE(pages->MovePages(both, to, kHalf) == NodePages::MoveResult::kMoved);
  CHECK(to[0] == 5);
  CHECK(to[kHalf - 1] == 5);
  CHECK(MappingLocked(rest) == std::optional<bool>(true));
  CHECK(rest[0] == 5);
  unlock(both, 2 * kHalf);
  unlock(to, kHalf);
  REQUIRE(pages->Decommit(both, 2 * kHalf));
  REQUIRE(pages->Decommit(to, kHalf));
}

TEST_CASE("StatusLineKib reads one kB line of /proc/PID/status, and nothing else") {
  CHECK(numarena::os::StatusLineKib("VmLck:\t     128 kB", "VmLck:") == std::optional<std::uint64_t>(128));
  CHECK(numarena::os::StatusLineKib("VmLck: 0 kB", "VmLck:") == std::optional<std::uint64_t>(0));
  CHECK_FALSE(numarena::os::StatusLineKib("VmPin:\t 128 kB", "VmLck:"));
  CHECK_FALSE(numarena::os::StatusLineKib("VmLck:\t 128 MB", "VmLck:"));
  CHECK_FALSE(numarena::os::StatusLineKib("VmLck:\t kB", "VmLck:"));
  CHECK_FALSE(numarena::os::StatusLineKib("VmLck:\t 12x kB", "VmLck:"));
  CHECK_FALSE(numarena::os::StatusLineKib("VmLck:", "VmLck:"));
  CHECK_FALSE(numarena::os::StatusLineKib("VmLck:\t 99999999999999999999999 kB", "VmLck:"));
  CHECK(numarena::os::StatusLineKib("VmLck: 18014398509481984 kB", "VmLck:") ==
        std::optional<std::uint64_t>(std::uint64_t{1} << 54));
  CHECK_FALSE(numarena::os::StatusLineKib("VmLck: 18014398509481985 kB", "VmLck:"));
  CHECK_FALSE(numarena::os::StatusLineKib("VmLck: 5 kB", ""));
}

TEST_CASE("a source over two mappings moves, or is refused with the destination still usable") {
  // Half the source advised for huge pages, half not: two mappings. Linux 6.17 and later move
  // it; earlier kernels refuse (EFAULT) after they have unmapped the destination, which must
  // then be mapped again (the lab runs this on 6.1 and 6.12, arena_cache_lab.cpp).
  NodePages* pages = Make(Policy::Bind(0));
  auto* from = static_cast<unsigned char*>(Span(pages, 4 * kMiB, 2 * kMiB, /*commit=*/false));
  auto* to = static_cast<unsigned char*>(Span(pages, 8 * kMiB, 2 * kMiB, /*commit=*/true));
  REQUIRE(pages->Commit(from, 2 * kMiB, /*advise_huge=*/true));
  REQUIRE(pages->Commit(from + 2 * kMiB, 2 * kMiB, /*advise_huge=*/false));
  std::memset(from, 0x3c, 4 * kMiB);
  const NodePages::MoveResult result = pages->MovePages(from, to, 4 * kMiB);
  INFO("result " << static_cast<int>(result));
  REQUIRE((result == NodePages::MoveResult::kMoved ||
           result == NodePages::MoveResult::kNotMoved));
  unsigned char* holder = result == NodePages::MoveResult::kMoved ? to : from;
  unsigned char* other = result == NodePages::MoveResult::kMoved ? from : to;
  CHECK(holder[0] == 0x3c);
  CHECK(holder[4 * kMiB - 1] == 0x3c);
  CHECK(other[0] == 0);  // zero pages, mapped: a hole would be SIGSEGV here
  std::memset(other, 0x3d, 4 * kMiB);
  auto counts = numarena::page_nodes(other, 4 * kMiB);
  REQUIRE(counts.ok());
  CHECK(counts->on(0) == counts->total_pages);
  REQUIRE(pages->Decommit(from, 4 * kMiB));
  REQUIRE(pages->Decommit(to, 8 * kMiB));
}

TEST_CASE("pages do not move where they may not: unaligned, overlapping, foreign, two nodes") {
  NodePages* pages = Make(Policy::Bind(0));
  auto* from = static_cast<char*>(Span(pages, 4 * kMiB, 2 * kMiB, /*commit=*/true));
  auto* to = static_cast<char*>(Span(pages, 8 * kMiB, 2 * kMiB, /*commit=*/true));
  std::memset(from, 5, 4 * kMiB);
  using Result = NodePages::MoveResult;
  CHECK(pages->MovePages(from + 1, to, 4096) == Result::kNotMoved);
  CHECK(pages->MovePages(from, to + 1, 4096) == Result::kNotMoved);
  CHECK(pages->MovePages(from, to, 4097) == Result::kNotMoved);
  CHECK(pages->MovePages(from, to, 0) == Result::kNotMoved);
  CHECK(pages->MovePages(to, to + 4096, 2 * kMiB) == Result::kNotMoved);  // overlapping
  // Beyond what the provider mapped, and memory of another provider or of nobody.
  CHECK(pages->MovePages(from, to + 8 * kMiB, SIZE_MAX - 4095) == Result::kNotMoved);
  NodePages* other = Make(Policy::Bind(0));
  void* foreign = Span(other, 4 * kMiB, 2 * kMiB, /*commit=*/true);
  CHECK(pages->MovePages(from, foreign, 4 * kMiB) == Result::kNotMoved);
  std::vector<char> heap_bytes(3 * 4096);
  char* unowned = reinterpret_cast<char*>(
      (reinterpret_cast<std::uintptr_t>(heap_bytes.data()) + 4095) & ~std::uintptr_t{4095});
  CHECK(pages->MovePages(unowned, to, 4096) == Result::kNotMoved);
  CHECK(pages->MovePages(from, unowned, 4096) == Result::kNotMoved);
  // Nothing moved: the source still holds its bytes.
  CHECK(from[0] == 5);
  CHECK(from[4 * kMiB - 1] == 5);
  // Pages charged per page to one of two nodes cannot move: the charge names the node.
  NodePages* interleaved = Make(Policy::Interleave({0, 1}, numarena::BindMode::kAdvisory));
  CHECK_FALSE(interleaved->CanMovePages());
  auto* a = static_cast<char*>(Span(interleaved, 2 * kMiB, 2 * kMiB, /*commit=*/true));
  auto* b = static_cast<char*>(Span(interleaved, 4 * kMiB, 2 * kMiB, /*commit=*/true));
  a[0] = 9;
  CHECK(interleaved->MovePages(a, b, 2 * kMiB) == Result::kNotMoved);
  CHECK(a[0] == 9);
  CHECK(pages->CanMovePages());
}

TEST_CASE("bad provider requests are InvalidArgument / FailedPrecondition with the fix") {
  auto preferred = NodePages::Create(Policy::Preferred(0), {}, next_owner++);
  CHECK(preferred.status().code() == absl::StatusCode::kInvalidArgument);
  numarena::ArenaOptions odd;
  odd.hugetlb_page_bytes = 3 * kMiB;
  CHECK(NodePages::Create(Policy::Bind(0), odd, next_owner++).status().code() ==
        absl::StatusCode::kInvalidArgument);

  numarena::ArenaOptions huge;
  huge.hugetlb_page_bytes = numarena::ArenaOptions::kHugetlb1G;
  auto pool = numarena::os::ReadFile("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages");
  auto result = NodePages::Create(Policy::Bind(0), huge, next_owner++);
  if (!pool.ok() || std::atoll(pool->c_str()) == 0) {
    REQUIRE(result.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(result.status().message()), Catch::Contains("nr_hugepages"));
  } else {
    CHECK(result.ok());
  }
}

TEST_CASE("after a refused commit the provider carves no fresh span until the failure is read") {
  // jemalloc asks for a fresh span after the commit of one it holds was refused, and keeps
  // both: the provider must refuse it and keep the first reason.
  RecordingGate gate(kMiB);
  GateScope scope(&gate);
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, 4 * kMiB, 4096, /*commit=*/false);
  numarena::ThreadSpanFailure().Clear();
  REQUIRE_FALSE(pages->Commit(p, 4 * kMiB));
  REQUIRE(numarena::ThreadSpanFailure().kind == numarena::SpanFailure::Kind::kGateRefused);
  const std::size_t mapped = pages->mapped_bytes();
  bool zero = false, commit = false;
  CHECK(pages->AllocateSpan(nullptr, 4 * kMiB, 4096, &zero, &commit) == nullptr);
  commit = true;
  CHECK(pages->AllocateSpan(nullptr, 4 * kMiB, 4096, &zero, &commit) == nullptr);
  CHECK(pages->mapped_bytes() == mapped);
  CHECK(numarena::ThreadSpanFailure().kind == numarena::SpanFailure::Kind::kGateRefused);
  numarena::ThreadSpanFailure().Clear();
  CHECK(Span(pages, 4 * kMiB, 4096, /*commit=*/false) != nullptr);
  numarena::ThreadSpanFailure().Clear();
}

TEST_CASE("spans of sizes near SIZE_MAX are refused, never wrapped to a small span") {
  NodePages* pages = Make(Policy::Bind(0));
  for (std::size_t size : {SIZE_MAX, SIZE_MAX - 4094, SIZE_MAX - 4095 - 4096}) {
    for (std::size_t alignment : {std::size_t{4096}, std::size_t{1} << 30}) {
      INFO("size " << size << " alignment " << alignment);
      numarena::ThreadSpanFailure().Clear();
      bool zero = false, commit = false;
      CHECK(pages->AllocateSpan(nullptr, size, alignment, &zero, &commit) == nullptr);
      CHECK(numarena::ThreadSpanFailure().failed());
    }
  }
  numarena::ThreadSpanFailure().Clear();
  void* p = Span(pages, 4096, 4096, /*commit=*/false);
  CHECK_FALSE(pages->Commit(p, SIZE_MAX));  // the range end would wrap
  CHECK(numarena::ThreadSpanFailure().kind == numarena::SpanFailure::Kind::kMap);
  numarena::ThreadSpanFailure().Clear();
  CHECK_FALSE(pages->Decommit(p, SIZE_MAX));
}

// Forces the guard's next meminfo read and does it, admitting nothing.
void RereadNodeMemory() {
  numarena::SpanFailure failure;
  numarena::NodeMemoryGuard::Invalidate(0);
  REQUIRE(numarena::NodeMemoryGuard::Admit(0, 0, &failure));
}

// A committed page takes the node's free memory only when it is written: the guard follows
// a committed object's span and subtracts the part without memory behind it at each read
// (mincore's answer), until it is written or decommitted.
TEST_CASE("the free-memory guard follows committed spans until they are written") {
  constexpr std::size_t kSpan = 64 * kMiB;
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, kSpan, 2 * kMiB, /*commit=*/false);
  RereadNodeMemory();
  const std::int64_t before = numarena::NodeMemoryGuard::Unwritten(0);
  REQUIRE(pages->Commit(p, kSpan));
  RereadNodeMemory();
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) - before == static_cast<std::int64_t>(kSpan));
  // A quarter written (whole 2 MiB blocks, so huge pages cannot make more resident).
  std::memset(p, 0x11, kSpan / 4);
  RereadNodeMemory();
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) - before ==
        static_cast<std::int64_t>(kSpan / 4 * 3));
  std::memset(p, 0x12, kSpan);
  RereadNodeMemory();
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) == before);

  // Decommitted unwritten: no longer counted.
  void* q = Span(pages, kSpan, 2 * kMiB, /*commit=*/false);
  REQUIRE(pages->Commit(q, kSpan));
  RereadNodeMemory();
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) - before == static_cast<std::int64_t>(kSpan));
  REQUIRE(pages->Decommit(q, kSpan));
  RereadNodeMemory();
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) == before);
  // Spans smaller than the guard follows, and jemalloc's metadata blocks (committed with
  // advise_huge false), are not followed.
  void* small = Span(pages, numarena::NodeMemoryGuard::kTrackedMinBytes / 2, 4096, false);
  REQUIRE(pages->Commit(small, numarena::NodeMemoryGuard::kTrackedMinBytes / 2));
  void* block = Span(pages, 2 * kMiB, 2 * kMiB, /*commit=*/true);
  REQUIRE(block != nullptr);
  RereadNodeMemory();
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) == before);
  REQUIRE(pages->Decommit(p, kSpan));
  REQUIRE(pages->Decommit(small, numarena::NodeMemoryGuard::kTrackedMinBytes / 2));
  REQUIRE(pages->Decommit(block, 2 * kMiB));
}

// AllocateOnNode and prefault (a layer below) subtract the same spans, looked at when they
// ask, not at the guard's last read: a page written since then is in the node's meminfo and
// must not be subtracted again.
TEST_CASE("placement's figure of committed, unwritten bytes is looked at when asked") {
  constexpr std::size_t kSpan = 64 * kMiB;
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, kSpan, 2 * kMiB, /*commit=*/false);
  const std::int64_t before = numarena::placement_internal::UnwrittenBytesOnNode(0);
  REQUIRE(pages->Commit(p, kSpan));
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(0) - before ==
        static_cast<std::int64_t>(kSpan));
  // prefault over the span itself leaves its own pages out (they are the ones it writes).
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(0, p, kSpan / 4) - before ==
        static_cast<std::int64_t>(kSpan / 4 * 3));
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(0, p, kSpan) == before);
  // A range running to the end of the address space (its end saturates, never wraps).
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(0, p, SIZE_MAX) <= before);
  RereadNodeMemory();
  const std::int64_t guard_figure = numarena::NodeMemoryGuard::Unwritten(0);
  std::memset(p, 0x13, kSpan / 2);
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(0) - before ==
        static_cast<std::int64_t>(kSpan / 2));
  // The guard's own figure stays the one paired with its last meminfo read.
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) == guard_figure);
  REQUIRE(pages->Decommit(p, kSpan));
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(0) == before);
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(-1) == 0);
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(1 << 20) == 0);
}

// Placement looks at the spans whenever AllocateOnNode or prefault checks a node, while arenas
// commit and decommit others. A decommit that found the spans' lock busy used to give up and
// have the next read drop every span, so an unwritten object was forgotten; the lock is waited
// for now (briefly: its holder only looks at up to kScanBytesPerRead).
TEST_CASE("a followed span is not forgotten when decommits race with placement's looks") {
  constexpr std::size_t kSpan = 64 * kMiB;
  NodePages* pages = Make(Policy::Bind(0));
  void* p = Span(pages, kSpan, 2 * kMiB, /*commit=*/false);
  void* q = Span(pages, 4 * kMiB, 2 * kMiB, /*commit=*/false);
  RereadNodeMemory();
  const std::int64_t before = numarena::NodeMemoryGuard::Unwritten(0);
  REQUIRE(pages->Commit(p, kSpan));
  std::atomic<bool> done{false};
  std::thread looker([&] {
    while (!done.load(std::memory_order_relaxed)) {
      (void)numarena::placement_internal::UnwrittenBytesOnNode(0);
      // prefault looks once per step of up to 64 MiB faulted in; this is far more often.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  for (int round = 0; round < 300; ++round) {
    REQUIRE(pages->Commit(q, 4 * kMiB));
    REQUIRE(pages->Decommit(q, 4 * kMiB));
  }
  done.store(true, std::memory_order_relaxed);
  looker.join();
  RereadNodeMemory();
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) - before == static_cast<std::int64_t>(kSpan));
  CHECK(numarena::placement_internal::UnwrittenBytesOnNode(0) - before ==
        static_cast<std::int64_t>(kSpan));
  REQUIRE(pages->Decommit(p, kSpan));
}

// Each read looks at no more than kScanBytesPerRead of the followed spans; the others keep the
// figure of their last full pass, which is never too small, and every span gets its turn.
TEST_CASE("the free-memory guard's reads share their mincore budget among the spans") {
  const std::size_t span = numarena::NodeMemoryGuard::kScanBytesPerRead / 4 * 3;
  NodePages* pages = Make(Policy::Bind(0));
  void* a = Span(pages, span, 2 * kMiB, /*commit=*/false);
  void* b = Span(pages, span, 2 * kMiB, /*commit=*/false);
  RereadNodeMemory();
  const std::int64_t before = numarena::NodeMemoryGuard::Unwritten(0);
  REQUIRE(pages->Commit(a, span));
  REQUIRE(pages->Commit(b, span));
  const auto both = static_cast<std::int64_t>(2 * span);
  for (int read = 0; read < 4; ++read) {  // counted once each, read after read
    RereadNodeMemory();
    CHECK(numarena::NodeMemoryGuard::Unwritten(0) - before == both);
  }
  std::memset(b, 0x21, 64 * kMiB);
  std::memset(a, 0x22, 32 * kMiB);
  RereadNodeMemory();  // may not have finished a pass over either: too large, never too small
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) - before >= both - std::int64_t{96 << 20});
  RereadNodeMemory();
  RereadNodeMemory();  // three reads cover 3 GiB: both spans looked at in full since the writes
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) - before == both - std::int64_t{96 << 20});
  REQUIRE(pages->Decommit(a, span));
  REQUIRE(pages->Decommit(b, span));
  RereadNodeMemory();
  CHECK(numarena::NodeMemoryGuard::Unwritten(0) == before);
}

// Without that, a span committed and left unwritten was forgotten at the guard's next read
// (every 50 ms), and a second one as large was admitted too: writing both takes the node
// below its reserve, an OOM kill on a full node. Nothing here is written: the spans are
// address space and accounting only.
TEST_CASE("the free-memory guard does not admit a span unwritten so far a second time") {
  numarena::SpanFailure failure;
  numarena::NodeMemoryGuard::Invalidate(0);
  REQUIRE_FALSE(numarena::NodeMemoryGuard::Admit(0, std::size_t{1} << 50, &failure));
  REQUIRE(failure.kind == numarena::SpanFailure::Kind::kNodeFull);
  const std::int64_t room = failure.node_available - failure.margin;
  REQUIRE(room > std::int64_t{64 << 20});
  // Six tenths of the room, twice: the first fits, the second only if the first is forgotten.
  const std::size_t share = (static_cast<std::size_t>(room) / 10 * 6) & ~(2 * kMiB - 1);
  NodePages* pages = Make(Policy::Bind(0));
  void* first = Span(pages, share, 4096, /*commit=*/false);
  void* second = Span(pages, share, 4096, /*commit=*/false);
  numarena::ThreadSpanFailure().Clear();
  REQUIRE(pages->Commit(first, share));

  numarena::NodeMemoryGuard::Invalidate(0);  // as if the refresh interval had passed
  CHECK_FALSE(pages->Commit(second, share));
  REQUIRE(numarena::ThreadSpanFailure().kind == numarena::SpanFailure::Kind::kNodeFull);
  CHECK(numarena::ThreadSpanFailure().node_unwritten >= static_cast<std::int64_t>(share));
  CHECK_THAT(std::string(numarena::ThreadSpanFailure().ToStatus("commit").message()),
             Catch::Contains("has committed there and not written yet"));
  numarena::ThreadSpanFailure().Clear();

  // Decommitted unwritten, the first span's bytes are admitted again, after a read too.
  REQUIRE(pages->Decommit(first, share));
  numarena::NodeMemoryGuard::Invalidate(0);
  CHECK(pages->Commit(second, share));
  CHECK_FALSE(numarena::ThreadSpanFailure().failed());
  REQUIRE(pages->Decommit(second, share));
  numarena::ThreadSpanFailure().Clear();
}

TEST_CASE("a provider knows when a request can never fit its nodes") {
  NodePages* pages = Make(Policy::Bind(0));
  numarena::SpanFailure failure;
  CHECK(pages->CouldEverFit(4096, &failure));
  const std::int64_t total = numarena::NodeMemoryGuard::Total(0);
  if (total <= 0) return;  // meminfo unreadable: nothing to check against
  CHECK(pages->CouldEverFit(static_cast<std::size_t>(total), &failure));
  CHECK_FALSE(failure.failed());
  CHECK_FALSE(pages->CouldEverFit(static_cast<std::size_t>(total) + 1, &failure));
  REQUIRE(failure.kind == numarena::SpanFailure::Kind::kNeverFits);
  auto status = failure.ToStatus("allocate");
  CHECK(status.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(status.message()), Catch::Contains("node 0 has only"));
}
