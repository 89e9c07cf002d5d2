// Arenas at the edges of their contracts: every small size with every alignment (jemalloc's
// 8-byte class is only 8-aligned), sized frees that name the class the object came from,
// sizes near SIZE_MAX, a thread priority that is not a Priority, and failed oversized
// allocations that must neither keep address space nor lose their reason.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "limit_gate.hpp"
#include "numarena/arena.hpp"
#include "numarena/capacity.hpp"

namespace {

using numarena_test::GateScope;
using numarena_test::LimitGate;

using numarena::Arena;
using numarena::Policy;
using numarena::Priority;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

Arena* Get(const Policy& policy) {
  auto arena = Arena::ForPolicy(policy);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  return *arena;
}

bool Aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// A "<key> <number> kB" line of a /proc or /sys text file, in bytes; -1 when absent.
long long KilobyteField(const std::string& path, const std::string& key) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    std::size_t at = line.find(key);
    if (at != std::string::npos) return std::stoll(line.substr(at + key.size())) * 1024;
  }
  return -1;
}

long long VmSize() { return KilobyteField("/proc/self/status", "VmSize:"); }

std::vector<std::size_t> PowersOfTwoUpTo(std::size_t limit) {
  std::vector<std::size_t> out;
  for (std::size_t a = 1; a <= limit; a <<= 1) out.push_back(a);
  return out;
}

}  // namespace

// Objects held at once per (size, alignment): a freed object comes straight back from the
// LIFO caches, so one at a time would test a single address; 16 live ones are consecutive
// regions of a slab, half of them 8-aligned only if the class is.
constexpr int kLive = 16;

TEST_CASE("every size from 1 to 4160 B with every alignment up to 4 KiB is aligned") {
  Arena* arena = Get(Policy::Bind(0));
  std::size_t failures = 0;
  void* live[kLive];
  for (std::size_t alignment : PowersOfTwoUpTo(4096)) {
    for (std::size_t size = 1; size <= 4160; ++size) {
      for (void*& p : live) {
        p = arena->allocate(size, alignment);
        REQUIRE(p != nullptr);
        if (!Aligned(p, alignment) || numarena::usable_size(p) < size) {
          if (++failures <= 5) {
            FAIL_CHECK("allocate(" << size << ", " << alignment << ") = " << p << ", usable "
                                   << numarena::usable_size(p));
          }
        }
        std::memset(p, 0x3c, size);
      }
      for (void* p : live) arena->deallocate(p, size, alignment);
    }
  }
  CHECK(failures == 0);
  // The default alignment is alignof(max_align_t): the sizes of jemalloc's 8-byte class too.
  for (std::size_t size = 0; size <= 8; ++size) {
    for (void*& p : live) {
      p = arena->allocate(size);
      REQUIRE(p != nullptr);
      CHECK(Aligned(p, alignof(std::max_align_t)));
    }
    for (void* p : live) arena->deallocate(p, size);
  }
}

TEST_CASE("a sized free of a small request goes back to the class it was served from") {
  Arena* arena = Get(Policy::Bind(0));
  numarena::deallocate(arena->allocate(16));  // this thread's caches exist from here
  for (std::size_t size = 1; size <= 8; ++size) {
    INFO("size " << size);
    void* p = arena->allocate(size);  // alignment 16: the 16-byte class
    REQUIRE(p != nullptr);
    CHECK(numarena::usable_size(p) == 16);
    numarena::deallocate(p, size);
    // An 8-aligned 8-byte request must not get it (that would be the 8-byte list) ...
    void* small = arena->allocate(8, 8);
    CHECK(small != p);
    // ... a 16-byte request must (the list it went back to; the front cache is LIFO).
    void* same = arena->allocate(16);
    CHECK(same == p);
    numarena::deallocate(small, 8, 8);
    numarena::deallocate(same, 16);
  }
}

TEST_CASE("sizes near SIZE_MAX are refused, never served") {
  Arena* arena = Get(Policy::Bind(0));
  for (std::size_t size : {kMax, kMax - 4094, kMax - 4095, kMax - (std::size_t{2} << 20),
                           (std::size_t{1} << 62) + 1, std::size_t{1} << 62}) {
    for (std::size_t alignment :
         {std::size_t{8}, std::size_t{16}, std::size_t{4096}, std::size_t{2} << 20}) {
      INFO("size " << size << " alignment " << alignment);
      auto result = arena->try_allocate(size, alignment);
      REQUIRE_FALSE(result.ok());
      CHECK((result.status().code() == absl::StatusCode::kInvalidArgument ||
             result.status().code() == absl::StatusCode::kResourceExhausted));
      CHECK(arena->allocate(size, alignment) == nullptr);
    }
  }
  // An alignment beyond any address space, with a small size.
  auto huge_alignment = arena->try_allocate(64, std::size_t{1} << 62);
  CHECK_FALSE(huge_alignment.ok());
  // The arena still works.
  void* p = arena->allocate(100);
  REQUIRE(p != nullptr);
  numarena::deallocate(p);
}

TEST_CASE("a thread priority outside the enum is refused with InvalidArgument, not stored") {
  // An arena no other test commits through: its first large allocation must commit.
  Arena* arena = Get(Policy::Bind(0, numarena::BindMode::kAdvisory));
  numarena::PriorityScope bogus(static_cast<Priority>(7));
  auto result = arena->try_allocate(64 * kMiB);
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(result.status().message()), Catch::Contains("priority is 7"));
}

TEST_CASE("a request larger than the node is refused up front without reserving address space") {
  const long long total = KilobyteField("/sys/devices/system/node/node0/meminfo", "MemTotal:");
  REQUIRE(total > 0);  // the host's node 0 meminfo
  Arena* arena = Get(Policy::Bind(0));
  const long long before = VmSize();
  const auto size = static_cast<std::size_t>(total) * 2;
  for (int i = 0; i < 100; ++i) {
    auto result = arena->try_allocate(size);
    REQUIRE_FALSE(result.ok());
    CHECK(result.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(std::string(result.status().message()), Catch::Contains("can never be placed"));
  }
  CHECK(VmSize() - before < static_cast<long long>(64 * kMiB));
}

TEST_CASE("a small request aligned beyond the node is refused without reserving address space") {
  // jemalloc reserves about size + alignment for an aligned request, so an alignment larger
  // than the node is refused up front like a size larger than it; a hundred of them, of
  // alignments from 2x the node to 2^47, leave the address space as it was.
  const long long total = KilobyteField("/sys/devices/system/node/node0/meminfo", "MemTotal:");
  REQUIRE(total > 0);  // the host's node 0 meminfo
  const auto node_bytes = static_cast<std::size_t>(total) * 1024;
  std::size_t smallest = std::size_t{1} << (64 - __builtin_clzll(node_bytes));  // > the node
  Arena* arena = Get(Policy::Bind(0));
  numarena::deallocate(arena->allocate(4096));
  const long long before = VmSize();
  for (int i = 0; i < 100; ++i) {
    const std::size_t alignment = std::min(smallest << (i % 8), std::size_t{1} << 47);
    auto result = arena->try_allocate(64, alignment);
    REQUIRE_FALSE(result.ok());
    CHECK(result.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(std::string(result.status().message()), Catch::Contains("can never be placed"));
    CHECK_THAT(std::string(result.status().message()), Catch::Contains("aligned to"));
  }
  CHECK(VmSize() - before < static_cast<long long>(64 * kMiB));
  // An alignment that overflows size + alignment is refused the same way.
  auto overflow = arena->try_allocate(SIZE_MAX / 2 + 1, std::size_t{1} << 63);
  REQUIRE_FALSE(overflow.ok());
  CHECK(VmSize() - before < static_cast<long long>(64 * kMiB));
  // An alignment the node can hold still works.
  void* p = arena->allocate(64, 64 * kMiB);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % (64 * kMiB) == 0);
  numarena::deallocate(p);
}

TEST_CASE("100 refused large allocations keep their reason and no address space") {
  const long long total = KilobyteField("/sys/devices/system/node/node0/meminfo", "MemTotal:");
  REQUIRE(total > 0);  // the host's node 0 meminfo
  // Half the node: a request that could succeed some day, refused now by the gate (or by the
  // node's free memory). Before the fix each refusal left jemalloc a span of this size for
  // good, so 100 of them took 100 x 64 GiB ranges' worth and then "ranges exhausted".
  const std::size_t size = static_cast<std::size_t>(total) / 2 / kMiB * kMiB;
  Arena* arena = Get(Policy::Bind(0));
  numarena::deallocate(arena->allocate(4096));  // caches and shard exist before the gate
  LimitGate gate(size / 4);
  GateScope scope(&gate);

  auto kind_of = [](const numarena::Status& s) -> std::string {
    std::string message(s.message());
    if (message.find("address ranges") != std::string::npos) return "address ranges";
    if (message.find("limit gate") != std::string::npos) return "gate";
    if (message.find("cannot take") != std::string::npos) return "node full";
    return message;
  };
  auto first = arena->try_allocate(size);
  REQUIRE_FALSE(first.ok());
  const std::string reason = kind_of(first.status());
  INFO(first.status().ToString());
  REQUIRE((reason == "gate" || reason == "node full"));
  const long long vm_after_first = VmSize();
  const numarena::ArenaStats stats_after_first = arena->stats();

  for (int i = 0; i < 100; ++i) {
    auto again = arena->try_allocate(size);
    REQUIRE_FALSE(again.ok());
    CHECK(again.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(kind_of(again.status()) == reason);
  }
  const numarena::ArenaStats stats = arena->stats();
  CHECK(VmSize() - vm_after_first < static_cast<long long>(64 * kMiB));
  CHECK(stats.retained + stats.mapped <=
        stats_after_first.retained + stats_after_first.mapped + 64 * kMiB);

  // The address space jemalloc kept from the first refusal serves a later request.
  gate.set_limit(kMax);
  void* p = arena->allocate(64 * kMiB);
  REQUIRE(p != nullptr);
  CHECK(VmSize() - vm_after_first < static_cast<long long>(64 * kMiB));
  numarena::deallocate(p);
  arena->purge();
}
