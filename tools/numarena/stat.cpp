// `numarena stat --pid PID`: where a process's memory is, per node (numarena/stat.hpp), like
// `numastat -p PID`, plus the share of it on the nodes the process runs on and the
// kernel's per-node allocation counters.
//
//   numarena stat --pid PID|self [--json] [--sysfs-root DIR] [--procfs-root DIR]
//   numarena stat PID|self ...            (the same)
//
// Exit 0, or 2 with one line on stderr (no such process, malformed file).
// --json: {"schema": "numarena.stat/2", "pid": int (null for 'self' in a recorded tree
//          without a self link), "command": str,
//          "nodes": [{"node": int, "anonymous_bytes": int, "hugetlb_bytes": int,
//                     "file_bytes": int, "private_bytes": int}],
//          "private_bytes": int, "file_bytes": int, "mappings": int,
//          "allowed_cpus": [int], "allowed_mem_nodes": [int], "running_cpus": [int],
//          "running_nodes": [int], "local_fraction": number,
//          "numastat": [{"node": int, "numa_hit": int, "numa_miss": int, "numa_foreign": int,
//                        "interleave_hit": int, "local_node": int, "other_node": int}]}
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <optional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "command.hpp"
#include "numarena/format.hpp"
#include "numarena/ops/json.hpp"
#include "numarena/ops/stat.hpp"
#include "cli_options.hpp"
#include "ops_format.hpp"

namespace numarena::cli {
namespace {

struct StatOptions {
  std::string pid, positional_pid;
  bool json = false;
  MachineRoots roots;
  WatchOptions watch;
};

std::string Mib(std::uint64_t bytes) {
  return absl::StrFormat("%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

std::string FormatNodeCounters(const std::map<int, NodeNumaCounters>& counters) {
  if (counters.empty()) return "";
  std::string out = absl::StrFormat("%-16s", "numastat (pages)");
  for (const auto& [node, c] : counters)
    out += absl::StrFormat(" %14s", absl::StrCat("Node ", node));
  out += "\n";
  auto row = [&](const char* name, std::uint64_t NodeNumaCounters::*field) {
    out += absl::StrFormat("%-16s", name);
    for (const auto& [node, c] : counters) out += absl::StrFormat(" %14d", c.*field);
    out += "\n";
  };
  row("numa_hit", &NodeNumaCounters::numa_hit);
  row("numa_miss", &NodeNumaCounters::numa_miss);
  row("numa_foreign", &NodeNumaCounters::numa_foreign);
  row("interleave_hit", &NodeNumaCounters::interleave_hit);
  row("local_node", &NodeNumaCounters::local_node);
  row("other_node", &NodeNumaCounters::other_node);
  return out;
}

std::string FormatProcessStat(const ProcessNumaStat& s) {
  std::string out = absl::StrCat("Per-node memory of pid ", s.pid,
                                 s.command.empty() ? "" : absl::StrCat(" (", s.command, ")"),
                                 " in MiB, from numa_maps (", s.mapping_count, " mappings)\n");
  out += absl::StrFormat("%-16s", "");
  for (const auto& [node, usage] : s.by_node) {
    out += absl::StrFormat(" %10s", absl::StrCat("Node ", node));
  }
  out += absl::StrFormat(" %10s\n", "Total");
  auto row = [&](const char* name, auto value) {
    out += absl::StrFormat("%-16s", name);
    std::uint64_t total = 0;
    for (const auto& [node, usage] : s.by_node) {
      std::uint64_t v = value(usage);
      total += v;
      out += absl::StrFormat(" %10s", Mib(v));
    }
    out += absl::StrFormat(" %10s\n", Mib(total));
  };
  row("Anonymous", [](const NodeMemoryUsage& u) { return u.anonymous_bytes; });
  row("Hugetlb", [](const NodeMemoryUsage& u) { return u.hugetlb_bytes; });
  row("Private", [](const NodeMemoryUsage& u) { return u.private_bytes(); });
  row("File (shared)", [](const NodeMemoryUsage& u) { return u.file_bytes; });
  out += absl::StrCat(
      "runs on: CPUs ", s.running_cpus.empty() ? "?" : FormatIdList(s.running_cpus),
      " (node", s.running_nodes.size() == 1 ? " " : "s ", FormatIdList(s.running_nodes),
      "); may use CPUs ", FormatIdList(s.allowed_cpus), ", memory nodes ",
      FormatIdList(s.allowed_mem_nodes), "\n");
  out += absl::StrCat("local: ", FormatPercent(s.local_fraction), " of ",
                      FormatBytes(s.private_bytes), " private memory is on node",
                      s.running_nodes.size() == 1 ? " " : "s ",
                      FormatIdList(s.running_nodes), ", where the process runs\n");
  return out;
}

namespace {

// The process id `args` names: the number given, or for "self" this process (the live /proc)
// or what <procfs-root>/self links to; nullopt for "self" in a recorded tree without that link.
std::optional<std::int64_t> ProcessId(const StatOptions& args) {
  std::string pid = args.pid;
  if (pid == "self") {
    const std::string root = args.roots.procfs_root();
    if (root == "/proc") return static_cast<std::int64_t>(getpid());
    std::error_code error;
    pid = std::filesystem::read_symlink(root + "/self", error).string();
    if (error) return std::nullopt;
  }
  auto number = ParseCount(pid, 999999999);
  if (!number) return std::nullopt;
  return static_cast<std::int64_t>(*number);
}

int StatOnce(const StatOptions& args) {
  auto reader = args.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("stat", std::string(topology.status().message()));
  auto stat = StatProcess(*reader, *topology, args.pid);
  if (!stat.ok()) return Fail("stat", std::string(stat.status().message()));
  auto counters = ReadNodeCounters(*reader, *topology);
  if (!counters.ok()) return Fail("stat", std::string(counters.status().message()));

  if (args.json) {
    JsonWriter json(std::cout);
    json.BeginObject();
    json.Key("schema").String("numarena.stat/2");
    json.Key("pid");
    if (auto pid = ProcessId(args); pid) {
      json.Int(*pid);
    } else {
      json.Null();
    }
    json.Key("command").String(stat->command);
    json.Key("nodes").BeginArray();
    for (const auto& [node, u] : stat->by_node) {
      json.BeginObject();
      json.Key("node").Int(node);
      json.Key("anonymous_bytes").Uint(u.anonymous_bytes);
      json.Key("hugetlb_bytes").Uint(u.hugetlb_bytes);
      json.Key("file_bytes").Uint(u.file_bytes);
      json.Key("private_bytes").Uint(u.private_bytes());
      json.EndObject();
    }
    json.EndArray();
    json.Key("private_bytes").Uint(stat->private_bytes);
    json.Key("file_bytes").Uint(stat->file_bytes);
    json.Key("mappings").Uint(stat->mapping_count);
    json.Key("allowed_cpus").IntArray(stat->allowed_cpus);
    json.Key("allowed_mem_nodes").IntArray(stat->allowed_mem_nodes);
    json.Key("running_cpus").IntArray(stat->running_cpus);
    json.Key("running_nodes").IntArray(stat->running_nodes);
    json.Key("local_fraction").Double(stat->local_fraction);
    json.Key("numastat").BeginArray();
    for (const auto& [node, c] : *counters) {
      json.BeginObject();
      json.Key("node").Int(node);
      json.Key("numa_hit").Uint(c.numa_hit);
      json.Key("numa_miss").Uint(c.numa_miss);
      json.Key("numa_foreign").Uint(c.numa_foreign);
      json.Key("interleave_hit").Uint(c.interleave_hit);
      json.Key("local_node").Uint(c.local_node);
      json.Key("other_node").Uint(c.other_node);
      json.EndObject();
    }
    json.EndArray();
    json.EndObject();
    std::cout << "\n";
    return 0;
  }
  std::cout << FormatProcessStat(*stat);
  if (!counters->empty()) std::cout << "\n" << FormatNodeCounters(*counters);
  return 0;
}

CommandRunner SetupStat(CLI::App& app) {
  auto options = std::make_shared<StatOptions>();
  app.add_option("--pid", options->pid, "the process id, or 'self' (as doctor and exporter take it)")
      ->type_name("PID");
  app.add_option("pid", options->positional_pid, "the same, without --pid")->type_name("PID");
  app.add_flag("--json", options->json,
               "one JSON object (schema numarena.stat/2); with --watch one per line");
  options->roots.AddTo(app);
  options->watch.AddTo(app);
  app.footer(
      "per-node memory of a process from /proc/PID/numa_maps (like numastat -p), the share on "
      "the nodes it runs on, and the kernel's per-node numastat counters");
  return [options] {
    if (!options->pid.empty() && !options->positional_pid.empty()) {
      return Fail("stat", absl::StrCat("--pid ", options->pid, " and ", options->positional_pid,
                                       ": give one process (numarena stat --pid PID)"));
    }
    if (options->pid.empty()) options->pid = options->positional_pid;
    if (options->pid.empty()) {
      return Fail("stat", "give one process id (or 'self'): numarena stat --pid PID");
    }
    if (Status s = options->watch.Check(); !s.ok()) return Fail("stat", std::string(s.message()));
    return Watch(options->watch, options->json, [&] { return StatOnce(*options); });
  };
}

}  // namespace

NUMARENA_COMMAND(stat, "per-node memory of a process (numa_maps), local share, numastat",
                 SetupStat);

}  // namespace numarena::cli
