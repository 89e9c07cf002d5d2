// An in-memory kernel for topology rules that need one exact combination of files: a
// SystemReader over a map from absolute path to contents, with directories implied by the
// files, and helpers that add a node or its HMAT attributes.
//
//   numarena::testing::MapReader r = numarena::testing::MapReader::TwoNodes();
//   r.AddHmat(1, {.initiators = "0", .read_bandwidth = 5000});
//   auto topology = numarena::Topology::discover(r);
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "numarena/topology.hpp"

namespace numarena::testing {

class MapReader : public SystemReader {
 public:
  std::map<std::string, std::string> files;
  std::optional<std::vector<int>> affinity;  // as sched_getaffinity would say, when set

  StatusOr<std::string> Read(const std::string& path) const override {
    auto it = files.find(path);
    if (it == files.end()) return absl::NotFoundError("no file " + path);
    return it->second;
  }
  StatusOr<std::vector<std::string>> List(const std::string& path) const override {
    std::set<std::string> names;
    std::string prefix = path + "/";
    for (const auto& [file, text] : files) {
      if (file.compare(0, prefix.size(), prefix) != 0) continue;
      std::string rest = file.substr(prefix.size());
      names.insert(rest.substr(0, rest.find('/')));
    }
    if (names.empty()) return absl::NotFoundError("no directory " + path);
    return std::vector<std::string>(names.begin(), names.end());
  }
  StatusOr<std::vector<int>> CpuAffinity() const override {
    if (affinity) return *affinity;
    return SystemReader::CpuAffinity();
  }

  static std::string NodeDir(int id) {
    return "/sys/devices/system/node/node" + std::to_string(id);
  }

  // A node with `cpus` (a cpulist, "" for memory-only), a distance row, and `mem_total_kb`
  // of which half is free.
  void AddNode(int id, const std::string& cpus, const std::string& distances,
               std::uint64_t mem_total_kb = 1048576) {
    std::string dir = NodeDir(id);
    files[dir + "/cpulist"] = cpus + "\n";
    files[dir + "/distance"] = distances + "\n";
    std::string n = "Node " + std::to_string(id);
    files[dir + "/meminfo"] = n + " MemTotal: " + std::to_string(mem_total_kb) + " kB\n" + n +
                              " MemFree: " + std::to_string(mem_total_kb / 2) + " kB\n";
  }

  // HMAT access0 attributes of node `id`; a value of 0 leaves its file out.
  struct Hmat {
    std::vector<int> initiators;
    std::uint64_t read_bandwidth = 0;
    std::uint64_t write_bandwidth = 0;
    std::uint64_t read_latency = 0;
    std::uint64_t write_latency = 0;
  };
  void AddHmat(int id, const Hmat& hmat) {
    std::string dir = NodeDir(id) + "/access0/initiators/";
    for (int initiator : hmat.initiators) files[dir + "node" + std::to_string(initiator)] = "";
    auto put = [&](const char* name, std::uint64_t value) {
      if (value != 0) files[dir + name] = std::to_string(value) + "\n";
    };
    put("read_bandwidth", hmat.read_bandwidth);
    put("write_bandwidth", hmat.write_bandwidth);
    put("read_latency", hmat.read_latency);
    put("write_latency", hmat.write_latency);
  }

  // Node `id`'s pool of `page_kb` pages: nr, free and surplus (0) files.
  void AddHugePool(int id, std::uint64_t page_kb, std::uint64_t total, std::uint64_t free) {
    std::string dir = NodeDir(id) + "/hugepages/hugepages-" + std::to_string(page_kb) + "kB/";
    files[dir + "nr_hugepages"] = std::to_string(total) + "\n";
    files[dir + "free_hugepages"] = std::to_string(free) + "\n";
    files[dir + "surplus_hugepages"] = "0\n";
  }

  // Two nodes: 0 with CPUs 0-3, 1 with CPUs 4-7, distance 21.
  static MapReader TwoNodes() {
    MapReader r;
    r.files["/sys/devices/system/node/online"] = "0-1\n";
    r.AddNode(0, "0-3", "10 21");
    r.AddNode(1, "4-7", "21 10");
    return r;
  }
};

}  // namespace numarena::testing
