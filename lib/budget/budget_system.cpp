// Reading a node's memory figures and the process's cgroup memory limit (see
// budget_system.hpp).
#include "budget/budget_system.hpp"

#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/parse_text.hpp"
#include "topology/topology_parse.hpp"
#include "topology/zoneinfo_parse.hpp"

namespace numarena::budget_internal {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<std::uint64_t> ParseUnsigned(std::string_view s) {
  s = Trim(s);
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// One "memory.max" or "memory.current" value: a byte count, or "max" (nullopt in *value).
Status ParseCgroupValue(std::string_view text, const std::string& display_path, bool allow_max,
                        std::optional<std::uint64_t>* value) {
  std::string_view t = Trim(text);
  if (allow_max && t == "max") {
    *value = std::nullopt;
    return absl::OkStatus();
  }
  auto parsed = ParseUnsigned(t);
  if (!parsed) {
    return absl::DataLossError(absl::StrCat(display_path, ": expected a byte count",
                                            allow_max ? " or 'max'" : "", ", found '",
                                            AsAbsl(t.substr(0, 40)), "'"));
  }
  *value = *parsed;
  return absl::OkStatus();
}

}  // namespace

StatusOr<NodeMemory> ParseNodeMeminfo(std::string_view text, const std::string& display_path) {
  auto meminfo = parse::ParseNodeMeminfo(text);
  if (!meminfo.ok()) {
    return absl::DataLossError(absl::StrCat(display_path, ": ", meminfo.status().message()));
  }
  if (meminfo->inactive_file_bytes > meminfo->total_bytes - meminfo->free_bytes) {
    return absl::DataLossError(absl::StrCat(
        display_path, ": Inactive(file) ", meminfo->inactive_file_bytes,
        " exceeds the used memory MemTotal - MemFree ",
        meminfo->total_bytes - meminfo->free_bytes));
  }
  return NodeMemory{meminfo->total_bytes, meminfo->free_bytes, meminfo->inactive_file_bytes};
}

StatusOr<std::optional<std::uint64_t>> ParseCgroupInactiveFile(std::string_view text,
                                                                const std::string& display_path) {
  std::optional<std::uint64_t> found;
  for (absl::string_view line : absl::StrSplit(AsAbsl(text), '\n')) {
    // "inactive_file 123456789"
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.empty() || words[0] != "inactive_file") continue;
    std::optional<std::uint64_t> value;
    if (words.size() == 2) {
      value = ParseUnsigned(std::string_view(words[1].data(), words[1].size()));
    }
    if (!value) {
      return absl::DataLossError(
          absl::StrCat(display_path, ": malformed line ",
                       parse::text::Quote(std::string_view(line.data(), line.size())),
                       " (expected 'inactive_file <bytes>')"));
    }
    if (found) {
      return absl::DataLossError(absl::StrCat(display_path, ": two inactive_file lines"));
    }
    found = value;
  }
  return found;
}

StatusOr<NodeMemory> ReadNodeMemory(const SystemReader& reader, int node) {
  std::string path = absl::StrCat("/sys/devices/system/node/node", node, "/meminfo");
  auto text = reader.Read(path);
  if (!text.ok()) return text.status();
  return ParseNodeMeminfo(*text, reader.DisplayPath(path));
}

StatusOr<std::vector<std::uint64_t>> ReadPerCpuFreeBytes(const SystemReader& reader,
                                                          const std::vector<int>& node_ids,
                                                          std::uint64_t page_bytes) {
  std::vector<std::uint64_t> bytes(node_ids.size(), 0);
  auto text = reader.Read("/proc/zoneinfo");
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) return bytes;
    return text.status();
  }
  int highest = 0;
  for (int id : node_ids) highest = std::max(highest, id);
  std::vector<parse::ZoneinfoNode> zones(static_cast<std::size_t>(highest) + 1);
  if (Status s = parse::ParseZoneinfo(*text, zones); !s.ok()) {
    return absl::DataLossError(
        absl::StrCat(reader.DisplayPath("/proc/zoneinfo"), ": ", std::string(s.message())));
  }
  for (std::size_t i = 0; i < node_ids.size(); ++i) {
    const std::uint64_t pages = zones[static_cast<std::size_t>(node_ids[i])].pcp_pages;
    bytes[i] = pages > UINT64_MAX / page_bytes ? UINT64_MAX : pages * page_bytes;
  }
  return bytes;
}

StatusOr<CgroupMemory> ReadCgroupMemory(const SystemReader& reader) {
  CgroupMemory result;
  auto self = reader.Read("/proc/self/cgroup");
  if (!self.ok()) {
    if (absl::IsNotFound(self.status())) return result;
    return self.status();
  }
  // cgroup v2 has one line "0::/path"; v1 hierarchies (other ids) do not limit here.
  std::optional<std::string> cgroup;
  for (absl::string_view line : absl::StrSplit(*self, '\n')) {
    if (line.substr(0, 3) == "0::") cgroup = std::string(line.substr(3));
  }
  if (!cgroup) return result;
  if (cgroup->empty() || cgroup->front() != '/' || cgroup->find("/..") != std::string::npos) {
    return absl::DataLossError(absl::StrCat(reader.DisplayPath("/proc/self/cgroup"),
                                            ": malformed cgroup v2 path '", *cgroup, "'"));
  }
  result.cgroup = *cgroup;
  // From the process's cgroup up to the root: the tightest memory.max wins.
  std::string dir = *cgroup;
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  for (;;) {
    std::string base = absl::StrCat("/sys/fs/cgroup", dir);
    auto max_text = reader.Read(base + "/memory.max");
    if (max_text.ok()) {
      std::optional<std::uint64_t> max;
      Status s = ParseCgroupValue(*max_text, reader.DisplayPath(base + "/memory.max"), true, &max);
      if (!s.ok()) return s;
      if (max && (!result.limit || *max < *result.limit)) {
        result.limit = max;
        result.current.reset();
        auto current_text = reader.Read(base + "/memory.current");
        if (current_text.ok()) {
          s = ParseCgroupValue(*current_text, reader.DisplayPath(base + "/memory.current"), false,
                               &result.current);
          if (!s.ok()) return s;
        } else if (!absl::IsNotFound(current_text.status())) {
          return current_text.status();
        }
        result.inactive_file.reset();
        auto stat_text = reader.Read(base + "/memory.stat");
        if (stat_text.ok()) {
          auto inactive =
              ParseCgroupInactiveFile(*stat_text, reader.DisplayPath(base + "/memory.stat"));
          if (!inactive.ok()) return inactive.status();
          result.inactive_file = *inactive;
        } else if (!absl::IsNotFound(stat_text.status())) {
          return stat_text.status();
        }
      }
    } else if (!absl::IsNotFound(max_text.status())) {
      return max_text.status();
    }
    if (dir.empty()) break;
    dir.resize(dir.rfind('/'));
  }
  return result;
}

}  // namespace numarena::budget_internal
