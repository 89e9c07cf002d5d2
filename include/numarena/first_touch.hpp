// First-touch correction: put the pages of a range on the node they belong to, and prove it.
//
// Linux places an anonymous page when it is first written, on the node the range's memory
// policy names or, without one, on the node of the CPU that touched it. A buffer filled by
// the wrong thread (a loader on socket 0 filling node-1 weights) therefore lands on the
// wrong node and stays there. This layer fixes that in three ways:
//
//   prefault(ptr, len, node)   binds the range to `node` (mbind MPOL_BIND) and faults every
//                              page in from a thread running on that node's CPUs, then
//                              migrates any page that was already resident elsewhere.
//   correct(ptr, len, node)    finds misplaced pages with batched move_pages(2) queries and
//                              migrates them in batches, without faulting anything in.
//   AllocateOnNode / FirstTouchAllocator
//                              fresh memory whose every page is verified, page by page, to
//                              be resident on the node before the call returns.
//
// Each returns a `PlacementReport`: how many pages were checked, already local, moved, not
// resident, and how many failed and why (a pinned page cannot move, a full node cannot take
// more, a page shared with another process is not ours to move).
//
// Ranges are widened to whole pages: a call on [ptr, ptr+len) acts on every page that range
// touches, including the parts of its first and last page outside it.
//
//   auto report = numarena::correct(weights, bytes, /*node=*/1);
//   if (!report.ok()) return report.status();          // bad node, kernel refused
//   if (report->failed > 0) LOG(WARNING) << report->ToString();
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "numarena/status.hpp"

namespace numarena {

// What a placement call found and did, in pages. Every checked page is counted exactly once:
//   pages_checked == already_local + moved + not_resident + failed.
struct PlacementReport {
  int node = -1;                  // the target node
  std::size_t pages_checked = 0;  // pages in the (page-widened) range
  std::size_t already_local = 0;  // resident on `node` before any migration
  std::size_t moved = 0;          // migrated to `node` by this call
  std::size_t not_resident = 0;   // never touched (or purged): nothing to place yet
  std::size_t failed = 0;         // misplaced or unqueryable and still not on `node`
  // -errno -> pages that failed with it (see PlacementFailureName).
  std::map<int, std::size_t> failures_by_reason;
  // prefault only: the node of the CPU that faulted the pages in (-1 when no page was
  // faulted or the kernel did not say). Equal to `node` when the process may run there.
  int populated_from_node = -1;

  // Every checked page is resident on `node` now.
  bool all_local() const { return already_local + moved == pages_checked; }
  // "node 1: 512 pages checked, 384 already local, 128 moved, 0 not resident, 0 failed"
  // followed by " (EBUSY pinned page: 3, ...)" when pages failed.
  std::string ToString() const;
};

// Names a per-page failure (a negative errno from move_pages), e.g.
// -EBUSY -> "EBUSY pinned page", -ENOMEM -> "ENOMEM target node full",
// -EACCES -> "EACCES page shared with another process", -EFAULT -> "EFAULT not mapped".
std::string PlacementFailureName(int negative_errno);

struct CorrectOptions {
  // Pages queried (and then migrated) per batch. Bounds this call's memory for very large
  // ranges. A batch is extended to the next 2 MiB boundary so that a transparent huge page,
  // which migrates as a whole, is never split between two batches. 1 to kMaxBatchPages.
  std::size_t batch_pages = 1024;
  static constexpr std::size_t kMaxBatchPages = std::size_t{1} << 20;
  // Also bind the range to the node (MPOL_BIND), so pages that fault in later (after a
  // purge, or pages not resident yet) land there too. prefault always binds.
  bool bind_range = false;
};

// Faults every page of [ptr, ptr+len) in on `node`: binds the range to the node (mbind
// MPOL_BIND, so this works on mapped, not yet touched memory and keeps later faults there),
// writes each page from a short-lived thread pinned to the node's CPUs where the process
// may run (memory-only nodes have none: then the calling thread writes, the binding decides
// the node), and migrates pages that were already resident elsewhere. Page contents are
// preserved. The binding stays on the range after the call.
//
// Faulting bound pages into a node that has no free memory left makes the kernel OOM-kill
// the process, so prefault populates in steps of up to 64 MiB and, before each, checks that
// the node can take twice the step's pages that are not on it yet while keeping numarena's
// reserve free (1/64 of the node, at least 16 MiB and at least the node's `high` watermark
// from /proc/zoneinfo): a step takes more free memory than its own pages while it runs.
// Free here is MemFree plus half of the node's page cache less its `low` watermark (what the
// kernel gives back to a bound allocation: what reclaim frees waits on per-CPU lists first;
// not its reclaimable kernel memory, which may be pinned), less what
// numarena's arenas have committed on the node and not written yet outside the range
// (meminfo does not show a large object until its owner writes it). Near the end the
// step shrinks to half the room left; when that is under 256 KiB, prefault stops with
// ResourceExhausted. The pages faulted in before stay, as does the binding.
//
// Errors: InvalidArgument for a node that is not an online, allowed node (named), a null
// `ptr` with len > 0, a range that runs past the end of the address space, a batch_pages
// outside [1, kMaxBatchPages], or a range that is not mapped (EFAULT); PermissionDenied when the
// kernel refuses mbind/move_pages with EPERM (seccomp), errno kept in the message;
// ResourceExhausted when the node cannot take the pages (the message names the node, its
// free memory and the reserve). len == 0 does nothing.
//
//   auto report = numarena::prefault(buf, bytes, 1);
//   assert(!report.ok() || report->all_local());
[[nodiscard]] StatusOr<PlacementReport> prefault(void* ptr, std::size_t len, int node,
                                                 const CorrectOptions& options = {});

// Migrates the resident pages of [ptr, ptr+len) that are not on `node` to it, in batches
// of options.batch_pages, and reports what it found. Never faults a page in: pages not yet
// touched are counted as not_resident. Pages the kernel refuses to move are counted in
// `failed` by reason; that is not an error of the call, and neither are unmapped pages in the
// range (counted in `failed` under -EFAULT: correct never faults, so a hole is only a page it
// cannot move). Errors otherwise as for prefault.
//
//   auto report = numarena::correct(kv_block, block_bytes, node);
//   if (report.ok()) metrics.pages_moved += report->moved;
[[nodiscard]] StatusOr<PlacementReport> correct(void* ptr, std::size_t len, int node,
                                                const CorrectOptions& options = {});

// Memory on one node, owned: unmapped on destruction. Move-only.
class NodeBuffer {
 public:
  NodeBuffer() = default;
  NodeBuffer(NodeBuffer&& other) noexcept;
  NodeBuffer& operator=(NodeBuffer&& other) noexcept;
  NodeBuffer(const NodeBuffer&) = delete;
  NodeBuffer& operator=(const NodeBuffer&) = delete;
  ~NodeBuffer();

  void* data() const { return data_; }
  std::size_t size() const { return size_; }  // the bytes asked for
  int node() const { return node_; }
  // The placement of the allocation (all pages local, by construction).
  const PlacementReport& report() const { return report_; }

 private:
  friend StatusOr<NodeBuffer> AllocateOnNode(std::size_t bytes, int node);
  void Release();

  void* data_ = nullptr;
  std::size_t size_ = 0;
  int node_ = -1;
  PlacementReport report_;
};

// Maps `bytes` (rounded up to whole pages; 2 MiB aligned with transparent huge pages
// advised when bytes >= 2 MiB), binds the mapping to `node`, faults it in from the node's
// CPUs, checks the node of every page with move_pages, migrates stragglers, and checks
// again. Returns only when every page is resident on `node`.
//
// Errors: InvalidArgument for bytes == 0, bytes that do not fit in the address space once
// rounded up to whole pages, or a bad node (named); PermissionDenied when the kernel refuses
// the binding; ResourceExhausted, before anything is mapped, when the node's free memory
// minus numarena's reserve (see prefault) is less than `bytes`, or when the node fills up
// while the pages are faulted in (never an OOM kill; the mapping is then released);
// FailedPrecondition when pages still are not on the node after correction (the message has
// the report).
//
//   auto buf = numarena::AllocateOnNode(64 << 20, 1);
//   if (!buf.ok()) return buf.status();
//   std::memcpy(buf->data(), src, 64 << 20);
[[nodiscard]] StatusOr<NodeBuffer> AllocateOnNode(std::size_t bytes, int node);

// An allocator of node-verified memory for one node, with the allocate/deallocate shape
// the adapters expect. Each allocation is its own mapping (AllocateOnNode's rules), so use
// it for large, long-lived buffers, not small objects. Thread-safe.
//
//   numarena::FirstTouchAllocator on_node1(1);
//   auto p = on_node1.allocate(256 << 20);
//   if (p.ok()) { ...; on_node1.deallocate(*p, 256 << 20); }
class FirstTouchAllocator {
 public:
  explicit FirstTouchAllocator(int node) : node_(node) {}

  int node() const { return node_; }

  // `bytes` of memory whose pages are all resident on node(). Errors as AllocateOnNode.
  [[nodiscard]] StatusOr<void*> allocate(std::size_t bytes);
  // Unmaps memory from allocate(); `bytes` must be the size passed to allocate.
  void deallocate(void* ptr, std::size_t bytes);

 private:
  int node_;
};

}  // namespace numarena
