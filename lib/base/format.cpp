// The one place numbers are formatted for people (see numarena/format.hpp).
#include "numarena/format.hpp"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace numarena {

std::string FormatBytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatPercent(double fraction) { return absl::StrFormat("%.1f%%", fraction * 100); }

std::string FormatIdList(std::span<const int> ids) {
  std::vector<int> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() &&
           static_cast<long>(sorted[j + 1]) == static_cast<long>(sorted[j]) + 1)
      ++j;
    if (!out.empty()) out += ",";
    absl::StrAppend(&out, sorted[i]);
    if (j > i) absl::StrAppend(&out, "-", sorted[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace numarena
