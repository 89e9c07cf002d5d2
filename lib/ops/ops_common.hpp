// Small helpers shared by the operations components (doctor, advise, stat, metrics, report,
// bandwidth, decode): finding a PCI device by a bus id as users type it, reading optional
// kernel files through a SystemReader, and the timestamp the measurement reports carry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "numarena/format.hpp"
#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena::ops {

// The device at `bus_id` ("0000:41:00.0" or the short "41:00.0", case-insensitive), or
// NotFound naming the address and how many devices discovery found.
[[nodiscard]] StatusOr<const PciDevice*> FindDevice(const Topology& topology,
                                                    std::string_view bus_id);

// The file's text, nullopt when it does not exist; other errors are returned.
[[nodiscard]] StatusOr<std::optional<std::string>> ReadOptional(const SystemReader& reader,
                                                                const std::string& path);

// Wraps a parse error of `path` as DataLoss naming the file as the reader shows it.
[[nodiscard]] Status FileError(const SystemReader& reader, const std::string& path,
                               const Status& parse_error);

// The current time in UTC as ISO 8601 to the second, "2025-01-31T12:00:00Z": the
// timestamp_utc of the bandwidth matrix and the decode table.
std::string UtcNow();

// True when "/proc/<pid>" names a plausible process: "self" or a positive decimal number.
bool IsPidArgument(std::string_view pid);

}  // namespace numarena::ops
