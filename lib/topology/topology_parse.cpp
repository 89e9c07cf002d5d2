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
using text::DecimalNoAlloc;
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

bool NodeMeminfoParser::Fail(Problem problem, std::string_view line,
                             std::string_view token) noexcept {
  problem_ = problem;
  problem_line_number_ = line_number_;
  problem_line_ = line;
  problem_token_ = token;
  return false;
}

bool NodeMeminfoParser::Feed(std::string_view raw) noexcept {
  ++line_number_;
  if (problem_ != Problem::kNone) return false;
  const std::string_view line = Trim(raw);
  if (line.empty()) return true;
  // "Node <id> <Key>: <value> [kB]": 4 or 5 tokens.
  std::string_view t[6];
  std::size_t count = 0;
  for (std::size_t i = 0; i < line.size() && count < 6;) {
    while (i < line.size() && IsSpace(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !IsSpace(line[i])) ++i;
    if (i > start) t[count++] = line.substr(start, i - start);
  }
  if (count < 4 || count > 5 || t[0] != "Node" || t[2].size() < 2 || t[2].back() != ':') {
    return Fail(Problem::kShape, line, {});
  }
  std::uint64_t node = 0;
  if (!DecimalNoAlloc(t[1], kMaxListId, &node)) return Fail(Problem::kNodeId, line, t[1]);
  if (info_.node >= 0 && info_.node != static_cast<int>(node)) {
    earlier_node_ = info_.node;
    return Fail(Problem::kNodeDiffers, line, t[1]);
  }
  info_.node = static_cast<int>(node);
  std::uint64_t value = 0;
  if (!DecimalNoAlloc(t[3], std::numeric_limits<std::uint64_t>::max(), &value)) {
    return Fail(Problem::kValue, line, t[3]);
  }
  const bool kilobytes = count == 5;
  if (kilobytes && t[4] != "kB") return Fail(Problem::kUnit, line, t[4]);
  const std::string_view key = t[2].substr(0, t[2].size() - 1);
  bool* seen = nullptr;
  std::uint64_t* bytes = nullptr;
  if (key == "MemTotal") {
    seen = &total_, bytes = &info_.total_bytes;
  } else if (key == "MemFree") {
    seen = &free_, bytes = &info_.free_bytes;
  } else if (key == "MemUsed") {
    seen = &used_, bytes = &info_.used_bytes;
  } else if (key == "Active(file)") {
    seen = &active_file_, bytes = &active_file_bytes_;
  } else if (key == "Inactive(file)") {
    seen = &inactive_file_, bytes = &info_.inactive_file_bytes;
  } else {
    return true;  // other counters are not needed
  }
  if (!kilobytes) return Fail(Problem::kNotKilobytes, line, key);
  if (value > std::numeric_limits<std::uint64_t>::max() / 1024) {
    return Fail(Problem::kOverflow, line, t[3]);
  }
  if (*seen) return Fail(Problem::kTwice, line, key);
  *seen = true;
  *bytes = value * 1024;
  return true;
}

bool NodeMeminfoParser::Finish() noexcept {
  if (problem_ != Problem::kNone) return false;
  line_number_ = 0;
  if (!total_) return Fail(Problem::kNoTotal, {}, {});
  if (!free_) return Fail(Problem::kNoFree, {}, {});
  if (info_.free_bytes > info_.total_bytes) return Fail(Problem::kFreeAboveTotal, {}, {});
  if (!used_) info_.used_bytes = info_.total_bytes - info_.free_bytes;
  // Each is below 2^54 (kB values that fit 64 bits in bytes): the sum cannot wrap.
  info_.reclaimable_bytes = active_file_bytes_ + info_.inactive_file_bytes;
  return true;
}

StatusOr<NodeMeminfo> ParseNodeMeminfo(std::string_view text) {
  NodeMeminfoParser parser;
  ForEachPiece(text, '\n', [&](std::string_view line) { parser.Feed(line); });
  if (parser.Finish()) return parser.info();
  using Problem = NodeMeminfoParser::Problem;
  const std::string token(parser.problem_token());
  std::string why;
  switch (parser.problem()) {
    case Problem::kNone:
      break;
    case Problem::kShape:
      why = "expected 'Node <id> <Key>: <value> [kB]'";
      break;
    case Problem::kNodeId:
      why = std::string(Decimal(token, kMaxListId, "node id").status().message());
      break;
    case Problem::kNodeDiffers:
      why = absl::StrCat("node id ", token, " differs from ", parser.earlier_node(),
                         " on earlier lines");
      break;
    case Problem::kValue:
      why = std::string(
          Decimal(token, std::numeric_limits<std::uint64_t>::max(), "value").status().message());
      break;
    case Problem::kUnit:
      why = absl::StrCat("unknown unit ", Quote(token));
      break;
    case Problem::kNotKilobytes:
      why = "expected a value in kB";
      break;
    case Problem::kOverflow:
      why = "value overflows 64 bits in bytes";
      break;
    case Problem::kTwice:
      why = absl::StrCat(token, " appears twice");
      break;
    case Problem::kNoTotal:
      return Invalid("node meminfo", "no 'MemTotal:' line");
    case Problem::kNoFree:
      return Invalid("node meminfo", "no 'MemFree:' line");
    case Problem::kFreeAboveTotal:
      return Invalid("node meminfo", absl::StrCat("MemFree (", parser.info().free_bytes / 1024,
                                                  " kB) exceeds MemTotal (",
                                                  parser.info().total_bytes / 1024, " kB)"));
  }
  return Invalid("node meminfo", absl::StrCat("line ", parser.problem_line_number(), " ",
                                              Quote(parser.problem_line()), ": ", why));
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
