// KvPool::AuditPlacement on the host: the kernel's moves are played by a page-node reader
// the test injects (a table of where each page is, which the test changes as the kernel's
// demotion or promotion would), so every count is exact and nothing depends on timing. The
// real kernel's moves are in tests/lab/kv_pool_lab.cpp.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kv_test_support.hpp"
#include "numarena/kv_pool.hpp"

namespace {

using numarena::KvAuditOptions;
using numarena::KvBlockId;
using numarena::KvKernelMoves;
using numarena::KvPool;
using numarena::KvPoolOptions;
using numarena::KvTier;
using numarena::Status;

constexpr std::uintptr_t kPage = 4096;

// Heap slabs whose node is remembered per page, and the "kernel": a table of pages it moved.
// Query answers a page's node from the table, else from the slab it belongs to.
class FakeKernel final : public numarena::KvStorage, public numarena::KvPageNodes {
 public:
  numarena::StatusOr<void*> AllocateSlab(int node, std::size_t bytes) override {
    void* p = std::aligned_alloc(kPage, bytes);
    std::memset(p, 0, bytes);
    std::lock_guard lock(mu_);
    slabs_[reinterpret_cast<std::uintptr_t>(p)] = {bytes, node};
    return p;
  }
  void FreeSlab(int /*node*/, void* slab, std::size_t bytes) override {
    std::lock_guard lock(mu_);
    const auto base = reinterpret_cast<std::uintptr_t>(slab);
    slabs_.erase(base);
    moved_.erase(moved_.lower_bound(base), moved_.lower_bound(base + bytes));
    std::free(slab);
  }
  bool UnderPressure(int node) const override {
    std::lock_guard lock(mu_);
    return pressure_.count(node) != 0;
  }

  Status Query(std::span<void* const> pages, std::span<int> nodes) override {
    std::lock_guard lock(mu_);
    ++queries_;
    if (!query_error_.ok()) return query_error_;
    for (std::size_t i = 0; i < pages.size(); ++i) nodes[i] = NodeLocked(pages[i]);
    return {};
  }
  Status Move(std::span<void* const> pages, int node, std::span<int> status) override {
    std::lock_guard lock(mu_);
    ++moves_;
    for (std::size_t i = 0; i < pages.size(); ++i) {
      const auto page = reinterpret_cast<std::uintptr_t>(pages[i]);
      if (auto refused = refuse_.find(page); refused != refuse_.end()) {
        status[i] = refused->second;
        continue;
      }
      moved_[page] = node;
      status[i] = node;
    }
    return {};
  }

  // The kernel moves the pages of [data, data + bytes) to `node`.
  void KernelMoves(const std::byte* data, std::size_t bytes, int node) {
    std::lock_guard lock(mu_);
    for (auto a = reinterpret_cast<std::uintptr_t>(data);
         a < reinterpret_cast<std::uintptr_t>(data) + bytes; a += kPage)
      moved_[a] = node;
  }
  // Move of that page refused with -errno until Allow().
  void Refuse(const std::byte* page, int error) {
    std::lock_guard lock(mu_);
    refuse_[reinterpret_cast<std::uintptr_t>(page)] = -error;
  }
  void Allow() {
    std::lock_guard lock(mu_);
    refuse_.clear();
  }
  void FailQueries(Status error) {
    std::lock_guard lock(mu_);
    query_error_ = std::move(error);
  }
  void Pressure(int node, bool on) {
    std::lock_guard lock(mu_);
    if (on) {
      pressure_.insert(node);
    } else {
      pressure_.erase(node);
    }
  }
  int NodeOf(const void* page) {
    std::lock_guard lock(mu_);
    return NodeLocked(page);
  }
  std::size_t queries() {
    std::lock_guard lock(mu_);
    return queries_;
  }

 private:
  int NodeLocked(const void* p) const {
    const auto page = reinterpret_cast<std::uintptr_t>(p);
    if (auto m = moved_.find(page); m != moved_.end()) return m->second;
    auto s = slabs_.upper_bound(page);
    if (s == slabs_.begin()) return -EFAULT;
    --s;
    if (page >= s->first + s->second.bytes) return -EFAULT;
    return s->second.node;
  }
  struct Slab {
    std::size_t bytes;
    int node;
  };
  mutable std::mutex mu_;
  std::map<std::uintptr_t, Slab> slabs_;
  std::map<std::uintptr_t, int> moved_, refuse_;
  std::set<int> pressure_;
  Status query_error_;
  std::size_t queries_ = 0, moves_ = 0;
};

// 2 layers, 2 head groups of 2 heads on nodes 0 and 1, cold tier node 2; head_dim 128 fp32
// and 4 tokens per block: 8 KiB blocks (two pages each), four per 32 KiB slab.
struct Fixture {
  std::shared_ptr<FakeKernel> kernel = std::make_shared<FakeKernel>();
  std::unique_ptr<KvPool> pool;
  std::vector<std::int32_t> tokens;
  numarena::KvSequenceId seq = 0;
  std::vector<KvBlockId> blocks;  // every block of the sequence

  explicit Fixture(KvKernelMoves mode, std::size_t token_count = 16) {
    KvPoolOptions o;
    o.geometry = {.layers = 2,
                  .kv_heads = 4,
                  .head_dim = 128,
                  .dtype = numarena::KvDType::kFp32,
                  .tokens_per_block = 4,
                  .layers_per_block = 1,
                  .heads_per_group = 2};
    o.home_nodes = {0, 1};
    o.cold_tier = numarena::KvColdTier::Node(2);
    o.storage = kernel;
    o.page_nodes = kernel;
    o.slab_bytes = 32 << 10;
    o.promote_on_touch = false;
    o.kernel_moves = mode;
    auto created = KvPool::Create(std::move(o));
    INFO((created.ok() ? std::string("ok") : std::string(created.status().message())));
    REQUIRE(created.ok());
    pool = *std::move(created);
    REQUIRE(pool->block_bytes() == 2 * kPage);
    tokens.resize(token_count);
    std::iota(tokens.begin(), tokens.end(), 500);
    auto s = pool->CreateSequence(tokens);
    REQUIRE(s.ok());
    seq = *s;
    kvtest::WriteTokens(*pool, seq, tokens, 0, tokens.size());
    for (int layer = 0; layer < 2; ++layer)
      for (int g = 0; g < 2; ++g)
        for (KvBlockId id : kvtest::BlockIds(*pool, seq, layer, g)) blocks.push_back(id);
  }
  // Block data (the block must stay where it is meanwhile: the test does not move it).
  std::byte* Data(KvBlockId id) {
    auto pin = pool->Pin(id);
    REQUIRE(pin.ok());
    return pin->data();
  }
  // Pages of all blocks off the node the pool placed their block on, by the fake kernel.
  std::size_t PagesOffNode() {
    std::size_t off = 0;
    for (KvBlockId id : blocks) {
      auto where = pool->Locate(id);
      REQUIRE(where.ok());
      std::byte* data = Data(id);
      for (std::size_t b = 0; b < pool->block_bytes(); b += kPage)
        off += kernel->NodeOf(data + b) != where->node ? 1 : 0;
    }
    return off;
  }
};

KvAuditOptions WholePool() {
  KvAuditOptions o;
  o.max_blocks = 1 << 20;
  o.max_corrected_blocks = 1 << 20;
  return o;
}

}  // namespace

TEST_CASE("audit: nothing moved, nothing found, every block and page asked about once") {
  Fixture f(KvKernelMoves::kCorrect);
  REQUIRE(f.blocks.size() == 16);  // 4 spans x 4 blocks
  auto audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->mode == KvKernelMoves::kCorrect);
  CHECK(audit->blocks_checked == 16);
  CHECK(audit->pages_checked == 32);
  CHECK(audit->hot_blocks_misplaced + audit->cold_blocks_misplaced == 0);
  CHECK(audit->pages_moved_back == 0);
  CHECK(audit->wrapped);
  CHECK(audit->not_moved.ok());
  const auto st = f.pool->Stats();
  CHECK(st.audits == 1);
  CHECK(st.audited_pages == 32);
  CHECK(st.kernel_demoted_pages + st.kernel_promoted_pages == 0);
  CHECK(std::string(numarena::KvKernelMovesName(KvKernelMoves::kReport)) == "report");
  CHECK(std::string(numarena::KvKernelMovesName(KvKernelMoves::kCorrect)) == "correct");
}

TEST_CASE("audit kReport: demoted and promoted pages are counted once each and left") {
  Fixture f(KvKernelMoves::kReport);
  const auto hot0 = kvtest::BlockIds(*f.pool, f.seq, 0, 0);
  const auto hot1 = kvtest::BlockIds(*f.pool, f.seq, 0, 1);
  const auto cold = kvtest::BlockIds(*f.pool, f.seq, 1, 0);
  for (KvBlockId id : cold) REQUIRE(f.pool->DemoteBlock(id).ok());
  // Demotion of a whole hot block of node 0 and half of one of node 1 to node 2; promotion
  // of one cold page to node 0.
  f.kernel->KernelMoves(f.Data(hot0[0]), f.pool->block_bytes(), 2);
  f.kernel->KernelMoves(f.Data(hot1[3]), kPage, 2);
  f.kernel->KernelMoves(f.Data(cold[1]) + kPage, kPage, 0);
  REQUIRE(f.PagesOffNode() == 4);

  auto audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->mode == KvKernelMoves::kReport);
  CHECK(audit->hot_blocks_misplaced == 2);
  CHECK(audit->hot_pages_misplaced == 3);
  CHECK(audit->cold_blocks_misplaced == 1);
  CHECK(audit->cold_pages_misplaced == 1);
  CHECK(audit->blocks_left == 3);
  CHECK(audit->pages_moved_back == 0);
  CHECK(f.PagesOffNode() == 4);  // left where the kernel put them
  auto st = f.pool->Stats();
  CHECK(st.kernel_demoted_pages == 3);
  CHECK(st.kernel_promoted_pages == 1);
  CHECK(st.hot_blocks_misplaced == 2);
  CHECK(st.hot_pages_misplaced == 3);
  CHECK(st.cold_blocks_misplaced == 1);
  CHECK(st.cold_pages_misplaced == 1);

  // Seen again: the totals do not grow. The kernel then demotes the other half of hot1[3]:
  // one more page, counted once.
  REQUIRE(f.pool->AuditPlacement(WholePool()).ok());
  CHECK(f.pool->Stats().kernel_demoted_pages == 3);
  f.kernel->KernelMoves(f.Data(hot1[3]) + kPage, kPage, 2);
  REQUIRE(f.pool->AuditPlacement(WholePool()).ok());
  st = f.pool->Stats();
  CHECK(st.kernel_demoted_pages == 4);
  CHECK(st.hot_pages_misplaced == 4);
  CHECK(st.audits == 3);

  // The pool's own move of a misplaced block places it anew (new memory, not misplaced).
  REQUIRE(f.pool->DemoteBlock(hot0[0]).ok());
  CHECK(f.pool->Stats().hot_blocks_misplaced == 1);
  CHECK(f.pool->Stats().hot_pages_misplaced == 2);
  CHECK(kvtest::CountBadRows(*f.pool, f.seq, f.tokens) == 0);
}

TEST_CASE("audit kCorrect: every page moved back, at most max_corrected_blocks per call") {
  Fixture f(KvKernelMoves::kReport);
  for (int layer = 0; layer < 2; ++layer)
    for (KvBlockId id : kvtest::BlockIds(*f.pool, f.seq, layer, 1))
      f.kernel->KernelMoves(f.Data(id), f.pool->block_bytes(), 2);  // all of node 1's blocks
  REQUIRE(f.PagesOffNode() == 16);

  KvAuditOptions bounded = WholePool();
  bounded.mode = KvKernelMoves::kCorrect;  // overrides the pool's kReport
  bounded.max_corrected_blocks = 3;
  std::size_t calls = 0;
  for (; f.PagesOffNode() > 0 && calls < 10; ++calls) {
    auto audit = f.pool->AuditPlacement(bounded);
    REQUIRE(audit.ok());
    CHECK(audit->mode == KvKernelMoves::kCorrect);
    CHECK(audit->pages_moved_back == std::min<std::size_t>(6, 16 - 6 * calls));
    CHECK(audit->blocks_left == audit->hot_blocks_misplaced - audit->pages_moved_back / 2);
  }
  CHECK(calls == 3);  // 8 blocks, 3 per call
  const auto st = f.pool->Stats();
  CHECK(st.kernel_demoted_pages == 16);
  CHECK(st.pages_moved_back == 16);
  CHECK(st.pages_not_moved == 0);
  CHECK(st.hot_blocks_misplaced == 0);
  CHECK(st.hot_pages_misplaced == 0);
  // Without the override the pool only reports.
  f.kernel->KernelMoves(f.Data(f.blocks[0]), kPage, 2);
  auto audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->pages_moved_back == 0);
  CHECK(f.PagesOffNode() == 1);
}

TEST_CASE("audit: max_blocks bounds a call, calls continue where the last stopped and wrap") {
  Fixture f(KvKernelMoves::kReport);
  f.kernel->KernelMoves(f.Data(f.blocks.back()), kPage, 2);
  KvAuditOptions few;
  few.max_blocks = 5;
  std::size_t checked = 0, found = 0;
  for (int call = 0; call < 3; ++call) {
    const std::size_t queries = f.kernel->queries();
    auto audit = f.pool->AuditPlacement(few);
    REQUIRE(audit.ok());
    CHECK(audit->blocks_checked == 5);
    CHECK(f.kernel->queries() - queries == 5);  // one query per block
    CHECK_FALSE(audit->wrapped);
    checked += audit->blocks_checked;
    found += audit->hot_pages_misplaced;
  }
  auto last = f.pool->AuditPlacement(few);
  REQUIRE(last.ok());
  CHECK(last->blocks_checked == 5);  // the 16th block, then the first four again
  CHECK(last->wrapped);
  found += last->hot_pages_misplaced;
  CHECK(checked + 1 == 16);
  CHECK(found == 1);  // the one moved page, in exactly one of the calls
  KvAuditOptions none;
  none.max_blocks = 0;
  auto refused = f.pool->AuditPlacement(none);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("max_blocks") != std::string::npos);
}

TEST_CASE("audit: blocks of freed spans are not audited (they hold no data)") {
  Fixture f(KvKernelMoves::kReport);
  f.kernel->KernelMoves(f.Data(f.blocks[0]), f.pool->block_bytes(), 2);
  REQUIRE(f.pool->FreeSequence(f.seq).ok());  // never marked computed: its spans are freed
  auto audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->blocks_checked == 0);
  CHECK(audit->hot_blocks_misplaced == 0);
}

TEST_CASE("audit kCorrect: refused moves are counted and explained, retried by later calls") {
  Fixture f(KvKernelMoves::kCorrect);
  const KvBlockId id = kvtest::BlockIds(*f.pool, f.seq, 0, 0)[1];
  std::byte* data = f.Data(id);
  f.kernel->KernelMoves(data, f.pool->block_bytes(), 2);
  f.kernel->Refuse(data + kPage, ENOMEM);
  auto audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->pages_moved_back == 1);
  CHECK(audit->pages_not_moved == 1);
  CHECK(audit->not_moved.code() == absl::StatusCode::kResourceExhausted);
  INFO(audit->not_moved.message());
  CHECK(audit->not_moved.message().find("ENOMEM") != std::string::npos);
  CHECK(audit->not_moved.message().find("node 0") != std::string::npos);
  CHECK(f.pool->Stats().hot_pages_misplaced == 1);
  f.kernel->Allow();
  audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->pages_moved_back == 1);
  CHECK(audit->not_moved.ok());
  const auto st = f.pool->Stats();
  CHECK(st.kernel_demoted_pages == 2);  // the page left behind is not counted twice
  CHECK(st.pages_moved_back == 2);
  CHECK(st.pages_not_moved == 1);
  CHECK(st.hot_pages_misplaced == 0);
  CHECK(f.PagesOffNode() == 0);
}

TEST_CASE("audit kCorrect: nothing is moved back onto a node under pressure") {
  Fixture f(KvKernelMoves::kCorrect);
  f.kernel->KernelMoves(f.Data(f.blocks[0]), f.pool->block_bytes(), 2);
  const int home = f.pool->Locate(f.blocks[0])->node;
  f.kernel->Pressure(home, true);
  auto audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->hot_pages_misplaced == 2);
  CHECK(audit->pages_moved_back == 0);
  CHECK(audit->blocks_left == 1);
  f.kernel->Pressure(home, false);
  audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->pages_moved_back == 2);
  CHECK(f.PagesOffNode() == 0);
}

TEST_CASE("audit: a refused query is the call's error, naming the block and the cause") {
  Fixture f(KvKernelMoves::kReport);
  f.kernel->FailQueries(absl::PermissionDeniedError("move_pages(query): Operation not permitted"));
  auto audit = f.pool->AuditPlacement();
  REQUIRE_FALSE(audit.ok());
  CHECK(audit.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(audit.status().message().find("Operation not permitted") != std::string::npos);
  CHECK(audit.status().message().find("block") != std::string::npos);
  CHECK(f.pool->Stats().audits == 1);
}

TEST_CASE("audit kCorrect beside pins, demotion and promotion on other threads") {
  Fixture f(KvKernelMoves::kCorrect, 64);  // 16 spans, 64 blocks
  std::atomic<bool> stop{false};
  // The "kernel" demotes a page of each block in turn; another thread pins, demotes and
  // promotes blocks, as decode and the pool's tiering would. Fixed iteration counts: the
  // outcome checked at the end does not depend on how the threads interleave.
  std::thread kernel([&] {
    for (int round = 0; round < 50; ++round) {
      for (KvBlockId id : f.blocks) {
        auto pin = f.pool->Pin(id);
        if (pin.ok()) f.kernel->KernelMoves(pin->data(), kPage, pin->node() == 2 ? 0 : 2);
      }
    }
  });
  std::thread tiering([&] {
    for (int round = 0; round < 50; ++round) {
      for (std::size_t i = static_cast<std::size_t>(round) % 4; i < f.blocks.size(); i += 4) {
        (void)f.pool->DemoteBlock(f.blocks[i]);
        auto pin = f.pool->Pin(f.blocks[(i + 1) % f.blocks.size()]);
        (void)f.pool->PromoteBlock(f.blocks[(i + 2) % f.blocks.size()]);
      }
    }
  });
  for (int call = 0; call < 50; ++call) {
    KvAuditOptions some;
    some.max_blocks = 16;
    REQUIRE(f.pool->AuditPlacement(some).ok());
  }
  kernel.join();
  tiering.join();
  auto audit = f.pool->AuditPlacement(WholePool());
  REQUIRE(audit.ok());
  CHECK(audit->blocks_checked == 64);
  CHECK(f.PagesOffNode() == 0);
  const auto st = f.pool->Stats();
  CHECK(st.hot_blocks_misplaced + st.cold_blocks_misplaced == 0);
  CHECK(st.pages_moved_back == st.kernel_demoted_pages + st.kernel_promoted_pages);
  CHECK(kvtest::CountBadRows(*f.pool, f.seq, f.tokens) == 0);
}

TEST_CASE("audit with the kernel's move_pages: every page of a pool on this host's node 0") {
  // The default page reader (MakeKernelPageNodes) on the host's one node: no cold tier, so
  // every resident page must be on node 0 and nothing is misplaced.
  KvPoolOptions o;
  o.geometry = {.layers = 2, .kv_heads = 2, .head_dim = 128, .tokens_per_block = 16};
  o.home_nodes = {0};
  o.kernel_moves = KvKernelMoves::kCorrect;
  auto pool = KvPool::Create(std::move(o));
  INFO((pool.ok() ? std::string("ok") : std::string(pool.status().message())));
  REQUIRE(pool.ok());
  std::vector<std::int32_t> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 1);
  auto seq = (*pool)->CreateSequence(tokens);
  REQUIRE(seq.ok());
  kvtest::WriteTokens(**pool, *seq, tokens, 0, tokens.size());
  auto audit = (*pool)->AuditPlacement();
  INFO((audit.ok() ? std::string("ok") : std::string(audit.status().message())));
  REQUIRE(audit.ok());
  CHECK(audit->blocks_checked == 8);  // 4 spans x 2 layers
  CHECK(audit->pages_checked == 8 * (*pool)->block_bytes() / kPage);
  CHECK(audit->hot_blocks_misplaced == 0);
  CHECK(audit->pages_moved_back == 0);
}
