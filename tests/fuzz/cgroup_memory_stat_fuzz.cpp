// Fuzz target: a cgroup v2 memory.stat (lib/budget/budget_system.hpp, ParseCgroupInactiveFile).
//
// Any input must parse or fail with DataLoss, with a message of bounded length that names the
// file (the input is quoted, shortened, never copied whole). A value found came from a line
// that reads "inactive_file" followed by that number.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "budget/budget_system.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string path = "/sys/fs/cgroup/fuzz/memory.stat";
  auto found = numarena::budget_internal::ParseCgroupInactiveFile(text, path);
  if (!found.ok()) {
    if (found.status().code() != absl::StatusCode::kDataLoss) std::abort();
    const auto message = found.status().message();
    if (message.size() > 400 || message.find(path) == absl::string_view::npos) std::abort();
    return 0;
  }
  if (*found) {
    const std::string digits = std::to_string(**found);
    if (text.find("inactive_file") == std::string_view::npos ||
        text.find(digits) == std::string_view::npos) {
      std::abort();
    }
  }
  return 0;
}
