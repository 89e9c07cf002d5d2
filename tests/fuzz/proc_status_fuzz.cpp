// Fuzz target: the cpuset lines of /proc/self/status (lib/topology/topology_parse.hpp), and
// its kB lines as the page moves read VmLck (os::StatusLineKib, lib/os/os.hpp).
//
// Any input must parse or fail with InvalidArgument; lists found are ascending and unique; a
// kB value is at most 2^54.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "os/os.hpp"
#include "topology/topology_parse.hpp"

namespace {

void CheckList(const std::optional<std::vector<int>>& list) {
  if (!list) return;
  if (std::adjacent_find(list->begin(), list->end(), [](int a, int b) { return a >= b; }) !=
      list->end()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (std::string_view rest = text; !rest.empty();) {
    const std::size_t end = std::min(rest.find('\n'), rest.size());
    const auto kib = numarena::os::StatusLineKib(rest.substr(0, end), "VmLck:");
    if (kib && *kib > (std::uint64_t{1} << 54)) std::abort();
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  auto limits = numarena::parse::ParseProcStatus(text);
  if (!limits.ok()) {
    if (limits.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  CheckList(limits->cpus_allowed);
  CheckList(limits->mems_allowed);
  return 0;
}
