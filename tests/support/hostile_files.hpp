// Things a hostile or broken machine tree can hold where a kernel file belongs, for the tests
// of the OS layer's file reads (tests/os) and of the CLI on such trees (tests/cli):
//
//   numarena::testing::TempDir dir;
//   numarena::testing::MakeHostile(dir.path() / "meminfo", numarena::testing::Hostile::kFifo);
//
// A link to /dev/zero or /dev/urandom never reaches end of file; a FIFO without a writer
// blocks an ordinary open() forever; a socket cannot be opened at all; a directory, a
// dangling link and a link loop fail in open() or read().
#pragma once

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace numarena::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "numarena_test.XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

enum class Hostile {
  kLinkToZero,     // symlink to /dev/zero: endless zeros
  kLinkToUrandom,  // symlink to /dev/urandom: endless random bytes
  kFifo,           // a named pipe nobody writes to
  kSocket,         // a bound Unix socket (open(2) fails with ENXIO)
  kDirectory,      // a directory (open succeeds, read fails with EISDIR)
  kDanglingLink,   // symlink to a path that does not exist
  kLoopingLink,    // symlink to itself (ELOOP)
};

inline const std::vector<Hostile>& AllHostile() {
  static const std::vector<Hostile> all = {
      Hostile::kLinkToZero, Hostile::kLinkToUrandom, Hostile::kFifo,       Hostile::kSocket,
      Hostile::kDirectory,  Hostile::kDanglingLink,  Hostile::kLoopingLink};
  return all;
}

inline const char* HostileName(Hostile kind) {
  switch (kind) {
    case Hostile::kLinkToZero:
      return "link to /dev/zero";
    case Hostile::kLinkToUrandom:
      return "link to /dev/urandom";
    case Hostile::kFifo:
      return "FIFO";
    case Hostile::kSocket:
      return "socket";
    case Hostile::kDirectory:
      return "directory";
    case Hostile::kDanglingLink:
      return "dangling link";
    case Hostile::kLoopingLink:
      return "looping link";
  }
  return "?";
}

// Replaces whatever is at `at` with a `kind` entry. Throws std::runtime_error on failure.
inline void MakeHostile(const std::filesystem::path& at, Hostile kind) {
  std::error_code ignored;
  std::filesystem::remove_all(at, ignored);
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      throw std::runtime_error(std::string(what) + " " + at.string() + ": " + std::strerror(errno));
    }
  };
  switch (kind) {
    case Hostile::kLinkToZero:
      check(::symlink("/dev/zero", at.c_str()) == 0, "symlink");
      break;
    case Hostile::kLinkToUrandom:
      check(::symlink("/dev/urandom", at.c_str()) == 0, "symlink");
      break;
    case Hostile::kFifo:
      check(::mkfifo(at.c_str(), 0600) == 0, "mkfifo");
      break;
    case Hostile::kSocket: {
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      check(at.string().size() < sizeof address.sun_path, "socket path too long");
      std::strcpy(address.sun_path, at.c_str());
      int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      check(fd >= 0, "socket");
      // The socket file stays after close: only the bound name matters.
      const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
      ::close(fd);
      check(bound, "bind");
      break;
    }
    case Hostile::kDirectory:
      check(::mkdir(at.c_str(), 0700) == 0, "mkdir");
      break;
    case Hostile::kDanglingLink:
      check(::symlink("/nonexistent/numarena/target", at.c_str()) == 0, "symlink");
      break;
    case Hostile::kLoopingLink:
      check(::symlink(at.filename().c_str(), at.c_str()) == 0, "symlink");
      break;
  }
}

}  // namespace numarena::testing
