// Helpers shared by the operations components (see ops_common.hpp).
#include "ops/ops_common.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace numarena::ops {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

StatusOr<const PciDevice*> FindDevice(const Topology& topology, std::string_view bus_id) {
  std::string wanted = Lower(bus_id);
  for (const PciDevice& device : topology.devices()) {
    std::string have = Lower(device.bus_id);
    if (have == wanted || have == "0000:" + wanted) return &device;
  }
  return absl::NotFoundError(absl::StrCat("no GPU, NIC or InfiniBand device at PCI address '",
                                          wanted, "' (", topology.devices().size(),
                                          " such devices found; `numarena topo` lists them)"));
}

StatusOr<const PciDevice*> FindGpu(const Topology& topology, std::string_view spec) {
  std::string_view index_text = spec;
  if (index_text.substr(0, 5) == "cuda:") index_text.remove_prefix(5);
  const bool is_index = !index_text.empty() && index_text.size() <= 4 &&
                        index_text.find_first_not_of("0123456789") == std::string_view::npos;
  if (is_index) {
    std::vector<const PciDevice*> gpus;
    for (const PciDevice& device : topology.devices()) {
      if (device.kind == DeviceKind::kGpu) gpus.push_back(&device);
    }
    std::sort(gpus.begin(), gpus.end(), [](const PciDevice* a, const PciDevice* b) {
      return Lower(a->bus_id) < Lower(b->bus_id);
    });
    std::size_t index = 0;
    for (char c : index_text) index = index * 10 + static_cast<std::size_t>(c - '0');
    if (index < gpus.size()) return gpus[index];
    std::string known;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      absl::StrAppend(&known, i == 0 ? "" : ", ", "cuda:", i, " = ", gpus[i]->bus_id);
    }
    return absl::NotFoundError(absl::StrCat(
        "no GPU of index ", index, ": ", gpus.size(), " GPU", gpus.size() == 1 ? "" : "s", " found",
        gpus.empty() ? "" : absl::StrCat(" (", known, ")"),
        "; indexes count GPUs in PCI address order, as CUDA_DEVICE_ORDER=PCI_BUS_ID does"));
  }
  auto device = FindDevice(topology, spec);
  if (!device.ok()) return device.status();
  if ((*device)->kind != DeviceKind::kGpu) {
    char class_text[16];
    std::snprintf(class_text, sizeof class_text, "0x%06x", (*device)->class_code);
    return absl::InvalidArgumentError(absl::StrCat(
        (*device)->bus_id, " is ", (*device)->kind == DeviceKind::kInfiniband ? "an " : "a ",
        DeviceKindName((*device)->kind), " (PCI class ", class_text,
        "), not a GPU: GPUs are display controllers (class 0x03xxxx) or processing "
        "accelerators (0x12xxxx); `numarena topo` lists the devices"));
  }
  return device;
}

StatusOr<std::optional<std::string>> ReadOptional(const SystemReader& reader,
                                                  const std::string& path) {
  auto text = reader.Read(path);
  if (text.ok()) return std::optional<std::string>(*std::move(text));
  if (absl::IsNotFound(text.status())) return std::optional<std::string>();
  return text.status();
}

Status FileError(const SystemReader& reader, const std::string& path, const Status& parse_error) {
  return absl::DataLossError(
      absl::StrCat(reader.DisplayPath(path), ": ", std::string(parse_error.message())));
}

Status ThreadStartError(const char* what, int index, int count, const std::system_error& error) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "could not start ", what, " ", index + 1, " of ", count, ": ", error.what(),
      "; the system refused another thread (its thread or memory limit), so ask for fewer "
      "threads"));
}

std::string FormatPageSize(std::size_t bytes) {
  constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  while (unit + 1 < std::size(kUnits) && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrCat(bytes, " ", kUnits[unit]);
}

const HugePagePool* HugePagePoolOf(const NodeInfo& node, std::size_t page_bytes) {
  for (const HugePagePool& pool : node.huge_pages) {
    if (pool.page_bytes == page_bytes) return &pool;
  }
  return nullptr;
}

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

bool IsPidArgument(std::string_view pid) {
  if (pid == "self") return true;
  if (pid.empty() || pid.size() > 9 || pid[0] == '0') return false;
  for (char c : pid) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace numarena::ops
