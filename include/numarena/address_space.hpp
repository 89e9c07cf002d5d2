// How much address space numarena reserves, and whether the process's limit allows it.
//
// Every heap of an arena owns ranges of 64 GiB of address space (reserved PROT_NONE and
// MAP_NORESERVE: they cost no memory until pages are committed), so that the owner of any
// pointer is one table lookup. A process address-space limit (RLIMIT_AS, `ulimit -v`, set by
// some batch schedulers and container setups) counts reserved ranges like used memory, so
// below about 130 GiB numarena cannot reserve its first range. These functions let a launcher
// (numarena run) and the malloc override say so at start-up, in one line, with the limit that
// is needed, instead of failing allocations later.
#pragma once

#include <cstddef>
#include <string_view>

#include "numarena/policy.hpp"
#include "numarena/status.hpp"

namespace numarena {

// Bytes of address space an arena of `policy` reserves for its first range per heap: 64 GiB
// per heap plus its page tables, and 64 GiB of alignment padding while a range is being
// reserved. `node_count`: the machine's nodes (Local and Preferred arenas keep a heap per node
// they use; the others one heap). Heaps that grow past 64 GiB reserve more later.
[[nodiscard]] std::size_t ReservedAddressSpace(const Policy& policy, int node_count);

// OK when the process's address-space limit leaves room for `reserved` bytes beyond `in_use`
// (or there is no limit). Otherwise FailedPrecondition with one line: `what` (e.g. "numarena
// run --local"), the limit, what is needed, and the shell command that fixes it.
[[nodiscard]] Status CheckAddressSpaceLimit(std::size_t reserved, std::size_t in_use,
                                            std::string_view what);

// The same for the running process: its RLIMIT_AS against its mapped size plus `reserved`.
[[nodiscard]] Status CheckAddressSpaceLimitNow(std::size_t reserved, std::string_view what);

}  // namespace numarena
