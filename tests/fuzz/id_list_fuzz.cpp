// Fuzz target: kernel ID lists (cpulist, online, Cpus_allowed_list, cpuset files), see
// lib/topology/topology_parse.hpp.
//
// Any input must parse or fail with InvalidArgument. A parsed list must be ascending,
// unique and within [0, kMaxListId], and printing it with FormatIdList and parsing that
// again must give the same list (so the CLI's compact form loses nothing).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "topology/topology_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace parse = numarena::parse;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ids = parse::ParseIdList(text, "fuzz list");
  if (!ids.ok()) {
    if (ids.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  for (std::size_t i = 0; i < ids->size(); ++i) {
    int id = (*ids)[i];
    if (id < 0 || id > parse::kMaxListId) std::abort();
    if (i > 0 && (*ids)[i - 1] >= id) std::abort();
  }
  auto again = parse::ParseIdList(numarena::FormatIdList(*ids), "fuzz list");
  if (!again.ok() || *again != *ids) std::abort();
  return 0;
}
