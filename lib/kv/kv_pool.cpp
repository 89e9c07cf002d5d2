// The KV-cache tensor pool: building it (Create), its layout accessors and its statistics
// (see include/numarena/kv_pool.hpp for the model, and kv_pool_state.hpp for how the
// implementation is divided: state, spans, pins, tiering, sequences).
#include "numarena/kv_pool.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kv/kv_pool_pins.hpp"
#include "kv/kv_pool_state.hpp"
#include "numarena/budget.hpp"
#include "numarena/topology.hpp"

namespace numarena {

using kv::BlockMeta;
using kv::HomeNode;
using kv::kMigrating;
using kv::PoolState;
using kv::StatStripe;

// ---- KvPool --------------------------------------------------------------------------

StatusOr<std::unique_ptr<KvPool>> KvPool::Create(KvPoolOptions options) {
  const bool custom_storage = options.storage != nullptr;
  if (!custom_storage) options.storage = MakeBoundMmapStorage(options.budget);
  if (options.page_nodes == nullptr) options.page_nodes = MakeKernelPageNodes();

  // Nodes: validated against the given topology, or the system's when memory really goes
  // to node ids (default storage). A custom storage defines its own node ids.
  const Topology* topology = options.topology;
  const bool needs_topology = options.home_nodes.empty() ||
                              options.cold_tier.kind == KvColdTier::Kind::kFarthest ||
                              options.cold_tier.kind == KvColdTier::Kind::kTarget;
  if (topology == nullptr && (needs_topology || !custom_storage)) {
    auto system = Topology::system();
    if (!system.ok()) {
      if (needs_topology) {
        return absl::FailedPreconditionError(absl::StrCat(
            "KV pool: cannot discover the topology to choose nodes: ", system.status().message()));
      }
    } else {
      topology = *system;
    }
  }
  std::optional<kv::TopologyView> view;
  if (topology != nullptr) view = kv::ViewOf(*topology);
  auto placement = kv::ResolvePlacement(options, view ? &*view : nullptr);
  if (!placement.ok()) return placement.status();

  auto layout = kv::MakeLayout(options.geometry, static_cast<int>(placement->home_nodes.size()));
  if (!layout.ok()) return layout.status();

  // Span metadata is allocated kSpansPerChunk spans at a time: a geometry whose chunk is
  // absurd (say 2^31 tokens per block: 2 TiB of token ids) is refused here, where the
  // caller can still change it, instead of failing or faulting in memory at the first span.
  const std::size_t chunk_bytes =
      kv::Chunk::Bytes(static_cast<std::size_t>(layout->blocks_per_span),
                       static_cast<std::size_t>(layout->geometry.tokens_per_block));
  if (chunk_bytes > kv::kMaxChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV pool: the geometry needs ", chunk_bytes, " bytes of metadata per ",
                     kv::kSpansPerChunk, " spans (", layout->blocks_per_span, " blocks per span, ",
                     layout->geometry.tokens_per_block, " tokens_per_block) and the pool allows ",
                     kv::kMaxChunkBytes,
                     "; use fewer tokens_per_block or larger layers_per_block or "
                     "heads_per_group"));
  }

  auto impl = std::make_unique<PoolState>();
  impl->layout = *layout;
  impl->placement = *std::move(placement);
  impl->storage = options.storage;
  impl->bps = static_cast<std::size_t>(layout->blocks_per_span);
  impl->tpb = static_cast<std::size_t>(layout->geometry.tokens_per_block);
  const std::size_t block_bytes = layout->block_bytes;

  for (int n : impl->placement.home_nodes) {
    std::size_t capacity = options.storage->CapacityBytes(n);
    if (options.budget != nullptr) {
      const std::uint64_t limit = options.budget->capacity(n);
      if (limit == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("KV pool: home node ", n, " is not covered by the budget"));
      }
      capacity = std::min<std::size_t>(
          capacity, static_cast<std::size_t>(static_cast<double>(limit) *
                                             options.budget->options().thresholds.trip));
    }
    if (block_bytes > capacity) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KV pool: one block is ", block_bytes, " bytes but node ", n, " may hold only ", capacity,
          " bytes; use fewer tokens_per_block, layers_per_block or heads_per_group"));
    }
  }
  const std::size_t blocks_per_slab = std::max<std::size_t>(1, options.slab_bytes / block_bytes);
  if (auto slab = kv::SlabBytes(block_bytes, blocks_per_slab); !slab.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("KV pool: slab_bytes ", options.slab_bytes,
                                                   " with blocks of ", block_bytes,
                                                   " bytes: ", slab.status().message()));
  }

  int max_node = 0;
  for (int n : impl->placement.home_nodes) max_node = std::max(max_node, n);
  for (int n : impl->placement.cold_nodes) max_node = std::max(max_node, n);
  impl->home_index.assign(static_cast<std::size_t>(max_node) + 1, -1);
  impl->cold_index.assign(static_cast<std::size_t>(max_node) + 1, -1);
  PoolState* raw = impl.get();
  for (int n : impl->placement.home_nodes) {
    auto home = std::make_unique<HomeNode>(
        n, [raw](std::uint32_t id) -> kv::HotMeta& { return raw->block(id).hot; },
        kv::MakeHotnessPolicy(options.hotness));
    home->hot = std::make_unique<kv::SlabAllocator>(options.storage.get(), n, block_bytes,
                                                    blocks_per_slab, options.hot_blocks_per_node,
                                                    options.retained_empty_slabs);
    impl->home_index[n] = static_cast<int>(impl->homes.size());
    impl->homes.push_back(std::move(home));
  }
  const std::size_t cold_count = impl->placement.cold_nodes.size();
  for (int n : impl->placement.cold_nodes) {
    std::size_t cap = 0;
    if (options.cold_blocks != 0) {  // split the total over the interleave set
      cap = options.cold_blocks / cold_count +
            (impl->cold.size() < options.cold_blocks % cold_count ? 1 : 0);
      if (cap == 0) cap = 1;
    }
    impl->cold_index[n] = static_cast<int>(impl->cold.size());
    impl->cold.push_back(std::make_unique<kv::SlabAllocator>(
        options.storage.get(), n, block_bytes, blocks_per_slab, cap, options.retained_empty_slabs));
  }
  for (int g = 0; g < layout->head_groups; ++g) {
    impl->group_node.push_back(impl->placement.home_nodes[static_cast<std::size_t>(g) %
                                                          impl->placement.home_nodes.size()]);
  }
  impl->options = std::move(options);
  impl->options.geometry = layout->geometry;
  auto pool = std::unique_ptr<KvPool>(new KvPool(std::move(impl)));
  if (Budget* budget = pool->impl_->options.budget) {
    KvPool* self = pool.get();
    pool->impl_->budget_hook = budget->AddReclaimHook(
        Priority::kLow, "kv-pool demotion",
        [self, budget](int node, std::size_t bytes) -> StatusOr<std::size_t> {
          const KvUrgency urgency = budget->state(node) >= NodeState::kAdmissionClosed
                                        ? KvUrgency::kUrgent
                                        : KvUrgency::kBackground;
          return self->Reclaim(node, bytes, urgency);
        });
  }
  return pool;
}

KvPool::KvPool(std::unique_ptr<PoolState> impl) : impl_(std::move(impl)) {}

KvPool::~KvPool() {
  // A pin held now would point into slabs freed below, and its destructor would unpin through
  // this freed pool: a use-after-free that may go unnoticed. Refuse it loudly instead.
  if (const std::size_t pinned = kv::PinnedBlocks(*impl_); pinned != 0) {
    std::fprintf(stderr,
                 "numarena: KvPool destroyed while %zu of its blocks are pinned; a KvBlockPin "
                 "must be destroyed or Reset() before its pool (its data pointer would dangle)\n",
                 pinned);
    std::abort();
  }
  if (impl_->budget_hook != 0) impl_->options.budget->RemoveReclaimHook(impl_->budget_hook);
  // Slab allocators free their slabs; block metadata goes with the chunks.
  impl_->homes.clear();
  impl_->cold.clear();
}

const KvGeometry& KvPool::geometry() const { return impl_->layout.geometry; }
int KvPool::head_groups() const { return impl_->layout.head_groups; }
int KvPool::layer_ranges() const { return impl_->layout.layer_ranges; }
std::size_t KvPool::block_bytes() const { return impl_->layout.block_bytes; }
int KvPool::group_node(int group) const {
  if (group < 0 || group >= impl_->layout.head_groups) return -1;
  return impl_->group_node[group];
}
const std::vector<int>& KvPool::home_nodes() const { return impl_->placement.home_nodes; }
const std::vector<int>& KvPool::cold_nodes() const { return impl_->placement.cold_nodes; }

KvPoolStats KvPool::Stats() const {
  const PoolState& p = *impl_;
  KvPoolStats st;
  st.block_bytes = p.layout.block_bytes;
  st.blocks_per_span = p.bps;
  std::vector<int> nodes = p.placement.home_nodes;
  nodes.insert(nodes.end(), p.placement.cold_nodes.begin(), p.placement.cold_nodes.end());
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (int n : nodes) {
    KvNodeStats ns;
    ns.node = n;
    if (HomeNode* h = p.home_of(n)) ns.hot_slab_bytes = h->hot->mapped_bytes();
    if (kv::SlabAllocator* c = p.cold_of(n)) ns.cold_slab_bytes = c->mapped_bytes();
    st.nodes.push_back(ns);
  }
  auto node_stats = [&st](int node) -> KvNodeStats* {
    for (KvNodeStats& ns : st.nodes)
      if (ns.node == node) return &ns;
    return nullptr;
  };
  const std::uint32_t spans = p.spans_created.load(std::memory_order_acquire);
  for (std::uint32_t s = 0; s < spans; ++s) {
    switch (p.span(s).state.load(std::memory_order_relaxed)) {
      case kv::kInUse:
        ++st.spans_in_use;
        break;
      case kv::kCached:
        ++st.spans_cached;
        break;
      case kv::kFree:
        ++st.spans_free;
        break;
      default:
        break;
    }
    for (std::size_t i = 0; i < p.bps; ++i) {
      const BlockMeta& b = p.block(p.block_id(s, static_cast<int>(i)));
      const auto tier = static_cast<KvTier>(b.tier.load(std::memory_order_relaxed));
      KvNodeStats* ns = node_stats(b.node.load(std::memory_order_relaxed));
      if ((b.state.load(std::memory_order_relaxed) & ~kMigrating) != 0) ++st.pinned_blocks;
      const std::uint32_t misplaced = b.misplaced.load(std::memory_order_relaxed);
      if (tier == KvTier::kHot) {
        ++st.hot_blocks;
        if (ns) ++ns->hot_blocks;
        st.hot_blocks_misplaced += misplaced != 0 ? 1 : 0;
        st.hot_pages_misplaced += misplaced;
      } else if (tier == KvTier::kCold) {
        ++st.cold_blocks;
        if (ns) ++ns->cold_blocks;
        st.cold_blocks_misplaced += misplaced != 0 ? 1 : 0;
        st.cold_pages_misplaced += misplaced;
      }
    }
  }
  std::uint64_t created = 0, freed = 0;
  for (const StatStripe& s : p.stripes) {
    st.hot_pins += s.hot_pins.load(std::memory_order_relaxed);
    st.cold_pins += s.cold_pins.load(std::memory_order_relaxed);
    st.prefix_lookups += s.prefix_lookups.load(std::memory_order_relaxed);
    st.prefix_hits += s.prefix_hits.load(std::memory_order_relaxed);
    created += s.sequences_created.load(std::memory_order_relaxed);
    freed += s.sequences_freed.load(std::memory_order_relaxed);
  }
  // Stripes are read one after another, so a free may be seen without its creation.
  st.sequences = created > freed ? created - freed : 0;
  const double pins = static_cast<double>(st.hot_pins + st.cold_pins);
  if (pins > 0) {
    st.hot_hit_rate = static_cast<double>(st.hot_pins) / pins;
    st.cold_hit_rate = static_cast<double>(st.cold_pins) / pins;
  }
  st.demotions = p.demotions.load();
  st.promotions = p.promotions.load();
  st.bytes_demoted = p.bytes_demoted.load();
  st.bytes_promoted = p.bytes_promoted.load();
  if (p.demotion_ns.load() > 0)
    st.demotion_mbps = static_cast<double>(st.bytes_demoted) * 1e3 / p.demotion_ns.load();
  if (p.promotion_ns.load() > 0)
    st.promotion_mbps = static_cast<double>(st.bytes_promoted) * 1e3 / p.promotion_ns.load();
  st.cached_evictions = p.cached_evictions.load();
  st.refusals = p.refusals.load();
  st.copy_on_writes = p.copy_on_writes.load();
  st.audits = p.audits.load();
  st.audited_pages = p.audited_pages.load();
  st.kernel_demoted_pages = p.kernel_demoted_pages.load();
  st.kernel_promoted_pages = p.kernel_promoted_pages.load();
  st.pages_moved_back = p.pages_moved_back.load();
  st.pages_not_moved = p.pages_not_moved.load();
  return st;
}

}  // namespace numarena
