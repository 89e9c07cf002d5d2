// Fuzz target: nodeN/numastat parsing (lib/ops/ops_parse.hpp). Any input either parses or
// fails with InvalidArgument; a parse is stable when the text is re-rendered and parsed.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ops/ops_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto stat = numarena::parse::ParseNodeNumastat(text);
  if (!stat.ok()) {
    if (stat.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  std::string again =
      "numa_hit " + std::to_string(stat->numa_hit) + "\nnuma_miss " +
      std::to_string(stat->numa_miss) + "\nnuma_foreign " + std::to_string(stat->numa_foreign) +
      "\ninterleave_hit " + std::to_string(stat->interleave_hit) + "\nlocal_node " +
      std::to_string(stat->local_node) + "\nother_node " + std::to_string(stat->other_node) + "\n";
  auto reparsed = numarena::parse::ParseNodeNumastat(again);
  if (!reparsed.ok() || reparsed->numa_hit != stat->numa_hit ||
      reparsed->other_node != stat->other_node || reparsed->numa_foreign != stat->numa_foreign) {
    std::abort();
  }
  return 0;
}
