// Reading what a node's memory is now, to judge how much more it can take: its meminfo
// (parse::NodeMeminfo) and its `low` and `high` watermarks (/proc/zoneinfo), allocation-free, so the
// arenas' free-memory guard can call them inside jemalloc's extent hooks. First-touch
// placement and the guard both read a node's room through here; what they make of the
// figures is parse::NodeObtainableBytes and parse::NodeReserveBytes (zoneinfo_parse.hpp).
// The budget parses the same meminfo with parse::ParseNodeMeminfo through its SystemReader.
#pragma once

#include <cstdint>

#include "topology/topology_parse.hpp"

namespace numarena {

// /sys/devices/system/node/node<node>/meminfo, parsed: false when it cannot be read or is
// malformed (then `*info` is unspecified).
bool ReadNodeMeminfoNoAlloc(int node, parse::NodeMeminfo* info) noexcept;

// The sums of the `low` and of the `high` watermarks of the node's zones in /proc/zoneinfo,
// in bytes (each at most INT64_MAX): false when the file cannot be read, is malformed or has
// no zone of the node (then both are left as they were).
bool ReadNodeWatermarksNoAlloc(int node, std::uint64_t* low_bytes, std::uint64_t* high_bytes) noexcept;

}  // namespace numarena
