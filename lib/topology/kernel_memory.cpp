// The kernel's weighted interleave weights, memory tiers and demotion switch (topology.hpp,
// KernelMemorySettings), read through a SystemReader so fixtures stand in for a kernel.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "numarena/topology.hpp"
#include "topology/kernel_files.hpp"
#include "topology/topology_parse.hpp"

namespace numarena {
namespace {

using topology_internal::KernelFiles;

constexpr const char* kWeightsDir = "/sys/kernel/mm/mempolicy/weighted_interleave";
constexpr const char* kTiersDir = "/sys/devices/virtual/memory_tiering";
constexpr const char* kDemotionFile = "/sys/kernel/mm/numa/demotion_enabled";

// An optional file holding a boolean.
StatusOr<std::optional<bool>> ReadBool(const KernelFiles& files, const std::string& path) {
  auto text = files.ReadOptional(path);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return std::optional<bool>();
  auto value = files.Parse(path, **text, parse::ParseSysfsBool);
  if (!value.ok()) return value.status();
  return std::optional<bool>(*value);
}

Status ReadWeights(const KernelFiles& files, KernelMemorySettings& settings) {
  auto entries = files.List(kWeightsDir);
  if (absl::IsNotFound(entries.status())) return absl::OkStatus();
  if (!entries.ok()) return entries.status();
  for (const std::string& entry : *entries) {
    const std::string path = absl::StrCat(kWeightsDir, "/", entry);
    // Linux 6.18 names the file "__auto_type" (its compiler.h defines `auto` as a macro).
    if (entry == "auto" || entry == "__auto_type") {
      auto automatic = ReadBool(files, path);
      if (!automatic.ok()) return automatic.status();
      settings.interleave_weights_auto = *automatic;
      continue;
    }
    std::optional<int> node = parse::ParseNodeEntryName(entry);
    if (!node) continue;
    auto text = files.ReadRequired(path, "the node's weighted interleave weight");
    if (!text.ok()) return text.status();
    auto weight = files.Parse(path, *text, parse::ParseInterleaveWeight);
    if (!weight.ok()) return weight.status();
    settings.interleave_weights.push_back({*node, std::max(*weight, 1u)});
  }
  std::sort(settings.interleave_weights.begin(), settings.interleave_weights.end(),
            [](const NodeInterleaveWeight& a, const NodeInterleaveWeight& b) {
              return a.node < b.node;
            });
  return absl::OkStatus();
}

Status ReadTiers(const KernelFiles& files, KernelMemorySettings& settings) {
  auto entries = files.List(kTiersDir);
  if (absl::IsNotFound(entries.status())) return absl::OkStatus();
  if (!entries.ok()) return entries.status();
  for (const std::string& entry : *entries) {
    std::optional<int> id = parse::ParseMemoryTierName(entry);
    if (!id) continue;
    const std::string path = absl::StrCat(kTiersDir, "/", entry, "/nodelist");
    auto text = files.ReadRequired(path, "the memory tier's nodes");
    if (!text.ok()) return text.status();
    auto nodes = files.Parse(path, *text, parse::ParseNodeList);
    if (!nodes.ok()) return nodes.status();
    settings.memory_tiers.push_back({*id, *std::move(nodes)});
  }
  std::sort(settings.memory_tiers.begin(), settings.memory_tiers.end(),
            [](const MemoryTier& a, const MemoryTier& b) { return a.id < b.id; });
  return absl::OkStatus();
}

}  // namespace

unsigned KernelMemorySettings::interleave_weight(int node) const {
  for (const NodeInterleaveWeight& w : interleave_weights) {
    if (w.node == node) return w.weight;
  }
  return 0;
}

int KernelMemorySettings::tier_of(int node) const {
  for (const MemoryTier& tier : memory_tiers) {
    if (std::binary_search(tier.nodes.begin(), tier.nodes.end(), node)) return tier.id;
  }
  return -1;
}

StatusOr<KernelMemorySettings> ReadKernelMemorySettings(const SystemReader& reader) {
  KernelFiles files(reader);
  KernelMemorySettings settings;
  if (Status s = ReadWeights(files, settings); !s.ok()) return s;
  if (Status s = ReadTiers(files, settings); !s.ok()) return s;
  auto demotion = ReadBool(files, kDemotionFile);
  if (!demotion.ok()) return demotion.status();
  settings.demotion_enabled = *demotion;
  return settings;
}

StatusOr<KernelMemorySettings> ReadKernelMemorySettings() {
  return ReadKernelMemorySettings(*MakeRootedReader());
}

}  // namespace numarena
