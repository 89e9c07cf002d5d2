// Pure parsers of the kernel files the operations tools read (see ops_parse.hpp).
//
// Inputs are whatever a file, a fixture or a fuzzer says: every number is checked for
// overflow, every error message quotes a bounded piece of the offending input, and nothing
// here allocates in proportion to a number found in the input.
#include "ops/ops_parse.hpp"

#include <limits>

#include "absl/strings/str_cat.h"
#include "base/parse_text.hpp"
#include "topology/topology_parse.hpp"

namespace numarena::parse {
namespace {

using text::Abs;
using text::Decimal;
using text::HexDigits;
using text::Invalid;
using text::IsDigit;
using text::IsSpace;
using text::Quote;
using text::Tokens;
using text::Trim;

// Calls fn(line, 1-based line number) for each line.
template <typename Fn>
void ForEachLine(std::string_view text, Fn&& fn) {
  int number = 1;
  text::ForEachPiece(text, '\n', [&](std::string_view line) { fn(line, number++); });
}

// Largest page count we accept: 2^48 pages of 4 KiB is far beyond any machine; the bound
// keeps products with the page size from overflowing.
constexpr std::uint64_t kMaxPages = std::uint64_t{1} << 48;
// kernelpagesize_kB: 4 KiB up to 16 GiB pages.
constexpr std::uint64_t kMaxPageKb = std::uint64_t{16} << 20;

}  // namespace

const char* MappingKindName(MappingKind kind) {
  switch (kind) {
    case MappingKind::kAnonymous:
      return "anon";
    case MappingKind::kFile:
      return "file";
    case MappingKind::kHeap:
      return "heap";
    case MappingKind::kStack:
      return "stack";
    case MappingKind::kHugetlb:
      return "huge";
  }
  return "?";
}

std::uint64_t NumaMapsEntry::pages_on(int node) const {
  auto it = pages_on_node.find(node);
  return it == pages_on_node.end() ? 0 : it->second;
}

std::uint64_t NumaMapsEntry::resident_pages() const {
  std::uint64_t total = 0;
  for (const auto& [node, pages] : pages_on_node) total += pages;
  return total;
}

StatusOr<NumaMapsEntry> ParseNumaMapsLine(std::string_view line) {
  std::vector<std::string_view> tokens = Tokens(line);
  if (tokens.size() < 2) {
    return Invalid("numa_maps line",
                   absl::StrCat("expected '<address> <policy> ...', found ", Quote(line)));
  }
  NumaMapsEntry entry;
  auto address =
      HexDigits(tokens[0], std::numeric_limits<std::uint64_t>::max(), "numa_maps address");
  if (!address.ok()) return address.status();
  entry.address = *address;
  entry.policy = std::string(tokens[1]);
  bool huge = false;
  for (std::size_t i = 2; i < tokens.size(); ++i) {
    std::string_view token = tokens[i];
    std::string where = absl::StrCat("numa_maps token ", Quote(token));
    std::size_t eq = token.find('=');
    if (eq == std::string_view::npos) {
      // Bare words: heap, stack (older kernels print "stack:TID"), huge.
      if (token == "heap") {
        entry.kind = MappingKind::kHeap;
      } else if (token == "stack" || token.substr(0, 6) == "stack:") {
        entry.kind = MappingKind::kStack;
      } else if (token == "huge") {
        huge = true;
      }
      continue;
    }
    std::string_view key = token.substr(0, eq);
    std::string_view value = token.substr(eq + 1);
    if (key == "file") {
      // The kernel escapes spaces in paths (\040), so the path is one token.
      entry.kind = MappingKind::kFile;
      entry.file = std::string(value);
    } else if (key.size() >= 2 && key[0] == 'N' && IsDigit(key[1])) {
      auto node = Decimal(key.substr(1), kMaxListId, where);
      if (!node.ok()) return node.status();
      auto pages = Decimal(value, kMaxPages, where);
      if (!pages.ok()) return pages.status();
      if (entry.pages_on_node.count(static_cast<int>(*node)) != 0) {
        return Invalid(where, "node listed twice on one line");
      }
      entry.pages_on_node[static_cast<int>(*node)] = *pages;
    } else if (key == "kernelpagesize_kB") {
      auto kb = Decimal(value, kMaxPageKb, where);
      if (!kb.ok()) return kb.status();
      if (*kb == 0) return Invalid(where, "page size of 0 kB");
      entry.page_size_bytes = *kb * 1024;
    } else if (key == "anon") {
      auto pages = Decimal(value, kMaxPages, where);
      if (!pages.ok()) return pages.status();
      entry.anon_pages = *pages;
    } else if (key == "dirty") {
      auto pages = Decimal(value, kMaxPages, where);
      if (!pages.ok()) return pages.status();
      entry.dirty_pages = *pages;
    }
    // mapped=, mapmax=, swapcache=, active=, writeback=, unknown keys: not needed here.
  }
  if (huge) entry.kind = MappingKind::kHugetlb;
  return entry;
}

StatusOr<std::vector<NumaMapsEntry>> ParseNumaMaps(std::string_view text) {
  std::vector<NumaMapsEntry> entries;
  Status status;
  ForEachLine(text, [&](std::string_view line, int number) {
    if (!status.ok() || Trim(line).empty()) return;
    auto entry = ParseNumaMapsLine(line);
    if (!entry.ok()) {
      status = absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": ", std::string(entry.status().message())));
      return;
    }
    entries.push_back(*std::move(entry));
  });
  if (!status.ok()) return status;
  return entries;
}

StatusOr<NodeNumastat> ParseNodeNumastat(std::string_view text) {
  NodeNumastat stat;
  struct Field {
    std::string_view name;
    std::uint64_t* value;
    bool seen;
  };
  Field fields[] = {
      {"numa_hit", &stat.numa_hit, false},         {"numa_miss", &stat.numa_miss, false},
      {"numa_foreign", &stat.numa_foreign, false}, {"interleave_hit", &stat.interleave_hit, false},
      {"local_node", &stat.local_node, false},     {"other_node", &stat.other_node, false}};
  Status status;
  ForEachLine(text, [&](std::string_view line, int number) {
    if (!status.ok()) return;
    std::vector<std::string_view> tokens = Tokens(line);
    if (tokens.empty()) return;
    for (Field& field : fields) {
      if (tokens[0] != field.name) continue;
      std::string where = absl::StrCat("numastat line ", number);
      if (tokens.size() != 2) {
        status = Invalid(where, absl::StrCat("expected '<counter> <value>', found ", Quote(line)));
        return;
      }
      auto value = Decimal(tokens[1], std::numeric_limits<std::uint64_t>::max(), where);
      if (!value.ok()) {
        status = value.status();
        return;
      }
      *field.value = *value;
      field.seen = true;
    }
  });
  if (!status.ok()) return status;
  for (const Field& field : fields) {
    if (!field.seen) {
      return Invalid("numastat", absl::StrCat("counter ", Abs(field.name), " is missing"));
    }
  }
  return stat;
}

StatusOr<std::int64_t> ParseSysctlInteger(std::string_view text) {
  std::string_view s = Trim(text);
  bool negative = !s.empty() && s.front() == '-';
  if (negative) s.remove_prefix(1);
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  auto value = Decimal(s, kMax, "sysctl value");
  if (!value.ok()) {
    return Invalid("sysctl value", absl::StrCat("expected one integer, found ", Quote(Trim(text))));
  }
  auto signed_value = static_cast<std::int64_t>(*value);
  return negative ? -signed_value : signed_value;
}

StatusOr<Selector> ParseSelector(std::string_view text) {
  Selector selector;
  int selected_count = 0;
  for (std::string_view token : Tokens(text)) {
    if (token.front() == '[') {
      if (token.size() < 3 || token.back() != ']') {
        return Invalid("selector", absl::StrCat("unbalanced brackets in ", Quote(token)));
      }
      token = token.substr(1, token.size() - 2);
      selector.selected = std::string(token);
      ++selected_count;
    } else if (token.find_first_of("[]") != std::string_view::npos) {
      return Invalid("selector", absl::StrCat("unbalanced brackets in ", Quote(token)));
    }
    selector.options.emplace_back(token);
  }
  if (selected_count != 1) {
    return Invalid("selector", absl::StrCat("expected exactly one [selected] option, found ",
                                            selected_count, " in ", Quote(Trim(text))));
  }
  return selector;
}

StatusOr<std::vector<int>> ParseIrqAffinityList(std::string_view text) {
  return ParseIdList(text, "IRQ affinity list");
}

StatusOr<int> ParseProcStatProcessor(std::string_view text) {
  std::size_t close = text.rfind(')');
  if (close == std::string_view::npos) {
    return Invalid("stat", "no ')' closing the command name");
  }
  std::vector<std::string_view> fields = Tokens(text.substr(close + 1));
  // Fields after the command start at field 3 (state); processor is field 39.
  constexpr std::size_t kProcessorIndex = 39 - 3;
  if (fields.size() <= kProcessorIndex) {
    return Invalid("stat", absl::StrCat("expected at least 39 fields, found ", fields.size() + 2));
  }
  auto cpu = Decimal(fields[kProcessorIndex], kMaxListId, "stat field 39 (processor)");
  if (!cpu.ok()) return cpu.status();
  return static_cast<int>(*cpu);
}

StatusOr<int> ParseDecimalEntry(std::string_view name) {
  auto value = Decimal(name, std::numeric_limits<int>::max(), "entry name");
  if (!value.ok()) return value.status();
  return static_cast<int>(*value);
}

StatusOr<ProcSecurity> ParseProcSecurity(std::string_view text) {
  ProcSecurity security;
  std::vector<std::string_view> lines;
  text::ForEachPiece(text, '\n', [&](std::string_view line) { lines.push_back(line); });
  for (std::string_view line : lines) {
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    const std::string_view value = Trim(line.substr(colon + 1));
    if (key == "Seccomp") {
      if (security.seccomp) return Invalid("process status", "Seccomp appears twice");
      auto mode = Decimal(value, 2, "Seccomp");
      if (!mode.ok()) return Invalid("process status", std::string(mode.status().message()));
      security.seccomp = static_cast<int>(*mode);
    } else if (key == "CapEff") {
      if (security.effective_capabilities) return Invalid("process status", "CapEff appears twice");
      auto caps = HexDigits(value, UINT64_MAX, "CapEff");
      if (!caps.ok()) return Invalid("process status", std::string(caps.status().message()));
      security.effective_capabilities = *caps;
    }
  }
  return security;
}

}  // namespace numarena::parse
