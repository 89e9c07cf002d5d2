// Translation of errno values into numarena's status codes (see status.hpp).
#include "numarena/status.hpp"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace numarena {
namespace {

const char* ErrnoName(int err) {
  switch (err) {
    case EPERM:
      return "EPERM";
    case ENOENT:
      return "ENOENT";
    case EINTR:
      return "EINTR";
    case EIO:
      return "EIO";
    case E2BIG:
      return "E2BIG";
    case EBADF:
      return "EBADF";
    case EAGAIN:
      return "EAGAIN";
    case ENOMEM:
      return "ENOMEM";
    case EACCES:
      return "EACCES";
    case EFAULT:
      return "EFAULT";
    case EBUSY:
      return "EBUSY";
    case EEXIST:
      return "EEXIST";
    case ENODEV:
      return "ENODEV";
    case EINVAL:
      return "EINVAL";
    case ENOSPC:
      return "ENOSPC";
    case ENOSYS:
      return "ENOSYS";
    case EOPNOTSUPP:
      return "EOPNOTSUPP";
    case ESRCH:
      return "ESRCH";
    case EXDEV:
      return "EXDEV";
    default:
      return "E?";
  }
}

}  // namespace

Status ErrnoToStatus(int err, std::string_view what) {
  std::string message = absl::StrCat(absl::string_view(what.data(), what.size()), ": ",
                                     std::strerror(err), " (errno ", err, " ", ErrnoName(err), ")");
  switch (err) {
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOMEM:
    case ENOSPC:
      return absl::ResourceExhaustedError(message);
    case EINVAL:
    case EFAULT:
      return absl::InvalidArgumentError(message);
    case EXDEV:
    case ENOSYS:
    case EOPNOTSUPP:
    case ENODEV:
    case ESRCH:
      return absl::FailedPreconditionError(message);
    case EAGAIN:
    case EBUSY:
    case EINTR:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace numarena
