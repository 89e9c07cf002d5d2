// The OS layer: the only code in numarena that talks to the kernel.
//
// Every mmap, madvise, mbind, set_mempolicy, get_mempolicy, move_pages, sched_*affinity,
// getcpu and getenv call, and every read of a file under /sys or /proc (or of a recorded
// tree standing in for them), goes through the functions below. Everything above this
// layer is ordinary C++ that can be unit-tested on a one-node machine with synthetic inputs
// (see topology's injected reader) and proven on a real multi-node kernel in the NUMA lab.
//
// Conventions: functions return absl::Status / StatusOr with errno kept in the message
// (see ErrnoToStatus). Node masks are sized from the kernel's possible node count, never a
// fixed 64 bits, so machines with sparse or large node ids work.
#pragma once

#include <cstddef>
#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/status.hpp"

namespace numarena::os {

// The x86-64 transparent huge page (PMD) size: mappings of at least this much are aligned to
// it so THP can back them.
inline constexpr std::size_t kTransparentHugePage = std::size_t{2} << 20;

// ---- files ---------------------------------------------------------------------------

// The most ReadFile reads from one file unless told otherwise: far above any kernel file
// numarena reads (the largest, /proc/<pid>/numa_maps of a process with very many mappings,
// is a few MiB), and small enough that a wrong file cannot exhaust memory.
inline constexpr std::size_t kMaxFileBytes = std::size_t{64} << 20;

// Reads a whole regular file of at most `max_bytes` bytes. The path is in every message.
//   NotFound            it does not exist (also a dangling symbolic link)
//   FailedPrecondition  it is a directory (EISDIR), a FIFO, socket or device (opened without
//                       blocking and refused before any read, so a FIFO with no writer or a
//                       link to /dev/zero cannot hang or exhaust memory), it is larger than
//                       max_bytes, or the path loops (ELOOP) or runs through a non-directory
//   others              as ErrnoToStatus (PermissionDenied for EACCES, ...)
[[nodiscard]] StatusOr<std::string> ReadFile(const std::string& path,
                                             std::size_t max_bytes = kMaxFileBytes);
// Names of the entries of a directory (no "." or ".."), unsorted. NotFound when missing.
[[nodiscard]] StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);
// Target of a symbolic link. NotFound when missing.
[[nodiscard]] StatusOr<std::string> ReadLink(const std::string& path);
// The environment variable, or an empty string when unset.
std::string GetEnv(const char* name);

// ---- virtual memory ------------------------------------------------------------------

std::size_t PageSize();
// Reserves address space that is neither readable nor committed (PROT_NONE|MAP_NORESERVE),
// aligned to `alignment` (a power of two; at least a page). InvalidArgument for bytes == 0
// or an alignment that is not a power of two, ResourceExhausted (ENOMEM) when
// bytes + alignment does not fit in the address space.
[[nodiscard]] StatusOr<void*> ReserveAddressSpace(std::size_t bytes, std::size_t alignment);
// Makes [addr, addr+bytes) of a reservation readable and writable (no page is touched).
[[nodiscard]] Status CommitRange(void* addr, std::size_t bytes);
// Returns [addr, addr+bytes) to PROT_NONE and drops its pages; the range stays reserved.
[[nodiscard]] Status DecommitRange(void* addr, std::size_t bytes);
// Anonymous read-write mapping (committed), optionally aligned.
[[nodiscard]] StatusOr<void*> MapAnonymous(std::size_t bytes, std::size_t alignment = 0);
// Mapping backed by hugetlbfs pages of `huge_page_bytes` (2 MiB or 1 GiB).
[[nodiscard]] StatusOr<void*> MapHugetlb(std::size_t bytes, std::size_t huge_page_bytes);
void Unmap(void* addr, std::size_t bytes);
// Drops the pages of the range (MADV_DONTNEED); the mapping and its policy stay.
[[nodiscard]] Status PurgeRange(void* addr, std::size_t bytes);
// Asks for transparent huge pages (MADV_HUGEPAGE); advisory, errors are returned.
[[nodiscard]] Status AdviseHugePages(void* addr, std::size_t bytes);
// Forbids transparent huge pages for the range (MADV_NOHUGEPAGE), e.g. so MPOL_INTERLEAVE
// spreads base pages even when THP is "always"; advisory, errors are returned.
[[nodiscard]] Status AdviseNoHugePages(void* addr, std::size_t bytes);
// True when every page of [addr, addr+bytes) is mapped, false when some page is not
// (mincore(2) ENOMEM, or a range that runs past the top of the address space). `addr` is
// rounded down to a page; fixed memory whatever the size. Linux 6.1's move_pages reports an
// untouched page of an anonymous mapping as -EFAULT, the same as an unmapped one (newer
// kernels say -ENOENT); this tells the two apart without faulting anything in.
[[nodiscard]] StatusOr<bool> RangeIsMapped(const void* addr, std::size_t bytes);
// The lowest address at or above `addr` that is mapped in this process (`addr` itself when
// it is mapped), from /proc/self/maps; UINTPTR_MAX when nothing is mapped above it. Lets
// callers step over a hole in one go instead of page by page.
[[nodiscard]] StatusOr<std::uintptr_t> NextMappingStart(std::uintptr_t addr);
// Touches (populates) every page of the range for writing (MADV_POPULATE_WRITE when the
// kernel has it, else a write of one byte per page).
// InvalidArgument (EINVAL) for a range that is not writable, where the kernel can tell.
[[nodiscard]] Status PopulateWrite(void* addr, std::size_t bytes);

// ---- memory policy -------------------------------------------------------------------

// A node mask size the kernel takes: the shortest whole number of 64-bit words holding its
// node id range (nr_node_ids, i.e. highest possible node id + 1), as get_mempolicy tells
// (before Linux 4.17 the kernel wants MAX_NUMNODES bits, 1024 at most); 1 on a kernel without
// NUMA calls (ENOSYS) or one that refuses them (seccomp: EPERM). Node masks are sized from
// it. Found once, without allocating.
int PossibleNodeCount();

// kPreferredMany is MPOL_PREFERRED_MANY (Linux 5.15+): pages on the node of the set nearest
// the faulting CPU while the set has memory, then anywhere. On a kernel without it (the call
// fails with EINVAL) BindRange, BindRangeNoAlloc and SetThreadPolicy apply MPOL_PREFERRED
// instead, which the kernel gives the set's lowest node, and KernelHasPreferredMany() says so.
// kWeightedInterleave is MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+): pages interleaved over the
// nodes in proportion to the kernel's system-wide weights
// (/sys/kernel/mm/mempolicy/weighted_interleave/nodeN); kernels without it refuse it (EINVAL).
enum class PolicyMode {
  kDefault,
  kBind,
  kPreferred,
  kInterleave,
  kLocal,
  kPreferredMany,
  kWeightedInterleave
};
const char* PolicyModeName(PolicyMode mode);
// 1 when the kernel accepted MPOL_PREFERRED_MANY, 0 when it refused it and MPOL_PREFERRED
// was used instead, -1 before the first kPreferredMany call.
int KernelHasPreferredMany();

// mbind(2) over a range. `nodes` are node ids; flags may include MPOL_MF_STRICT/MOVE.
[[nodiscard]] Status BindRange(void* addr, std::size_t bytes, PolicyMode mode,
                               std::span<const int> nodes, unsigned flags = 0);
// set_mempolicy(2) for the calling thread.
[[nodiscard]] Status SetThreadPolicy(PolicyMode mode, std::span<const int> nodes);
// The node the page at `addr` is on (get_mempolicy MPOL_F_NODE|MPOL_F_ADDR). Faults the
// page in if it is not resident, so prefer QueryPageNodes to inspect without touching.
[[nodiscard]] StatusOr<int> NodeOfAddress(void* addr);
// The mode of the policy the kernel applies at `addr` (get_mempolicy MPOL_F_ADDR), as the
// kernel's MPOL_* number without its mode flags: MPOL_DEFAULT (0) where the range has no
// policy of its own, MPOL_WEIGHTED_INTERLEAVE (6) for weighted interleave. Touches nothing.
[[nodiscard]] StatusOr<int> KernelPolicyModeOfAddress(void* addr);
// move_pages(2) with a null node list: fills `status` with the node of each page or a
// negative errno (-ENOENT: not resident, -EFAULT: not mapped). Batched internally.
[[nodiscard]] Status QueryPageNodes(std::span<void* const> pages, std::span<int> status);
// move_pages(2) to `target`: migrates the pages; `status` receives the node or -errno.
[[nodiscard]] Status MovePages(std::span<void* const> pages, std::span<const int> target,
                               std::span<int> status);

// ---- the kernel -----------------------------------------------------------------------

// A kernel's major and minor version, from its release string ("6.12.118+deb12-cloud-amd64").
struct KernelVersion {
  int major = 0;
  int minor = 0;
  friend auto operator<=>(const KernelVersion&, const KernelVersion&) = default;
};
// "6.1.0-57-cloud-amd64" -> {6, 1}; nullopt unless it starts with "<major>.<minor>".
std::optional<KernelVersion> ParseKernelRelease(std::string_view release);
// The running kernel's version (uname), read once; nullopt when uname fails or says something
// ParseKernelRelease does not read.
std::optional<KernelVersion> RunningKernel();

// Whether the kernel lets this process make the placement calls numarena needs, each tried
// once on a page of its own, from a thread of its own (the caller's memory policy is not
// touched): mbind(MPOL_BIND, {node}), get_mempolicy, set_mempolicy (the probe thread's own
// policy, set to what it was) and move_pages (a query of the page's node). 0, or the errno
// the call failed with (EPERM under a seccomp filter that refuses it, ENOSYS on a kernel
// without NUMA or under a filter that says so).
struct PlacementCallProbe {
  int mbind = 0;
  int get_mempolicy = 0;
  int set_mempolicy = 0;
  int move_pages = 0;
};
PlacementCallProbe ProbePlacementCalls(int node);

// ---- CPUs ----------------------------------------------------------------------------

// CPUs the calling thread may run on (sched_getaffinity), ascending.
[[nodiscard]] StatusOr<std::vector<int>> ThreadAffinity();
// CPUs the process runs on: the union of its threads' sched_getaffinity masks, ascending.
// taskset, numactl and container runtimes set every thread's mask at start; unlike
// ThreadAffinity (or the main thread's mask) the union does not shrink when one thread,
// the caller or the main thread, pins itself to a node.
[[nodiscard]] StatusOr<std::vector<int>> ProcessAffinity();
// How many CPUs the process may run on, at least 1: the sched_getaffinity mask of the thread
// that first asks, which is the main thread at load (the library's constructors ask), before
// any thread of the program pins itself to fewer. What sizes numarena's bin and heap shards
// (the two must agree, heap_table.hpp), where std::thread::hardware_concurrency() would count
// every online CPU of the host, also those a container's cpuset keeps the process off. The
// same answer for the life of the process; no allocation, and no file read unless the kernel
// refuses an 8192-CPU mask (then the online count stands in), so it may run in a constructor
// before any allocator is ready.
unsigned AllowedCpuCount();
// Pins the calling thread to `cpus` (sched_setaffinity).
[[nodiscard]] Status SetThreadAffinity(std::span<const int> cpus);
// (cpu, node) the calling thread is running on now (getcpu).
struct CpuAndNode {
  int cpu = -1;
  int node = -1;
};
CpuAndNode CurrentCpuAndNode();

// ---- allocation-free calls -----------------------------------------------------------
// For code that must not allocate (jemalloc extent hooks, which may run with allocator locks
// held; jemalloc issue #978): these never touch the heap or build a Status. They return 0
// on success or an errno value.

// A node mask with inline storage for the kernel's policy calls.
struct KernelNodeMask {
  static constexpr int kMaxNodes = 1024;
  unsigned long words[kMaxNodes / (8 * sizeof(unsigned long))] = {};
  unsigned long max_node = 0;  // the `maxnode` argument
};
// Fills `mask` with `nodes`; EINVAL when a node id is negative or >= kMaxNodes.
int MakeKernelNodeMask(std::span<const int> nodes, KernelNodeMask* mask);
// mbind(2) with a prebuilt mask (kDefault/kLocal ignore it).
int BindRangeNoAlloc(void* addr, std::size_t bytes, PolicyMode mode, const KernelNodeMask& mask);
// Reserves address space like ReserveAddressSpace; *out receives the aligned start.
// EINVAL / ENOMEM for the cases ReserveAddressSpace names.
int ReserveAddressSpaceNoAlloc(std::size_t bytes, std::size_t alignment, void** out);
// mprotect(PROT_READ|PROT_WRITE) of part of a reservation.
int CommitRangeNoAlloc(void* addr, std::size_t bytes);
// Replaces part of a reservation with hugetlbfs pages (MAP_FIXED|MAP_HUGETLB), inaccessible
// (PROT_NONE) until CommitRangeNoAlloc, so that a policy is set before anything can be
// faulted; the kernel reserves the huge pages now, so ENOMEM means the pool is too small.
int MapHugetlbFixedNoAlloc(void* addr, std::size_t bytes, std::size_t huge_page_bytes);
// Faults every page of the range in for writing (MADV_POPULATE_WRITE, Linux 5.14+), under
// the range's policy, so that a fault that would raise SIGBUS (a hugetlb page the bound
// node's pool cannot give) or fail for lack of memory is an error here instead: EFAULT,
// ENOMEM or EHWPOISON. EINVAL on kernels without it.
int PopulateWriteNoAlloc(void* addr, std::size_t bytes);
// Turns part of a reservation that was committed or hugetlb-mapped back into reserved,
// inaccessible address space (PROT_NONE, MAP_NORESERVE), releasing its pages.
int ReturnToReservationNoAlloc(void* addr, std::size_t bytes);
// MADV_DONTNEED.
int PurgeRangeNoAlloc(void* addr, std::size_t bytes);
// Moves the pages of [from, from+bytes) to [to, to+bytes) with mremap(MREMAP_FIXED): their
// page table entries move, nothing is copied or faulted, and what `to` held is unmapped
// first. With `keep_source` (MREMAP_DONTUNMAP, Linux 5.7) `from` stays mapped, with its
// protection, advice and memory policy, and reads as zero pages, but the kernel clears
// VM_LOCKED on the whole mapping it lies in (mlock); without, it is left unmapped. Both page-aligned, not overlapping; before Linux 6.17 `from` must lie in one
// mapping: EFAULT otherwise, after the kernel has unmapped `to`. A kernel without
// MREMAP_DONTUNMAP refuses `keep_source` with EINVAL before it touches anything.
int MovePagesNoAlloc(void* from, void* to, std::size_t bytes, bool keep_source);
// Maps fresh anonymous memory (MAP_NORESERVE), inaccessible (PROT_NONE) until
// CommitRangeNoAlloc, at exactly `addr`, where nothing is mapped: EEXIST when something is
// (MAP_FIXED_NOREPLACE; kernels before 4.17 read the flag as a hint, and a mapping made
// elsewhere is undone with the same error).
int MapFreshAtNoAlloc(void* addr, std::size_t bytes);
// MADV_HUGEPAGE (huge = true) or MADV_NOHUGEPAGE.
int AdviseHugePagesNoAlloc(void* addr, std::size_t bytes, bool huge);
// Pages of [addr, addr+bytes) (page-aligned `addr`) that have memory behind them now
// (mincore(2), in fixed-size batches): *resident_pages on success. ENOMEM when part of the
// range is not mapped. A page only read since it was mapped counts too (the kernel's shared
// zero page is mapped there).
int ResidentPagesNoAlloc(const void* addr, std::size_t bytes, std::size_t* resident_pages);
// Reads at most capacity-1 bytes of a small regular file into `buffer` and NUL-terminates
// it. Returns the length read, or -errno: -EISDIR for a directory, -EINVAL for a FIFO,
// socket or device (refused without blocking, as ReadFile does).
long ReadFileNoAlloc(const char* path, char* buffer, std::size_t capacity);
// Reads a file of any length through a fixed buffer and calls on_line(context, line) for
// each line, without its '\n'. A line longer than kMaxLineNoAlloc bytes is passed cut to
// that length. Stops when on_line returns false. Returns 0 or an errno value.
inline constexpr std::size_t kMaxLineNoAlloc = 512;
int ReadLinesNoAlloc(const char* path, bool (*on_line)(void* context, std::string_view line),
                     void* context);
// The value of one "<key> <digits> kB" line of /proc/PID/status (`key` with its colon, e.g.
// "VmLck:"; spaces or tabs between), in kB: nullopt for another key, another unit, no digits,
// or a value above 2^54 kB. Allocates nothing; a pure function of its arguments.
std::optional<std::uint64_t> StatusLineKib(std::string_view line, std::string_view key) noexcept;
// Bytes of memory the calling process has locked (VmLck of /proc/thread-self/status: mlock,
// mlockall), 0 when none; UINT64_MAX when it cannot be told (the file cannot be read, /proc
// is not mounted, no descriptor is left, or it has no VmLck line), which a caller deciding
// whether locks could be lost should take as "locked". Allocates nothing.
std::uint64_t LockedMemoryBytesNoAlloc() noexcept;
// The calling thread's memory policy as the kernel keeps it (mode with its flags, and nodes),
// so that it can be put back exactly after a temporary change.
struct ThreadPolicy {
  int mode = 0;
  KernelNodeMask mask;
};
int GetThreadPolicyNoAlloc(ThreadPolicy* policy);
int SetThreadPolicyNoAlloc(const ThreadPolicy& policy);
// set_mempolicy(MPOL_PREFERRED, {node}) for the calling thread: its new pages go to `node`
// while the node has free memory, else to the nearest node that has.
int PreferNodeNoAlloc(int node);
// The node of the CPU the calling thread runs on without a system call: CurrentNodeFast in
// os/current_node.hpp (inline, for allocation fast paths).

}  // namespace numarena::os
