// Fuzz target: /proc/zoneinfo (lib/topology/zoneinfo_parse.hpp).
//
// Any input must parse or fail with InvalidArgument. Fed line by line into a window of
// nodes, the parser must agree with the whole-text parse, never write outside its window,
// and leave nodes it never saw at zero.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "topology/zoneinfo_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace parse = numarena::parse;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  parse::ZoneinfoNode whole[4];
  numarena::Status status = parse::ParseZoneinfo(text, whole);
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) std::abort();

  // Nodes 1 and 2 only, with guards on both sides that must stay untouched.
  parse::ZoneinfoNode window[4];
  parse::ZoneinfoParser parser(std::span<parse::ZoneinfoNode>(window + 1, 2), /*first_node=*/1);
  std::string_view rest = text;
  while (!rest.empty()) {
    std::size_t end = rest.find('\n');
    parser.Feed(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
  }
  // The window reads only its nodes' lines: a bad value in another node's section (a page
  // count that overflows node 0's sum, say) fails the whole-text parse but not the window's.
  // Whatever the window refuses, the whole-text parse must refuse too.
  if (!parser.ok() && status.ok()) std::abort();
  if (window[0].seen || window[3].seen || window[0].free_pages != 0 || window[3].pcp_pages != 0) {
    std::abort();
  }
  if (status.ok() && parser.ok()) {
    for (int i = 1; i <= 2; ++i) {
      if (window[i].seen != whole[i].seen || window[i].free_pages != whole[i].free_pages ||
          window[i].low_pages != whole[i].low_pages || window[i].pcp_pages != whole[i].pcp_pages) {
        std::abort();
      }
    }
    for (const auto& n : whole) {
      if (!n.seen && (n.free_pages | n.min_pages | n.low_pages | n.high_pages | n.managed_pages |
                      n.pcp_pages) != 0) {
        std::abort();
      }
    }
  }
  return 0;
}
