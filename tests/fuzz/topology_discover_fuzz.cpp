// Fuzz target: whole-machine discovery (Topology::discover) over an in-memory tree.
//
// The input is a set of files: a line "@@ <absolute path>" starts a file, the lines up to
// the next "@@ " line are its contents. For example
//   @@ /sys/devices/system/node/online
//   0-1
//   @@ /sys/devices/system/node/node0/cpulist
//   0-3
// Discovery must succeed or fail with NotFound / DataLoss (never crash), and a topology
// it returns must be consistent: nodes ascending; distances defined between every pair;
// nodes_by_distance a permutation starting at its node; every CPU of a node mapping back
// to it and to no other; devices only on online nodes; allowed memory nodes online.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/topology.hpp"

namespace {

class FuzzReader : public numarena::SystemReader {
 public:
  explicit FuzzReader(std::string_view text) {
    std::string* current = nullptr;
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(start, end - start);
      start = end + 1;
      if (line.substr(0, 3) == "@@ ") {
        current = &files_[std::string(line.substr(3))];
        current->clear();
      } else if (current != nullptr) {
        current->append(line.data(), line.size());
        current->push_back('\n');
      }
    }
  }

  numarena::StatusOr<std::string> Read(const std::string& path) const override {
    auto it = files_.find(path);
    if (it == files_.end()) return absl::NotFoundError(path);
    return it->second;
  }

  numarena::StatusOr<std::vector<std::string>> List(const std::string& path) const override {
    std::set<std::string> names;
    std::string prefix = path + "/";
    for (const auto& entry : files_) {
      const std::string& file = entry.first;
      if (file.compare(0, prefix.size(), prefix) != 0 || file.size() == prefix.size()) continue;
      std::string rest = file.substr(prefix.size());
      names.insert(rest.substr(0, rest.find('/')));
    }
    if (names.empty()) return absl::NotFoundError(path);
    return std::vector<std::string>(names.begin(), names.end());
  }

 private:
  std::map<std::string, std::string> files_;
};

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzReader reader(std::string_view(reinterpret_cast<const char*>(data), size));
  auto topo = numarena::Topology::discover(reader);
  if (!topo.ok()) {
    Check(absl::IsNotFound(topo.status()) || absl::IsDataLoss(topo.status()));
    return 0;
  }
  std::vector<int> ids = topo->node_ids();
  Check(!ids.empty());
  Check(std::is_sorted(ids.begin(), ids.end()));
  Check(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  for (int from : ids) {
    for (int to : ids) {
      int d = topo->distance(from, to);
      Check(d >= 0 && d <= 255);
    }
    std::vector<int> order = topo->nodes_by_distance(from);
    Check(!order.empty() && order.front() == from);
    std::sort(order.begin(), order.end());
    Check(order == ids);
    for (int cpu : topo->cpus_of_node(from)) {
      auto owner = topo->node_of_cpu(cpu);
      Check(owner.ok() && *owner == from);
    }
  }
  for (const numarena::PciDevice& d : topo->devices()) {
    if (d.node) Check(topo->has_node(*d.node));
  }
  for (int node : topo->process().allowed_mem_nodes) Check(topo->memory_allowed(node));
  return 0;
}
