// Fuzz target: /proc/PID/numa_maps parsing (lib/ops/ops_parse.hpp).
//
// Any input must either parse or fail with InvalidArgument, and a parsed result must be
// self-consistent: a non-zero page size, and every line parsed on its own gives the same
// entry as the whole-file parse (so the multi-line driver adds nothing of its own).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ops/ops_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto maps = numarena::parse::ParseNumaMaps(text);
  if (!maps.ok()) {
    if (maps.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  std::size_t index = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r\v\f") == std::string_view::npos) continue;
    auto one = numarena::parse::ParseNumaMapsLine(line);
    if (!one.ok() || index >= maps->size()) std::abort();
    const auto& entry = (*maps)[index++];
    if (one->address != entry.address || one->pages_on_node != entry.pages_on_node ||
        one->page_size_bytes != entry.page_size_bytes || entry.page_size_bytes == 0) {
      std::abort();
    }
  }
  if (index != maps->size()) std::abort();
  return 0;
}
