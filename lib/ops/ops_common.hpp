// Small helpers shared by the operations components (doctor, advise, stat, metrics, report,
// bandwidth, decode): finding a PCI device by a bus id as users type it, reading optional
// kernel files through a SystemReader, and the timestamp the measurement reports carry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "numarena/format.hpp"
#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena::ops {

// The device at `bus_id` ("0000:41:00.0" or the short "41:00.0", case-insensitive), or
// NotFound naming the address and how many devices discovery found.
[[nodiscard]] StatusOr<const PciDevice*> FindDevice(const Topology& topology,
                                                    std::string_view bus_id);

// The GPU `spec` names: a PCI address (as FindDevice takes it), an index "N" or "cuda:N".
// Indexes count the GPUs (display controllers, class 0x03xxxx, and processing accelerators,
// 0x12xxxx) in PCI address order, which is CUDA's numbering under CUDA_DEVICE_ORDER=PCI_BUS_ID
// (CUDA's default order is fastest first and may differ). InvalidArgument when the address
// is a NIC or InfiniBand device (its class in the message), NotFound when no such GPU.
[[nodiscard]] StatusOr<const PciDevice*> FindGpu(const Topology& topology, std::string_view spec);

// The file's text, nullopt when it does not exist; other errors are returned.
[[nodiscard]] StatusOr<std::optional<std::string>> ReadOptional(const SystemReader& reader,
                                                                const std::string& path);

// Wraps a parse error of `path` as DataLoss naming the file as the reader shows it.
[[nodiscard]] Status FileError(const SystemReader& reader, const std::string& path,
                               const Status& parse_error);

// The ResourceExhausted error StartThread returns.
[[nodiscard]] Status ThreadStartError(const char* what, int index, int count,
                                      const std::system_error& error);

// Starts a thread running `body`, or ResourceExhausted when the system refuses it (at the
// process's or the system's thread limit, or without memory for its stack), naming it as
// `what` number index + 1 of `count` and saying to ask for fewer threads. std::thread
// reports that refusal by throwing, which the commands must not let escape.
template <typename Body>
[[nodiscard]] StatusOr<std::thread> StartThread(const char* what, int index, int count,
                                                Body&& body) {
  try {
    return std::thread(std::forward<Body>(body));
  } catch (const std::system_error& e) {
    return ThreadStartError(what, index, count, e);
  }
}

// The current time in UTC as ISO 8601 to the second, "2025-01-31T12:00:00Z": the
// timestamp_utc of the bandwidth matrix and the decode table.
std::string UtcNow();

// A huge page size the way the kernel's documentation names them: "2 MiB", "1 GiB", "64 KiB"
// (whole units, unlike FormatBytes's "2.0 MiB"; sizes that are not whole KiB in bytes).
std::string FormatPageSize(std::size_t bytes);

// `node`'s pool of `page_bytes` huge pages, or nullptr when the node has none of that size.
const HugePagePool* HugePagePoolOf(const NodeInfo& node, std::size_t page_bytes);

// True when "/proc/<pid>" names a plausible process: "self" or a positive decimal number.
bool IsPidArgument(std::string_view pid);

}  // namespace numarena::ops
