// Pure parsers of the kernel's topology files (see topology_parse.hpp for the formats).
//
// All parsers work on std::string_view without allocating per character, check every
// arithmetic step for overflow, and bound what an ID list can expand to, because their
// input is whatever a file (or a fuzzer) says.
#include "topology/topology_parse.hpp"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/parse_text.hpp"

namespace numarena::parse {
namespace {

using text::Abs;
using text::Decimal;
using text::ForEachPiece;
using text::HexDigits;
using text::Invalid;
using text::IsDigit;
using text::IsSpace;
using text::Quote;
using text::Tokens;
using text::Trim;

// "0x" followed by 1..16 hex digits, at most `max`.
StatusOr<std::uint64_t> ParseHex(std::string_view text, std::uint64_t max, std::string_view what) {
  std::string_view s = Trim(text);
  if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) {
    return Invalid(what, absl::StrCat("expected a hex number like 0x10de, found ", Quote(s)));
  }
  return HexDigits(s.substr(2), max, what);
}

}  // namespace

StatusOr<std::vector<int>> ParseIdList(std::string_view text, std::string_view what, int max_id) {
  std::string_view s = Trim(text);
  std::vector<int> out;
  if (s.empty()) return out;
  if (s.find_first_of(":/") != std::string_view::npos) {
    return Invalid(what, absl::StrCat("the stride form 'A-B:C/D' in ", Quote(s),
                                      " is not supported (the kernel never prints it)"));
  }
  std::vector<bool> present;
  Status error = absl::OkStatus();
  int index = 0;
  ForEachPiece(s, ',', [&](std::string_view raw) {
    if (!error.ok()) return;
    ++index;
    std::string_view element = Trim(raw);
    auto fail = [&](const std::string& why) {
      error = Invalid(what, absl::StrCat("element ", index, " ", Quote(element), ": ", why));
    };
    if (element.empty()) return fail("empty element (stray comma?)");
    std::size_t dash = element.find('-');
    std::string_view first = Trim(element.substr(0, dash));
    std::string_view last = dash == std::string_view::npos ? first : Trim(element.substr(dash + 1));
    if (first.empty()) return fail("missing start of range (negative ids are not allowed)");
    if (last.empty()) return fail("missing end of range");
    auto lo = Decimal(first, static_cast<std::uint64_t>(max_id), "id");
    if (!lo.ok()) return fail(std::string(lo.status().message()));
    auto hi = Decimal(last, static_cast<std::uint64_t>(max_id), "id");
    if (!hi.ok()) return fail(std::string(hi.status().message()));
    if (*lo > *hi) return fail("reversed range (start > end)");
    if (present.size() <= *hi) present.resize(*hi + 1, false);
    for (std::uint64_t id = *lo; id <= *hi; ++id) present[id] = true;
  });
  if (!error.ok()) return error;
  for (std::size_t id = 0; id < present.size(); ++id) {
    if (present[id]) out.push_back(static_cast<int>(id));
  }
  return out;
}

StatusOr<std::vector<int>> ParseCpuList(std::string_view text) {
  return ParseIdList(text, "CPU list");
}

StatusOr<std::vector<int>> ParseNodeList(std::string_view text) {
  return ParseIdList(text, "node list", kMaxNodeId);
}

StatusOr<std::vector<int>> ParseDistanceRow(std::string_view text) {
  std::vector<int> out;
  std::vector<std::string_view> tokens = Tokens(text);
  if (tokens.empty()) return Invalid("distance row", "empty (expected numbers like '10 21')");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    auto value = Decimal(tokens[i], 255, "distance");
    if (!value.ok()) {
      return Invalid("distance row", absl::StrCat("entry ", i + 1, ": ", value.status().message()));
    }
    out.push_back(static_cast<int>(*value));
  }
  return out;
}

StatusOr<NodeMeminfo> ParseNodeMeminfo(std::string_view text) {
  NodeMeminfo info;
  std::optional<std::uint64_t> total, free, used, active_file, inactive_file;
  Status error = absl::OkStatus();
  int line_number = 0;
  ForEachPiece(text, '\n', [&](std::string_view raw) {
    ++line_number;
    if (!error.ok()) return;
    std::string_view line = Trim(raw);
    if (line.empty()) return;
    auto fail = [&](const std::string& why) {
      error =
          Invalid("node meminfo", absl::StrCat("line ", line_number, " ", Quote(line), ": ", why));
    };
    std::vector<std::string_view> t = Tokens(line);
    if (t.size() < 4 || t.size() > 5 || t[0] != "Node" || t[2].size() < 2 || t[2].back() != ':') {
      return fail("expected 'Node <id> <Key>: <value> [kB]'");
    }
    auto node = Decimal(t[1], kMaxListId, "node id");
    if (!node.ok()) return fail(std::string(node.status().message()));
    if (info.node >= 0 && info.node != static_cast<int>(*node)) {
      return fail(
          absl::StrCat("node id ", *node, " differs from ", info.node, " on earlier lines"));
    }
    info.node = static_cast<int>(*node);
    auto value = Decimal(t[3], std::numeric_limits<std::uint64_t>::max(), "value");
    if (!value.ok()) return fail(std::string(value.status().message()));
    bool kilobytes = t.size() == 5;
    if (kilobytes && t[4] != "kB") return fail(absl::StrCat("unknown unit ", Quote(t[4])));
    std::string_view key = t[2].substr(0, t[2].size() - 1);
    std::optional<std::uint64_t>* slot = key == "MemTotal"         ? &total
                                         : key == "MemFree"        ? &free
                                         : key == "MemUsed"        ? &used
                                         : key == "Active(file)"   ? &active_file
                                         : key == "Inactive(file)" ? &inactive_file
                                                                   : nullptr;
    if (slot == nullptr) return;  // other counters are not needed
    if (!kilobytes) return fail("expected a value in kB");
    if (*value > std::numeric_limits<std::uint64_t>::max() / 1024) {
      return fail("value overflows 64 bits in bytes");
    }
    if (slot->has_value()) return fail(absl::StrCat(Abs(key), " appears twice"));
    *slot = *value * 1024;
  });
  if (!error.ok()) return error;
  if (!total) return Invalid("node meminfo", "no 'MemTotal:' line");
  if (!free) return Invalid("node meminfo", "no 'MemFree:' line");
  if (*free > *total) {
    return Invalid("node meminfo", absl::StrCat("MemFree (", *free / 1024,
                                                " kB) exceeds MemTotal (", *total / 1024, " kB)"));
  }
  info.total_bytes = *total;
  info.free_bytes = *free;
  info.used_bytes = used ? *used : *total - *free;
  // Each is below 2^54 (kB values that fit 64 bits in bytes): the sum cannot wrap.
  info.reclaimable_bytes = active_file.value_or(0) + inactive_file.value_or(0);
  return info;
}

StatusOr<ProcStatusLimits> ParseProcStatus(std::string_view text) {
  ProcStatusLimits limits;
  Status error = absl::OkStatus();
  ForEachPiece(text, '\n', [&](std::string_view line) {
    if (!error.ok()) return;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return;
    std::string_view key = line.substr(0, colon);
    std::optional<std::vector<int>>* slot = key == "Cpus_allowed_list"   ? &limits.cpus_allowed
                                            : key == "Mems_allowed_list" ? &limits.mems_allowed
                                                                         : nullptr;
    if (slot == nullptr) return;
    if (slot->has_value()) {
      error = Invalid("process status", absl::StrCat(Abs(key), " appears twice"));
      return;
    }
    auto list = ParseIdList(line.substr(colon + 1), key);
    if (!list.ok()) {
      error = Invalid("process status", std::string(list.status().message()));
      return;
    }
    *slot = *std::move(list);
  });
  if (!error.ok()) return error;
  return limits;
}

StatusOr<CgroupPaths> ParseProcCgroup(std::string_view text) {
  CgroupPaths paths;
  Status error = absl::OkStatus();
  int line_number = 0;
  ForEachPiece(text, '\n', [&](std::string_view raw) {
    ++line_number;
    if (!error.ok()) return;
    std::string_view line = raw;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (Trim(line).empty()) return;
    auto fail = [&](const std::string& why) {
      error = Invalid("process cgroup",
                      absl::StrCat("line ", line_number, " ", Quote(line), ": ", why));
    };
    std::size_t first = line.find(':');
    std::size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) return fail("expected 'hierarchy:controllers:path'");
    auto hierarchy =
        Decimal(line.substr(0, first), std::numeric_limits<std::uint32_t>::max(), "hierarchy id");
    if (!hierarchy.ok()) return fail(std::string(hierarchy.status().message()));
    std::string_view controllers = line.substr(first + 1, second - first - 1);
    std::string_view path = line.substr(second + 1);  // may itself contain ':'
    if (path.empty() || path.front() != '/') return fail("the cgroup path must start with '/'");
    bool escapes = false;
    ForEachPiece(path, '/', [&](std::string_view component) { escapes |= component == ".."; });
    if (escapes) return fail("the cgroup path must not contain '..'");
    bool has_cpuset = false;
    ForEachPiece(controllers, ',', [&](std::string_view c) { has_cpuset |= c == "cpuset"; });
    if (*hierarchy == 0 && controllers.empty()) {
      paths.unified = std::string(path);
    } else if (has_cpuset) {
      paths.cpuset_v1 = std::string(path);
    }
  });
  if (!error.ok()) return error;
  return paths;
}

StatusOr<std::uint32_t> ParsePciClass(std::string_view text) {
  auto value = ParseHex(text, 0xffffff, "PCI class");
  if (!value.ok()) return value.status();
  return static_cast<std::uint32_t>(*value);
}

StatusOr<std::uint16_t> ParseHexId(std::string_view text) {
  auto value = ParseHex(text, 0xffff, "PCI id");
  if (!value.ok()) return value.status();
  return static_cast<std::uint16_t>(*value);
}

StatusOr<std::optional<int>> ParseNumaNode(std::string_view text) {
  std::string_view s = Trim(text);
  if (s == "-1") return std::optional<int>();
  if (!s.empty() && s.front() == '-') {
    return Invalid("numa_node", absl::StrCat(Quote(s), ": the only negative value allowed is -1"));
  }
  auto value = Decimal(s, kMaxListId, "numa_node");
  if (!value.ok()) return value.status();
  return std::optional<int>(static_cast<int>(*value));
}

StatusOr<std::uint64_t> ParseDecimalU64(std::string_view text) {
  return Decimal(Trim(text), std::numeric_limits<std::uint64_t>::max(), "value");
}

std::optional<int> ParseNodeEntryName(std::string_view name) {
  if (name.size() < 5 || name.substr(0, 4) != "node") return std::nullopt;
  auto id = Decimal(name.substr(4), kMaxListId, "node");
  if (!id.ok()) return std::nullopt;
  return static_cast<int>(*id);
}

std::optional<std::uint64_t> ParseHugePageDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "hugepages-", kSuffix = "kB";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.substr(0, kPrefix.size()) != kPrefix ||
      name.substr(name.size() - kSuffix.size()) != kSuffix) {
    return std::nullopt;
  }
  std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  auto kb = Decimal(digits, SIZE_MAX >> 10, "page size");
  // In bytes it must fit a size_t (kB << 10), and page sizes are powers of two.
  if (!kb.ok() || *kb == 0 || *kb > (SIZE_MAX >> 10) || (*kb & (*kb - 1)) != 0) return std::nullopt;
  return *kb;
}

StatusOr<unsigned> ParseInterleaveWeight(std::string_view text) {
  auto weight = Decimal(Trim(text), 255, "interleave weight");
  if (!weight.ok()) return weight.status();
  return static_cast<unsigned>(*weight);
}

StatusOr<bool> ParseSysfsBool(std::string_view text) {
  std::string_view s = Trim(text);
  if (s == "true" || s == "1" || s == "Y") return true;
  if (s == "false" || s == "0" || s == "N") return false;
  return Invalid("boolean", absl::StrCat("expected true or false, found ", Quote(s)));
}

std::optional<int> ParseMemoryTierName(std::string_view name) {
  constexpr std::string_view kPrefix = "memory_tier";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) {
    return std::nullopt;
  }
  auto id = Decimal(name.substr(kPrefix.size()), kMaxListId, "memory tier");
  if (!id.ok()) return std::nullopt;
  return static_cast<int>(*id);
}

}  // namespace numarena::parse
