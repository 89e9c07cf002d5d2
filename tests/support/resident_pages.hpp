// How many pages of a range are resident now, by the kernel's own answer (mincore): for tests
// of what memory an allocation made resident, or kept.
//
//   ResidentPages held = CountResident(block, 6 << 20);
//   CHECK(held.resident == held.pages);
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace numarena::testing {

struct ResidentPages {
  std::size_t resident = 0;  // pages mincore says are resident
  std::size_t pages = 0;     // pages asked about; -1 in both when mincore failed
};

// The whole pages of [begin, begin + bytes) (begin is rounded up, the end down to a page).
inline ResidentPages CountResident(const void* begin, std::size_t bytes) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto first = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) / page * page;
  const auto last = (reinterpret_cast<std::uintptr_t>(begin) + bytes) / page * page;
  ResidentPages counted;
  if (last <= first) return counted;
  std::vector<unsigned char> states((last - first) / page);
  if (mincore(reinterpret_cast<void*>(first), last - first, states.data()) != 0) {
    return ResidentPages{static_cast<std::size_t>(-1), static_cast<std::size_t>(-1)};
  }
  counted.pages = states.size();
  for (unsigned char state : states) counted.resident += state & 1;
  return counted;
}

// A large object's rounding to its class: its pages from the one after the page that holds
// the request's last byte to the end of its usable size.
inline ResidentPages CountResidentPastRequest(const void* object, std::size_t request,
                                              std::size_t usable) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const auto* bytes = static_cast<const unsigned char*>(object);
  const std::size_t from = (request + page - 1) / page * page + page;
  return from >= usable ? ResidentPages{} : CountResident(bytes + from, usable - from);
}

// Whether the kernel gives transparent huge pages to ranges that ask for them (madvise or
// always mode); `*modes` gets the sysfs line, for a test that skips saying why. Without them
// base pages hide what a huge page over a range would make resident.
inline bool HugePagesOnRequest(std::string* modes) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::getline(thp, *modes);
  return !modes->empty() && modes->find("[never]") == std::string::npos;
}

}  // namespace numarena::testing
