// KV pool audit: where the kernel put the pages of the pool's blocks, and putting them back
// (KvPool::AuditPlacement, see kv_pool.hpp; the default page reader, MakeKernelPageNodes).
//
// The pool places a block by choosing the slab it lives in: hot slabs are bound to the
// block's home node, cold slabs to a cold-tier node. The kernel may still move the pages:
// memory tiering demotes pages of a node under pressure to a lower tier (mbind's MPOL_BIND
// does not stop it), NUMA balancing in tiering mode promotes pages it sees used. The audit
// asks, block by block, where the pages are, and reports or undoes what the kernel did.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/kv_pool_pins.hpp"
#include "kv/kv_pool_state.hpp"
#include "numarena/budget.hpp"
#include "numarena/kv_pool.hpp"
#include "os/os.hpp"

namespace numarena {

using kv::BlockMeta;
using kv::BlockSlot;
using kv::PoolState;

const char* KvKernelMovesName(KvKernelMoves mode) {
  switch (mode) {
    case KvKernelMoves::kReport:
      return "report";
    case KvKernelMoves::kCorrect:
      return "correct";
  }
  return "unknown";
}

namespace {

// Stateless, so one instance may serve any number of pools and threads.
class KernelPageNodes final : public KvPageNodes {
 public:
  Status Query(std::span<void* const> pages, std::span<int> nodes) override {
    return os::QueryPageNodes(pages, nodes);
  }
  Status Move(std::span<void* const> pages, int node, std::span<int> status) override {
    const std::vector<int> target(pages.size(), node);
    return os::MovePages(pages, target, status);
  }
};

// What a negative move_pages status means, for the audit's message.
std::string PageError(int status) {
  switch (-status) {
    case EBUSY:
      return "EBUSY (the page is in use, e.g. under I/O or pinned by the kernel)";
    case ENOMEM:
      return "ENOMEM (no free memory on the target node)";
    case EACCES:
      return "EACCES (the page is shared with another process)";
    case ENOENT:
      return "ENOENT (the page is no longer resident)";
    case EFAULT:
      return "EFAULT (the page is not mapped)";
    default:
      return absl::StrCat("errno ", -status, " (", std::strerror(-status), ")");
  }
}

// Whether the pool may move pages back onto `node` now: not when its budget is at the warn
// line or past it, or the storage says the node is under pressure. The kernel demoted them
// because the node was short of memory; moving them back then would only fight its reclaim.
bool NodeHasRoom(const PoolState& p, int node) {
  if (p.options.budget != nullptr && p.options.budget->state(node) >= NodeState::kWarn)
    return false;
  return !p.storage->UnderPressure(node);
}

}  // namespace

std::shared_ptr<KvPageNodes> MakeKernelPageNodes() { return std::make_shared<KernelPageNodes>(); }

StatusOr<KvAuditReport> KvPool::AuditPlacement(const KvAuditOptions& options) {
  PoolState& p = *impl_;
  if (options.max_blocks == 0) {
    return absl::InvalidArgumentError(
        "KV pool: AuditPlacement with max_blocks 0 would look at no block; pass at least 1");
  }
  KvAuditReport report;
  report.mode = options.mode.value_or(p.options.kernel_moves);
  KvPageNodes& reader = *p.options.page_nodes;
  const std::uintptr_t page = os::PageSize();
  std::vector<void*> pages, off_node;
  std::vector<int> nodes, moved;
  std::size_t corrected_blocks = 0;
  std::uint64_t newly_demoted = 0, newly_promoted = 0;
  Status failure;

  std::lock_guard lock(p.audit_mu);
  // Spans only grow, so every slot below `total` exists; the cursor visits each at most once
  // per call.
  const std::uint64_t total =
      static_cast<std::uint64_t>(p.spans_created.load(std::memory_order_acquire)) * p.bps;
  for (std::uint64_t visited = 0; visited < total && report.blocks_checked < options.max_blocks;
       ++visited) {
    if (p.audit_cursor >= total) p.audit_cursor = 0;
    const auto id = static_cast<BlockSlot>(p.audit_cursor++);
    if (p.audit_cursor == total) report.wrapped = true;
    const auto span = static_cast<std::uint32_t>(id / p.bps);
    if (!kv::Pinnable(p, span)) continue;  // free spans hold no data
    // A pin reference keeps the block where it is (no demotion, promotion or drop) and its
    // slab mapped while its pages are asked about and moved.
    kv::AcquirePin(p, id, /*promote=*/false);
    BlockMeta& b = p.block(id);
    const auto tier = static_cast<KvTier>(b.tier.load(std::memory_order_relaxed));
    std::byte* data = b.data.load(std::memory_order_relaxed);
    const int node = b.node.load(std::memory_order_relaxed);
    if (!kv::Pinnable(p, span) || data == nullptr || tier == KvTier::kNone) {
      kv::UnpinRaw(p, id);
      continue;
    }
    ++report.blocks_checked;
    const auto first = reinterpret_cast<std::uintptr_t>(data) & ~(page - 1);
    const auto end =
        (reinterpret_cast<std::uintptr_t>(data) + p.layout.block_bytes + page - 1) & ~(page - 1);
    pages.clear();
    for (std::uintptr_t a = first; a < end; a += page) pages.push_back(reinterpret_cast<void*>(a));
    nodes.assign(pages.size(), -ENOENT);
    if (Status st = reader.Query(pages, nodes); !st.ok()) {
      kv::UnpinRaw(p, id);
      failure = Status(st.code(), absl::StrCat("KV pool: asking the kernel where block ",
                                               p.PublicId(id), "'s pages are: ", st.message()));
      break;
    }
    off_node.clear();
    for (std::size_t i = 0; i < pages.size(); ++i) {
      if (nodes[i] < 0) continue;  // not resident: nothing the kernel could have moved
      ++report.pages_checked;
      if (nodes[i] != node) off_node.push_back(pages[i]);
    }
    if (off_node.empty()) {
      b.misplaced.store(0, std::memory_order_relaxed);
      kv::UnpinRaw(p, id);
      continue;
    }
    // Pages found off the node that were not already left there by an earlier audit: what
    // the kernel moved since (the totals count each move once, however often it is seen).
    const std::uint32_t known = b.misplaced.load(std::memory_order_relaxed);
    const std::size_t newly = off_node.size() > known ? off_node.size() - known : 0;
    if (tier == KvTier::kHot) {
      ++report.hot_blocks_misplaced;
      report.hot_pages_misplaced += off_node.size();
      newly_demoted += newly;
    } else {
      ++report.cold_blocks_misplaced;
      report.cold_pages_misplaced += off_node.size();
      newly_promoted += newly;
    }
    std::size_t still_off = off_node.size();
    if (report.mode == KvKernelMoves::kCorrect && corrected_blocks < options.max_corrected_blocks &&
        NodeHasRoom(p, node)) {
      ++corrected_blocks;
      moved.assign(off_node.size(), -ENOENT);
      Status st = reader.Move(off_node, node, moved);
      int first_error = 0;
      for (int m : moved) {
        if (m < 0) {
          first_error = m;
          break;
        }
      }
      // Where the pages are now, by a second query: the kernel moves a transparent huge
      // page whole, and reports the pages of it after the first as EBUSY although they
      // moved with it.
      if (st.ok() && first_error != 0) st = reader.Query(off_node, moved);
      std::size_t on_node = 0;
      for (int m : moved) on_node += st.ok() && m == node ? 1 : 0;
      report.pages_moved_back += on_node;
      report.pages_not_moved += off_node.size() - on_node;
      still_off -= on_node;
      if (still_off != 0 && report.not_moved.ok()) {
        report.not_moved = absl::ResourceExhaustedError(
            absl::StrCat("KV pool: ", off_node.size() - on_node, " of ", off_node.size(),
                         " pages of block ", p.PublicId(id), " stayed off node ", node, ": ",
                         !st.ok()           ? std::string(st.message())
                         : first_error != 0 ? PageError(first_error)
                                            : std::string("the kernel put them on another node")));
      }
    } else {
      ++report.blocks_left;
    }
    b.misplaced.store(static_cast<std::uint32_t>(still_off), std::memory_order_relaxed);
    kv::UnpinRaw(p, id);
  }

  p.audits.fetch_add(1, std::memory_order_relaxed);
  p.audited_pages.fetch_add(report.pages_checked, std::memory_order_relaxed);
  p.kernel_demoted_pages.fetch_add(newly_demoted, std::memory_order_relaxed);
  p.kernel_promoted_pages.fetch_add(newly_promoted, std::memory_order_relaxed);
  p.pages_moved_back.fetch_add(report.pages_moved_back, std::memory_order_relaxed);
  p.pages_not_moved.fetch_add(report.pages_not_moved, std::memory_order_relaxed);
  if (!failure.ok()) return failure;
  return report;
}

}  // namespace numarena
