// The process's address-space limit (RLIMIT_AS, `ulimit -v`) and how much of it is in use.
// Numarena reserves large ranges of address space that it never commits; the limit counts
// them all the same, so these say whether a reservation can succeed and why it did not.
#pragma once

#include <cstddef>
#include <optional>

namespace numarena::os {

// The soft RLIMIT_AS in bytes; nullopt when unlimited (or unreadable).
std::optional<std::size_t> AddressSpaceLimit() noexcept;

// Bytes of address space the process has mapped now (/proc/self/statm's first field); 0 when
// it cannot be read. Allocation-free.
std::size_t AddressSpaceInUse() noexcept;

}  // namespace numarena::os
