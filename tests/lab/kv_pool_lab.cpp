// The KV-cache pool in the NUMA lab: where its blocks really are, by the kernel's answer.
//
//   snc4  every block of head group g (all layers, all spans) is on g's home node, and the
//         default home nodes are the four CPU nodes;
//   cxl   with KvColdTier::Farthest the cold tier is the memory-only node; demoted blocks'
//         pages are there and promoted ones are back on their home node, data intact;
//   tiny  a pool whose home node has a small budget is filled to twice the budget: usage
//         crosses the warn and admission lines, the pool demotes to the cold node and no
//         allocation (the pool's or the budget's) is refused.
//   cxl   the kernel's own tiering beside the pool's (AuditPlacement): pages of hot blocks
//         moved to the memory-only node and pages of cold blocks moved to a CPU node, as the
//         kernel's demotion and promotion would (move_pages from the test), are counted by a
//         kReport audit and left, and moved back by kCorrect audits (a bounded number of
//         blocks per call) until every page of every block is on its node again; on 6.12,
//         with demotion_enabled on, the kernel's own demotion (memory.reclaim of the test's
//         cgroup, and an allocation bound to node 0 larger than its free memory) moves pages
//         of hot blocks to the memory-only node; a kReport audit finds exactly those pages
//         and kCorrect audits bring every one home.
// lab-topologies: snc4 cxl tiny
// lab-kernel-6.12: cxl
#include <catch2/catch.hpp>

#include <numaif.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

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

// The pages of a block (page-aligned blocks: 16 KiB).
std::vector<void*> BlockPages(KvPool& pool, KvBlockId id) {
  auto pin = pool.Pin(id);
  REQUIRE(pin.ok());
  std::vector<void*> pages;
  for (std::size_t off = 0; off < pool.block_bytes(); off += 4096)
    pages.push_back(pin->data() + off);
  return pages;
}

// Moves pages the way the kernel's demotion or promotion does (move_pages(2) itself, not
// numarena's wrapper), and requires that they moved.
void KernelLikeMove(const std::vector<void*>& pages, int node) {
  std::vector<int> target(pages.size(), node), status(pages.size(), -1);
  const long rc = ::syscall(SYS_move_pages, 0, pages.size(), pages.data(), target.data(),
                            status.data(), MPOL_MF_MOVE);
  REQUIRE(rc == 0);
  for (int st : status) REQUIRE(st == node);
}

// Pages of the blocks that are not on the node their pool placed them on (Locate), by the
// kernel's answer.
std::size_t PagesOffNode(KvPool& pool, const std::vector<KvBlockId>& blocks, KvTier tier) {
  std::size_t off = 0;
  for (KvBlockId id : blocks) {
    auto where = pool.Locate(id);
    REQUIRE(where.ok());
    if (where->tier != tier) continue;
    auto pin = pool.Pin(id);
    REQUIRE(pin.ok());
    auto pages = numarena::page_node_list(pin->data(), pool.block_bytes());
    REQUIRE(pages.ok());
    for (int n : *pages) {
      REQUIRE(n >= 0);  // every page was written
      if (n != where->node) ++off;
    }
  }
  return off;
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text << "\n";
  file.close();
  if (!file) throw std::runtime_error("cannot write '" + text + "' to " + path);
}

// Transparent huge pages off while it lives, so that the pool's slabs are base pages and a
// block's pages move one by one, as the kernel demotes base pages (a huge page moves whole,
// and with it every block of its 2 MiB).
struct NoHugePages {
  static constexpr const char* kPath = "/sys/kernel/mm/transparent_hugepage/enabled";
  std::string before = "always";
  NoHugePages() {
    std::ifstream in(kPath);
    std::string word;
    while (in >> word) {
      if (word.size() > 2 && word.front() == '[') before = word.substr(1, word.size() - 2);
    }
    Write(kPath, "never");
  }
  ~NoHugePages() {
    try {
      Write(kPath, before);
    } catch (...) {
    }
  }
};

// A pool over nodes 0 and 1 with the memory-only node as its cold tier, one sequence of
// 48 tokens written (24 blocks), and the blocks of group 0 (node 0) of layer 1 demoted.
struct CxlPool {
  std::unique_ptr<KvPool> pool;
  std::vector<std::int32_t> tokens;
  numarena::KvSequenceId seq = 0;
  std::vector<KvBlockId> blocks;
  int memory_only = -1;
};

CxlPool MakeCxlPool(numarena::KvKernelMoves mode) {
  CxlPool c;
  for (const auto& n : numarena::lab::Expected().nodes)
    if (n.memory_only()) c.memory_only = n.id;
  REQUIRE(c.memory_only >= 0);
  KvPoolOptions o;
  o.geometry = Geometry();
  o.cold_tier = numarena::KvColdTier::Node(c.memory_only);
  o.promote_on_touch = false;
  o.kernel_moves = mode;
  auto pool = KvPool::Create(o);
  INFO((pool.ok() ? std::string("ok") : std::string(pool.status().message())));
  REQUIRE(pool.ok());
  c.pool = *std::move(pool);
  c.tokens = Tokens(48, 11);
  auto seq = c.pool->CreateSequence(c.tokens);
  REQUIRE(seq.ok());
  c.seq = *seq;
  kvtest::WriteTokens(*c.pool, c.seq, c.tokens, 0, c.tokens.size());
  c.blocks = AllBlocks(*c.pool, c.seq);
  for (KvBlockId id : kvtest::BlockIds(*c.pool, c.seq, 1, 0)) REQUIRE(c.pool->DemoteBlock(id).ok());
  return c;
}

// Requires every page of every block on the node the pool placed it on.
void RequireAllOnTheirNodes(CxlPool& c) {
  for (KvBlockId id : c.blocks) {
    auto where = c.pool->Locate(id);
    REQUIRE(where.ok());
    RequireBlockOn(*c.pool, id, where->node, where->tier);
  }
}

// Audits that move pages back (the operator's override of the pool's kReport), a few calls,
// until no hot block is misplaced; each call must move every page it tries.
void CorrectMisplacedHotBlocks(CxlPool& c) {
  numarena::KvAuditOptions correct;
  correct.mode = numarena::KvKernelMoves::kCorrect;
  for (int call = 0; call < 4 && c.pool->Stats().hot_blocks_misplaced > 0; ++call) {
    auto audit = c.pool->AuditPlacement(correct);
    REQUIRE(audit.ok());
    INFO(audit->not_moved.message());
    CHECK(audit->pages_not_moved == 0);
  }
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

TEST_CASE("cxl: pages the kernel moved are reported (kReport) and left where they are") {
  if (numarena::lab::Expected().name != "cxl") return;
  NoHugePages base_pages;
  CxlPool c = MakeCxlPool(numarena::KvKernelMoves::kReport);
  // As demotion would: two hot blocks of node 0 onto the memory-only node, one of node 1
  // half. As tiering-mode balancing would: one cold block onto node 0.
  const auto hot0 = kvtest::BlockIds(*c.pool, c.seq, 0, 0);
  const auto hot1 = kvtest::BlockIds(*c.pool, c.seq, 0, 1);
  const auto cold = kvtest::BlockIds(*c.pool, c.seq, 1, 0);
  KernelLikeMove(BlockPages(*c.pool, hot0[0]), c.memory_only);
  KernelLikeMove(BlockPages(*c.pool, hot0[1]), c.memory_only);
  auto half = BlockPages(*c.pool, hot1[2]);
  half.resize(2);
  KernelLikeMove(half, c.memory_only);
  KernelLikeMove(BlockPages(*c.pool, cold[0]), 0);
  const std::size_t hot_off = PagesOffNode(*c.pool, c.blocks, KvTier::kHot);
  const std::size_t cold_off = PagesOffNode(*c.pool, c.blocks, KvTier::kCold);
  CHECK(hot_off >= 10);  // more when a move took a whole huge page
  CHECK(cold_off >= 4);

  auto audit = c.pool->AuditPlacement();
  REQUIRE(audit.ok());
  CHECK(audit->blocks_checked == c.blocks.size());
  CHECK(audit->pages_checked == c.blocks.size() * 4);
  CHECK(audit->hot_pages_misplaced == hot_off);
  CHECK(audit->cold_pages_misplaced == cold_off);
  CHECK(audit->hot_blocks_misplaced >= 3);
  CHECK(audit->cold_blocks_misplaced >= 1);
  CHECK(audit->pages_moved_back == 0);
  CHECK(audit->blocks_left == audit->hot_blocks_misplaced + audit->cold_blocks_misplaced);
  // Reported, not moved: the kernel's answer is unchanged.
  CHECK(PagesOffNode(*c.pool, c.blocks, KvTier::kHot) == hot_off);
  CHECK(PagesOffNode(*c.pool, c.blocks, KvTier::kCold) == cold_off);
  // A second audit sees the same pages; the totals count each move once.
  REQUIRE(c.pool->AuditPlacement().ok());
  const auto st = c.pool->Stats();
  CHECK(st.audits == 2);
  CHECK(st.kernel_demoted_pages == hot_off);
  CHECK(st.kernel_promoted_pages == cold_off);
  CHECK(st.hot_pages_misplaced == hot_off);
  CHECK(st.cold_pages_misplaced == cold_off);
  CHECK(st.pages_moved_back == 0);
  // The pool moving a misplaced block places it anew: promote the cold one home.
  REQUIRE(c.pool->PromoteBlock(cold[0]).ok());
  RequireBlockOn(*c.pool, cold[0], 0, KvTier::kHot);
  CHECK(c.pool->Stats().cold_blocks_misplaced == 0);
  CHECK(kvtest::CountBadRows(*c.pool, c.seq, c.tokens) == 0);
}

TEST_CASE("cxl: kCorrect audits move every page the kernel moved back, a few blocks per call") {
  if (numarena::lab::Expected().name != "cxl") return;
  NoHugePages base_pages;
  CxlPool c = MakeCxlPool(numarena::KvKernelMoves::kCorrect);
  const auto cold = kvtest::BlockIds(*c.pool, c.seq, 1, 0);
  for (int layer = 0; layer < 2; ++layer) {
    for (KvBlockId id : kvtest::BlockIds(*c.pool, c.seq, layer, 1))
      KernelLikeMove(BlockPages(*c.pool, id), c.memory_only);  // every hot block of node 1
  }
  KernelLikeMove(BlockPages(*c.pool, cold[1]), 1);
  const std::size_t hot_off = PagesOffNode(*c.pool, c.blocks, KvTier::kHot);
  const std::size_t cold_off = PagesOffNode(*c.pool, c.blocks, KvTier::kCold);
  CHECK(hot_off >= 6 * 4);
  CHECK(cold_off >= 4);

  // One block moved back per call: the first call leaves the rest, reported.
  numarena::KvAuditOptions bounded;
  bounded.max_corrected_blocks = 1;
  auto first = c.pool->AuditPlacement(bounded);
  REQUIRE(first.ok());
  CHECK(first->hot_blocks_misplaced + first->cold_blocks_misplaced >= 7);
  CHECK(first->pages_moved_back == 4);
  CHECK(first->pages_not_moved == 0);
  CHECK(first->not_moved.ok());
  CHECK(first->blocks_left == first->hot_blocks_misplaced + first->cold_blocks_misplaced - 1);
  CHECK(PagesOffNode(*c.pool, c.blocks, KvTier::kHot) +
            PagesOffNode(*c.pool, c.blocks, KvTier::kCold) ==
        hot_off + cold_off - 4);
  // Later calls finish the job; each is bounded.
  for (int call = 0; call < 16 && c.pool->Stats().pages_moved_back < hot_off + cold_off; ++call) {
    auto audit = c.pool->AuditPlacement(bounded);
    REQUIRE(audit.ok());
    CHECK(audit->pages_moved_back <= 4);
  }
  RequireAllOnTheirNodes(c);  // every page of every block, page by page
  const auto st = c.pool->Stats();
  CHECK(st.kernel_demoted_pages == hot_off);
  CHECK(st.kernel_promoted_pages == cold_off);
  CHECK(st.pages_moved_back == hot_off + cold_off);
  CHECK(st.pages_not_moved == 0);
  CHECK(st.hot_blocks_misplaced == 0);
  CHECK(st.cold_blocks_misplaced == 0);
  CHECK(kvtest::CountBadRows(*c.pool, c.seq, c.tokens) == 0);  // the kernel copied the data
}

TEST_CASE("cxl on 6.12: the kernel's own demotion of hot blocks is found and undone") {
  if (numarena::lab::Expected().name != "cxl") return;
  const char* series = std::getenv("NUMARENA_LAB_KERNEL_SERIES");
  // Linux 6.1 puts every cxl node in one memory tier: it has nowhere to demote to.
  if (series == nullptr || std::string(series) != "6.12") return;
  const std::string cgroup = "/sys/fs/cgroup/kv-demotion";
  Write("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
  REQUIRE((::mkdir(cgroup.c_str(), 0755) == 0 || errno == EEXIST));
  Write(cgroup + "/cgroup.procs", std::to_string(::getpid()));
  Write("/sys/kernel/mm/numa/demotion_enabled", "true");
  struct Restore {
    std::string cgroup;
    ~Restore() {
      try {
        Write("/sys/kernel/mm/numa/demotion_enabled", "false");
        Write("/sys/fs/cgroup/cgroup.procs", std::to_string(::getpid()));
      } catch (...) {
      }
      ::rmdir(cgroup.c_str());
    }
  } restore{cgroup};

  // The blocks' pages are charged to the cgroup: they are written after the move into it.
  // Transparent huge pages stay as Debian ships them (always): the kernel demotes and the
  // audit moves back whole huge pages.
  CxlPool c = MakeCxlPool(numarena::KvKernelMoves::kReport);
  // Proactive reclaim of the cgroup, as an operator's memory.reclaim (or a TMO-like agent)
  // does. No swap: anonymous pages can only be demoted to the lower tier.
  {
    std::ofstream reclaim(cgroup + "/memory.reclaim");
    reclaim << "256M\n";  // may end with EAGAIN (less reclaimed than asked): fine
  }
  const std::size_t demoted = PagesOffNode(*c.pool, c.blocks, KvTier::kHot);
  INFO("pages of hot blocks the kernel demoted: " << demoted);
  REQUIRE(demoted > 0);
  // Found, every page of it (the pool only reports).
  auto found = c.pool->AuditPlacement();
  REQUIRE(found.ok());
  CHECK(found->hot_pages_misplaced == demoted);
  CHECK(found->pages_moved_back == 0);
  CHECK(c.pool->Stats().kernel_demoted_pages == demoted);
  CHECK(c.pool->Stats().hot_pages_misplaced == demoted);
  CHECK(PagesOffNode(*c.pool, c.blocks, KvTier::kHot) == demoted);
  // Undone by audits that move pages back (the operator's override of the pool's kReport).
  CorrectMisplacedHotBlocks(c);
  const auto st = c.pool->Stats();
  CHECK(st.hot_blocks_misplaced == 0);
  CHECK(st.pages_moved_back > 0);
  CHECK(st.pages_not_moved == 0);
  RequireAllOnTheirNodes(c);  // every page of every block, page by page
  CHECK(kvtest::CountBadRows(*c.pool, c.seq, c.tokens) == 0);
}

// Free memory of a node, from its meminfo ("Node 0 MemFree:  123456 kB").
std::size_t NodeFreeBytes(int node) {
  std::ifstream in("/sys/devices/system/node/node" + std::to_string(node) + "/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("MemFree:");
    if (at != std::string::npos) return std::stoull(line.substr(at + 8)) * 1024;
  }
  throw std::runtime_error("no MemFree in node " + std::to_string(node) + "'s meminfo");
}

TEST_CASE("cxl on 6.12: pressure on a DRAM node demotes hot blocks, audits bring them home") {
  if (numarena::lab::Expected().name != "cxl") return;
  const char* series = std::getenv("NUMARENA_LAB_KERNEL_SERIES");
  if (series == nullptr || std::string(series) != "6.12") return;
  Write("/sys/kernel/mm/numa/demotion_enabled", "true");
  struct Restore {
    ~Restore() {
      try {
        Write("/sys/kernel/mm/numa/demotion_enabled", "false");
      } catch (...) {
      }
    }
  } restore;
  CxlPool c = MakeCxlPool(numarena::KvKernelMoves::kReport);
  // Another allocation of the server, bound to node 0, needs more than node 0 has free:
  // reclaim on node 0 demotes its oldest pages, the KV blocks among them, to the lower tier.
  // Which pages reclaim takes is the kernel's choice (its LRU, kswapd's timing): a round
  // that demoted none of the blocks is tried again with more pressure. The deterministic
  // proof of the kernel's own demotion is the memory.reclaim case above; this one shows it
  // under pressure when the kernel picks the blocks, and then asserts every page.
  std::size_t demoted = 0;
  for (int round = 0; round < 3 && demoted == 0; ++round) {
    // 128, 192, 256 MiB over node 0's free memory: node 2 (512 MiB) takes what is demoted.
    const std::size_t balloon =
        NodeFreeBytes(0) + ((std::size_t{128} + 64 * static_cast<std::size_t>(round)) << 20);
    numarena::lab::Mapping pressure(balloon);
    unsigned long mask = 1;  // node 0
    REQUIRE(::syscall(SYS_mbind, pressure.data(), balloon, MPOL_BIND, &mask, 64, 0) == 0);
    for (std::size_t off = 0; off < balloon; off += 4096) pressure.data()[off] = 1;
    demoted = PagesOffNode(*c.pool, c.blocks, KvTier::kHot);
    INFO("round " << round << ": pages of hot blocks the kernel demoted under node 0's "
                  "pressure: " << demoted);
    if (demoted == 0) continue;
    auto found = c.pool->AuditPlacement();
    REQUIRE(found.ok());
    CHECK(found->hot_pages_misplaced == demoted);
  }
  if (demoted == 0) {
    WARN("the kernel demoted none of the KV blocks under three rounds of pressure on node 0 "
         "(it reclaimed other pages): nothing to audit in this run");
    return;
  }
  // The pressure is gone (the allocation freed): audits that move pages back bring every
  // page of every block home.
  CorrectMisplacedHotBlocks(c);
  CHECK(c.pool->Stats().hot_blocks_misplaced == 0);
  RequireAllOnTheirNodes(c);
  CHECK(kvtest::CountBadRows(*c.pool, c.seq, c.tokens) == 0);
}
