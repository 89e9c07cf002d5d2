// What the process may use: the CPUs its threads may run on, the memory nodes it may
// allocate from, and the cgroup cpuset that limits both, read the way the kernel applies
// them (sched affinity, /proc/self/status, cgroup v2 cpuset.*.effective or v1's cpuset
// hierarchy), intersected with the online nodes. A limit a user should act on (CPUs over
// several nodes, a cpuset that hides nodes) becomes a warning rather than an error.
#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numarena/format.hpp"
#include "topology/kernel_files.hpp"
#include "topology/topology_parse.hpp"

namespace numarena::topology_internal {
namespace {

constexpr const char* kCgroupRoot = "/sys/fs/cgroup";
constexpr const char* kCgroupV1CpusetRoot = "/sys/fs/cgroup/cpuset";

std::vector<int> Intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// A cpuset file found for the process: its ids and the file it came from.
struct CgroupList {
  std::vector<int> ids;
  std::string path;
};

// Looks for `file` in the process's cgroup and then its ancestors up to `mount`.
// A cgroup without the cpuset controller has no such file and inherits its parent's
// set; an empty file cannot describe a running process, so it is skipped likewise.
StatusOr<std::optional<CgroupList>> FindCgroupList(const KernelFiles& files,
                                                   const std::string& mount,
                                                   const std::string& cgroup,
                                                   const char* file) {
  std::string dir = cgroup;
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  for (;;) {
    std::string path = absl::StrCat(mount, dir, "/", file);
    auto text = files.ReadOptional(path);
    if (!text.ok()) return text.status();
    if (text->has_value()) {
      auto ids = files.Parse(path, **text, parse::ParseCpuList);
      if (!ids.ok()) return ids.status();
      if (!ids->empty()) return std::optional<CgroupList>(CgroupList{*std::move(ids), path});
    }
    if (dir.empty()) return std::optional<CgroupList>();
    dir.erase(dir.rfind('/'));
  }
}

}  // namespace

StatusOr<ProcessScope> ReadProcessScope(const KernelFiles& files, const Topology& topology,
                                        std::vector<std::string>& warnings) {
  ProcessScope scope;
  std::vector<int> all_cpus, online, memory_nodes;
  for (const NodeInfo& node : topology.nodes()) {
    all_cpus.insert(all_cpus.end(), node.cpus.begin(), node.cpus.end());
    online.push_back(node.id);
    if (node.mem_total_bytes > 0) memory_nodes.push_back(node.id);
  }
  std::sort(all_cpus.begin(), all_cpus.end());
  if (memory_nodes.empty()) memory_nodes = online;

  // What the process itself says (the cpuset as the kernel applies it to this task).
  const std::string status_path = "/proc/self/status";
  parse::ProcStatusLimits limits;
  auto status_text = files.ReadOptional(status_path);
  if (!status_text.ok()) return status_text.status();
  if (status_text->has_value()) {
    auto parsed = files.Parse(status_path, **status_text, parse::ParseProcStatus);
    if (!parsed.ok()) return parsed.status();
    limits = *std::move(parsed);
  }

  std::vector<int> affinity;
  auto live_affinity = files.reader().CpuAffinity();
  if (live_affinity.ok()) {
    affinity = *std::move(live_affinity);
  } else if (absl::IsUnimplemented(live_affinity.status())) {
    affinity = limits.cpus_allowed.value_or(all_cpus);
  } else {
    return live_affinity.status();
  }
  std::vector<int> mems = limits.mems_allowed.value_or(online);

  // The cgroup's cpuset.
  const std::string cgroup_path = "/proc/self/cgroup";
  auto cgroup_text = files.ReadOptional(cgroup_path);
  if (!cgroup_text.ok()) return cgroup_text.status();
  std::optional<CgroupList> cgroup_cpus, cgroup_mems;
  if (cgroup_text->has_value()) {
    auto paths = files.Parse(cgroup_path, **cgroup_text, parse::ParseProcCgroup);
    if (!paths.ok()) return paths.status();
    if (paths->unified) {
      scope.cgroup = paths->unified;
      auto cpus = FindCgroupList(files, kCgroupRoot, *paths->unified, "cpuset.cpus.effective");
      if (!cpus.ok()) return cpus.status();
      auto nodes = FindCgroupList(files, kCgroupRoot, *paths->unified, "cpuset.mems.effective");
      if (!nodes.ok()) return nodes.status();
      cgroup_cpus = *std::move(cpus);
      cgroup_mems = *std::move(nodes);
    }
    if (paths->cpuset_v1 && (!cgroup_cpus || !cgroup_mems)) {
      if (!scope.cgroup) scope.cgroup = paths->cpuset_v1;
      if (!cgroup_cpus) {
        auto cpus =
            FindCgroupList(files, kCgroupV1CpusetRoot, *paths->cpuset_v1, "cpuset.effective_cpus");
        if (!cpus.ok()) return cpus.status();
        cgroup_cpus = *std::move(cpus);
      }
      if (!cgroup_mems) {
        auto nodes =
            FindCgroupList(files, kCgroupV1CpusetRoot, *paths->cpuset_v1, "cpuset.effective_mems");
        if (!nodes.ok()) return nodes.status();
        cgroup_mems = *std::move(nodes);
      }
    }
  }

  scope.allowed_cpus = affinity;
  if (cgroup_cpus) {
    scope.cgroup_cpus = cgroup_cpus->ids;
    scope.allowed_cpus = Intersect(scope.allowed_cpus, cgroup_cpus->ids);
  }
  scope.allowed_mem_nodes = Intersect(mems, online);
  if (cgroup_mems) {
    scope.cgroup_mems = cgroup_mems->ids;
    scope.allowed_mem_nodes = Intersect(scope.allowed_mem_nodes, cgroup_mems->ids);
  }

  // Warnings a user should act on.
  std::vector<int> cpu_nodes = topology.nodes_of_cpus(scope.allowed_cpus);
  if (scope.allowed_cpus.empty()) {
    warnings.push_back(
        absl::StrCat("no CPU is allowed: the affinity (", FormatIdList(affinity),
                     ") and the cgroup cpuset (",
                     cgroup_cpus ? FormatIdList(cgroup_cpus->ids) : std::string("none"),
                     ") do not intersect"));
  } else if (cpu_nodes.size() > 1) {
    warnings.push_back(absl::StrCat(
        "the process may run on CPUs of ", cpu_nodes.size(), " nodes (",
        FormatIdList(cpu_nodes),
        "): threads can move between nodes, so memory first touched by one thread may be "
        "remote for another; pin each worker to one node's CPUs"));
  }
  if (cgroup_cpus) {
    std::vector<int> cgroup_nodes = topology.nodes_of_cpus(cgroup_cpus->ids);
    std::vector<int> cpu_bearing = topology.nodes_of_cpus(all_cpus);
    if (cgroup_nodes != cpu_bearing) {
      warnings.push_back(absl::StrCat(
          "the cgroup cpuset (", files.Display(cgroup_cpus->path), ") allows CPUs of nodes ",
          FormatIdList(cgroup_nodes), " only, of ", FormatIdList(cpu_bearing)));
    }
  }
  if (scope.allowed_mem_nodes.empty()) {
    warnings.push_back(
        "no memory node is allowed: Mems_allowed_list and the cgroup cpuset "
        "leave none of the online nodes");
  } else if (scope.allowed_mem_nodes != memory_nodes) {
    std::string source =
        cgroup_mems ? absl::StrCat("the cgroup cpuset (", files.Display(cgroup_mems->path), ")")
                    : std::string("Mems_allowed_list of /proc/self/status");
    warnings.push_back(absl::StrCat(source, " limits memory to nodes ",
                                    FormatIdList(scope.allowed_mem_nodes), " of ",
                                    FormatIdList(memory_nodes)));
  }
  return scope;
}

}  // namespace numarena::topology_internal
