// Fuzz target: /proc/self/cgroup (lib/topology/topology_parse.hpp).
//
// Any input must parse or fail with InvalidArgument. Paths found are absolute and have no
// ".." component, so joining them to the cgroup mount can never leave it.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "topology/topology_parse.hpp"

namespace {

void CheckPath(const std::optional<std::string>& path) {
  if (!path) return;
  if (path->empty() || path->front() != '/') std::abort();
  std::string_view rest(*path);
  while (!rest.empty()) {
    std::size_t slash = rest.find('/');
    std::string_view component = rest.substr(0, slash);
    if (component == "..") std::abort();
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto paths = numarena::parse::ParseProcCgroup(text);
  if (!paths.ok()) {
    if (paths.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  CheckPath(paths->unified);
  CheckPath(paths->cpuset_v1);
  return 0;
}
