// Linux implementation of the OS layer (os.hpp). Nothing else in numarena makes a memory
// policy system call, includes <sys/mman.h> or <sched.h>, or opens files under /sys and /proc.
//
// The policy calls (mbind, set_mempolicy, get_mempolicy, move_pages) are made directly, not
// through libnuma's wrappers of the same names: linking libnuma runs its constructor in every
// process that loads numarena, which reads /proc/self/status and /sys/devices/system/node
// through stdio and formats a path per node, whether or not the process ever places a page.
// Under `numarena run` that is every program, and it cost each 0.15-0.45 MiB of resident
// memory (bench/RESULTS.md, "The fixed cost, the text layout, and freed memory on growth").
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "os/current_node.hpp"
#include "os/os.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#ifndef MPOL_PREFERRED_MANY
#define MPOL_PREFERRED_MANY 5  // <linux/mempolicy.h> since 5.15; older headers lack it
#endif
#ifndef MPOL_WEIGHTED_INTERLEAVE
#define MPOL_WEIGHTED_INTERLEAVE 6  // <linux/mempolicy.h> since 6.9
#endif

namespace numarena::os {
namespace {

// The kernel's calls, with libnuma's argument types; -1 and errno on failure.
long SysMbind(void* addr, unsigned long len, int mode, const unsigned long* nodemask,
              unsigned long maxnode, unsigned flags) {
  return ::syscall(SYS_mbind, addr, len, mode, nodemask, maxnode, flags);
}
long SysSetMempolicy(int mode, const unsigned long* nodemask, unsigned long maxnode) {
  return ::syscall(SYS_set_mempolicy, mode, nodemask, maxnode);
}
long SysGetMempolicy(int* mode, unsigned long* nodemask, unsigned long maxnode, void* addr,
                     unsigned long flags) {
  return ::syscall(SYS_get_mempolicy, mode, nodemask, maxnode, addr, flags);
}
long SysMovePages(int pid, unsigned long count, void** pages, const int* nodes, int* status,
                  int flags) {
  return ::syscall(SYS_move_pages, pid, count, pages, nodes, status, flags);
}

constexpr std::size_t kBitsPerWord = sizeof(unsigned long) * 8;
// move_pages copies its arrays into the kernel; batches keep that allocation small.
constexpr std::size_t kMovePagesBatch = 1024;

std::string Hex(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<std::uintptr_t>(p)));
}

int ToKernelMode(PolicyMode mode) {
  switch (mode) {
    case PolicyMode::kDefault:
      return MPOL_DEFAULT;
    case PolicyMode::kBind:
      return MPOL_BIND;
    case PolicyMode::kPreferred:
      return MPOL_PREFERRED;
    case PolicyMode::kInterleave:
      return MPOL_INTERLEAVE;
    case PolicyMode::kLocal:
      return MPOL_LOCAL;
    case PolicyMode::kPreferredMany:
      return MPOL_PREFERRED_MANY;
    case PolicyMode::kWeightedInterleave:
      return MPOL_WEIGHTED_INTERLEAVE;
  }
  return MPOL_DEFAULT;
}

std::atomic<int> g_kernel_has_preferred_many{-1};

// Runs `call(kernel_mode)`; for kPreferredMany, a kernel that does not know the mode (EINVAL
// before 5.15) gets MPOL_PREFERRED instead, which it applies to the mask's lowest node. An
// EINVAL that MPOL_PREFERRED repeats was about the nodes, not the mode, and is returned.
template <typename Call>
long WithPreferredManyFallback(PolicyMode mode, Call call) {
  long rc = call(ToKernelMode(mode));
  if (mode != PolicyMode::kPreferredMany) return rc;
  if (rc == 0) {
    g_kernel_has_preferred_many.store(1, std::memory_order_relaxed);
    return rc;
  }
  if (errno != EINVAL || g_kernel_has_preferred_many.load(std::memory_order_relaxed) == 1) {
    return rc;
  }
  rc = call(MPOL_PREFERRED);
  if (rc == 0) g_kernel_has_preferred_many.store(0, std::memory_order_relaxed);
  return rc;
}

// A node mask sized for the kernel: at least the possible node count, and large enough for
// the highest id asked for (which the kernel then rejects with a clear EINVAL).
struct NodeMask {
  std::vector<unsigned long> words;
  unsigned long max_node = 0;  // the `maxnode` argument: bits in `words`, plus one.

  explicit NodeMask(std::span<const int> nodes) {
    int highest = PossibleNodeCount() - 1;
    for (int n : nodes) highest = std::max(highest, n);
    std::size_t word_count = static_cast<std::size_t>(highest) / kBitsPerWord + 1;
    words.assign(word_count, 0);
    for (int n : nodes) {
      if (n >= 0) words[n / kBitsPerWord] |= 1UL << (n % kBitsPerWord);
    }
    // The kernel reads maxnode-1 bits (a historical off-by-one libnuma also follows).
    max_node = word_count * kBitsPerWord + 1;
  }
};

Status BatchedMovePages(std::span<void* const> pages, const int* target, std::span<int> status,
                        const char* what) {
  if (pages.size() != status.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": pages and status differ in size"));
  }
  for (std::size_t first = 0; first < pages.size(); first += kMovePagesBatch) {
    std::size_t count = std::min(kMovePagesBatch, pages.size() - first);
    long rc = SysMovePages(0, count, const_cast<void**>(pages.data() + first),
                         target == nullptr ? nullptr : target + first, status.data() + first,
                         MPOL_MF_MOVE);
    if (rc < 0) {
      return ErrnoToStatus(errno,
                           absl::StrCat(what, "(", count, " pages from ", Hex(pages[first]), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

const char* FileTypeName(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    default:
      return "not a regular file";
  }
}

}  // namespace

StatusOr<std::string> ReadFile(const std::string& path, std::size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO without a writer (or a device) would otherwise wait forever;
  // it is refused below before any read. O_NOCTTY: a terminal never becomes ours.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, absl::StrCat("fstat ", path));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    // A directory keeps its errno name, as read(2) would report it.
    if (S_ISDIR(info.st_mode)) return ErrnoToStatus(EISDIR, absl::StrCat("read ", path));
    // /dev/zero or /dev/urandom (e.g. behind a symlink in a recorded tree) would never end,
    // a FIFO or socket may never answer: kernel files under /sys and /proc are regular.
    return absl::FailedPreconditionError(absl::StrCat(
        "read ", path, ": ", FileTypeName(info.st_mode),
        ", not a regular file; numarena reads only regular files (as the kernel's files under "
        "/sys and /proc are)"));
  }
  auto too_large = [&] {
    return absl::FailedPreconditionError(absl::StrCat(
        "read ", path, ": larger than ", max_bytes,
        " bytes, the most numarena reads from one file; no kernel file it reads is that large, "
        "so this is not the file it expects"));
  };
  // sysfs reports 4096 and procfs 0 whatever the content: st_size only refuses early.
  if (static_cast<std::uint64_t>(info.st_size) > max_bytes) {
    ::close(fd);
    return too_large();
  }
  std::string out;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    if (static_cast<std::size_t>(n) > max_bytes - out.size()) {
      ::close(fd);
      return too_large();
    }
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
  // getdents64 rather than opendir/readdir: those sit in a part of libc no other start-up
  // call reaches, a 64 KiB fault-around window of it mapped into every process under
  // `numarena run` for one listing of /sys (bench/RESULTS.md, "The fixed cost, the text
  // layout, and freed memory on growth").
  // O_DIRECTORY: a FIFO or a device is refused (ENOTDIR) before it could block.
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open directory ", path));
  // struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[].
  constexpr std::size_t kRecordLengthAt = 16, kNameAt = 19;
  alignas(8) char buffer[4096];
  std::vector<std::string> names;
  for (;;) {
    const long filled = ::syscall(SYS_getdents64, fd, buffer, sizeof buffer);
    if (filled < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, absl::StrCat("getdents64 ", path));
    }
    if (filled == 0) break;
    for (std::size_t at = 0; at + kNameAt < static_cast<std::size_t>(filled);) {
      std::uint16_t length;
      std::memcpy(&length, buffer + at + kRecordLengthAt, sizeof length);
      if (length <= kNameAt || at + length > static_cast<std::size_t>(filled)) break;
      const std::string_view name(buffer + at + kNameAt,
                                  ::strnlen(buffer + at + kNameAt, length - kNameAt));
      if (name != "." && name != "..") names.emplace_back(name);
      at += length;
    }
  }
  ::close(fd);
  return names;
}

StatusOr<std::string> ReadLink(const std::string& path) {
  char buffer[4096];
  ssize_t n = ::readlink(path.c_str(), buffer, sizeof buffer - 1);
  if (n < 0) return ErrnoToStatus(errno, absl::StrCat("readlink ", path));
  return std::string(buffer, static_cast<std::size_t>(n));
}

std::string GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::size_t PageSize() {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

StatusOr<void*> ReserveAddressSpace(std::size_t bytes, std::size_t alignment) {
  void* reserved = nullptr;
  if (int err = ReserveAddressSpaceNoAlloc(bytes, alignment, &reserved); err != 0) {
    return ErrnoToStatus(
        err, absl::StrCat("mmap(reserve ", bytes, " bytes aligned to ", alignment, ")"));
  }
  return reserved;
}

Status CommitRange(void* addr, std::size_t bytes) {
  if (::mprotect(addr, bytes, PROT_READ | PROT_WRITE) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("mprotect(", Hex(addr), ", ", bytes, ", RW)"));
  }
  return absl::OkStatus();
}

Status DecommitRange(void* addr, std::size_t bytes) {
  // MAP_FIXED over the range drops its pages and its memory policy in one call.
  void* p = ::mmap(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                   -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap(decommit ", Hex(addr), ", ", bytes, ")"));
  }
  return absl::OkStatus();
}

StatusOr<void*> MapAnonymous(std::size_t bytes, std::size_t alignment) {
  if (alignment <= PageSize()) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return ErrnoToStatus(errno, absl::StrCat("mmap(", bytes, " bytes)"));
    return p;
  }
  auto reserved = ReserveAddressSpace(bytes, alignment);
  if (!reserved.ok()) return reserved.status();
  if (Status s = CommitRange(*reserved, bytes); !s.ok()) {
    Unmap(*reserved, bytes);
    return s;
  }
  return *reserved;
}

StatusOr<void*> MapHugetlb(std::size_t bytes, std::size_t huge_page_bytes) {
  int shift = 0;
  while ((std::size_t{1} << shift) < huge_page_bytes) ++shift;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (shift << MAP_HUGE_SHIFT);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    Status s =
        ErrnoToStatus(err, absl::StrCat("mmap(MAP_HUGETLB ", huge_page_bytes >> 20, " MiB pages, ",
                                        bytes, " bytes); check /sys/kernel/mm/hugepages/hugepages-",
                                        huge_page_bytes >> 10, "kB/nr_hugepages"));
    if (err == ENOMEM || err == EINVAL) return absl::FailedPreconditionError(s.message());
    return s;
  }
  return p;
}

void Unmap(void* addr, std::size_t bytes) { ::munmap(addr, bytes); }

Status PurgeRange(void* addr, std::size_t bytes) {
  if (::madvise(addr, bytes, MADV_DONTNEED) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("madvise(", Hex(addr), ", ", bytes, ", DONTNEED)"));
  }
  return absl::OkStatus();
}

Status AdviseHugePages(void* addr, std::size_t bytes) {
  if (::madvise(addr, bytes, MADV_HUGEPAGE) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("madvise(", Hex(addr), ", ", bytes, ", HUGEPAGE)"));
  }
  return absl::OkStatus();
}

Status AdviseNoHugePages(void* addr, std::size_t bytes) {
  if (::madvise(addr, bytes, MADV_NOHUGEPAGE) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("madvise(", Hex(addr), ", ", bytes, ", NOHUGEPAGE)"));
  }
  return absl::OkStatus();
}

StatusOr<bool> RangeIsMapped(const void* addr, std::size_t bytes) {
  const std::size_t page = PageSize();
  auto begin = reinterpret_cast<std::uintptr_t>(addr) & ~(page - 1);
  std::uintptr_t last;  // the last byte of the range
  if (bytes == 0) return true;
  if (__builtin_add_overflow(reinterpret_cast<std::uintptr_t>(addr), bytes - 1, &last)) {
    return false;  // runs past the top of the address space, which is never mapped
  }
  const std::uintptr_t pages = (last - begin) / page + 1;
  // In batches, so the residency vector has a fixed size whatever the range.
  constexpr std::uintptr_t kBatch = 4096;
  unsigned char residency[kBatch];
  for (std::uintptr_t done = 0; done < pages;) {
    const std::uintptr_t count = std::min(kBatch, pages - done);
    if (::mincore(reinterpret_cast<void*>(begin + done * page), count * page, residency) != 0) {
      if (errno == ENOMEM) return false;
      return ErrnoToStatus(errno, absl::StrCat("mincore(", Hex(addr), ", ", bytes, ")"));
    }
    done += count;
  }
  return true;
}

StatusOr<std::uintptr_t> NextMappingStart(std::uintptr_t addr) {
  StatusOr<std::string> maps = ReadFile("/proc/self/maps");
  if (!maps.ok()) return maps.status();
  std::uintptr_t next = UINTPTR_MAX;
  std::string_view text = *maps;
  while (!text.empty()) {
    std::size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    // "start-end perms offset dev inode path", addresses in hex.
    std::size_t dash = line.find('-');
    std::size_t space = line.find(' ');
    if (dash == std::string_view::npos || space == std::string_view::npos || space < dash) continue;
    std::uintptr_t start = 0, end = 0;
    const char* text_end = line.data() + space;
    if (std::from_chars(line.data(), line.data() + dash, start, 16).ptr != line.data() + dash ||
        std::from_chars(line.data() + dash + 1, text_end, end, 16).ptr != text_end) {
      continue;
    }
    if (addr >= start && addr < end) return addr;
    if (start > addr) next = std::min<std::uintptr_t>(next, start);
  }
  return next;
}

Status PopulateWrite(void* addr, std::size_t bytes) {
  // Kernels that know MADV_POPULATE_WRITE accept it for an empty range; older ones say EINVAL
  // for any range. A kernel that knows it also says EINVAL for a range it cannot write
  // (PROT_NONE, read-only), which the byte-touching fallback would turn into a SIGSEGV.
  static const bool kernel_populates = ::madvise(nullptr, 0, MADV_POPULATE_WRITE) == 0;
  if (::madvise(addr, bytes, MADV_POPULATE_WRITE) == 0) return absl::OkStatus();
  const int err = errno;
  if (err != EINVAL || kernel_populates) {
    return ErrnoToStatus(err, absl::StrCat("madvise(", Hex(addr), ", ", bytes, ", POPULATE_WRITE)",
                                           err == EINVAL ? ": the range is not writable" : ""));
  }
  // Kernels before 5.14: touch one byte per page, preserving the contents.
  auto* bytes_ptr = static_cast<volatile unsigned char*>(addr);
  for (std::size_t off = 0; off < bytes; off += PageSize()) {
    bytes_ptr[off] = bytes_ptr[off];
  }
  return absl::OkStatus();
}

int PossibleNodeCount() {
  static const int count = [] {
    // get_mempolicy refuses (EINVAL) a mask shorter than the kernel's node id range
    // (nr_node_ids, at most MAX_NUMNODES = 1024; before Linux 4.17, MAX_NUMNODES itself): the
    // shortest it takes, in whole words, holds every possible node. A kernel without NUMA
    // (ENOSYS) or a filter that refuses the call (EPERM) leaves one node, as libnuma's
    // numa_available() would.
    constexpr unsigned long kMaxBits = 1024;
    unsigned long words[kMaxBits / kBitsPerWord];
    for (unsigned long bits = kBitsPerWord; bits <= kMaxBits; bits += kBitsPerWord) {
      int mode = 0;
      if (SysGetMempolicy(&mode, words, bits, nullptr, 0) == 0) return static_cast<int>(bits);
      if (errno != EINVAL) return 1;
    }
    return static_cast<int>(kMaxBits);
  }();
  return count;
}

const char* PolicyModeName(PolicyMode mode) {
  switch (mode) {
    case PolicyMode::kDefault:
      return "MPOL_DEFAULT";
    case PolicyMode::kBind:
      return "MPOL_BIND";
    case PolicyMode::kPreferred:
      return "MPOL_PREFERRED";
    case PolicyMode::kInterleave:
      return "MPOL_INTERLEAVE";
    case PolicyMode::kLocal:
      return "MPOL_LOCAL";
    case PolicyMode::kPreferredMany:
      return "MPOL_PREFERRED_MANY";
    case PolicyMode::kWeightedInterleave:
      return "MPOL_WEIGHTED_INTERLEAVE";
  }
  return "MPOL_?";
}

int KernelHasPreferredMany() { return g_kernel_has_preferred_many.load(std::memory_order_relaxed); }

// The kernel has no notion of a negative node: a NodeMask would silently drop it, and an
// empty mask means "local" to MPOL_PREFERRED, so a bad id must be refused here.
Status CheckNodeIds(std::span<const int> nodes, const char* call) {
  for (int n : nodes) {
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          call, ": node id ", n, " is negative (nodes=", absl::StrJoin(nodes, ","), ")"));
    }
  }
  return absl::OkStatus();
}

Status BindRange(void* addr, std::size_t bytes, PolicyMode mode, std::span<const int> nodes,
                 unsigned flags) {
  bool without_nodes = mode == PolicyMode::kDefault || mode == PolicyMode::kLocal;
  if (!without_nodes) {
    if (Status s = CheckNodeIds(nodes, "mbind"); !s.ok()) return s;
  }
  NodeMask mask(without_nodes ? std::span<const int>() : nodes);
  long rc = WithPreferredManyFallback(mode, [&](int kernel_mode) {
    return SysMbind(addr, bytes, kernel_mode, without_nodes ? nullptr : mask.words.data(),
                 without_nodes ? 0 : mask.max_node, flags);
  });
  if (rc != 0) {
    return ErrnoToStatus(errno,
                         absl::StrCat("mbind(", Hex(addr), ", ", bytes, ", ", PolicyModeName(mode),
                                      ", nodes=", absl::StrJoin(nodes, ","), ")"));
  }
  return absl::OkStatus();
}

Status SetThreadPolicy(PolicyMode mode, std::span<const int> nodes) {
  bool without_nodes = mode == PolicyMode::kDefault || mode == PolicyMode::kLocal;
  if (!without_nodes) {
    if (Status s = CheckNodeIds(nodes, "set_mempolicy"); !s.ok()) return s;
  }
  NodeMask mask(without_nodes ? std::span<const int>() : nodes);
  long rc = WithPreferredManyFallback(mode, [&](int kernel_mode) {
    return SysSetMempolicy(kernel_mode, without_nodes ? nullptr : mask.words.data(),
                         without_nodes ? 0 : mask.max_node);
  });
  if (rc != 0) {
    return ErrnoToStatus(errno, absl::StrCat("set_mempolicy(", PolicyModeName(mode),
                                             ", nodes=", absl::StrJoin(nodes, ","), ")"));
  }
  return absl::OkStatus();
}

StatusOr<int> NodeOfAddress(void* addr) {
  int node = -1;
  if (SysGetMempolicy(&node, nullptr, 0, addr, MPOL_F_NODE | MPOL_F_ADDR) != 0) {
    return ErrnoToStatus(errno,
                         absl::StrCat("get_mempolicy(MPOL_F_NODE|MPOL_F_ADDR, ", Hex(addr), ")"));
  }
  return node;
}

StatusOr<int> KernelPolicyModeOfAddress(void* addr) {
  int mode = -1;
  if (SysGetMempolicy(&mode, nullptr, 0, addr, MPOL_F_ADDR) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("get_mempolicy(MPOL_F_ADDR, ", Hex(addr), ")"));
  }
  // <linux/mempolicy.h>'s MPOL_MODE_FLAGS: MPOL_F_STATIC_NODES, _RELATIVE_NODES, _NUMA_BALANCING.
  constexpr int kModeFlags = (1 << 15) | (1 << 14) | (1 << 13);
  return mode & ~kModeFlags;
}

std::optional<KernelVersion> ParseKernelRelease(std::string_view release) {
  KernelVersion version;
  const char* end = release.data() + release.size();
  auto major = std::from_chars(release.data(), end, version.major);
  if (major.ec != std::errc() || major.ptr == end || *major.ptr != '.') return std::nullopt;
  auto minor = std::from_chars(major.ptr + 1, end, version.minor);
  if (minor.ec != std::errc() || minor.ptr == major.ptr + 1) return std::nullopt;
  if (version.major < 0 || version.minor < 0) return std::nullopt;
  return version;
}

std::optional<KernelVersion> RunningKernel() {
  static const std::optional<KernelVersion> running = [] {
    struct utsname name;
    if (uname(&name) != 0) return std::optional<KernelVersion>();
    return ParseKernelRelease(name.release);
  }();
  return running;
}

PlacementCallProbe ProbePlacementCalls(int node) {
  PlacementCallProbe probe;
  std::thread worker([&] {
    const std::size_t page = PageSize();
    void* memory = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      probe = {errno, errno, errno, errno};
      return;
    }
    const int nodes[] = {node};
    NodeMask mask(nodes);
    probe.mbind =
        SysMbind(memory, page, MPOL_BIND, mask.words.data(), mask.max_node, 0) == 0 ? 0 : errno;
    static_cast<char*>(memory)[0] = 1;
    ThreadPolicy current;
    probe.get_mempolicy = GetThreadPolicyNoAlloc(&current);
    if (probe.get_mempolicy != 0) current = ThreadPolicy{};  // MPOL_DEFAULT: this thread only
    probe.set_mempolicy = SetThreadPolicyNoAlloc(current);
    void* pages[] = {memory};
    int status[] = {0};
    probe.move_pages = SysMovePages(0, 1, pages, nullptr, status, 0) == 0 ? 0 : errno;
    ::munmap(memory, page);
  });
  worker.join();
  return probe;
}

Status QueryPageNodes(std::span<void* const> pages, std::span<int> status) {
  return BatchedMovePages(pages, nullptr, status, "move_pages(query)");
}

Status MovePages(std::span<void* const> pages, std::span<const int> target, std::span<int> status) {
  if (target.size() != pages.size()) {
    return absl::InvalidArgumentError("move_pages: pages and target nodes differ in size");
  }
  return BatchedMovePages(pages, target.data(), status, "move_pages(move)");
}

namespace {
// sched_getaffinity of thread `tid` (0: the calling thread).
StatusOr<std::vector<int>> AffinityOf(pid_t tid) {
  // The set grows until the kernel takes it (EINVAL while it is shorter than the kernel's
  // CPU ids), so machines with more than 1024 CPUs work. The system call itself, not glibc's
  // wrapper: the kernel writes the bytes it has and the rest stays zeroed, as the wrapper
  // would leave it, and no start-up call of the override reaches that part of libc
  // otherwise (see ListDirectory).
  std::size_t cpus = 1024;
  for (int attempt = 0; attempt < 8; ++attempt, cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    std::size_t size = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(size, set);
    if (::syscall(SYS_sched_getaffinity, tid, size, set) < 0) {
      int err = errno;
      CPU_FREE(set);
      if (err == EINVAL) continue;
      return ErrnoToStatus(err, "sched_getaffinity");
    }
    std::vector<int> out;
    for (std::size_t cpu = 0; cpu < size * 8; ++cpu) {
      if (CPU_ISSET_S(cpu, size, set)) out.push_back(static_cast<int>(cpu));
    }
    CPU_FREE(set);
    return out;
  }
  return absl::InternalError("sched_getaffinity: CPU mask larger than expected");
}
}  // namespace

StatusOr<std::vector<int>> ThreadAffinity() { return AffinityOf(0); }

namespace {
unsigned CallingThreadCpuCount() {
  // 8192 CPUs: Debian's kernels' NR_CPUS. A kernel built for more refuses the mask (EINVAL),
  // and then the online count stands in.
  unsigned long mask[8192 / kBitsPerWord] = {};
  const long filled = ::syscall(SYS_sched_getaffinity, 0, sizeof mask, mask);
  if (filled <= 0) return std::max(std::thread::hardware_concurrency(), 1u);
  unsigned count = 0;
  for (std::size_t word = 0; word < static_cast<std::size_t>(filled) / sizeof mask[0]; ++word) {
    count += static_cast<unsigned>(__builtin_popcountl(mask[word]));
  }
  return std::max(count, 1u);
}

// Asked at load, on the main thread, before the program's own code runs (a constructor of
// the jemalloc options may have asked already).
[[gnu::constructor]] void AskAllowedCpuCountAtLoad() { (void)AllowedCpuCount(); }
}  // namespace

unsigned AllowedCpuCount() {
  static const unsigned count = CallingThreadCpuCount();
  return count;
}

StatusOr<std::vector<int>> ProcessAffinity() {
  // The union over the process's threads (/proc/self/task): neither the calling thread's
  // mask nor the main thread's alone, since either may have pinned itself to one node.
  auto tasks = ListDirectory("/proc/self/task");
  if (!tasks.ok()) return ThreadAffinity();
  std::vector<int> cpus;
  for (const std::string& task : *tasks) {
    int tid = 0;
    if (!absl::SimpleAtoi(task, &tid) || tid <= 0) continue;
    auto mask = AffinityOf(static_cast<pid_t>(tid));
    if (!mask.ok()) continue;  // the thread exited since the listing
    cpus.insert(cpus.end(), mask->begin(), mask->end());
  }
  if (cpus.empty()) return ThreadAffinity();
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

Status SetThreadAffinity(std::span<const int> cpus) {
  int highest = 0;
  for (int c : cpus) highest = std::max(highest, c);
  // Up to CPU_SETSIZE CPUs the set lives on the stack: a worker thread pins itself first
  // thing, and under a tight address-space limit (ulimit -v) the first malloc of a new
  // thread crashed in jemalloc 5.3 (a NULL arena when making one failed) instead of this
  // call returning the kernel's answer.
  cpu_set_t fixed_set;
  const bool fits = highest < CPU_SETSIZE;
  cpu_set_t* set = fits ? &fixed_set : CPU_ALLOC(highest + 1);
  if (set == nullptr) return absl::ResourceExhaustedError("sched_setaffinity: CPU_ALLOC failed");
  const std::size_t size = fits ? sizeof fixed_set : CPU_ALLOC_SIZE(highest + 1);
  CPU_ZERO_S(size, set);
  for (int c : cpus) {
    if (c >= 0) CPU_SET_S(c, size, set);
  }
  int rc = ::sched_setaffinity(0, size, set);
  int err = errno;
  if (!fits) CPU_FREE(set);
  if (rc != 0) {
    return ErrnoToStatus(err,
                         absl::StrCat("sched_setaffinity(cpus=", absl::StrJoin(cpus, ","), ")"));
  }
  return absl::OkStatus();
}

CpuAndNode CurrentCpuAndNode() {
  unsigned cpu = 0, node = 0;
  if (::syscall(SYS_getcpu, &cpu, &node, nullptr) != 0) return {};
  return {static_cast<int>(cpu), static_cast<int>(node)};
}

// ---- allocation-free calls -------------------------------------------------------------

int MakeKernelNodeMask(std::span<const int> nodes, KernelNodeMask* mask) {
  *mask = KernelNodeMask();
  for (int n : nodes) {
    if (n < 0 || n >= KernelNodeMask::kMaxNodes) return EINVAL;
    mask->words[n / kBitsPerWord] |= 1UL << (n % kBitsPerWord);
  }
  mask->max_node = sizeof(mask->words) * 8 + 1;  // see NodeMask: the kernel reads maxnode-1
  return 0;
}

int BindRangeNoAlloc(void* addr, std::size_t bytes, PolicyMode mode, const KernelNodeMask& mask) {
  bool without_nodes = mode == PolicyMode::kDefault || mode == PolicyMode::kLocal;
  long rc = WithPreferredManyFallback(mode, [&](int kernel_mode) {
    return SysMbind(addr, bytes, kernel_mode, without_nodes ? nullptr : mask.words,
                 without_nodes ? 0 : mask.max_node, 0);
  });
  return rc == 0 ? 0 : errno;
}

int ReserveAddressSpaceNoAlloc(std::size_t bytes, std::size_t alignment, void** out) {
  if (alignment < PageSize()) alignment = PageSize();
  if (bytes == 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  std::size_t padded;
  if (__builtin_add_overflow(bytes, alignment, &padded)) return ENOMEM;  // no such range
  void* raw =
      ::mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return errno;
  auto base = reinterpret_cast<std::uintptr_t>(raw);
  std::uintptr_t aligned = (base + alignment - 1) & ~(alignment - 1);
  if (aligned > base) ::munmap(raw, aligned - base);
  std::uintptr_t end = aligned + bytes;
  std::uintptr_t raw_end = base + padded;
  if (raw_end > end) ::munmap(reinterpret_cast<void*>(end), raw_end - end);
  *out = reinterpret_cast<void*>(aligned);
  return 0;
}

int CommitRangeNoAlloc(void* addr, std::size_t bytes) {
  return ::mprotect(addr, bytes, PROT_READ | PROT_WRITE) == 0 ? 0 : errno;
}

int MapHugetlbFixedNoAlloc(void* addr, std::size_t bytes, std::size_t huge_page_bytes) {
  int shift = 0;
  while ((std::size_t{1} << shift) < huge_page_bytes) ++shift;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_FIXED | (shift << MAP_HUGE_SHIFT);
  void* p = ::mmap(addr, bytes, PROT_NONE, flags, -1, 0);
  return p == MAP_FAILED ? errno : 0;
}

int PopulateWriteNoAlloc(void* addr, std::size_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack it
#endif
  return ::madvise(addr, bytes, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
}

int ReturnToReservationNoAlloc(void* addr, std::size_t bytes) {
  void* p = ::mmap(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                   -1, 0);
  return p == MAP_FAILED ? errno : 0;
}

int PurgeRangeNoAlloc(void* addr, std::size_t bytes) {
  return ::madvise(addr, bytes, MADV_DONTNEED) == 0 ? 0 : errno;
}

int MovePagesNoAlloc(void* from, void* to, std::size_t bytes, bool keep_source) {
#ifndef MREMAP_DONTUNMAP
  constexpr int MREMAP_DONTUNMAP = 4;  // Linux 5.7; older headers lack it
#endif
  const int flags = MREMAP_MAYMOVE | MREMAP_FIXED | (keep_source ? MREMAP_DONTUNMAP : 0);
  void* moved = ::mremap(from, bytes, bytes, flags, to);
  return moved == MAP_FAILED ? errno : 0;
}

int MapFreshAtNoAlloc(void* addr, std::size_t bytes) {
#ifndef MAP_FIXED_NOREPLACE
  constexpr int MAP_FIXED_NOREPLACE = 0x100000;  // Linux 4.17; older headers lack it
#endif
  void* p = ::mmap(addr, bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return errno;
  if (p != addr) {  // an older kernel took the address as a hint
    ::munmap(p, bytes);
    return EEXIST;
  }
  return 0;
}

int AdviseHugePagesNoAlloc(void* addr, std::size_t bytes, bool huge) {
  return ::madvise(addr, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0 ? 0 : errno;
}

int ResidentPagesNoAlloc(const void* addr, std::size_t bytes, std::size_t* resident_pages) {
  const std::size_t page = PageSize();
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  if (begin % page != 0 || bytes > UINTPTR_MAX - begin) return EINVAL;
  const std::size_t pages = bytes / page + (bytes % page != 0);
  constexpr std::size_t kBatch = 4096;
  unsigned char residency[kBatch];
  std::size_t resident = 0;
  for (std::size_t done = 0; done < pages;) {
    const std::size_t count = std::min(kBatch, pages - done);
    if (::mincore(reinterpret_cast<void*>(begin + done * page), count * page, residency) != 0) {
      return errno;
    }
    for (std::size_t i = 0; i < count; ++i) resident += residency[i] & 1;
    done += count;
  }
  *resident_pages = resident;
  return 0;
}

long ReadFileNoAlloc(const char* path, char* buffer, std::size_t capacity) {
  if (capacity == 0) return -EINVAL;
  // As ReadFile: never wait on a FIFO or device, read regular files only.
  int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return -errno;
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return S_ISDIR(info.st_mode) ? -EISDIR : -EINVAL;
  }
  std::size_t length = 0;
  while (length + 1 < capacity) {
    ssize_t n = ::read(fd, buffer + length, capacity - 1 - length);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return -err;
    }
    if (n == 0) break;
    length += static_cast<std::size_t>(n);
  }
  ::close(fd);
  buffer[length] = '\0';
  return static_cast<long>(length);
}

std::optional<std::uint64_t> StatusLineKib(std::string_view line, std::string_view key) noexcept {
  if (key.empty() || line.substr(0, key.size()) != key) return std::nullopt;
  std::string_view rest = line.substr(key.size());
  auto skip_blanks = [&rest] {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  };
  skip_blanks();
  constexpr std::uint64_t kMaxKib = std::uint64_t{1} << 54;  // 2^64 bytes
  std::uint64_t value = 0;
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') {
    value = value * 10 + static_cast<std::uint64_t>(rest[digits] - '0');
    if (value > kMaxKib) return std::nullopt;
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  rest.remove_prefix(digits);
  skip_blanks();
  if (rest != "kB") return std::nullopt;
  return value;
}

std::uint64_t LockedMemoryBytesNoAlloc() noexcept {
  // The thread's own file: /proc/self/status of a process whose main thread has exited has no
  // Vm lines at all.
  std::optional<std::uint64_t> kib;
  const int err = ReadLinesNoAlloc(
      "/proc/thread-self/status",
      [](void* context, std::string_view line) {
        auto* out = static_cast<std::optional<std::uint64_t>*>(context);
        *out = StatusLineKib(line, "VmLck:");
        return !out->has_value();
      },
      &kib);
  if (err != 0 || !kib) return UINT64_MAX;  // cannot be told: as locked
  return *kib > (UINT64_MAX >> 10) ? UINT64_MAX : *kib << 10;
}

int ReadLinesNoAlloc(const char* path, bool (*on_line)(void* context, std::string_view line),
                     void* context) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  char buffer[4096];
  std::size_t length = 0;  // bytes in buffer not yet passed on
  bool cutting = false;    // inside a line already passed on cut to kMaxLineNoAlloc
  bool more = true;
  int err = 0;
  while (more) {
    ssize_t n = ::read(fd, buffer + length, sizeof buffer - length);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    const bool end_of_file = n == 0;
    length += static_cast<std::size_t>(n);
    std::size_t start = 0;
    while (more) {
      const char* newline =
          static_cast<const char*>(std::memchr(buffer + start, '\n', length - start));
      if (newline == nullptr) break;
      std::size_t end = static_cast<std::size_t>(newline - buffer);
      if (!cutting) {
        std::size_t cut = std::min(end - start, kMaxLineNoAlloc);
        more = on_line(context, std::string_view(buffer + start, cut));
      }
      cutting = false;
      start = end + 1;
    }
    // Keep the unfinished line; pass it on cut when it cannot fit the buffer any more.
    std::memmove(buffer, buffer + start, length - start);
    length -= start;
    if (more && !cutting && length >= kMaxLineNoAlloc) {
      more = on_line(context, std::string_view(buffer, kMaxLineNoAlloc));
      cutting = true;
    }
    if (cutting) length = 0;
    if (end_of_file) {
      if (more && length > 0 && !cutting) on_line(context, std::string_view(buffer, length));
      break;
    }
  }
  ::close(fd);
  return err;
}

int GetThreadPolicyNoAlloc(ThreadPolicy* policy) {
  *policy = ThreadPolicy();
  policy->mask.max_node = sizeof(policy->mask.words) * 8;
  if (SysGetMempolicy(&policy->mode, policy->mask.words, policy->mask.max_node, nullptr, 0) != 0) {
    return errno;
  }
  policy->mask.max_node += 1;  // set_mempolicy reads maxnode - 1 bits (see NodeMask)
  return 0;
}

int SetThreadPolicyNoAlloc(const ThreadPolicy& policy) {
  // get_mempolicy reports an empty mask for the modes that take none (default, local).
  long rc = SysSetMempolicy(policy.mode, policy.mask.words, policy.mask.max_node);
  return rc == 0 ? 0 : errno;
}

int PreferNodeNoAlloc(int node) {
  KernelNodeMask mask;
  if (int err = MakeKernelNodeMask(std::span<const int>(&node, 1), &mask); err != 0) return err;
  return SysSetMempolicy(MPOL_PREFERRED, mask.words, mask.max_node) == 0 ? 0 : errno;
}

namespace current_node_internal {

std::atomic<std::uint16_t> cpu_node_plus_one[kTableCpus];

int CurrentNodeSlow() noexcept {
  unsigned cpu = 0, node = 0;
  // glibc's getcpu uses the vDSO: no kernel entry on x86-64. It reads the CPU and its node
  // from one value, so the pair is right even if the thread has moved since.
  if (::getcpu(&cpu, &node) != 0) return -1;
  if (cpu < kTableCpus && node < 0xffff) {
    cpu_node_plus_one[cpu].store(static_cast<std::uint16_t>(node + 1), std::memory_order_relaxed);
  }
  return static_cast<int>(node);
}

}  // namespace current_node_internal

}  // namespace numarena::os
