// Per-node memory of a process and the kernel's per-node allocation counters (stat.hpp).
//
// Everything is read through the SystemReader and parsed by lib/ops_parse, so a fixture
// /proc tree and the live /proc go through the same code. A process may exit between two
// reads; every read of /proc/<pid> therefore treats "not found" as "the process is gone".
#include "numarena/ops/stat.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "ops/ops_common.hpp"
#include "ops/ops_parse.hpp"
#include "topology/topology_parse.hpp"

namespace numarena {
namespace {

std::string NodePath(int node, const char* file) {
  return absl::StrCat("/sys/devices/system/node/node", node, "/", file);
}

// The CPU each thread of the process last ran on. Threads that exit while we list them
// are skipped; a process whose task directory is unreadable gives an empty list.
StatusOr<std::vector<int>> RunningCpus(const SystemReader& reader, const std::string& pid) {
  std::set<int> cpus;
  std::string task_dir = absl::StrCat("/proc/", pid, "/task");
  auto tasks = reader.List(task_dir);
  std::vector<std::string> stat_files;
  if (tasks.ok()) {
    for (const std::string& task : *tasks) {
      if (parse::ParseDecimalEntry(task).ok()) {
        stat_files.push_back(absl::StrCat(task_dir, "/", task, "/stat"));
      }
    }
  }
  if (stat_files.empty()) stat_files.push_back(absl::StrCat("/proc/", pid, "/stat"));
  for (const std::string& path : stat_files) {
    auto text = ops::ReadOptional(reader, path);
    if (!text.ok()) return text.status();
    if (!text->has_value()) continue;
    auto cpu = parse::ParseProcStatProcessor(**text);
    if (!cpu.ok()) return ops::FileError(reader, path, cpu.status());
    cpus.insert(*cpu);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

}  // namespace

StatusOr<std::map<int, NodeNumaCounters>> ReadNodeCounters(const SystemReader& reader,
                                                           const Topology& topology) {
  std::map<int, NodeNumaCounters> counters;
  for (const NodeInfo& node : topology.nodes()) {
    std::string path = NodePath(node.id, "numastat");
    auto text = ops::ReadOptional(reader, path);
    if (!text.ok()) return text.status();
    if (!text->has_value()) continue;
    auto parsed = parse::ParseNodeNumastat(**text);
    if (!parsed.ok()) return ops::FileError(reader, path, parsed.status());
    counters[node.id] = *parsed;
  }
  return counters;
}

std::uint64_t ProcessNumaStat::private_bytes_on(int node) const {
  auto it = by_node.find(node);
  return it == by_node.end() ? 0 : it->second.private_bytes();
}

StatusOr<ProcessNumaStat> StatProcess(const SystemReader& reader, const Topology& topology,
                                      const std::string& pid) {
  if (!ops::IsPidArgument(pid)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", pid, "' is not a process id (expected a positive number or 'self')"));
  }
  ProcessNumaStat stat;
  stat.pid = pid;
  std::string proc = absl::StrCat("/proc/", pid);

  std::string maps_path = proc + "/numa_maps";
  auto maps_text = reader.Read(maps_path);
  if (!maps_text.ok()) {
    if (absl::IsNotFound(maps_text.status())) {
      return absl::NotFoundError(absl::StrCat(
          "no process ", pid, ": ", reader.DisplayPath(maps_path),
          " does not exist (the process is gone, or the kernel was built without NUMA)"));
    }
    return maps_text.status();
  }
  auto maps = parse::ParseNumaMaps(*maps_text);
  if (!maps.ok()) return ops::FileError(reader, maps_path, maps.status());

  for (const NodeInfo& node : topology.nodes()) stat.by_node[node.id];
  stat.mapping_count = maps->size();
  for (const parse::NumaMapsEntry& entry : *maps) {
    for (const auto& [node, pages] : entry.pages_on_node) {
      std::uint64_t bytes = pages * entry.page_size_bytes;
      NodeMemoryUsage& usage = stat.by_node[node];
      switch (entry.kind) {
        case parse::MappingKind::kFile:
          usage.file_bytes += bytes;
          stat.file_bytes += bytes;
          break;
        case parse::MappingKind::kHugetlb:
          usage.hugetlb_bytes += bytes;
          stat.private_bytes += bytes;
          break;
        default:
          usage.anonymous_bytes += bytes;
          stat.private_bytes += bytes;
          break;
      }
    }
  }

  if (auto comm = ops::ReadOptional(reader, proc + "/comm"); comm.ok() && comm->has_value()) {
    stat.command = **comm;
    while (!stat.command.empty() && stat.command.back() == '\n') stat.command.pop_back();
  }

  std::string status_path = proc + "/status";
  auto status_text = ops::ReadOptional(reader, status_path);
  if (!status_text.ok()) return status_text.status();
  if (status_text->has_value()) {
    auto limits = parse::ParseProcStatus(**status_text);
    if (!limits.ok()) return ops::FileError(reader, status_path, limits.status());
    if (limits->cpus_allowed) stat.allowed_cpus = *limits->cpus_allowed;
    if (limits->mems_allowed) stat.allowed_mem_nodes = *limits->mems_allowed;
  }

  auto running = RunningCpus(reader, pid);
  if (!running.ok()) return running.status();
  stat.running_cpus = *running;
  stat.running_nodes =
      topology.nodes_of_cpus(stat.running_cpus.empty() ? std::span<const int>(stat.allowed_cpus)
                                                       : std::span<const int>(stat.running_cpus));

  if (stat.private_bytes > 0) {
    std::uint64_t local = 0;
    for (int node : stat.running_nodes) local += stat.private_bytes_on(node);
    stat.local_fraction = static_cast<double>(local) / static_cast<double>(stat.private_bytes);
  }
  return stat;
}

std::vector<std::string> ProcessDescendants(const SystemReader& reader, const std::string& pid) {
  std::string root = pid;
  if (pid == "self") {
    // The process "self" names: its own stat file says its number.
    auto own = reader.Read("/proc/self/stat");
    if (!own.ok()) return {};
    root = own->substr(0, own->find(' '));
  }
  auto entries = reader.List("/proc");
  if (!entries.ok()) return {};
  std::multimap<std::string, std::string> children;  // parent -> child
  for (const std::string& entry : *entries) {
    if (entry.empty() || !std::all_of(entry.begin(), entry.end(), ::isdigit)) continue;
    auto text = reader.Read(absl::StrCat("/proc/", entry, "/stat"));
    if (!text.ok()) continue;  // gone meanwhile
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so the fields are
    // counted from the last ')'.
    const auto close = text->rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text->substr(close + 1));
    std::string state, parent;
    if (fields >> state >> parent) children.emplace(parent, entry);
  }
  std::vector<std::string> found;
  std::vector<std::string> frontier = {root};
  while (!frontier.empty() && found.size() < entries->size()) {
    const std::string parent = frontier.back();
    frontier.pop_back();
    auto [first, last] = children.equal_range(parent);
    for (auto it = first; it != last; ++it) {
      found.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return found;
}

}  // namespace numarena
