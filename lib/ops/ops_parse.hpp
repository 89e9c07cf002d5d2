// Parsers for the kernel files the operations tools read, as pure functions of their text.
//
// `numarena doctor`, `stat`, `report` and the metrics read a handful of procfs and sysfs
// files that are not part of topology discovery: a process's /proc/PID/numa_maps and
// /proc/PID/stat, the per-node numastat counters, sysctl values, the transparent-hugepage
// selectors and IRQ affinity lists. Each parser below takes the whole text of one file and
// returns the value, or InvalidArgument saying what was wrong and where ("line 3: token
// 'N1=x': page count is not a decimal number"). They never read files, so they are unit
// tested and fuzzed on synthetic inputs (tests/ops/ops_parse_test.cpp, tests/fuzz/*_fuzz.cpp);
// the callers read the file through a SystemReader and prefix errors with its path.
//
// Leading and trailing whitespace (the kernel's trailing newline) is ignored everywhere.
//
//   auto maps = numarena::parse::ParseNumaMaps(text);
//   for (const auto& m : *maps) bytes_on_node1 += m.pages_on(1) * m.page_size_bytes;
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/ops/stat.hpp"
#include "numarena/status.hpp"

namespace numarena::parse {

// What a numa_maps line says the mapping is (the bare tokens heap, stack, huge, file=).
enum class MappingKind : unsigned char { kAnonymous, kFile, kHeap, kStack, kHugetlb };
const char* MappingKindName(MappingKind kind);

// One line of /proc/PID/numa_maps, e.g.
//   "7f3c00000000 bind:1 anon=16384 dirty=16384 N1=16384 kernelpagesize_kB=4"
// Page counts are in units of the mapping's page size (huge pages for hugetlb mappings).
struct NumaMapsEntry {
  std::uint64_t address = 0;
  std::string policy;  // "default", "bind:1", "prefer:0", "interleave:0-3", "local", ...
  MappingKind kind = MappingKind::kAnonymous;
  std::string file;                            // path for kFile (kernel escaping kept as is)
  std::map<int, std::uint64_t> pages_on_node;  // N<node>=<pages>
  std::uint64_t page_size_bytes = 4096;        // kernelpagesize_kB * 1024
  std::uint64_t anon_pages = 0;
  std::uint64_t dirty_pages = 0;

  // Pages on `node` (0 when none) and on all nodes.
  std::uint64_t pages_on(int node) const;
  std::uint64_t resident_pages() const;
};

// The whole /proc/PID/numa_maps. Empty text gives an empty vector (a kernel thread). A line
// must start with a hexadecimal address and a policy; N<node>=<pages>, anon=, dirty= and
// kernelpagesize_kB= must be well-formed numbers; other tokens (mapped=, active=, ...) are
// skipped so newer kernels still parse.
[[nodiscard]] StatusOr<std::vector<NumaMapsEntry>> ParseNumaMaps(std::string_view text);
// One line (without its newline).
[[nodiscard]] StatusOr<NumaMapsEntry> ParseNumaMapsLine(std::string_view line);

// /sys/devices/system/node/nodeN/numastat: "numa_hit 123\nnuma_miss 0\n...". All six counters
// are required; unknown lines are skipped. Units are pages (allocation events).
using NodeNumastat = NodeNumaCounters;
[[nodiscard]] StatusOr<NodeNumastat> ParseNodeNumastat(std::string_view text);

// A sysctl file holding one integer ("0\n", "-1", "2097152").
[[nodiscard]] StatusOr<std::int64_t> ParseSysctlInteger(std::string_view text);

// A transparent-hugepage selector such as /sys/kernel/mm/transparent_hugepage/enabled:
// "always [madvise] never" -> selected "madvise". Exactly one option must be bracketed.
struct Selector {
  std::string selected;
  std::vector<std::string> options;  // all options in order, without brackets
};
[[nodiscard]] StatusOr<Selector> ParseSelector(std::string_view text);

// /proc/irq/N/smp_affinity_list (and effective_affinity_list): a CPU list "0-7,96-103".
[[nodiscard]] StatusOr<std::vector<int>> ParseIrqAffinityList(std::string_view text);

// /proc/PID/stat and /proc/PID/task/TID/stat: the CPU the task last ran on (field 39,
// "processor"). The command name (field 2) may contain spaces and parentheses; the fields
// are counted after its last ')'.
[[nodiscard]] StatusOr<int> ParseProcStatProcessor(std::string_view text);

// A decimal directory entry such as an IRQ number under msi_irqs/ or a task id: "123" -> 123.
// Anything else gives an error (callers skip such entries).
[[nodiscard]] StatusOr<int> ParseDecimalEntry(std::string_view name);

// The security lines of /proc/<pid>/status: "Seccomp:\t2" (0 none, 1 strict, 2 a filter)
// and "CapEff:\t000001ffffffffff" (effective capabilities, hex). Absent lines stay nullopt
// (kernels without seccomp); a present but malformed value is an error naming the field.
struct ProcSecurity {
  std::optional<int> seccomp;
  std::optional<std::uint64_t> effective_capabilities;
};
[[nodiscard]] StatusOr<ProcSecurity> ParseProcSecurity(std::string_view text);

}  // namespace numarena::parse
