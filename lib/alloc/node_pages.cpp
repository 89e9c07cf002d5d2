// The node page provider (see node_pages.hpp): reserved per-placement address ranges, bound
// before first touch, committed against the free-memory guard and the capacity gate.
#include "alloc/node_pages.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "alloc/class_map.hpp"
#include "base/checked_math.hpp"
#include "base/clock.hpp"
#include "numarena/format.hpp"
#include "numarena/topology.hpp"
#include "os/address_space.hpp"
#include "os/current_node.hpp"

namespace numarena {
namespace arena_internal {
thread_local constinit std::size_t fresh_commit_bytes = 0;
}  // namespace arena_internal

namespace {

std::atomic<CapacityGate*> g_gate{nullptr};

// Whether this thread's last successful MovePages kept its source (LastMoveKeptSourceForTesting).
thread_local constinit bool t_last_move_kept_source = false;

// HugeAdviceLimit's bound for this thread's commits (0: none).
thread_local constinit std::size_t t_huge_advice_limit = 0;

// Providers live as long as their heap (for the process, unless the heap is destroyed:
// DestroyHeap discards its provider); this table keeps them reachable for the fork child.
std::atomic<NodePages*> g_providers[arena_internal::kMaxHeaps];
// Whether page moves try MREMAP_DONTUNMAP (MovePages): false once the kernel refused it.
std::atomic<bool> g_keep_source_moves{true};

// Set for good once the process is known to have locked memory (NoteProcessLockedMemory).
std::atomic<bool> g_locked_noted{false};
// ProcessLocksMemory's last reading of /proc (and when it was taken: -1 never).
std::atomic<std::int64_t> g_locks_read_at{-1};
std::atomic<bool> g_locks_read{false};

// Whether the process is known to have locked memory without reading anything: noted, or
// seen by ProcessLocksMemory's last reading. For decisions on paths every process runs at
// start-up (EnsureMapped), where a read of /proc would cost every program its time.
bool ProcessKnownToLockMemory() noexcept {
  return g_locked_noted.load(std::memory_order_relaxed) ||
         g_locks_read.load(std::memory_order_relaxed);
}

// Whether the process has locked memory (mlock, mlockall): noted by the override as it
// happens, else read from /proc/thread-self/status at most once a second (a file that cannot
// be read counts as locked). MREMAP_DONTUNMAP clears VM_LOCKED on the whole mapping its
// source lies in, so in such a process a move would quietly unlock the rest of the heap's
// mapping; the plain move (the source range mapped again) leaves the rest locked. Linked
// without the override, a lock taken less than a second after a reading is missed until the
// next one.
bool ProcessLocksMemory() noexcept {
  if (g_locked_noted.load(std::memory_order_relaxed)) return true;
  constexpr std::int64_t kRereadNanos = 1'000'000'000;
  const std::int64_t now = CoarseMonotonicNanos();
  const std::int64_t last = g_locks_read_at.load(std::memory_order_relaxed);
  if (last < 0 || now - last >= kRereadNanos) {
    g_locks_read.store(os::LockedMemoryBytesNoAlloc() != 0, std::memory_order_relaxed);
    g_locks_read_at.store(now, std::memory_order_relaxed);
  }
  return g_locks_read.load(std::memory_order_relaxed);
}

// Per-page state, one std::uint16_t per page of a range:
//   bits 0-1  priority + 1 the page was committed with (0: not committed)
//   bit  2    the charge went to the capacity gate (a gate was installed)
//   bits 3-15 index of the node charged, in the provider's node list
constexpr std::uint16_t kStatePriorityMask = 0x3;
constexpr std::uint16_t kStateGated = 0x4;
constexpr int kStateNodeShift = 3;

// Per page of a range's page states (and for the header pages), one word:
//   bits 0-15  pages of the range committed in the part this table page describes
//   bits 16-17 priority + 1 the table page was charged with; bit 18: charged to the gate
//   bit 30     busy: being purged, its last committed page gone (commits wait; see
//              ReleaseTablePage)
//   bit 31     charged
constexpr std::uint32_t kTableCount = 0xffff;
constexpr int kTablePriorityShift = 16;
constexpr std::uint32_t kTableGated = std::uint32_t{1} << 18;
constexpr std::uint32_t kTableBits = (std::uint32_t{3} << kTablePriorityShift) | kTableGated;
constexpr std::uint32_t kTableBusy = std::uint32_t{1} << 30;
constexpr std::uint32_t kTableCharged = std::uint32_t{1} << 31;

std::uintptr_t AlignUp(std::uintptr_t value, std::uintptr_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}
std::uintptr_t AlignDown(std::uintptr_t value, std::uintptr_t alignment) {
  return value & ~(alignment - 1);
}

void* ToPointer(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

std::string MiB(std::int64_t bytes) {
  return absl::StrCat(bytes / (1 << 20), " MiB (", bytes, " bytes)");
}

}  // namespace

// ---- the capacity gate --------------------------------------------------------------------

CapacityGate* SetCapacityGate(CapacityGate* gate) {
  return g_gate.exchange(gate, std::memory_order_acq_rel);
}
CapacityGate* GetCapacityGate() { return g_gate.load(std::memory_order_acquire); }

// ---- SpanFailure's Status ---------------------------------------------------------------

namespace {

// A pool number of `node` ("free_hugepages", ...), or -1 when it cannot be read.
long long NodePoolCount(int node, std::size_t page_bytes, const char* file) {
  StatusOr<std::string> text = os::ReadFile(NodeHugePagePoolFile(node, page_bytes, file));
  if (!text.ok()) return -1;
  long long value = -1;
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value) ? value : -1;
}

Status NodeHugetlbStatus(const std::string& what, int node, std::size_t page_bytes,
                         std::size_t bytes, int err) {
  std::string pool = NodeHugePagePoolFile(node, page_bytes, "nr_hugepages");
  long long total = NodePoolCount(node, page_bytes, "nr_hugepages");
  long long free = NodePoolCount(node, page_bytes, "free_hugepages");
  std::string state = total < 0 ? std::string("cannot be read")
                                 : absl::StrCat("has ", free, " of ", total, " pages free");
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": node ", node, "'s pool of ", page_bytes >> 10, " kB huge pages cannot give ",
      bytes, " bytes (errno ", err, " ", std::strerror(err), "): ", pool, " ", state,
      "; pages reserved on other nodes do not count for memory bound to node ", node,
      ". Reserve more on this node: echo N > ", pool));
}

}  // namespace

Status SpanFailure::ToStatus(const std::string& what) const {
  switch (kind) {
    case Kind::kNone:
      return absl::OkStatus();
    case Kind::kGateRefused:
      return Status(gate_status.code(),
                    absl::StrCat(what, ": the capacity gate refused ", bytes, " bytes on node ",
                                 node, ": ", std::string(gate_status.message())));
    case Kind::kNodeFull:
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": node ", node, " cannot take ", MiB(static_cast<std::int64_t>(bytes)),
          " more: about ", MiB(node_available), " of its ", MiB(node_total),
          " are free (counting half of its reclaimable page cache, less its low watermark",
          node_unwritten > 0
              ? absl::StrCat(", less ", MiB(node_unwritten),
                             " numarena has committed there and not written yet")
              : std::string(),
          ") and numarena keeps ",
          MiB(margin),
          " free so that bound memory is refused here instead of OOM-killing the process "
          "when touched; free memory on the node, or use Policy::Preferred to fall back to "
          "the next node"));
    case Kind::kBind:
      return ErrnoToStatus(err, absl::StrCat(what, ": mbind of a Strict placement to node ", node,
                                             " refused (use BindMode::kAdvisory to "
                                             "fall back)"));
    case Kind::kMap:
      if (std::optional<std::size_t> limit = os::AddressSpaceLimit(); limit && err == ENOMEM) {
        return ErrnoToStatus(
            err, absl::StrCat(what, ": reserving ", FormatBytes(bytes),
                              " of address space, under an address-space limit (RLIMIT_AS, "
                              "ulimit -v) of ", FormatBytes(*limit), " with ",
                              FormatBytes(os::AddressSpaceInUse()),
                              " mapped; numarena reserves 64 GiB ranges (never committed, "
                              "they cost no memory): raise the limit or remove it"));
      }
      return ErrnoToStatus(err, absl::StrCat(what, ": mapping ", bytes, " bytes"));
    case Kind::kHugetlb:
      if (node >= 0) return NodeHugetlbStatus(what, node, huge_page_bytes, bytes, err);
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": no free hugetlbfs pages of ", huge_page_bytes >> 10, " kB for ",
                       bytes, " bytes (errno ", err, " ", std::strerror(err),
                       "); reserve some: echo N > /sys/kernel/mm/hugepages/hugepages-",
                       huge_page_bytes >> 10, "kB/nr_hugepages, or per node in ",
                       NodeHugePagePoolFile(0, huge_page_bytes, "nr_hugepages"), " and its peers"));
    case Kind::kAddressSpace:
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": numarena's reserved address ranges for this arena are exhausted (",
          NodePages::kMaxRanges, " ranges of ", NodePages::kRangeBytes >> 30, " GiB)"));
    case Kind::kBadPriority:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the thread's priority is ", err,
          ", not a numarena::Priority (kHigh, kNormal or kLow); check its PriorityScope"));
    case Kind::kNeverFits:
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": ", bytes, " bytes can never be placed there: ",
          node >= 0 ? absl::StrCat("node ", node, " has") : std::string("its nodes have"), " only ",
          MiB(node_total),
          " of memory in total (MemTotal); split the allocation or use a policy over more "
          "or larger nodes"));
  }
  return absl::InternalError(what);
}

namespace {

// A priority outside the enum would index the gate's per-class figures and corrupt the page
// states' bits: refused before anything is charged.
bool CheckPriority(Priority priority, SpanFailure* failure) noexcept {
  if (static_cast<unsigned>(priority) < static_cast<unsigned>(kPriorityCount)) return true;
  failure->kind = SpanFailure::Kind::kBadPriority;
  failure->err = static_cast<int>(priority);
  return false;
}

// The node's free-memory guard, then the capacity gate (when one is installed); a gate
// refusal takes the guard's admission back.
bool AdmitAndCharge(int node, std::size_t bytes, Priority priority, CapacityGate* gate,
                    SpanFailure* failure) noexcept {
  if (!NodeMemoryGuard::Admit(node, bytes, failure)) return false;
  if (gate == nullptr) return true;
  Status status = gate->Charge(node, bytes, priority);
  if (status.ok()) return true;
  NodeMemoryGuard::Unadmit(node, bytes);
  failure->kind = SpanFailure::Kind::kGateRefused;
  failure->node = node;
  failure->bytes = bytes;
  failure->gate_status = std::move(status);
  return false;
}

}  // namespace

// ---- NodePages: creation ---------------------------------------------------------------------

NodePages::NodePages(const Policy& placement, const ArenaOptions& options, int owner_heap)
    : placement_(placement), options_(options), owner_heap_(owner_heap) {}

StatusOr<NodePages*> NodePages::Create(const Policy& placement, const ArenaOptions& options,
                                       int owner_heap) {
  std::string what = absl::StrCat("node pages for ", placement.ToString());
  if (owner_heap < 0 || owner_heap >= arena_internal::kMaxHeaps) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": owner heap id ", owner_heap, " is outside [0, ", arena_internal::kMaxHeaps, ")"));
  }
  if (placement.kind() != PolicyKind::kBind && placement.kind() != PolicyKind::kInterleave &&
      placement.kind() != PolicyKind::kWeightedInterleave) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a provider places pages by bind, interleave or weighted interleave; ",
                     "preferred and local are resolved to per-node binds by the arena"));
  }
  if (placement.uses_kernel_weights()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": an arena binds chunks to nodes by weights of its own; weighted(auto) (the "
              "kernel's weights) is for numarena::AllocateInterleaved, or give the weights, "
              "e.g. weighted(0:3,1:1)"));
  }
  std::size_t huge = options.hugetlb_page_bytes;
  if (huge != 0 && huge != ArenaOptions::kHugetlb2M && huge != ArenaOptions::kHugetlb1G) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": hugetlb_page_bytes ", huge, " is not 0, 2 MiB or 1 GiB"));
  }
  if (huge != 0) {
    // A bound mapping draws from its nodes' own pools: if the kernel shows per-node pools,
    // those are what must hold pages.
    long long on_nodes = 0;
    for (int node : placement.nodes()) {
      long long count = NodePoolCount(node, huge, "nr_hugepages");
      if (count < 0) {
        on_nodes = -1;
        break;
      }
      on_nodes += count;
    }
    if (on_nodes == 0) {
      std::string pool = NodeHugePagePoolFile(placement.nodes().front(), huge, "nr_hugepages");
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": node", placement.nodes().size() == 1 ? " " : "s ",
          absl::StrJoin(placement.nodes(), ","), " hold no hugetlbfs pages of ", huge >> 10,
          " kB (", pool, " is 0; pages on other nodes do not count for bound memory); reserve "
          "some on the node, e.g. echo 512 > ", pool));
    }
    std::string pool =
        absl::StrCat("/sys/kernel/mm/hugepages/hugepages-", huge >> 10, "kB/nr_hugepages");
    StatusOr<std::string> text = os::ReadFile(pool);
    if (!text.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": this kernel offers no ", huge >> 10, " kB huge pages (", pool, " is missing)"));
    }
    if (std::atoll(text->c_str()) <= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the system has no hugetlbfs pages of ", huge >> 10, " kB (", pool,
                       " is 0); reserve some, e.g. echo 512 > ", pool));
    }
  }

  auto* pages = new NodePages(placement, options, owner_heap);
  pages->page_ = os::PageSize();
  pages->hugetlb_ = huge != 0;
  pages->interleaved_ = placement.kind() == PolicyKind::kInterleave;
  const std::vector<int>& nodes = placement.nodes();
  if (nodes.empty() || nodes.size() > static_cast<std::size_t>(kMaxPlacementNodes)) {
    delete pages;
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a placement needs 1 to ", kMaxPlacementNodes, " nodes"));
  }
  for (int node : nodes) pages->nodes_[pages->node_count_++] = node;
  if (os::MakeKernelNodeMask(nodes, &pages->mask_) != 0) {
    delete pages;
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": node ids must be below ", os::KernelNodeMask::kMaxNodes));
  }
  pages->node_ = placement.kind() == PolicyKind::kBind && nodes.size() == 1 ? nodes[0] : kNodeMixed;
  SpanFailure failure;
  bool ok;
  {
    std::lock_guard<std::mutex> lock(pages->mutex_);
    ok = pages->AddRange(kRangeBytes, &failure);
  }
  // Bind the first step now, so a Strict placement the kernel refuses fails at creation.
  if (ok && !pages->hugetlb_) {
    Range* range = &pages->ranges_[0];
    ok = pages->EnsureMapped(range, range->base + pages->page_, &failure);
  }
  if (!ok) {
    Status status = failure.ToStatus(what);
    Discard(pages);
    return status;
  }
  g_providers[owner_heap].store(pages, std::memory_order_release);
  return pages;
}

void NodePages::Discard(NodePages* pages) noexcept {
  if (pages == nullptr) return;
  NodePages* expected = pages;
  g_providers[pages->owner_heap_].compare_exchange_strong(expected, nullptr,
                                                          std::memory_order_acq_rel);
  pages->ReleaseRanges();
  delete pages;
}

void NodePages::ReleaseRanges() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  int count = range_count_.load(std::memory_order_relaxed);
  for (int i = 0; i < count; ++i) {
    Range& range = ranges_[i];
    std::size_t bytes = range.end - range.base;
    // Pages still charged: a destroyed heap's pages jemalloc could not decommit (hugetlb
    // pages stay committed for it). Walked only when there are any, and only up to the bump
    // pointer, past which nothing was ever carved.
    if (committed_bytes_.load(std::memory_order_relaxed) >
        table_bytes_.load(std::memory_order_relaxed)) {
      ReleasePageCharges(range, range.base, range.bump);
    }
    std::uintptr_t first_granule = range.base >> arena_internal::kGranuleShift;
    for (std::uintptr_t g = 0; g < (bytes >> arena_internal::kGranuleShift); ++g) {
      // The class map's table first: it must not describe objects of the next owner.
      arena_internal::DropClassTable(first_granule + g);
      arena_internal::granule_heap[first_granule + g].store(0, std::memory_order_relaxed);
    }
    // The guard must not look at this address space again: the next mapping there is not
    // the node's.
    for (int index = 0; index < node_count_; ++index) {
      NodeMemoryGuard::ForgetUnwritten(nodes_[index], ToPointer(range.base), bytes);
    }
    os::Unmap(ToPointer(range.base), bytes);
    // What the tables still hold charged (the header, after a failed first commit).
    std::uint32_t header = range.header.load(std::memory_order_relaxed);
    if ((header & kTableCharged) != 0) ReleaseMetadata(range.header_bytes, header);
    const std::size_t table_pages = (range.tables_bytes - range.header_bytes) / page_;
    for (std::size_t k = 0; k < table_pages; ++k) {
      std::uint32_t word = range.table_pages[k].load(std::memory_order_relaxed);
      if ((word & kTableCharged) != 0) ReleaseMetadata(page_, word);
    }
    os::Unmap(range.tables, range.tables_bytes);
    range.base = range.end = range.bump = range.mapped_end = 0;
    range.pages = nullptr;
    range.table_pages = nullptr;
    range.tables = nullptr;
    range.tables_bytes = range.header_bytes = 0;
    range.header.store(0, std::memory_order_relaxed);
  }
  range_count_.store(0, std::memory_order_release);
  mapped_bytes_.store(0, std::memory_order_relaxed);
}

bool NodePages::AddRange(std::size_t min_bytes, SpanFailure* failure) noexcept {
  int index = range_count_.load(std::memory_order_relaxed);
  if (index >= kMaxRanges) {
    failure->kind = SpanFailure::Kind::kAddressSpace;
    failure->bytes = min_bytes;
    return false;
  }
  std::optional<std::size_t> rounded =
      RoundUpChecked(std::max(min_bytes, kRangeBytes), kRangeBytes);
  if (!rounded) {
    failure->kind = SpanFailure::Kind::kMap;
    failure->err = ENOMEM;
    failure->bytes = min_bytes;
    return false;
  }
  std::size_t bytes = *rounded;
  void* base = nullptr;
  int err = os::ReserveAddressSpaceNoAlloc(bytes, kRangeBytes, &base);
  std::uintptr_t first_granule =
      reinterpret_cast<std::uintptr_t>(base) >> arena_internal::kGranuleShift;
  std::uintptr_t granules = bytes >> arena_internal::kGranuleShift;
  if (err == 0 && first_granule + granules > arena_internal::kGranuleCount) {
    os::Unmap(base, bytes);
    err = ENOMEM;
  }
  // The page tables (see Range): the header's counters, then the page states.
  void* tables = nullptr;
  const std::size_t state_bytes = (bytes / page_) * sizeof(std::uint16_t);
  const std::size_t table_pages = (state_bytes + page_ - 1) / page_;
  const std::size_t header_bytes = AlignUp(table_pages * sizeof(std::uint32_t), page_);
  const std::size_t tables_bytes = header_bytes + table_pages * page_;
  if (err == 0) {
    err = os::ReserveAddressSpaceNoAlloc(tables_bytes, page_, &tables);
    if (err == 0) {
      // Charged page by page, so base pages only; placed where the memory they describe is
      // (preferred, not bound: a full node must never make bookkeeping OOM-kill the process).
      // Advised and placed before they are made accessible (see MapStep).
      (void)os::AdviseHugePagesNoAlloc(tables, tables_bytes, /*huge=*/false);
      os::KernelNodeMask first;
      if (os::MakeKernelNodeMask(std::span<const int>(nodes_, 1), &first) == 0) {
        (void)os::BindRangeNoAlloc(tables, tables_bytes, os::PolicyMode::kPreferred, first);
      }
      err = os::CommitRangeNoAlloc(tables, tables_bytes);
      if (err != 0) os::Unmap(tables, tables_bytes);
    }
    if (err != 0) os::Unmap(base, bytes);
  }
  if (err != 0) {
    failure->kind = SpanFailure::Kind::kMap;
    failure->err = err;
    failure->bytes = bytes;
    return false;
  }
  Range& range = ranges_[index];
  range.base = reinterpret_cast<std::uintptr_t>(base);
  range.end = range.base + bytes;
  range.bump = range.base;
  range.mapped_end = range.base;
  range.tables = tables;  // zero pages: every count and state 0
  range.tables_bytes = tables_bytes;
  range.header_bytes = header_bytes;
  range.header.store(0, std::memory_order_relaxed);
  range.table_pages = static_cast<std::atomic<std::uint32_t>*>(tables);
  range.pages = reinterpret_cast<std::atomic<std::uint16_t>*>(static_cast<char*>(tables) +
                                                              header_bytes);
  for (std::uintptr_t g = 0; g < granules; ++g) {
    arena_internal::granule_heap[first_granule + g].store(
        static_cast<std::uint16_t>(owner_heap_ + 1), std::memory_order_relaxed);
  }
  range_count_.store(index + 1, std::memory_order_release);
  return true;
}

NodePages::Range* NodePages::RangeOf(std::uintptr_t addr) const noexcept {
  int count = range_count_.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i) {
    const Range& range = ranges_[i];
    if (addr >= range.base && addr < range.end) return const_cast<Range*>(&range);
  }
  return nullptr;
}

bool NodePages::SameRange(const void* a, const void* b) const noexcept {
  Range* range = RangeOf(reinterpret_cast<std::uintptr_t>(a));
  return range != nullptr && range == RangeOf(reinterpret_cast<std::uintptr_t>(b));
}

bool NodePages::CouldEverFit(std::size_t bytes, SpanFailure* failure) const noexcept {
  std::int64_t total = 0;
  for (int i = 0; i < node_count_; ++i) {
    std::int64_t node_total = NodeMemoryGuard::Total(nodes_[i]);
    if (node_total < 0) return true;  // unknown: nothing to check against
    total += node_total;
  }
  if (bytes <= static_cast<std::uint64_t>(total)) return true;
  failure->kind = SpanFailure::Kind::kNeverFits;
  failure->node = node_count_ == 1 ? nodes_[0] : kNodeMixed;
  failure->bytes = bytes;
  failure->node_total = total;
  return false;
}

// ---- NodePages: mapping and binding ------------------------------------------------------------

bool NodePages::EnsureMapped(Range* range, std::uintptr_t end, SpanFailure* failure) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (end <= range->mapped_end) return true;
  std::uintptr_t begin = range->mapped_end;
  std::uintptr_t new_end;
  if (hugetlb_) {
    new_end = std::min(range->end, AlignUp(end, options_.hugetlb_page_bytes));
  } else {
    // kMapStep at a time, fewer system calls and mappings; only what is asked for (to the huge
    // page) in a process known to have locked its memory, where all of a writable step is
    // faulted in (known without a read of /proc, which every process would pay at start-up).
    const std::uintptr_t step = ProcessKnownToLockMemory() ? 0 : kMapStep;
    new_end = std::min(range->end, AlignUp(std::max(end, begin + step), kHugePage));
  }
  std::size_t bytes = new_end - begin;
  // Advised and bound while still inaccessible, then made readable and writable: in a process
  // that locked its memory (mlockall) the kernel faults a range in as soon as it becomes
  // writable, and pages faulted before the bind would stay wherever that was (mbind without
  // MPOL_MF_MOVE does not move them).
  if (hugetlb_) {
    int err = os::MapHugetlbFixedNoAlloc(ToPointer(begin), bytes, options_.hugetlb_page_bytes);
    if (err != 0) {
      failure->kind = SpanFailure::Kind::kHugetlb;
      failure->err = err;
      failure->bytes = bytes;
      failure->huge_page_bytes = options_.hugetlb_page_bytes;
      return false;
    }
  } else {
    // Base pages unless a commit asks for huge ones (AdviseLargeCommit): a small object
    // must not fault in 2 MiB nobody charged. Errors mean a kernel without THP: fine.
    (void)os::AdviseHugePagesNoAlloc(ToPointer(begin), bytes, /*huge=*/false);
  }
  if (!ApplyPolicy(begin, new_end, failure)) return false;
  if (int err = os::CommitRangeNoAlloc(ToPointer(begin), bytes); err != 0) {
    failure->kind = SpanFailure::Kind::kMap;
    failure->err = err;
    failure->bytes = bytes;
    return false;
  }
  if (hugetlb_ && !PopulateHugetlb(begin, new_end, failure)) return false;
  range->mapped_end = new_end;
  return true;
}

// The mmap above reserved huge pages from the machine's pool, wherever they are; a page is
// taken from a node's own pool only when it is faulted, under the bind, and a node whose pool
// is empty then raises SIGBUS in the caller's first write. Faulting now turns that into a
// refusal naming the node's pool. (Kernels before 5.14 cannot populate: EINVAL, and the old
// behaviour stays.)
bool NodePages::PopulateHugetlb(std::uintptr_t begin, std::uintptr_t end,
                                SpanFailure* failure) noexcept {
  int err = os::PopulateWriteNoAlloc(ToPointer(begin), end - begin);
  if (err == 0 || err == EINVAL) return true;
  (void)os::ReturnToReservationNoAlloc(ToPointer(begin), end - begin);
  failure->kind = SpanFailure::Kind::kHugetlb;
  failure->err = err;
  failure->bytes = end - begin;
  failure->node = node_count_ == 1 ? nodes_[0] : kNodeMixed;
  failure->huge_page_bytes = options_.hugetlb_page_bytes;
  return false;
}

bool NodePages::BindWithFallback(std::uintptr_t begin, std::uintptr_t end,
                                 const os::KernelNodeMask& mask, os::PolicyMode mode,
                                 int first_node, SpanFailure* failure) noexcept {
  int err = os::BindRangeNoAlloc(ToPointer(begin), end - begin, mode, mask);
  if (err == 0) return true;
  if (placement_.mode() == BindMode::kStrict) {
    failure->kind = SpanFailure::Kind::kBind;
    failure->err = err;
    failure->node = first_node;
    failure->bytes = end - begin;
    return false;
  }
  // Advisory: membind -> preferred -> none, each step counted. A set of several nodes is
  // preferred as a set (MPOL_PREFERRED_MANY; the OS layer gives kernels before 5.15 the
  // set's lowest node), a single node as itself.
  fallbacks_.fetch_add(1, std::memory_order_relaxed);
  if (mode != os::PolicyMode::kPreferred && mode != os::PolicyMode::kPreferredMany) {
    int set_nodes = 0;
    for (unsigned long word : mask.words) set_nodes += __builtin_popcountl(word);
    const bool several = set_nodes > 1;
    os::KernelNodeMask one;
    if ((several || os::MakeKernelNodeMask(std::span<const int>(&first_node, 1), &one) == 0) &&
        os::BindRangeNoAlloc(ToPointer(begin), end - begin,
                             several ? os::PolicyMode::kPreferredMany : os::PolicyMode::kPreferred,
                             several ? mask : one) == 0) {
      return true;
    }
    fallbacks_.fetch_add(1, std::memory_order_relaxed);
  }
  return true;  // no policy: the kernel's default (local) placement
}

bool NodePages::ApplyPolicy(std::uintptr_t begin, std::uintptr_t end,
                            SpanFailure* failure) noexcept {
  switch (placement_.kind()) {
    case PolicyKind::kBind:
      return BindWithFallback(begin, end, mask_, os::PolicyMode::kBind, nodes_[0], failure);
    case PolicyKind::kInterleave:
      return BindWithFallback(begin, end, mask_, os::PolicyMode::kInterleave, nodes_[0], failure);
    case PolicyKind::kWeightedInterleave: {
      Range* range = RangeOf(begin);
      std::size_t chunk = placement_.chunk_bytes();
      std::uintptr_t at = begin;
      while (at < end) {
        std::size_t index = (at - range->base) / chunk;
        int node = WeightedChunkNode(placement_.weights(), index);
        // Extend over following chunks of the same node: one mbind per run.
        std::uintptr_t run_end = range->base + (index + 1) * chunk;
        while (run_end < end &&
               WeightedChunkNode(placement_.weights(), (run_end - range->base) / chunk) == node) {
          run_end += chunk;
        }
        run_end = std::min(run_end, end);
        os::KernelNodeMask one;
        os::MakeKernelNodeMask(std::span<const int>(&node, 1), &one);
        if (!BindWithFallback(at, run_end, one, os::PolicyMode::kBind, node, failure)) {
          return false;
        }
        at = run_end;
      }
      return true;
    }
    case PolicyKind::kPreferred:
    case PolicyKind::kLocal:
    case PolicyKind::kTarget:  // never here: Arena::ForPolicy resolves targets
      break;
  }
  return true;
}

int NodePages::NodeIndexOfPage(const Range& range, std::uintptr_t page) const noexcept {
  switch (placement_.kind()) {
    case PolicyKind::kInterleave:
      // The kernel interleaves anonymous memory by page offset, i.e. by address.
      return static_cast<int>((page / page_) % static_cast<std::uintptr_t>(node_count_));
    case PolicyKind::kWeightedInterleave: {
      int node =
          WeightedChunkNode(placement_.weights(), (page - range.base) / placement_.chunk_bytes());
      for (int i = 0; i < node_count_; ++i) {
        if (nodes_[i] == node) return i;
      }
      return 0;
    }
    default:
      return 0;
  }
}

HugeAdviceLimit::HugeAdviceLimit(std::size_t request_bytes) noexcept
    : saved_(t_huge_advice_limit) {
  t_huge_advice_limit = request_bytes;
}

HugeAdviceLimit::~HugeAdviceLimit() { t_huge_advice_limit = saved_; }

void NodePages::AdviseLargeCommit(std::uintptr_t begin, std::uintptr_t end, bool huge) noexcept {
  // Without transparent huge pages the range keeps the MADV_NOHUGEPAGE it was mapped with.
  if (hugetlb_ || interleaved_ || !options_.transparent_huge_pages) return;
  std::uintptr_t inner_begin = AlignUp(begin, kHugePage);
  std::uintptr_t inner_end = AlignDown(end, kHugePage);
  if (inner_end <= inner_begin) return;
  (void)os::AdviseHugePagesNoAlloc(ToPointer(inner_begin), inner_end - inner_begin, huge);
}

// ---- NodePages: spans, commit, decommit -------------------------------------------------------

void* NodePages::AllocateSpan(void* new_addr, std::size_t size, std::size_t alignment, bool* zero,
                              bool* commit) noexcept {
  SpanFailure* failure = &ThreadSpanFailure();
  if (failure->failed()) return nullptr;  // see the header: keep the first reason
  alignment = std::max(alignment, page_);
  std::optional<std::size_t> rounded = RoundUpChecked(size, page_);
  std::optional<std::size_t> padded = rounded ? AddChecked(*rounded, alignment) : std::nullopt;
  if ((alignment & (alignment - 1)) != 0 || !padded) {
    failure->kind = SpanFailure::Kind::kMap;
    failure->err = ENOMEM;
    failure->bytes = size;
    return nullptr;
  }
  size = *rounded;
  std::uintptr_t start;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    int count = range_count_.load(std::memory_order_relaxed);
    Range* range = count > 0 ? &ranges_[count - 1] : nullptr;
    // Room for `size` bytes at `at` in `range` (at <= range->end always holds for a bump).
    auto fits = [&](std::uintptr_t at) { return at <= range->end && size <= range->end - at; };
    if (new_addr != nullptr) {
      start = reinterpret_cast<std::uintptr_t>(new_addr);
      if (range == nullptr || start != range->bump || start % alignment != 0 || !fits(start)) {
        return nullptr;  // jemalloc asked to grow in place where we cannot
      }
    } else {
      start = range == nullptr ? 0 : AlignUp(range->bump, alignment);
      if (range == nullptr || !fits(start)) {
        if (!AddRange(*padded, failure)) return nullptr;
        range = &ranges_[range_count_.load(std::memory_order_relaxed) - 1];
        start = AlignUp(range->bump, alignment);
      }
    }
    range->bump = start + size;
  }
  mapped_bytes_.fetch_add(size, std::memory_order_relaxed);
  *zero = true;  // address space never handed out before: never touched
  // Spans jemalloc asks for committed are its metadata blocks (a new arena's base block, 2
  // MiB, a few KiB of it used); objects' extents come uncommitted (retained growth) and are
  // committed through the commit hook. Huge pages here would make the whole block resident
  // at the first metadata write: 2 MiB of RSS per jemalloc arena of a heap.
  if (*commit && !Commit(ToPointer(start), size, /*advise_huge=*/false)) {
    // Give the address space back when nothing was carved after it, so refused commits do
    // not use up the range.
    std::lock_guard<std::mutex> lock(mutex_);
    Range* range = RangeOf(start);
    if (range != nullptr && range->bump == start + size) {
      range->bump = start;
      mapped_bytes_.fetch_sub(size, std::memory_order_relaxed);
    }
    return nullptr;
  }
  return ToPointer(start);
}

bool NodePages::Commit(void* addr, std::size_t size, bool advise_huge) noexcept {
  SpanFailure* failure = &ThreadSpanFailure();
  auto begin = reinterpret_cast<std::uintptr_t>(addr);
  Range* range = RangeOf(begin);
  if (range == nullptr || size > range->end - begin) {
    failure->kind = SpanFailure::Kind::kMap;
    failure->err = EINVAL;
    failure->bytes = size;
    return false;
  }
  const std::uintptr_t end = begin + size;
  if (!EnsureMapped(range, end, failure)) return false;

  std::size_t first = (begin - range->base) / page_;
  std::size_t last = (AlignUp(end, page_) - range->base) / page_;
  std::size_t pages_per_node[kMaxPlacementNodes] = {};
  std::size_t new_pages = 0;
  for (std::size_t i = first; i < last; ++i) {
    if (range->pages[i].load(std::memory_order_relaxed) != 0) continue;
    ++pages_per_node[NodeIndexOfPage(*range, range->base + i * page_)];
    ++new_pages;
  }
  if (new_pages == 0) return true;

  Priority priority = CurrentPriority();
  if (!CheckPriority(priority, failure)) return false;
  CapacityGate* gate = GetCapacityGate();
  bool multi_bind = placement_.kind() == PolicyKind::kBind && node_count_ > 1;
  int charged_index = -1;  // multi-node bind: the node the pages are charged to

  auto charge = [&](int index, std::size_t bytes) -> bool {
    return AdmitAndCharge(nodes_[index], bytes, priority, gate, failure);
  };
  auto uncharge = [&](int index, std::size_t bytes) {
    NodeMemoryGuard::Unadmit(nodes_[index], bytes);
    if (gate != nullptr) gate->Release(nodes_[index], bytes, priority);
  };

  if (multi_bind) {
    // The kernel picks among the set (the local node first); charge the first node that
    // has room, starting with the caller's.
    int current = os::CurrentNodeFast();
    int start = 0;
    for (int i = 0; i < node_count_; ++i) {
      if (nodes_[i] == current) start = i;
    }
    for (int k = 0; k < node_count_ && charged_index < 0; ++k) {
      int index = (start + k) % node_count_;
      if (charge(index, new_pages * page_)) charged_index = index;
    }
    if (charged_index < 0) {
      refusals_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } else {
    for (int index = 0; index < node_count_; ++index) {
      if (pages_per_node[index] == 0) continue;
      if (!charge(index, pages_per_node[index] * page_)) {
        for (int undo = 0; undo < index; ++undo) {
          if (pages_per_node[undo] != 0) uncharge(undo, pages_per_node[undo] * page_);
        }
        refusals_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    }
  }

  // The pages of states these commits write into, charged before they are touched, and
  // the range's header the first time (last: a refused commit charges nothing).
  bool tables = AcquireTablePages(*range, first, last, failure);
  if (tables && !ChargeTablesHeader(*range, failure)) {
    ReleaseTablePages(*range, first, last);
    tables = false;
  }
  if (!tables) {
    if (multi_bind) {
      uncharge(charged_index, new_pages * page_);
    } else {
      for (int index = 0; index < node_count_; ++index) {
        if (pages_per_node[index] != 0) uncharge(index, pages_per_node[index] * page_);
      }
    }
    refusals_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  auto state_base = static_cast<std::uint16_t>(static_cast<unsigned>(priority) + 1) |
                    (gate != nullptr ? kStateGated : 0);
  for (std::size_t i = first; i < last; ++i) {
    if (range->pages[i].load(std::memory_order_relaxed) != 0) continue;
    int index = multi_bind ? charged_index : NodeIndexOfPage(*range, range->base + i * page_);
    range->pages[i].store(static_cast<std::uint16_t>(state_base | (index << kStateNodeShift)),
                          std::memory_order_relaxed);
  }
  committed_bytes_.fetch_add(new_pages * page_, std::memory_order_relaxed);
  // Objects' pages only (the commit hook; a jemalloc metadata block, committed from
  // AllocateSpan without huge pages, frees nothing the heap could return).
  if (advise_huge) arena_internal::fresh_commit_bytes += new_pages * page_;
  if (advise_huge && size >= kHugePage) {
    // Under a HugeAdviceLimit, a request that only crosses into its last huge page (by less
    // than kCrossing: 8 MiB + 1 byte, a Python bytearray; 8 MiB + a header) leaves that page
    // and the rest of the class's rounding to base pages. Any deeper into it, the huge pages
    // go on to the end as before: the request will touch most of that page, and faulting it
    // in 4 KiB at a time costs more than it saves (huge pages only where the request ends,
    // rounded down, made a loop of random 5-25 MiB blocks 2.9x slower, 10 us a fault here).
    constexpr std::size_t kCrossing = std::size_t{64} << 10;
    std::uintptr_t huge_end = end;
    if (const std::size_t limit = t_huge_advice_limit; limit != 0 && limit < size) {
      const std::uintptr_t request_end = begin + limit;
      if (request_end - AlignDown(request_end, kHugePage) < kCrossing) huge_end = request_end;
    }
    AdviseLargeCommit(begin, huge_end, /*huge=*/true);
  }
  // An object's extent, all of it new and on one node: the guard follows it until written.
  // (Not jemalloc's metadata blocks, committed at carving with advise_huge false: a few KiB
  // of their 2 MiB are ever written.)
  if (advise_huge && !hugetlb_ && !multi_bind && new_pages == last - first &&
      size >= NodeMemoryGuard::kTrackedMinBytes) {
    int node_index = -1;
    for (int index = 0; index < node_count_; ++index) {
      if (pages_per_node[index] == 0) continue;
      node_index = node_index == -1 ? index : -2;
    }
    if (node_index >= 0) NodeMemoryGuard::TrackUnwritten(nodes_[node_index], addr, size);
  }
  return true;
}

NodePages::MoveResult NodePages::MovePages(void* from, void* to, std::size_t bytes) noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(from);
  const auto target = reinterpret_cast<std::uintptr_t>(to);
  if (!CanMovePages() || bytes == 0 || begin % page_ != 0 || target % page_ != 0 ||
      bytes % page_ != 0) {
    return MoveResult::kNotMoved;
  }
  // Both spans lie in mapped parts of this provider's ranges and do not overlap.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto mapped = [this, bytes](std::uintptr_t at) {
      const Range* range = RangeOf(at);
      return range != nullptr && at < range->mapped_end && bytes <= range->mapped_end - at;
    };
    if (!mapped(begin) || !mapped(target) ||
        (begin < target + bytes && target < begin + bytes)) {
      return MoveResult::kNotMoved;
    }
  }
  // MREMAP_DONTUNMAP first: `from` stays mapped, bound and advised, so the move leaves no
  // hole that another thread's mmap() could take, or a fork() child copy, and costs no
  // mapping again. Kernels before 5.7 refuse the flag up front (EINVAL; a sandbox may say
  // EPERM or ENOSYS): a refusal that left the destination mapped changed nothing, so the
  // plain move is tried, `from` is mapped again after it, and later moves go that way at once.
  // Any other error is not retried: EFAULT (a source over two mappings before Linux 6.17)
  // comes after the kernel unmapped `to`, and another thread's mmap() may have taken the hole
  // since, which a second MREMAP_FIXED would unmap.
  int error = EINVAL;
  const bool try_keep = g_keep_source_moves.load(std::memory_order_relaxed) &&
                        !ProcessLocksMemory();
  if (try_keep) error = os::MovePagesNoAlloc(from, to, bytes, /*keep_source=*/true);
  const bool kept_source = error == 0;
  const bool refused_up_front = error == EINVAL || error == EPERM || error == ENOSYS;
  if (error != 0 && (!try_keep || (refused_up_front && DestinationStillMapped(to, bytes)))) {
    if (try_keep) g_keep_source_moves.store(false, std::memory_order_relaxed);
    error = os::MovePagesNoAlloc(from, to, bytes, /*keep_source=*/false);
  }
  if (error != 0) {
    // The kernel unmaps the destination before it looks at the source (mremap_to), so a
    // move refused there (EFAULT: the source over two mappings before Linux 6.17) leaves `to`
    // unmapped, and it is mapped again at once (MAP_FIXED_NOREPLACE: never over what another
    // thread mapped there meanwhile); a move refused earlier (ENOMEM at the mapping count
    // limit, an unknown flag) leaves it as it was.
    if (error != EFAULT && DestinationStillMapped(to, bytes)) return MoveResult::kNotMoved;
    return MapSpanAgain(target, bytes) ? MoveResult::kNotMoved : MoveResult::kDestinationLost;
  }
  // The pages moved to `to` took their binding with them. Without MREMAP_DONTUNMAP `from` is
  // a hole now.
  if (!kept_source && !MapSpanAgain(begin, bytes)) return MoveResult::kMovedLeftHole;
  // Committed and charged, but its pages are gone: the free-memory guard counts it as
  // committed and unwritten again, as a span just committed.
  NodeMemoryGuard::TrackUnwritten(node_, from, bytes);
  t_last_move_kept_source = kept_source;
  return MoveResult::kMoved;
}

void NoteProcessLockedMemory() noexcept { g_locked_noted.store(true, std::memory_order_relaxed); }

bool NodePages::LastMoveKeptSourceForTesting() noexcept { return t_last_move_kept_source; }

void NodePages::SetKeepSourceMovesForTesting(bool keep) noexcept {
  g_keep_source_moves.store(keep, std::memory_order_relaxed);
}

bool NodePages::DestinationStillMapped(void* to, std::size_t bytes) noexcept {
  std::size_t resident = 0;
  return os::ResidentPagesNoAlloc(to, bytes, &resident) == 0;  // mincore: ENOMEM when not
}

bool NodePages::MapSpanAgain(std::uintptr_t begin, std::size_t bytes) noexcept {
  // Inaccessible until advised and bound, as in MapStep (a process that locked its memory
  // faults a writable range in at once).
  if (os::MapFreshAtNoAlloc(ToPointer(begin), bytes) != 0) return false;
  (void)os::AdviseHugePagesNoAlloc(ToPointer(begin), bytes, /*huge=*/false);
  SpanFailure failure;
  if (!ApplyPolicy(begin, begin + bytes, &failure) ||
      os::CommitRangeNoAlloc(ToPointer(begin), bytes) != 0) {
    // Unbound pages would go wherever they are touched first: make the span inaccessible
    // instead, so that it is never used.
    (void)os::ReturnToReservationNoAlloc(ToPointer(begin), bytes);
    return false;
  }
  if (bytes >= kHugePage) AdviseLargeCommit(begin, begin + bytes, /*huge=*/true);
  return true;
}

bool NodePages::Decommit(void* addr, std::size_t size) noexcept {
  if (hugetlb_) return false;  // hugetlb pages stay reserved and committed
  auto begin = reinterpret_cast<std::uintptr_t>(addr);
  Range* range = RangeOf(begin);
  if (range == nullptr || size > range->end - begin) return false;
  const std::uintptr_t end = begin + size;
  if (os::PurgeRangeNoAlloc(addr, size) != 0) return false;
  if (size >= kHugePage) AdviseLargeCommit(begin, end, /*huge=*/false);
  for (int index = 0; index < node_count_; ++index) {
    NodeMemoryGuard::ForgetUnwritten(nodes_[index], addr, size);
  }

  ReleasePageCharges(*range, begin, end);
  return true;
}

void NodePages::ReleasePageCharges(Range& range, std::uintptr_t begin,
                                   std::uintptr_t end) noexcept {
  std::size_t released[kMaxPlacementNodes][kPriorityCount] = {};
  std::size_t released_on[kMaxPlacementNodes] = {};  // gated or not: for the free-memory guard
  std::size_t ungated_pages = 0;
  std::size_t first = (begin - range.base) / page_;
  std::size_t last = (AlignUp(end, page_) - range.base) / page_;
  const std::size_t per_table_page = PagesPerTablePage();
  std::size_t table_page = first / per_table_page;
  std::uint32_t released_in_table_page = 0;
  for (std::size_t i = first; i < last; ++i) {
    if (i / per_table_page != table_page) {
      ReleaseTablePage(range, table_page, released_in_table_page);
      table_page = i / per_table_page;
      released_in_table_page = 0;
    }
    std::uint16_t state = range.pages[i].load(std::memory_order_relaxed);
    if (state == 0) continue;
    range.pages[i].store(0, std::memory_order_relaxed);
    ++released_in_table_page;
    int index = state >> kStateNodeShift;
    if (index < kMaxPlacementNodes) ++released_on[index];
    if ((state & kStateGated) == 0) {
      ++ungated_pages;
      continue;
    }
    int priority = (state & kStatePriorityMask) - 1;
    if (index < kMaxPlacementNodes && priority >= 0 && priority < kPriorityCount) {
      ++released[index][priority];
    }
  }
  std::size_t released_pages = ungated_pages;
  CapacityGate* gate = GetCapacityGate();
  for (int index = 0; index < node_count_; ++index) {
    // The purged pages are free again: the guard counts them before its next meminfo read.
    if (released_on[index] != 0) NodeMemoryGuard::Unadmit(nodes_[index], released_on[index] * page_);
    for (int priority = 0; priority < kPriorityCount; ++priority) {
      std::size_t pages = released[index][priority];
      if (pages == 0) continue;
      released_pages += pages;
      if (gate != nullptr) {
        gate->Release(nodes_[index], pages * page_, static_cast<Priority>(priority));
      }
    }
  }
  committed_bytes_.fetch_sub(released_pages * page_, std::memory_order_relaxed);
  ReleaseTablePage(range, table_page, released_in_table_page);
}

// ---- NodePages: page tables ----------------------------------------------------------------

bool NodePages::ChargeMetadata(std::size_t bytes, SpanFailure* failure,
                               std::uint32_t* bits) noexcept {
  // The tables' pages are placed (preferred) on the placement's first node and charged there.
  const int node = nodes_[0];
  const Priority priority = CurrentPriority();
  if (!CheckPriority(priority, failure)) return false;
  CapacityGate* gate = GetCapacityGate();
  if (!AdmitAndCharge(node, bytes, priority, gate, failure)) return false;
  *bits = ((static_cast<std::uint32_t>(priority) + 1) << kTablePriorityShift) |
          (gate != nullptr ? kTableGated : 0);
  committed_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  table_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

void NodePages::ReleaseMetadata(std::size_t bytes, std::uint32_t bits) noexcept {
  const int node = nodes_[0];
  NodeMemoryGuard::Unadmit(node, bytes);
  const int priority = static_cast<int>((bits >> kTablePriorityShift) & 3) - 1;
  if ((bits & kTableGated) != 0 && priority >= 0 && priority < kPriorityCount) {
    if (CapacityGate* gate = GetCapacityGate()) {
      gate->Release(node, bytes, static_cast<Priority>(priority));
    }
  }
  committed_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  table_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

bool NodePages::ChargeTablesHeader(Range& range, SpanFailure* failure) noexcept {
  // Charged once, when the range is first used, and kept while the range exists. Charged
  // before it is claimed (the gate may run reclaim hooks that commit here): of two threads
  // that charge it at once, the second gives its charge back.
  if ((range.header.load(std::memory_order_acquire) & kTableCharged) != 0) return true;
  std::uint32_t bits = 0;
  if (!ChargeMetadata(range.header_bytes, failure, &bits)) return false;
  std::uint32_t expected = 0;
  if (!range.header.compare_exchange_strong(expected, kTableCharged | bits,
                                            std::memory_order_acq_rel)) {
    ReleaseMetadata(range.header_bytes, bits);
  }
  return true;
}

bool NodePages::AcquireTablePages(Range& range, std::size_t first, std::size_t last,
                                  SpanFailure* failure) noexcept {
  const std::size_t per_table_page = PagesPerTablePage();
  for (std::size_t start = first; start < last;) {
    const std::size_t table_page = start / per_table_page;
    const std::size_t stop = std::min(last, (table_page + 1) * per_table_page);
    std::uint32_t pages = 0;  // pages this commit adds to the table page
    for (std::size_t i = start; i < stop; ++i) {
      pages += range.pages[i].load(std::memory_order_relaxed) == 0 ? 1 : 0;
    }
    if (pages != 0 && !AcquireTablePage(range, table_page, pages, failure)) {
      ReleaseTablePages(range, first, start);  // the table pages acquired before this one
      return false;
    }
    start = stop;
  }
  return true;
}

void NodePages::ReleaseTablePages(Range& range, std::size_t first, std::size_t last) noexcept {
  // Counts what AcquireTablePages counted: the pages in [first, last) not committed yet.
  const std::size_t per_table_page = PagesPerTablePage();
  for (std::size_t start = first; start < last;) {
    const std::size_t table_page = start / per_table_page;
    const std::size_t stop = std::min(last, (table_page + 1) * per_table_page);
    std::uint32_t pages = 0;
    for (std::size_t i = start; i < stop; ++i) {
      pages += range.pages[i].load(std::memory_order_relaxed) == 0 ? 1 : 0;
    }
    ReleaseTablePage(range, table_page, pages);
    start = stop;
  }
}

bool NodePages::AcquireTablePage(Range& range, std::size_t table_page, std::uint32_t pages,
                                 SpanFailure* failure) noexcept {
  std::atomic<std::uint32_t>& word = range.table_pages[table_page];
  std::uint32_t charged_bits = 0;
  bool holding_charge = false;  // charged by this call, not yet in the word
  for (;;) {
    std::uint32_t value = word.load(std::memory_order_acquire);
    if ((value & kTableBusy) != 0) {  // being purged (one madvise, no callbacks): wait
      std::this_thread::yield();
      continue;
    }
    if ((value & kTableCharged) != 0) {
      if (!word.compare_exchange_weak(value, value + pages, std::memory_order_acq_rel)) continue;
      // Another commit charged the table page first: this call's charge goes back.
      if (holding_charge) ReleaseMetadata(page_, charged_bits);
      return true;
    }
    if (!holding_charge) {
      // Charged before the word is claimed: the gate may run reclaim hooks on this thread
      // that commit into the same table page.
      if (!ChargeMetadata(page_, failure, &charged_bits)) return false;
      holding_charge = true;
      continue;  // look again: the word may have changed meanwhile
    }
    if (word.compare_exchange_weak(value, kTableCharged | charged_bits | pages,
                                   std::memory_order_acq_rel)) {
      return true;
    }
  }
}

void NodePages::ReleaseTablePage(Range& range, std::size_t table_page,
                                 std::uint32_t pages) noexcept {
  if (pages == 0) return;
  std::atomic<std::uint32_t>& word = range.table_pages[table_page];
  std::uint32_t now = word.fetch_sub(pages, std::memory_order_acq_rel) - pages;
  if ((now & kTableCount) != 0 || (now & kTableCharged) == 0) return;
  // The last committed page this table page describes is gone: so is the table page, unless
  // a commit took it again meanwhile (then the exchange fails and it stays). Busy only for
  // the purge, so that no commit writes a state the purge would wipe; the charge goes back
  // after.
  const std::uint32_t bits = now & kTableBits;
  if (!word.compare_exchange_strong(now, kTableBusy | bits, std::memory_order_acq_rel)) return;
  (void)os::PurgeRangeNoAlloc(static_cast<char*>(range.tables) + range.header_bytes +
                                  table_page * page_,
                              page_);
  word.store(0, std::memory_order_release);
  ReleaseMetadata(page_, bits);
}

bool NodePages::PurgeKeepCommitted(void* addr, std::size_t size) noexcept {
  return os::PurgeRangeNoAlloc(addr, size) == 0;
}

void NodePages::ClearBusyTablePagesInForkChild() noexcept {
  // A thread of the parent was purging a table page, between its claim and its release: the
  // page stays charged here, with no committed page, as if the purge had not started.
  const int count = range_count_.load(std::memory_order_relaxed);
  for (int r = 0; r < count; ++r) {
    Range& range = ranges_[r];
    const std::size_t table_pages = (range.tables_bytes - range.header_bytes) / page_;
    for (std::size_t k = 0; k < table_pages; ++k) {
      const std::uint32_t word = range.table_pages[k].load(std::memory_order_relaxed);
      if ((word & kTableBusy) != 0) {
        range.table_pages[k].store(kTableCharged | (word & kTableBits), std::memory_order_relaxed);
      }
    }
  }
}

void NodePages::RecreateLocksInForkChild() noexcept {
  NodeMemoryGuard::UnlockInForkChild();
  for (std::atomic<NodePages*>& slot : g_providers) {
    if (NodePages* pages = slot.load(std::memory_order_acquire)) {
      new (&pages->mutex_) std::mutex();
      pages->ClearBusyTablePagesInForkChild();
    }
  }
}

int NodePages::CommittedNodeOfPage(const void* addr) const noexcept {
  auto at = reinterpret_cast<std::uintptr_t>(addr);
  Range* range = RangeOf(at);
  if (range == nullptr) return kNodeNone;
  std::uint16_t state = range->pages[(at - range->base) / page_].load(std::memory_order_relaxed);
  if (state == 0) return kNodeNone;
  int index = state >> kStateNodeShift;
  return index < node_count_ ? nodes_[index] : kNodeNone;
}

}  // namespace numarena
