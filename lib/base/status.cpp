// Translation of errno values into numarena's status codes (see status.hpp).
#include "numarena/status.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace numarena {
namespace {

// " EISDIR" for errno values the C library can name; "" for one it cannot (a value from a
// newer kernel, or a C library without strerrorname_np), so the message never shows a
// made-up name.
std::string ErrnoNameSuffix(int err) {
  if (err == ENOENT) return " ENOENT";  // without asking: see ErrnoToStatus
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* name = strerrorname_np(err)) return absl::StrCat(" ", name);
#endif
  return "";
}

}  // namespace

Status ErrnoToStatus(int err, std::string_view what) {
  // strerror_r (GNU form: returns the text, in `buffer` or a static string): std::strerror
  // may share one buffer between threads.
  // ENOENT's text and name without asking: topology discovery meets absent optional files
  // under /sys (access classes, hugepage pools) at every start-up, and strerror_r (through
  // gettext) and strerrorname_np reach three 64 KiB windows of libc that are otherwise mapped
  // into no process under `numarena run` for that alone. (The text is glibc's in the C
  // locale, the locale of a process that has not called setlocale.)
  char buffer[256];
  const char* text =
      err == ENOENT ? "No such file or directory" : strerror_r(err, buffer, sizeof buffer);
  std::string message = absl::StrCat(absl::string_view(what.data(), what.size()), ": ", text,
                                     " (errno ", err, ErrnoNameSuffix(err), ")");
  switch (err) {
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(message);
    case ENOENT:
    // No such process: the one a /proc file or a call named has exited (a thread's
    // /proc/self/task/TID/stat opened before and read after it ended gives ESRCH), which a
    // caller treats like a file that is gone.
    case ESRCH:
      return absl::NotFoundError(message);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:  // out of file descriptors (process or system)
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    case EINVAL:
    case EFAULT:
      return absl::InvalidArgumentError(message);
    case EXDEV:
    case ENOSYS:
    case EOPNOTSUPP:
    case ENODEV:
    // A path that is not what was expected: a directory where a file belongs, a file where a
    // directory belongs, a symlink loop, a name too long, a socket (ENXIO from open), a
    // read-only file system.
    case EISDIR:
    case ENOTDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case ENXIO:
    case EROFS:
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
