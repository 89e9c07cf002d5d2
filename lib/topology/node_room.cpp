// Reading a node's meminfo and watermarks without allocating (see node_room.hpp).
#include "topology/node_room.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "os/os.hpp"
#include "topology/zoneinfo_parse.hpp"

namespace numarena {

bool ReadNodeMeminfoNoAlloc(int node, parse::NodeMeminfo* info) noexcept {
  if (node < 0) return false;
  char path[96] = "/sys/devices/system/node/node";
  std::size_t length = std::strlen(path);
  char digits[16];
  int count = 0;
  int value = node;
  do {
    digits[count++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  while (count > 0) path[length++] = digits[--count];
  std::memcpy(path + length, "/meminfo", sizeof("/meminfo"));

  parse::NodeMeminfoParser parser;
  const int err = os::ReadLinesNoAlloc(
      path,
      [](void* context, std::string_view line) {
        return static_cast<parse::NodeMeminfoParser*>(context)->Feed(line);
      },
      &parser);
  if (err != 0 || !parser.Finish()) return false;
  *info = parser.info();
  return true;
}

bool ReadNodeWatermarksNoAlloc(int node, std::uint64_t* low_bytes, std::uint64_t* high_bytes) noexcept {
  parse::ZoneinfoNode zones;
  parse::ZoneinfoParser parser(std::span<parse::ZoneinfoNode>(&zones, 1), node);
  const int err = os::ReadLinesNoAlloc(
      "/proc/zoneinfo",
      [](void* context, std::string_view line) {
        return static_cast<parse::ZoneinfoParser*>(context)->Feed(line);
      },
      &parser);
  if (err != 0 || !parser.ok() || !zones.seen) return false;
  const std::uint64_t page = os::PageSize();
  const std::uint64_t most = static_cast<std::uint64_t>(INT64_MAX) / page;
  *low_bytes = std::min(zones.low_pages, most) * page;
  *high_bytes = std::min(zones.high_pages, most) * page;
  return true;
}

}  // namespace numarena
