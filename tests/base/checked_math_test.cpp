// Checked size arithmetic (lib/base/checked_math.hpp): exact results where they fit, and
// nothing (never a wrapped value) at the edge of size_t.
#include "base/checked_math.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

using numarena::AddChecked;
using numarena::MulChecked;
using numarena::RangeEndChecked;
using numarena::RoundUpChecked;

namespace {
constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
}  // namespace

TEST_CASE("AddChecked: exact sums, nothing past SIZE_MAX") {
  CHECK(AddChecked(2, 3) == std::size_t{5});
  CHECK(AddChecked(kMax - 1, 1) == kMax);
  CHECK(AddChecked(kMax, 0) == kMax);
  CHECK_FALSE(AddChecked(kMax, 1).has_value());
  CHECK_FALSE(AddChecked(kMax - 4094, 4095).has_value());
  CHECK_FALSE(AddChecked(kMax, kMax).has_value());
}

TEST_CASE("MulChecked: exact products, nothing past SIZE_MAX") {
  CHECK(MulChecked(0, kMax) == std::size_t{0});
  CHECK(MulChecked(kMax, 1) == kMax);
  CHECK(MulChecked(std::size_t{1} << 32, (std::size_t{1} << 32) - 1) ==
        (std::size_t{1} << 32) * ((std::size_t{1} << 32) - 1));
  CHECK_FALSE(MulChecked(std::size_t{1} << 32, std::size_t{1} << 32).has_value());
  CHECK_FALSE(MulChecked(kMax / 3 + 1, 3).has_value());
}

TEST_CASE("RoundUpChecked: multiples stay, others round up, SIZE_MAX-4094 does not wrap to 0") {
  CHECK(RoundUpChecked(0, 4096) == std::size_t{0});
  CHECK(RoundUpChecked(1, 4096) == std::size_t{4096});
  CHECK(RoundUpChecked(4096, 4096) == std::size_t{4096});
  CHECK(RoundUpChecked(4097, 4096) == std::size_t{8192});
  CHECK(RoundUpChecked(10, 3) == std::size_t{12});  // any non-zero step
  CHECK(RoundUpChecked(kMax - 4095, 4096) == kMax - 4095);
  for (std::size_t below = 0; below < 4095; ++below) {
    INFO("SIZE_MAX - " << below);
    CHECK_FALSE(RoundUpChecked(kMax - below, 4096).has_value());
  }
  CHECK_FALSE(RoundUpChecked(5, 0).has_value());
}

TEST_CASE("RangeEndChecked: the end of a range, nothing when it wraps the address space") {
  int object = 0;
  const auto at = reinterpret_cast<std::uintptr_t>(&object);
  CHECK(RangeEndChecked(&object, 0) == at);
  CHECK(RangeEndChecked(&object, 100) == at + 100);
  CHECK(RangeEndChecked(&object, UINTPTR_MAX - at) == UINTPTR_MAX);
  CHECK_FALSE(RangeEndChecked(&object, UINTPTR_MAX - at + 1).has_value());
  CHECK_FALSE(RangeEndChecked(&object, kMax).has_value());
}
