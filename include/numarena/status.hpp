// Errors in numarena.
//
// Everything that can fail in a way a caller can act on returns `absl::Status` or
// `absl::StatusOr<T>`. The codes carry meaning, so callers can branch on them:
//
//   InvalidArgument     bad input: unknown or offline node id, empty node set, zero weights
//   ResourceExhausted   a budget or the node itself refused the memory
//   PermissionDenied    the kernel refused a policy call with EPERM (seccomp, capabilities)
//   FailedPrecondition  the system cannot do what was asked (cpuset excludes the node,
//                       kernel without NUMA, no hugetlbfs pages configured)
//   NotFound / DataLoss a kernel file is missing / malformed; the message names the file
//                       (NotFound too for a process or thread that has exited, ESRCH)
//   Internal            anything else; errno is kept in the message
//
// Malloc-like hot paths (`Arena::allocate`) return nullptr instead, and the STL adapters
// throw `std::bad_alloc`, because their callers' contracts say so.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace numarena {

using absl::Status;
using absl::StatusOr;

// Maps an errno value from a failed system call to the status code a caller can act on
// and keeps the errno name and number in the message, e.g.
//   "mbind(0x7f.., 4096, MPOL_BIND, nodes=1): Operation not permitted (errno 1 EPERM)".
// `what` names the call and its arguments.
[[nodiscard]] Status ErrnoToStatus(int err, std::string_view what);

}  // namespace numarena
