// The OS layer's range calls at the edges: reservations whose padding would overflow,
// RangeIsMapped over ranges far larger than memory (in fixed memory) or wrapping the
// address space, and NextMappingStart, which lets callers step over holes.
#include <sys/mman.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "os/os.hpp"

namespace numarena::os {
namespace {

constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
constexpr std::size_t kGiB = std::size_t{1} << 30;

}  // namespace

TEST_CASE("reservations refuse sizes whose alignment padding overflows, and zero bytes") {
  for (std::size_t bytes : {kMax, kMax - 4095, kMax - (std::size_t{2} << 20) + 1}) {
    INFO("bytes " << bytes);
    auto reserved = ReserveAddressSpace(bytes, std::size_t{2} << 20);
    REQUIRE_FALSE(reserved.ok());
    CHECK(reserved.status().code() == absl::StatusCode::kResourceExhausted);
    void* out = nullptr;
    CHECK(ReserveAddressSpaceNoAlloc(bytes, std::size_t{2} << 20, &out) == ENOMEM);
    auto mapped = MapAnonymous(bytes, std::size_t{2} << 20);
    CHECK_FALSE(mapped.ok());
  }
  CHECK(ReserveAddressSpace(0, 4096).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReserveAddressSpace(4096, 3 * 4096).status().code() == absl::StatusCode::kInvalidArgument);
  auto fine = ReserveAddressSpace(4096, std::size_t{2} << 20);
  REQUIRE(fine.ok());
  CHECK(reinterpret_cast<std::uintptr_t>(*fine) % (std::size_t{2} << 20) == 0);
  Unmap(*fine, 4096);
}

TEST_CASE("RangeIsMapped: 64 GiB in fixed memory, holes, and ranges that wrap") {
  const std::size_t bytes = 64 * kGiB;
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  auto* base = static_cast<char*>(p);
  auto whole = RangeIsMapped(base, bytes);
  REQUIRE(whole.ok());
  CHECK(*whole);
  // A hole in the last batch of the range.
  REQUIRE(::munmap(base + bytes - 2 * PageSize(), PageSize()) == 0);
  auto holed = RangeIsMapped(base, bytes);
  REQUIRE(holed.ok());
  CHECK_FALSE(*holed);
  auto before_hole = RangeIsMapped(base, bytes - 2 * PageSize());
  REQUIRE(before_hole.ok());
  CHECK(*before_hole);
  ::munmap(base, bytes);

  int object = 0;
  auto wraps = RangeIsMapped(&object, kMax);
  REQUIRE(wraps.ok());
  CHECK_FALSE(*wraps);
  auto empty = RangeIsMapped(&object, 0);
  REQUIRE(empty.ok());
  CHECK(*empty);
}

TEST_CASE("NextMappingStart finds the mapping after a hole") {
  const std::size_t page = PageSize();
  void* p =
      ::mmap(nullptr, 3 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  REQUIRE(::munmap(p, 2 * page) == 0);  // hole [base, base + 2 pages), mapped after it
  auto inside = NextMappingStart(base + 2 * page);
  REQUIRE(inside.ok());
  CHECK(*inside == base + 2 * page);
  // Something else may have been mapped into the hole meanwhile; nothing above base + 2 pages
  // can come first.
  auto after_hole = NextMappingStart(base);
  REQUIRE(after_hole.ok());
  CHECK(*after_hole >= base);
  CHECK(*after_hole <= base + 2 * page);
  auto top = NextMappingStart(UINTPTR_MAX - page);
  REQUIRE(top.ok());
  CHECK(*top == UINTPTR_MAX);  // nothing is mapped at the very top of a user address space
  ::munmap(reinterpret_cast<void*>(base + 2 * page), page);
}

TEST_CASE("PopulateWrite on a range it cannot write is an error, not a SIGSEGV") {
  const std::size_t bytes = 16 * PageSize();
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  Status populated = PopulateWrite(p, bytes);
  CHECK_FALSE(populated.ok());
  ::munmap(p, bytes);
}

}  // namespace numarena::os
