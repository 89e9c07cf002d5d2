// PCI device discovery: which GPUs, NICs and InfiniBand adapters the machine has, and the
// NUMA node the firmware puts each on. A device whose node is unknown (no numa_node file, or
// -1) keeps node -1 and gets a warning; it is never assumed to be on node 0, since buffers
// placed for it there could be a socket away.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "topology/kernel_files.hpp"
#include "topology/topology_parse.hpp"

namespace numarena::topology_internal {
namespace {

constexpr const char* kPciDir = "/sys/bus/pci/devices";

std::string Hex4(std::uint16_t v) { return absl::StrCat(absl::Hex(v, absl::kZeroPad4)); }

}  // namespace

StatusOr<std::vector<PciDevice>> ReadPciDevices(const KernelFiles& files,
                                                const Topology& topology,
                                                std::vector<std::string>& warnings) {
  std::vector<PciDevice> devices;
  auto entries = files.reader().List(kPciDir);
  if (!entries.ok()) {
    if (absl::IsNotFound(entries.status())) return devices;  // no PCI bus
    warnings.push_back(absl::StrCat("PCI devices not listed: ",
                                    files.WithPath(entries.status(), kPciDir).message()));
    return devices;
  }
  std::sort(entries->begin(), entries->end());
  for (const std::string& bus_id : *entries) {
    std::string dir = absl::StrCat(kPciDir, "/", bus_id);
    std::string class_path = dir + "/class";
    auto class_text = files.ReadOptional(class_path);
    if (!class_text.ok()) return class_text.status();
    if (!class_text->has_value()) continue;
    auto class_code = files.Parse(class_path, **class_text, parse::ParsePciClass);
    if (!class_code.ok()) return class_code.status();
    std::optional<DeviceKind> kind = DeviceKindOfClass(*class_code);
    if (!kind) continue;

    PciDevice device;
    device.bus_id = bus_id;
    device.class_code = *class_code;
    device.kind = *kind;
    const std::pair<const char*, std::uint16_t*> ids[] = {{"vendor", &device.vendor},
                                                          {"device", &device.device}};
    for (auto [file, slot] : ids) {
      std::string path = absl::StrCat(dir, "/", file);
      auto text = files.ReadOptional(path);
      if (!text.ok()) return text.status();
      if (!text->has_value()) continue;  // left 0: unknown
      auto id = files.Parse(path, **text, parse::ParseHexId);
      if (!id.ok()) return id.status();
      *slot = *id;
    }

    std::string label = absl::StrCat(DeviceKindName(device.kind), " ", bus_id, " (",
                                     Hex4(device.vendor), ":", Hex4(device.device), ")");
    std::string node_path = dir + "/numa_node";
    auto node_text = files.ReadOptional(node_path);
    if (!node_text.ok()) return node_text.status();
    if (!node_text->has_value()) {
      warnings.push_back(absl::StrCat(label,
                                             " has no numa_node file: its NUMA node is "
                                             "unknown (kernel without NUMA support?)"));
    } else {
      auto node = files.Parse(node_path, **node_text, parse::ParseNumaNode);
      if (!node.ok()) return node.status();
      if (!node->has_value()) {
        std::string hint = topology.nodes().size() == 1 ? absl::StrCat(" (the machine has one node, ",
                                                                   topology.nodes().front().id, ")")
                                                    : std::string();
        warnings.push_back(absl::StrCat(
            label,
            " has numa_node -1: the firmware gives no proximity, so its NUMA node is "
            "unknown and is not assumed to be node 0; choose the node for its buffers and "
            "threads explicitly",
            hint));
      } else if (!topology.has_node(**node)) {
        warnings.push_back(absl::StrCat(label, " reports numa_node ", **node,
                                               ", which is not an online node; treated as "
                                               "unknown"));
      } else {
        device.node = **node;
      }
    }
    devices.push_back(std::move(device));
  }
  return devices;
}

}  // namespace numarena::topology_internal
