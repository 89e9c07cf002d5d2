// The KV-cache pool in the NUMA lab: where its blocks really are, by the kernel's answer.
//
//   snc4  every block of head group g (all layers, all spans) is on g's home node, and the
//         default home nodes are the four CPU nodes;
//   cxl   with KvColdTier::Farthest the cold tier is the memory-only node; demoted blocks'
//         pages are there and promoted ones are back on their home node, data intact;
//   tiny  a pool whose home node has a small budget is filled to twice the budget: usage
//         crosses the warn and admission lines, the pool demotes to the cold node and no
//         allocation (the pool's or the budget's) is refused.
// lab-topologies: snc4 cxl tiny
// lab-kernel-6.12: cxl
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>

#include "kv_test_support.hpp"
#include "lab_support.hpp"
#include "numarena/budget.hpp"
#include "numarena/kv_pool.hpp"
#include "numarena/page_nodes.hpp"

namespace {

using numarena::KvBlockId;
using numarena::KvPool;
using numarena::KvPoolOptions;
using numarena::KvTier;

// 16 KiB blocks (4 pages): head_dim 128 fp16, 16 tokens, 2 heads per group, one layer.
numarena::KvGeometry Geometry() {
  return {.layers = 2,
          .kv_heads = 8,
          .head_dim = 128,
          .dtype = numarena::KvDType::kFp16,
          .tokens_per_block = 16,
          .layers_per_block = 1,
          .heads_per_group = 2};
}

std::vector<std::int32_t> Tokens(std::size_t n, std::int32_t first) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = first + static_cast<std::int32_t>(i);
  return t;
}

// The node of every page of the block (pinned without promotion), all must be `node`.
void RequireBlockOn(KvPool& pool, KvBlockId id, int node, KvTier tier) {
  auto where = pool.Locate(id);
  REQUIRE(where.ok());
  REQUIRE(where->tier == tier);
  REQUIRE(where->node == node);
  auto pin = pool.Pin(id);  // callers disable promote_on_touch
  REQUIRE(pin.ok());
  auto pages = numarena::page_node_list(pin->data(), pool.block_bytes());
  REQUIRE(pages.ok());
  for (std::size_t i = 0; i < pages->size(); ++i) {
    INFO("block " << id << " page " << i << " expected node " << node);
    REQUIRE((*pages)[i] == node);
  }
}

std::vector<KvBlockId> AllBlocks(KvPool& pool, numarena::KvSequenceId seq) {
  std::vector<KvBlockId> ids;
  for (int layer = 0; layer < pool.geometry().layers; ++layer)
    for (int g = 0; g < pool.head_groups(); ++g)
      for (KvBlockId id : kvtest::BlockIds(pool, seq, layer, g)) ids.push_back(id);
  return ids;
}

}  // namespace

TEST_CASE("snc4: head-first placement puts every block of group g on its home node") {
  const auto& lab = numarena::lab::Expected();
  if (lab.name != "snc4") return;
  KvPoolOptions o;
  o.geometry = Geometry();
  o.geometry.heads_per_group = 0;  // default: 8 heads over the home nodes
  o.promote_on_touch = false;
  auto pool = KvPool::Create(o);
  INFO((pool.ok() ? std::string("ok") : std::string(pool.status().message())));
  REQUIRE(pool.ok());
  REQUIRE((*pool)->home_nodes() == lab.cpu_node_ids());
  REQUIRE((*pool)->head_groups() == 4);
  std::vector<numarena::KvSequenceId> seqs;
  for (int s = 0; s < 3; ++s) {
    auto tokens = Tokens(64, 1000 * s);
    auto seq = (*pool)->CreateSequence(tokens);
    REQUIRE(seq.ok());
    kvtest::WriteTokens(**pool, *seq, tokens, 0, tokens.size());
    seqs.push_back(*seq);
  }
  std::size_t checked = 0;
  for (auto seq : seqs) {
    for (int layer = 0; layer < 2; ++layer) {
      for (int g = 0; g < 4; ++g) {
        const int home = lab.cpu_node_ids()[static_cast<std::size_t>(g)];
        REQUIRE((*pool)->group_node(g) == home);
        for (KvBlockId id : kvtest::BlockIds(**pool, seq, layer, g)) {
          RequireBlockOn(**pool, id, home, KvTier::kHot);
          ++checked;
        }
      }
    }
  }
  CHECK(checked == 3 * 2 * 4 * 4);
  auto stats = (*pool)->Stats();
  for (const auto& n : stats.nodes) CHECK(n.hot_blocks == 3 * 2 * 4);
}

TEST_CASE("cxl: demoted blocks go to the memory-only node and promoted ones come home") {
  const auto& lab = numarena::lab::Expected();
  if (lab.name != "cxl") return;
  int memory_only = -1;
  for (const auto& n : lab.nodes)
    if (n.memory_only()) memory_only = n.id;
  REQUIRE(memory_only >= 0);
  KvPoolOptions o;
  o.geometry = Geometry();
  o.cold_tier = numarena::KvColdTier::Farthest();
  o.promote_on_touch = false;
  auto pool = KvPool::Create(o);
  INFO((pool.ok() ? std::string("ok") : std::string(pool.status().message())));
  REQUIRE(pool.ok());
  REQUIRE((*pool)->home_nodes() == lab.cpu_node_ids());
  REQUIRE((*pool)->cold_nodes() == std::vector<int>{memory_only});

  auto tokens = Tokens(48, 7);
  auto seq = (*pool)->CreateSequence(tokens);
  REQUIRE(seq.ok());
  kvtest::WriteTokens(**pool, *seq, tokens, 0, tokens.size());
  const auto blocks = AllBlocks(**pool, *seq);
  for (int home : (*pool)->home_nodes()) CHECK((*pool)->Demote(home, 1000) > 0);
  for (KvBlockId id : blocks) RequireBlockOn(**pool, id, memory_only, KvTier::kCold);
  CHECK(kvtest::CountBadRows(**pool, *seq, tokens) == 0);  // read from the cold tier

  for (KvBlockId id : blocks) REQUIRE((*pool)->PromoteBlock(id).ok());
  for (int layer = 0; layer < 2; ++layer)
    for (int g = 0; g < (*pool)->head_groups(); ++g)
      for (KvBlockId id : kvtest::BlockIds(**pool, *seq, layer, g))
        RequireBlockOn(**pool, id, (*pool)->group_node(g), KvTier::kHot);
  CHECK(kvtest::CountBadRows(**pool, *seq, tokens) == 0);
  const auto st = (*pool)->Stats();
  CHECK(st.demotions == blocks.size());
  CHECK(st.promotions == blocks.size());
}

TEST_CASE("tiny: filling past the budget demotes instead of failing") {
  const auto& lab = numarena::lab::Expected();
  if (lab.name != "tiny") return;
  // The small node is home; the other node is the cold tier.
  int small = -1, big = -1;
  for (const auto& n : lab.nodes) {
    if (small < 0 || n.mem_mib < lab.node(small).mem_mib) small = n.id;
  }
  for (const auto& n : lab.nodes)
    if (n.id != small) big = n.id;
  numarena::BudgetOptions bo;
  bo.mode = numarena::BudgetMode::kQuota;
  constexpr std::size_t kQuota = std::size_t{32} << 20;
  bo.quotas = {{small, kQuota}, {big, std::size_t{256} << 20}};
  auto budget = numarena::Budget::Create(bo, lab.node_ids());
  REQUIRE(budget.ok());
  std::atomic<int> worst{0};
  (*budget)->AddListener([&](const numarena::BudgetEvent& e) {
    if (e.node == small) worst = std::max(worst.load(), static_cast<int>(e.to));
  });

  KvPoolOptions o;
  o.geometry = Geometry();
  o.geometry.kv_heads = 2;  // one group, on the small node
  o.home_nodes = {small};
  o.cold_tier = numarena::KvColdTier::Node(big);
  o.budget = budget->get();
  o.slab_bytes = 256 << 10;
  o.promote_on_touch = false;
  auto pool = KvPool::Create(o);
  INFO((pool.ok() ? std::string("ok") : std::string(pool.status().message())));
  REQUIRE(pool.ok());

  // 2 x quota of blocks: 16 KiB blocks, 2 per span (2 layers), 64 spans per sequence.
  const std::size_t sequences = 2 * kQuota / (64 * 2 * (*pool)->block_bytes());
  std::vector<numarena::KvSequenceId> seqs;
  std::vector<std::vector<std::int32_t>> all_tokens;
  std::uint64_t peak = 0;
  for (std::size_t s = 0; s < sequences; ++s) {
    all_tokens.push_back(Tokens(64 * 16, static_cast<std::int32_t>(s * 100000)));
    auto seq = (*pool)->CreateSequence(all_tokens.back());
    INFO("sequence " << s);
    REQUIRE(seq.ok());
    kvtest::WriteTokens(**pool, *seq, all_tokens.back(), 0, all_tokens.back().size());
    seqs.push_back(*seq);
    peak = std::max(peak, (*budget)->usage(small));
  }
  const auto snap = (*budget)->Snapshot();
  const auto* n = snap.node(small);
  REQUIRE(n != nullptr);
  CHECK(worst.load() >= static_cast<int>(numarena::NodeState::kAdmissionClosed));  // > 85 %
  CHECK(peak <= n->trip_bytes);
  CHECK(n->refusals == 0);
  CHECK(n->reclaim_runs >= 2);
  const auto st = (*pool)->Stats();
  CHECK(st.refusals == 0);
  CHECK(st.demotions > 0);
  CHECK(st.hot_blocks + st.cold_blocks == sequences * 64 * 2);
  CHECK(st.cold_blocks * (*pool)->block_bytes() >= kQuota);
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    for (KvBlockId id : AllBlocks(**pool, seqs[s])) {
      const auto where = (*pool)->Locate(id);
      RequireBlockOn(**pool, id, where->tier == KvTier::kHot ? small : big, where->tier);
    }
    CHECK(kvtest::CountBadRows(**pool, seqs[s], all_tokens[s]) == 0);
  }
}
