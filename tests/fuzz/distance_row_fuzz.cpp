// Fuzz target: one row of nodeN/distance (lib/topology/topology_parse.hpp).
//
// Any input must parse or fail with InvalidArgument. A parsed row is non-empty with every
// entry in 0..255, and the row printed the kernel's way ("10 21") parses to itself.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "topology/topology_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace parse = numarena::parse;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto row = parse::ParseDistanceRow(text);
  if (!row.ok()) {
    if (row.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (row->empty()) std::abort();
  std::string printed;
  for (int d : *row) {
    if (d < 0 || d > 255) std::abort();
    if (!printed.empty()) printed += ' ';
    printed += std::to_string(d);
  }
  printed += '\n';
  auto again = parse::ParseDistanceRow(printed);
  if (!again.ok() || *again != *row) std::abort();
  return 0;
}
