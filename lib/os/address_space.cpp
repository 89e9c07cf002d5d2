// RLIMIT_AS and the mapped size of the process (address_space.hpp).
#include "os/address_space.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include "os/os.hpp"

namespace numarena::os {

std::optional<std::size_t> AddressSpaceLimit() noexcept {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<std::size_t>(limit.rlim_cur);
}

std::size_t AddressSpaceInUse() noexcept {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[128];
  ssize_t n;
  do {
    n = ::read(fd, text, sizeof text - 1);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return 0;
  std::size_t pages = 0;
  for (ssize_t i = 0; i < n && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (pages > (~std::size_t{0} - 9) / 10) return 0;  // not statm: no such size
    pages = pages * 10 + static_cast<std::size_t>(text[i] - '0');
  }
  return pages * PageSize();
}

}  // namespace numarena::os
