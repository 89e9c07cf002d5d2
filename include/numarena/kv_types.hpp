// The KV-cache pool's vocabulary: geometry, tiers, storage, options, handles and statistics.
//
// These are the value types a caller fills in or reads back, and that the pool's parts
// (layout, placement, slabs, hotness in lib/kv) share. They live apart from the KvPool class
// (numarena/kv_pool.hpp) so that those parts need not see the pool they make up. Include
// numarena/kv_pool.hpp to use the pool; it includes this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "numarena/capacity.hpp"
#include "numarena/memory_target.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"

namespace numarena {

class Topology;
class Budget;

// ---- geometry ------------------------------------------------------------------------

// Element type of the K/V tensors. The pool never interprets the values; only the size.
enum class KvDType : unsigned char { kFp32, kFp16, kBf16, kFp8 };
std::size_t KvDTypeBytes(KvDType dtype);  // 4, 2, 2, 1
const char* KvDTypeName(KvDType dtype);   // "fp32", "fp16", "bf16", "fp8"

// The model's KV shape and how it is cut into blocks.
struct KvGeometry {
  int layers = 0;    // transformer layers with a KV cache
  int kv_heads = 0;  // KV heads per layer (after GQA/MQA grouping)
  int head_dim = 0;  // elements per head vector
  KvDType dtype = KvDType::kFp16;
  int tokens_per_block = 16;
  int layers_per_block = 1;  // layers in one block's layer range; must divide `layers`
  // KV heads in one head group; must divide `kv_heads`. 0: kv_heads / home node count when
  // that divides, else 1 (one head per group, groups round-robin over the home nodes).
  int heads_per_group = 0;
};

// ---- tiers and storage ---------------------------------------------------------------

// Where demoted blocks go.
struct KvColdTier {
  enum class Kind : unsigned char {
    kNone,        // no cold tier: a full hot tier refuses
    kNode,        // one named node, e.g. a CXL memory-only node
    kFarthest,    // the allowed node farthest from the home nodes (SLIT; ties: memory-only,
                  // then the lowest HMAT read bandwidth, then the lowest id)
    kInterleave,  // slabs round-robin over a node set
    kTarget,      // the best allowed node outside the home nodes by `attribute`
                  // (numarena/memory_target.hpp), ranked from the first home node; when no
                  // node near it qualifies, from the whole machine. Target(kCapacity) picks
                  // the largest tier, e.g. a CXL expander, without naming its node id.
  };
  Kind kind = Kind::kNone;
  std::vector<int> nodes;
  MemoryAttribute attribute = MemoryAttribute::kCapacity;  // kTarget only

  static KvColdTier None() { return {}; }
  static KvColdTier Node(int node) { return {Kind::kNode, {node}}; }
  static KvColdTier Farthest() { return {Kind::kFarthest, {}}; }
  static KvColdTier Interleave(std::vector<int> nodes) {
    return {Kind::kInterleave, std::move(nodes)};
  }
  static KvColdTier Target(MemoryAttribute attribute) { return {Kind::kTarget, {}, attribute}; }
};

// Which hot blocks are demoted first.
enum class KvHotnessPolicy : unsigned char {
  kLru,       // least recently pinned first
  kClock,     // second chance: a hand sweeps the hot blocks, clearing reference bits
  kTwoQueue,  // 2Q: blocks pinned once since they became hot (FIFO) go before blocks
              // pinned again (LRU); a ghost list remembers recent demotions so a block that
              // comes back soon is treated as frequently used
};
const char* KvHotnessPolicyName(KvHotnessPolicy policy);

// Where block memory comes from: page-aligned slabs whose pages land on a node. The pool
// carves slabs into blocks, so storage is called rarely (growth, demotion, release).
// Implementations must be thread-safe. They may call back into the pool's `Reclaim` from
// `AllocateSlab` (a budget's reclaim hook): the pool never holds a lock while calling them.
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  // `bytes` (a multiple of the page size) whose pages will be on `node`.
  // ResourceExhausted when a budget or the node refuses.
  [[nodiscard]] virtual StatusOr<void*> AllocateSlab(int node, std::size_t bytes) = 0;
  // Returns a slab from AllocateSlab; its pages are released.
  virtual void FreeSlab(int node, void* slab, std::size_t bytes) = 0;
  // True when growing on `node` now would add to memory pressure (for example a budget past
  // its warn line). Promotion into the hot tier is skipped then. Default: never.
  virtual bool UnderPressure(int /*node*/) const { return false; }
  // Bytes the storage could ever give on `node` (a budget's limit); used to reject
  // configurations whose blocks cannot fit. Default: unlimited.
  virtual std::size_t CapacityBytes(int /*node*/) const { return SIZE_MAX; }
};

// Slabs from anonymous mappings bound to their node with mbind before first touch (`mode`
// kStrict: MPOL_BIND, kAdvisory: MPOL_PREFERRED). When `gate` is given, every slab is
// charged to it with `priority` before it is mapped and released after it is unmapped; a
// refused charge is the slab's ResourceExhausted.
std::shared_ptr<KvStorage> MakeBoundMmapStorage(CapacityGate* gate = nullptr,
                                                BindMode mode = BindMode::kStrict,
                                                Priority priority = Priority::kNormal);

// Slabs from numarena's per-node arenas (`Arena::ForNode(node)`): the node page provider
// binds them and charges the process-wide capacity gate (InstallProcessBudget), and a freed
// slab is purged at once so the gate sees the memory go. Use this when the pool should share
// the arenas' accounting with the rest of the process; pass `budget` to the pool too so it
// registers its reclaim hook (the default storage would charge the budget a second time).
std::shared_ptr<KvStorage> MakeArenaStorage();

// ---- the kernel's own tiering --------------------------------------------------------

// What `KvPool::AuditPlacement` does with pages of a block that the kernel moved off the node
// the pool placed the block on: memory tiering (`demotion_enabled` and reclaim) demotes a hot
// block's pages to a lower tier, NUMA balancing in tiering mode promotes a cold block's.
enum class KvKernelMoves : unsigned char {
  kReport,   // count them (stats, metrics, the audit's report) and leave them where they are
  kCorrect,  // count them and move them back with move_pages(2), a bounded number per audit
};
const char* KvKernelMovesName(KvKernelMoves mode);  // "report", "correct"

// How the pool asks where pages are and moves them: move_pages(2) by default
// (MakeKernelPageNodes). Tests inject their own.
class KvPageNodes {
 public:
  virtual ~KvPageNodes() = default;
  // Fills `nodes` with the node of each page, or a negative errno (-ENOENT: not resident,
  // -EFAULT: not mapped). An error status when the query itself failed (EPERM: the kernel
  // refuses move_pages to this process).
  [[nodiscard]] virtual Status Query(std::span<void* const> pages, std::span<int> nodes) = 0;
  // Moves the pages to `node`; `status` receives each page's node afterwards or a negative
  // errno (-EBUSY: in use, -ENOMEM: no room on `node`). An error status when the call failed
  // as a whole.
  [[nodiscard]] virtual Status Move(std::span<void* const> pages, int node,
                                    std::span<int> status) = 0;
};
std::shared_ptr<KvPageNodes> MakeKernelPageNodes();

// Bounds of one `KvPool::AuditPlacement` call, so that a server can call it from a
// maintenance loop at a known cost.
struct KvAuditOptions {
  // What this call does with misplaced pages; unset: KvPoolOptions::kernel_moves. (An
  // operator's "move them back now" on a pool that only reports.)
  std::optional<KvKernelMoves> mode;
  // Blocks whose pages are asked about in this call (the pool keeps a cursor, so successive
  // calls cover every block in turn); 0 is refused.
  std::size_t max_blocks = 1024;
  // kCorrect: blocks whose misplaced pages are moved back in this call; the rest are
  // counted and left for a later call. The rate limit of correction is this times the rate
  // of calls. (A transparent huge page moves whole: moving one block's pages back may
  // bring its neighbours in the same 2 MiB back too.)
  std::size_t max_corrected_blocks = 64;
};

// What one `KvPool::AuditPlacement` call found and did. Pages are counted per block (a page
// that two blocks share, when blocks are not whole pages, counts for each).
struct KvAuditReport {
  KvKernelMoves mode = KvKernelMoves::kReport;
  std::size_t blocks_checked = 0;  // blocks holding data (a sequence's or cached) asked about
  std::size_t pages_checked = 0;   // their resident pages
  // Blocks with at least one page off their node, hot (the kernel demoted them) and cold
  // (the kernel promoted them).
  std::size_t hot_blocks_misplaced = 0;
  std::size_t cold_blocks_misplaced = 0;
  std::size_t hot_pages_misplaced = 0;   // pages of hot blocks not on their home node
  std::size_t cold_pages_misplaced = 0;  // pages of cold blocks not on their cold-tier node
  std::size_t pages_moved_back = 0;      // kCorrect: pages now back on their block's node
  std::size_t pages_not_moved = 0;       // kCorrect: pages the kernel would not move back
  std::size_t blocks_left = 0;           // misplaced blocks left alone (kReport, past
                                         // max_corrected_blocks, or the node's budget at its
                                         // warn line or the storage under pressure)
  // Why pages_not_moved is not 0 (the first block's reason), OK otherwise.
  Status not_moved;
  bool wrapped = false;  // the cursor passed the last block: every block has been visited
                         // since the first call, or since the previous wrap
};

// ---- options -------------------------------------------------------------------------

struct KvPoolOptions {
  KvGeometry geometry;

  // Home nodes the head groups are spread over, group g on home_nodes[g % size]. Empty: the
  // process's allowed nodes that have CPUs, minus the cold tier's nodes; when `near_cpus` is
  // given, the nodes of those CPUs; when `near_device` (a PCI bus id) is given, the device's
  // node and the nodes of its socket (SLIT distance below 20).
  std::vector<int> home_nodes;
  std::vector<int> near_cpus;
  std::string near_device;

  KvColdTier cold_tier;
  KvHotnessPolicy hotness = KvHotnessPolicy::kLru;

  // Blocks the hot tier may hold on each home node; 0: limited only by the storage.
  std::size_t hot_blocks_per_node = 0;
  // Blocks the cold tier may hold in total; 0: limited only by the storage.
  std::size_t cold_blocks = 0;
  // Rate limit of background demotion (`Demote` with kBackground) in MB/s; 0: unlimited.
  // Urgent demotion (making room for an allocation, reclaim at the trip line) ignores it.
  double demotion_mbps = 0;
  // Size of the slabs blocks are carved from (rounded up to whole blocks and pages).
  std::size_t slab_bytes = std::size_t{2} << 20;
  // Empty slabs kept per (tier, node) so demote/promote cycles do not remap and re-fault
  // memory. `Reclaim` releases them first.
  std::size_t retained_empty_slabs = 1;
  // Pinning a cold block promotes it when the hot tier has room.
  bool promote_on_touch = true;
  // What AuditPlacement does with pages the kernel moved (see KvKernelMoves).
  KvKernelMoves kernel_moves = KvKernelMoves::kReport;
  // Where AuditPlacement asks about and moves pages. Default: MakeKernelPageNodes().
  std::shared_ptr<KvPageNodes> page_nodes;

  // Block memory. Default: MakeBoundMmapStorage(budget).
  std::shared_ptr<KvStorage> storage;
  // The budget that drives tiering (may be null). The pool registers a reclaim hook on it
  // (class Priority::kLow, so cold KV is asked before other memory): in kWarn it demotes
  // toward the warn line at the background rate, from kAdmissionClosed on it demotes at
  // once. Promotion skips nodes at or past kWarn, and a block larger than a node's capacity
  // is a configuration error. The budget must outlive the pool.
  Budget* budget = nullptr;
  // Topology used to resolve and validate nodes. Default: Topology::system(). Only needed
  // when home nodes or the cold tier are not all given explicitly, or to validate them.
  const Topology* topology = nullptr;
};

// ---- handles and pins ----------------------------------------------------------------

// A block handle: the block's place in the pool (low 32 bits) and the generation of its span
// (high 32 bits). A span gets a new generation each time it is taken from the free lists
// for a new owner, so an id whose span was released (its sequence freed, or truncated past
// the span) and then reused is refused (FailedPrecondition, "stale") instead of naming
// another sequence's block. While the span lives on, the id stays valid: sharing a cached
// prefix span keeps its ids, a fork's copy-on-write leaves the old id on the parent's span,
// and truncating inside a span keeps it (rows appended later overwrite the old ones).
using KvBlockId = std::uint64_t;
using KvSequenceId = std::uint64_t;
enum class KvTier : unsigned char { kNone = 0, kHot = 1, kCold = 2 };

// ---- statistics ----------------------------------------------------------------------

struct KvNodeStats {
  int node = -1;
  std::size_t hot_blocks = 0;       // blocks whose data is in this node's hot tier
  std::size_t cold_blocks = 0;      // blocks whose data is in the cold tier on this node
  std::size_t hot_slab_bytes = 0;   // memory the hot tier holds on this node
  std::size_t cold_slab_bytes = 0;  // memory the cold tier holds on this node
};

struct KvPoolStats {
  std::size_t block_bytes = 0;      // bytes of one block (with alignment padding)
  std::size_t blocks_per_span = 0;  // layer ranges x head groups
  std::vector<KvNodeStats> nodes;   // every node the pool uses, ascending
  std::size_t hot_blocks = 0;
  std::size_t cold_blocks = 0;
  std::size_t pinned_blocks = 0;

  std::size_t sequences = 0;
  std::size_t spans_in_use = 0;  // owned by at least one sequence
  std::size_t spans_cached = 0;  // owned by none, kept for prefix reuse
  std::size_t spans_free = 0;    // backed by memory, ready for allocation

  std::uint64_t hot_pins = 0;   // pins served from the hot tier
  std::uint64_t cold_pins = 0;  // pins served from the cold tier (no room to promote)
  double hot_hit_rate = 0;      // hot_pins / (hot_pins + cold_pins); 0 when no pins
  double cold_hit_rate = 0;

  std::uint64_t demotions = 0;  // blocks
  std::uint64_t promotions = 0;
  std::uint64_t bytes_demoted = 0;
  std::uint64_t bytes_promoted = 0;
  double demotion_mbps = 0;   // bytes_demoted / time spent demoting
  double promotion_mbps = 0;  // bytes_promoted / time spent promoting

  std::uint64_t prefix_lookups = 0;    // full spans looked up for reuse
  std::uint64_t prefix_hits = 0;       // of which found and shared
  std::uint64_t cached_evictions = 0;  // cached spans dropped (for an allocation, or by Reclaim)
  std::uint64_t refusals = 0;          // allocations refused (ResourceExhausted)
  std::uint64_t copy_on_writes = 0;

  // The kernel's own tiering, as AuditPlacement saw it (totals over every call).
  std::uint64_t audits = 0;         // AuditPlacement calls
  std::uint64_t audited_pages = 0;  // resident pages asked about
  // Pages found off their block's node that the previous audit of the block had not left
  // there: each move of the kernel counted once, however many audits see it.
  std::uint64_t kernel_demoted_pages = 0;   // of hot blocks, off their home node
  std::uint64_t kernel_promoted_pages = 0;  // of cold blocks, off their cold-tier node
  std::uint64_t pages_moved_back = 0;       // moved back by kCorrect audits
  std::uint64_t pages_not_moved = 0;        // kCorrect audits tried, the kernel refused
  // Now, not totals: blocks (and their pages) whose last audit found pages off their node
  // and left them there, until an audit finds them back or the pool moves the block.
  std::size_t hot_blocks_misplaced = 0;
  std::size_t cold_blocks_misplaced = 0;
  std::size_t hot_pages_misplaced = 0;
  std::size_t cold_pages_misplaced = 0;
};

// How urgently `Demote` must free hot memory.
enum class KvUrgency : unsigned char {
  kBackground,  // rate-limited by KvPoolOptions::demotion_mbps
  kUrgent,      // now, regardless of the rate limit
};

}  // namespace numarena
