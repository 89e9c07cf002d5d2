// Checked size arithmetic: every size numarena computes from a caller's number goes through
// these, so a request near SIZE_MAX is refused instead of wrapping to a small size (a
// "successful" 0-page mapping, a loop that never ends, a pointer into someone else's memory).
//
// Each returns std::nullopt when the exact result does not fit in std::size_t. They never
// allocate, so jemalloc's extent hooks may use them.
//
//   std::optional<std::size_t> mapped = RoundUpChecked(bytes, page);
//   if (!mapped) return absl::InvalidArgumentError("... does not fit in the address space");
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace numarena {

// a + b.
[[nodiscard]] inline std::optional<std::size_t> AddChecked(std::size_t a, std::size_t b) {
  std::size_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// a * b.
[[nodiscard]] inline std::optional<std::size_t> MulChecked(std::size_t a, std::size_t b) {
  std::size_t product;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// `value` rounded up to a multiple of `to` (any non-zero value; a power of two is cheapest).
// std::nullopt when `to` is 0 or the result does not fit.
[[nodiscard]] inline std::optional<std::size_t> RoundUpChecked(std::size_t value, std::size_t to) {
  if (to == 0) return std::nullopt;
  const std::size_t remainder = value % to;
  if (remainder == 0) return value;
  return AddChecked(value, to - remainder);
}

// The end of [begin, begin + bytes) as an address; std::nullopt when the range wraps past
// the top of the address space.
[[nodiscard]] inline std::optional<std::uintptr_t> RangeEndChecked(const void* begin,
                                                                   std::size_t bytes) {
  std::uintptr_t end;
  if (__builtin_add_overflow(reinterpret_cast<std::uintptr_t>(begin), bytes, &end)) {
    return std::nullopt;
  }
  return end;
}

}  // namespace numarena
