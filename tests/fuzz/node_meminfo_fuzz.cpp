// Fuzz target: nodeN/meminfo (lib/topology/topology_parse.hpp).
//
// Any input must parse or fail with InvalidArgument. A parsed result names a node id in
// range, has MemFree <= MemTotal, byte counts that are whole kB (the kernel's unit), and
// Inactive(file) within the page cache it is part of. The same parser, fed a line at a time,
// is what the free-memory guard reads inside jemalloc's extent hooks.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "topology/topology_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace parse = numarena::parse;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto info = parse::ParseNodeMeminfo(text);
  if (!info.ok()) {
    if (info.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (info->node < 0 || info->node > parse::kMaxListId) std::abort();
  if (info->free_bytes > info->total_bytes) std::abort();
  if (info->total_bytes % 1024 != 0 || info->free_bytes % 1024 != 0 ||
      info->used_bytes % 1024 != 0 || info->inactive_file_bytes % 1024 != 0) {
    std::abort();
  }
  if (info->inactive_file_bytes > info->reclaimable_bytes) std::abort();
  return 0;
}
