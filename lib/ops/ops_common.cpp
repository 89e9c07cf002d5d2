// Helpers shared by the operations components (see ops_common.hpp).
#include "ops/ops_common.hpp"

#include <cctype>
#include <chrono>
#include <ctime>

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
