// How much address space numarena reserves, and the RLIMIT_AS check (numarena/address_space.hpp).
#include "numarena/address_space.hpp"

#include <optional>

#include "absl/strings/str_cat.h"
#include "alloc/node_pages.hpp"
#include "numarena/format.hpp"
#include "os/address_space.hpp"

namespace numarena {
namespace {

// A range's page tables: two bytes of state per page, plus the header (see NodePages::Range).
constexpr std::size_t kTableBytesPerRange = NodePages::kRangeBytes / 4096 * 2 + (1 << 20);

}  // namespace

std::size_t ReservedAddressSpace(const Policy& policy, int node_count) {
  const bool heap_per_node =
      policy.kind() == PolicyKind::kLocal || policy.kind() == PolicyKind::kPreferred;
  const std::size_t heaps =
      heap_per_node ? static_cast<std::size_t>(node_count > 0 ? node_count : 1) : 1;
  return heaps * (NodePages::kRangeBytes + kTableBytesPerRange) + NodePages::kRangeBytes;
}

Status CheckAddressSpaceLimit(std::size_t reserved, std::size_t in_use, std::string_view what) {
  const std::optional<std::size_t> limit = os::AddressSpaceLimit();
  std::size_t needed;
  if (!limit || __builtin_add_overflow(reserved, in_use, &needed) || needed <= *limit) {
    return Status();
  }
  // `ulimit -v` counts KiB; round up, with 1 GiB for the program's own growth.
  const std::size_t suggested_kib = (needed >> 10) + (std::size_t{1} << 20);
  return absl::FailedPreconditionError(absl::StrCat(
      absl::string_view(what.data(), what.size()), ": the address-space limit (RLIMIT_AS, ulimit -v) is ", FormatBytes(*limit),
      ", but numarena reserves ", FormatBytes(reserved),
      " of address space (64 GiB ranges, reserved and never committed: they cost no memory)",
      in_use > 0 ? absl::StrCat(" beside the ", FormatBytes(in_use), " mapped now") : "",
      "; raise the limit (ulimit -v ", suggested_kib, ", or ulimit -v unlimited) or run without "
      "numarena"));
}

Status CheckAddressSpaceLimitNow(std::size_t reserved, std::string_view what) {
  return CheckAddressSpaceLimit(reserved, os::AddressSpaceInUse(), what);
}

}  // namespace numarena
