// Fuzz target: the kernel's weighted interleave, memory tier and demotion files
// (ReadKernelMemorySettings, lib/topology/kernel_memory.cpp, and its parsers in
// topology_parse.hpp). The input is the text of every one of those files at once, on a
// kernel that has them all. Reading must succeed or fail with DataLoss (never crash); what
// it returns holds weights 1..255 ascending by node, tiers ascending by id with ascending
// node lists. Each parser alone succeeds or fails with InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/topology.hpp"
#include "topology/topology_parse.hpp"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

// Every file of the settings holds `text`.
class SameTextReader : public numarena::SystemReader {
 public:
  explicit SameTextReader(std::string text) : text_(std::move(text)) {}

  numarena::StatusOr<std::string> Read(const std::string& path) const override {
    if (Listing(path).ok() || path.find("/power") != std::string::npos) {
      return absl::NotFoundError(path);
    }
    return text_;
  }

  numarena::StatusOr<std::vector<std::string>> List(const std::string& path) const override {
    return Listing(path);
  }

 private:
  static numarena::StatusOr<std::vector<std::string>> Listing(const std::string& path) {
    if (path == "/sys/kernel/mm/mempolicy/weighted_interleave") {
      return std::vector<std::string>{"node0", "node3", "auto", "other"};
    }
    if (path == "/sys/devices/virtual/memory_tiering") {
      return std::vector<std::string>{"memory_tier4", "memory_tier72", "power", "uevent"};
    }
    return absl::NotFoundError(path);
  }

  std::string text_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace parse = numarena::parse;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto weight = parse::ParseInterleaveWeight(text); weight.ok()) {
    Check(*weight <= 255);
  } else {
    Check(weight.status().code() == absl::StatusCode::kInvalidArgument);
  }
  if (auto flag = parse::ParseSysfsBool(text); !flag.ok()) {
    Check(flag.status().code() == absl::StatusCode::kInvalidArgument);
  }
  if (auto tier = parse::ParseMemoryTierName(text)) Check(*tier >= 0);

  SameTextReader reader{std::string(text)};
  auto settings = numarena::ReadKernelMemorySettings(reader);
  if (!settings.ok()) {
    Check(absl::IsDataLoss(settings.status()));
    return 0;
  }
  int last_node = -1;
  for (const numarena::NodeInterleaveWeight& w : settings->interleave_weights) {
    Check(w.node > last_node && w.weight >= 1 && w.weight <= 255);
    last_node = w.node;
  }
  int last_tier = -1;
  for (const numarena::MemoryTier& tier : settings->memory_tiers) {
    Check(tier.id > last_tier);
    last_tier = tier.id;
    for (std::size_t i = 1; i < tier.nodes.size(); ++i) Check(tier.nodes[i - 1] < tier.nodes[i]);
  }
  return 0;
}
