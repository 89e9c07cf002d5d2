// Byte counts and fractions as people read them in budget messages and views:
// "64.0 MiB", "3.50 GiB", "87.5 %".
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"

namespace numarena::budget_internal {

inline std::string FormatBytes(std::uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  // Two literal formats: clang checks StrFormat's format string at compile time.
  if (value < 10) return absl::StrFormat("%.2f %s", value, kUnits[unit]);
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

inline std::string FormatPercent(double fraction) {
  return absl::StrFormat("%.1f %%", fraction * 100.0);
}

}  // namespace numarena::budget_internal
