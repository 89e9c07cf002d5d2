// /proc/zoneinfo (see zoneinfo_parse.hpp): allocation-free, line by line.
#include "topology/zoneinfo_parse.hpp"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/parse_text.hpp"

namespace numarena::parse {
namespace {

using text::IsSpace;

// Splits off the next whitespace-separated word of `rest`.
std::string_view NextWord(std::string_view& rest) noexcept {
  std::size_t at = 0;
  while (at < rest.size() && IsSpace(rest[at])) ++at;
  std::size_t end = at;
  while (end < rest.size() && !IsSpace(rest[end])) ++end;
  std::string_view word = rest.substr(at, end - at);
  rest.remove_prefix(end);
  return word;
}

// A decimal value with nothing after it; false for anything else or on overflow.
bool ParseValue(std::string_view rest, std::uint64_t* value) noexcept {
  std::string_view word = NextWord(rest);
  if (word.empty() || !NextWord(rest).empty()) return false;
  return text::DecimalNoAlloc(word, UINT64_MAX, value);
}

bool Add(std::uint64_t* sum, std::uint64_t value) noexcept {
  if (*sum > UINT64_MAX - value) return false;
  *sum += value;
  return true;
}

}  // namespace

bool ZoneinfoParser::Fail(const char* why) noexcept {
  error_ = why;
  error_line_ = line_;
  return false;
}

bool ZoneinfoParser::Feed(std::string_view line) noexcept {
  if (error_ != nullptr) return false;
  ++line_;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.empty()) return true;

  if (!IsSpace(line.front())) {
    // "Node 1, zone    DMA32"
    std::string_view rest = line;
    if (NextWord(rest) != "Node") return Fail("a line that is not indented must be 'Node N, zone Z'");
    std::string_view id = NextWord(rest);
    if (id.size() < 2 || id.back() != ',') return Fail("expected 'Node N,' with a comma");
    id.remove_suffix(1);
    std::uint64_t node = 0;
    if (!ParseValue(id, &node) || node > 65535) return Fail("the node id is not a number up to 65535");
    if (NextWord(rest) != "zone" || NextWord(rest).empty()) return Fail("expected 'zone <name>' after the node id");
    in_zone_ = true;
    in_pagesets_ = false;
    const auto index = static_cast<std::int64_t>(node) - first_node_;
    current_ = index >= 0 && static_cast<std::uint64_t>(index) < nodes_.size()
                   ? &nodes_[static_cast<std::size_t>(index)]
                   : nullptr;
    if (current_ != nullptr) current_->seen = true;
    return true;
  }
  if (!in_zone_) return true;  // nothing before the first zone header counts

  std::string_view rest = line;
  std::string_view key = NextWord(rest);
  std::uint64_t* field = nullptr;
  if (key == "pagesets") {
    in_pagesets_ = true;
    return true;
  }
  if (key == "node_unreclaimable:" || key == "start_pfn:") {
    in_pagesets_ = false;
    return true;
  }
  if (in_pagesets_) {
    if (key != "count:") return true;  // cpu:, high:, batch:, high_min:, vm stats threshold
    std::uint64_t value = 0;
    if (!ParseValue(rest, &value)) return Fail("'count:' of a per-CPU list is not a number");
    if (current_ != nullptr && !Add(&current_->pcp_pages, value)) return Fail("per-CPU page counts overflow");
    return true;
  }
  if (key == "pages") {
    if (NextWord(rest) != "free") return true;
    std::uint64_t value = 0;
    if (!ParseValue(rest, &value)) return Fail("'pages free' is not a number");
    if (current_ != nullptr && !Add(&current_->free_pages, value)) return Fail("free pages overflow");
    return true;
  }
  if (current_ != nullptr) {
    if (key == "min") field = &current_->min_pages;
    if (key == "low") field = &current_->low_pages;
    if (key == "high") field = &current_->high_pages;
    if (key == "managed") field = &current_->managed_pages;
  } else if (key == "min" || key == "low" || key == "high" || key == "managed") {
    std::uint64_t ignored = 0;
    if (!ParseValue(rest, &ignored)) return Fail("a watermark or 'managed' value is not a number");
    return true;
  }
  if (field == nullptr) return true;
  std::uint64_t value = 0;
  if (!ParseValue(rest, &value)) return Fail("a watermark or 'managed' value is not a number");
  if (!Add(field, value)) return Fail("a zone sum overflows");
  return true;
}

Status ParseZoneinfo(std::string_view text, std::span<ZoneinfoNode> nodes, int first_node) {
  ZoneinfoParser parser(nodes, first_node);
  std::string_view rest = text;
  while (!rest.empty()) {
    std::size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    if (!parser.Feed(line)) {
      return text::Invalid("zoneinfo", absl::StrCat("line ", parser.error_line(), " ",
                                                    text::Quote(line), ": ", parser.error()));
    }
  }
  return absl::OkStatus();
}

std::uint64_t NodeReserveBytes(std::uint64_t total_bytes, std::uint64_t high_watermark_bytes) {
  constexpr std::uint64_t kMin = std::uint64_t{16} << 20;
  constexpr std::uint64_t kMax = std::uint64_t{1} << 30;
  return std::max(std::clamp(total_bytes / 64, kMin, kMax), high_watermark_bytes);
}

std::uint64_t NodeObtainableBytes(std::uint64_t free_bytes, std::uint64_t reclaimable_bytes,
                                  std::uint64_t low_watermark_bytes) {
  const std::uint64_t half_cache = reclaimable_bytes / 2;
  const std::uint64_t half = half_cache > low_watermark_bytes ? half_cache - low_watermark_bytes : 0;
  return free_bytes > UINT64_MAX - half ? UINT64_MAX : free_bytes + half;
}

}  // namespace numarena::parse
