// Fuzz target: the processor field of /proc/PID/stat (lib/ops/ops_parse.hpp). Any input parses
// to a CPU id in range or fails with InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ops/ops_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cpu = numarena::parse::ParseProcStatProcessor(text);
  if (!cpu.ok()) {
    if (cpu.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (*cpu < 0) std::abort();
  return 0;
}
