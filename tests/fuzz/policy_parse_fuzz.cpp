// Fuzz target: policy strings (numarena::Policy::Parse), the syntax users type into the C
// API, the CLI and `numarena run`.
//
// Any input must parse or fail with InvalidArgument. A parsed policy must print (ToString)
// as text that parses back to the same policy, so what numarena reports can be pasted back.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "numarena/policy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto policy = numarena::Policy::Parse(text);
  if (!policy.ok()) {
    if (policy.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  auto again = numarena::Policy::Parse(policy->ToString());
  if (!again.ok() || !(*again == *policy)) std::abort();
  return 0;
}
