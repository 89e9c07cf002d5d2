// Fuzz target: the one-value sysfs files discovery reads (lib/topology/topology_parse.hpp): PCI
// class, vendor/device ids, numa_node, HMAT attributes and initiator entry names.
//
// Every parser gets the same input. Each must parse or fail with InvalidArgument; parsed
// values stay in their range and print back to themselves; numa_node is "unknown" only
// for -1, so no other input can be misread as "no node" (or as node 0).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "topology/topology_parse.hpp"

namespace {

template <typename T>
bool Rejected(const numarena::StatusOr<T>& result) {
  if (result.ok()) return false;
  if (result.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || (s.front() >= '\t' && s.front() <= '\r'))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || (s.back() >= '\t' && s.back() <= '\r'))) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace parse = numarena::parse;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  char buffer[32];

  auto class_code = parse::ParsePciClass(text);
  if (!Rejected(class_code)) {
    if (*class_code > 0xffffff) std::abort();
    std::snprintf(buffer, sizeof buffer, "0x%06x\n", static_cast<unsigned>(*class_code));
    if (*parse::ParsePciClass(buffer) != *class_code) std::abort();
  }

  auto id = parse::ParseHexId(text);
  if (!Rejected(id)) {
    std::snprintf(buffer, sizeof buffer, "0x%04x", static_cast<unsigned>(*id));
    if (*parse::ParseHexId(buffer) != *id) std::abort();
  }

  auto node = parse::ParseNumaNode(text);
  if (!Rejected(node)) {
    if (!node->has_value() && Trim(text) != "-1") std::abort();
    if (node->has_value() && (**node < 0 || **node > parse::kMaxListId)) std::abort();
  }

  auto value = parse::ParseDecimalU64(text);
  if (!Rejected(value)) {
    if (*parse::ParseDecimalU64(std::to_string(*value)) != *value) std::abort();
  }

  if (auto entry = parse::ParseNodeEntryName(text)) {
    if (*entry < 0 || *entry > parse::kMaxListId || text.substr(0, 4) != "node") std::abort();
  }
  return 0;
}
