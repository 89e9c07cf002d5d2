// Parsers for the kernel files topology discovery reads, as pure functions of their text.
//
// Each parser takes the whole contents of one file (or one field) and returns the value or
// an InvalidArgument status whose message says what was wrong and where ("element 2
// '7-5': reversed range"). They never read files, so they are unit-tested and fuzzed on
// synthetic inputs; the topology layer reads the file, calls the parser and turns a
// failure into DataLoss prefixed with the file's path.
//
// Formats follow what the kernel prints, with a little tolerance for hand-written fixtures:
// leading/trailing whitespace (the trailing newline) is ignored everywhere.
//
// ID lists (cpulist, online, Cpus_allowed_list, cpuset.cpus.effective, ...):
//   "0-47,96-143", "3", "" (empty set). Elements are "N" or "A-B" with A <= B, separated by
//   commas, optionally surrounded by spaces. Rejected, with a message saying why:
//   - the stride form "A-B:C/D": the kernel accepts it when *written* to a cpuset but
//     never prints it, so seeing it in a file we read means the file is not what we think;
//   - reversed ranges "7-5", empty elements "1,,2", signs, hex, other characters;
//   - ids above kMaxListId (bounds the memory a list can expand to; Linux allows at most
//     8192 CPUs), and node ids above kMaxNodeId (Linux allows at most 1024 nodes).
//   Duplicates and overlaps are merged; the result is ascending and unique.
//
//   auto cpus = numarena::parse::ParseCpuList("0-3,8\n");  // {0, 1, 2, 3, 8}
//   std::string s = numarena::FormatIdList(*cpus);           // "0-3,8" (numarena/format.hpp)
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/format.hpp"
#include "numarena/status.hpp"

namespace numarena::parse {

// The largest CPU (or IRQ) id an ID list may contain, and the largest node id: a node list
// with larger ids cannot name a node, and policy strings that repeat it piece by piece
// ("preferred(2-55555)" prints back as 55554 pieces) must stay cheap to parse.
inline constexpr int kMaxListId = 65535;
inline constexpr int kMaxNodeId = 1023;

// Parses an ID list (see above) whose ids are at most `max_id`. `what` names the list in
// error messages ("CPU list").
[[nodiscard]] StatusOr<std::vector<int>> ParseIdList(std::string_view text, std::string_view what,
                                                     int max_id = kMaxListId);
[[nodiscard]] StatusOr<std::vector<int>> ParseCpuList(std::string_view text);
[[nodiscard]] StatusOr<std::vector<int>> ParseNodeList(std::string_view text);

// One row of /sys/devices/system/node/nodeN/distance: "10 12 32 32\n" -> {10, 12, 32, 32}.
// Entries are decimal SLIT distances 0..255 separated by whitespace; at least one entry.
[[nodiscard]] StatusOr<std::vector<int>> ParseDistanceRow(std::string_view text);

// /sys/devices/system/node/nodeN/meminfo. Every non-empty line must have the form
// "Node <id> <Key>: <value>[ kB]" with one node id throughout; MemTotal and MemFree are
// required, MemUsed defaults to MemTotal - MemFree. Values in kB are returned in bytes.
// The one reader of this file: topology discovery, the budget, first-touch placement and the
// arenas' free-memory guard all parse it here.
struct NodeMeminfo {
  int node = -1;
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t used_bytes = 0;
  // What the kernel can reclaim on the node for a bound allocation: its file-backed page
  // cache (Active(file) + Inactive(file)); 0 for absent lines. Not KReclaimable: kernel
  // memory meminfo calls reclaimable is often pinned (a tmpfs pins the dentries of its files,
  // open files pin theirs), and when the kernel's shrinkers free nothing it OOM-kills a bound
  // allocation instead (the lab's root file system put 9 MiB of it on a 256 MiB node).
  std::uint64_t reclaimable_bytes = 0;
  std::uint64_t inactive_file_bytes = 0;  // Inactive(file) alone; 0 when absent
};

// The meminfo parser, a line at a time and allocation-free (the free-memory guard reads the
// file inside jemalloc's extent hooks, through os::ReadLinesNoAlloc). ParseNodeMeminfo below
// runs it over a whole text and says its problem in words.
class NodeMeminfoParser {
 public:
  enum class Problem : unsigned char {
    kNone,
    kShape,           // not "Node <id> <Key>: <value> [kB]"
    kNodeId,          // the id is not a decimal number up to kMaxListId (token)
    kNodeDiffers,     // another node id than earlier lines (token; earlier_node())
    kValue,           // the value is not a decimal number (token)
    kUnit,            // a unit other than kB (token)
    kNotKilobytes,    // a field numarena reads without a unit
    kOverflow,        // the value does not fit 64 bits in bytes
    kTwice,           // the field appears twice (token: its key)
    kNoTotal,         // Finish: no MemTotal line
    kNoFree,          // Finish: no MemFree line
    kFreeAboveTotal,  // Finish: MemFree > MemTotal
  };

  // Feeds one line (surrounding whitespace ignored). False from the first problem on; later
  // lines are then ignored.
  bool Feed(std::string_view line) noexcept;
  // After the last line: whether the file was well formed; then info() holds its figures.
  bool Finish() noexcept;

  const NodeMeminfo& info() const noexcept { return info_; }
  Problem problem() const noexcept { return problem_; }
  // The first problem's line (1-based; 0 for Finish's problems), that line trimmed (it
  // points into the caller's text, valid while that is) and the token concerned.
  std::size_t problem_line_number() const noexcept { return problem_line_number_; }
  std::string_view problem_line() const noexcept { return problem_line_; }
  std::string_view problem_token() const noexcept { return problem_token_; }
  int earlier_node() const noexcept { return earlier_node_; }

 private:
  bool Fail(Problem problem, std::string_view line, std::string_view token) noexcept;

  NodeMeminfo info_;
  bool total_ = false, free_ = false, used_ = false, active_file_ = false, inactive_file_ = false;
  std::uint64_t active_file_bytes_ = 0;
  std::size_t line_number_ = 0;
  Problem problem_ = Problem::kNone;
  std::size_t problem_line_number_ = 0;
  std::string_view problem_line_;
  std::string_view problem_token_;
  int earlier_node_ = -1;
};

[[nodiscard]] StatusOr<NodeMeminfo> ParseNodeMeminfo(std::string_view text);

// The cpuset lines of /proc/<pid>/status ("Cpus_allowed_list:\t0-7"). Absent lines stay
// nullopt; a present but malformed list is an error naming the field.
struct ProcStatusLimits {
  std::optional<std::vector<int>> cpus_allowed;
  std::optional<std::vector<int>> mems_allowed;
};
[[nodiscard]] StatusOr<ProcStatusLimits> ParseProcStatus(std::string_view text);

// /proc/<pid>/cgroup: "hierarchy:controllers:path" per line. `unified` is the path of the
// cgroup v2 entry ("0::/system.slice/x.service"), `cpuset_v1` that of a cgroup v1 hierarchy
// whose controllers include cpuset. Paths are absolute and never contain a ".." component
// (so they cannot leave the cgroup mount when joined to it).
struct CgroupPaths {
  std::optional<std::string> unified;
  std::optional<std::string> cpuset_v1;
};
[[nodiscard]] StatusOr<CgroupPaths> ParseProcCgroup(std::string_view text);

// /sys/bus/pci/devices/<bdf>/class: "0x030200" -> 0x030200 (24 bits).
[[nodiscard]] StatusOr<std::uint32_t> ParsePciClass(std::string_view text);
// /sys/bus/pci/devices/<bdf>/{vendor,device}: "0x10de" -> 0x10de (16 bits).
[[nodiscard]] StatusOr<std::uint16_t> ParseHexId(std::string_view text);
// /sys/bus/pci/devices/<bdf>/numa_node: "1" -> 1; "-1" -> nullopt (the kernel does not
// know). Other negative values and ids above kMaxListId are errors.
[[nodiscard]] StatusOr<std::optional<int>> ParseNumaNode(std::string_view text);
// A decimal unsigned value such as an HMAT attribute ("read_bandwidth": "204800\n").
[[nodiscard]] StatusOr<std::uint64_t> ParseDecimalU64(std::string_view text);
// A directory entry naming a node ("node12" -> 12); nullopt for anything else.
std::optional<int> ParseNodeEntryName(std::string_view name);
// A huge page pool directory ("hugepages-2048kB" -> 2048, the page size in kB); nullopt for
// anything else, and for sizes that are not a power of two or overflow bytes.
std::optional<std::uint64_t> ParseHugePageDirName(std::string_view name);

// /sys/kernel/mm/mempolicy/weighted_interleave/nodeN (Linux 6.9+): the node's weight for
// MPOL_WEIGHTED_INTERLEAVE, "3\n" -> 3. A decimal 0..255 (the kernel keeps a u8, and uses 1
// where it holds 0).
[[nodiscard]] StatusOr<unsigned> ParseInterleaveWeight(std::string_view text);
// A sysfs boolean as the kernel prints it: "true" / "false" (demotion_enabled, the weighted
// interleave "auto" file), also "1" / "0" and "Y" / "N".
[[nodiscard]] StatusOr<bool> ParseSysfsBool(std::string_view text);
// A memory tier directory of /sys/devices/virtual/memory_tiering ("memory_tier4" -> 4);
// nullopt for anything else (power, uevent).
std::optional<int> ParseMemoryTierName(std::string_view name);

}  // namespace numarena::parse
