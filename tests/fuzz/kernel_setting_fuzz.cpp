// Fuzz target: the small kernel setting files doctor reads (lib/ops/ops_parse.hpp): sysctl
// integers, THP selectors and IRQ affinity lists. Each parser either succeeds or fails with
// InvalidArgument; a parsed selector's choice is one of its options, a parsed integer
// prints back to the trimmed input (modulo leading zeros), an affinity list is ascending.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ops/ops_parse.hpp"

namespace {

void ExpectInvalid(const numarena::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto value = numarena::parse::ParseSysctlInteger(text); !value.ok()) {
    ExpectInvalid(value.status());
  } else if (numarena::parse::ParseSysctlInteger(std::to_string(*value)).value() != *value) {
    std::abort();
  }
  if (auto selector = numarena::parse::ParseSelector(text); !selector.ok()) {
    ExpectInvalid(selector.status());
  } else {
    bool found = false;
    for (const auto& option : selector->options) found = found || option == selector->selected;
    if (!found || selector->selected.empty()) std::abort();
  }
  if (auto cpus = numarena::parse::ParseIrqAffinityList(text); !cpus.ok()) {
    ExpectInvalid(cpus.status());
  } else {
    for (std::size_t i = 1; i < cpus->size(); ++i) {
      if ((*cpus)[i - 1] >= (*cpus)[i]) std::abort();
    }
  }
  return 0;
}
