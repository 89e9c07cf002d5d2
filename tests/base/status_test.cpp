// ErrnoToStatus (numarena/status.hpp): the code a caller branches on, and a message that
// keeps the call, the C library's text, and the errno number with its real name.
#include "numarena/status.hpp"

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <string>

namespace {

std::string Message(const numarena::Status& s) { return std::string(s.message()); }

TEST_CASE("ErrnoToStatus names every errno the C library knows") {
  struct Case {
    int err;
    const char* name;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {EPERM, "EPERM", absl::StatusCode::kPermissionDenied},
      {EACCES, "EACCES", absl::StatusCode::kPermissionDenied},
      {ENOENT, "ENOENT", absl::StatusCode::kNotFound},
      {ESRCH, "ESRCH", absl::StatusCode::kNotFound},
      {ENOMEM, "ENOMEM", absl::StatusCode::kResourceExhausted},
      {EMFILE, "EMFILE", absl::StatusCode::kResourceExhausted},
      {ENFILE, "ENFILE", absl::StatusCode::kResourceExhausted},
      {EINVAL, "EINVAL", absl::StatusCode::kInvalidArgument},
      {EISDIR, "EISDIR", absl::StatusCode::kFailedPrecondition},
      {ENOTDIR, "ENOTDIR", absl::StatusCode::kFailedPrecondition},
      {ELOOP, "ELOOP", absl::StatusCode::kFailedPrecondition},
      {ENAMETOOLONG, "ENAMETOOLONG", absl::StatusCode::kFailedPrecondition},
      {ENXIO, "ENXIO", absl::StatusCode::kFailedPrecondition},
      {EROFS, "EROFS", absl::StatusCode::kFailedPrecondition},
      {ENOSYS, "ENOSYS", absl::StatusCode::kFailedPrecondition},
      {EAGAIN, "EAGAIN", absl::StatusCode::kUnavailable},
      {ETIMEDOUT, "ETIMEDOUT", absl::StatusCode::kInternal},
      {EOVERFLOW, "EOVERFLOW", absl::StatusCode::kInternal},
      {EHWPOISON, "EHWPOISON", absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    numarena::Status s = numarena::ErrnoToStatus(c.err, "open /sys/x");
    CHECK(s.code() == c.code);
    CHECK(Message(s).rfind("open /sys/x: ", 0) == 0);
    CHECK(Message(s).find("(errno " + std::to_string(c.err) + " " + c.name + ")") !=
          std::string::npos);
  }
}

TEST_CASE("ErrnoToStatus's own ENOENT text is the C library's in the C locale") {
  // ENOENT's text is not asked of strerror (status.cpp says why): it must read the same.
  CHECK(Message(numarena::ErrnoToStatus(ENOENT, "open /sys/x")) ==
        std::string("open /sys/x: ") + std::strerror(ENOENT) + " (errno " +
            std::to_string(ENOENT) + " " + strerrorname_np(ENOENT) + ")");
}

TEST_CASE("ErrnoToStatus never makes up a name") {
  // No errno has the name "E?"; one the C library does not know keeps just its number.
  for (int err = 1; err < 200; ++err) {
    INFO(err);
    CHECK(Message(numarena::ErrnoToStatus(err, "call")).find("E?") == std::string::npos);
  }
  numarena::Status unknown = numarena::ErrnoToStatus(4000, "call");
  CHECK(unknown.code() == absl::StatusCode::kInternal);
  CHECK(Message(unknown).find("(errno 4000)") != std::string::npos);
}

}  // namespace
