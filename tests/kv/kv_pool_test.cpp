// KV-cache pool: geometry and configuration errors, block accounting, reference counts and
// copy-on-write, prefix reuse, eviction order of every hotness policy, tier moves, data
// integrity across 100,000 random demote/promote cycles, and budget-driven demotion.
#include "numarena/kv_pool.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <numeric>
#include <random>
#include <string>

#include "kv_test_support.hpp"
#include "kv/kv_testing.hpp"
#include "numarena/arena.hpp"
#include "numarena/budget.hpp"

using numarena::KvBlockId;
using numarena::KvColdTier;
using numarena::KvHotnessPolicy;
using numarena::KvPool;
using numarena::KvPoolOptions;
using numarena::KvTier;

namespace {

// 2 layers, 4 heads in 2 groups, head_dim 8 fp32, 4 tokens per block: 4 blocks per span.
KvPoolOptions SmallOptions(std::shared_ptr<kvtest::HeapStorage> storage) {
  KvPoolOptions o;
  o.geometry = {.layers = 2,
                .kv_heads = 4,
                .head_dim = 8,
                .dtype = numarena::KvDType::kFp32,
                .tokens_per_block = 4,
                .layers_per_block = 1,
                .heads_per_group = 2};
  o.home_nodes = {0, 1};
  o.cold_tier = KvColdTier::Node(2);
  o.storage = std::move(storage);
  o.slab_bytes = 4096;
  return o;
}

std::unique_ptr<KvPool> MustCreate(KvPoolOptions o) {
  auto pool = KvPool::Create(std::move(o));
  INFO((pool.ok() ? std::string("ok") : std::string(pool.status().message())));
  REQUIRE(pool.ok());
  return *std::move(pool);
}

std::vector<std::int32_t> Tokens(std::size_t n, std::int32_t first = 100) {
  std::vector<std::int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

}  // namespace

TEST_CASE("configuration errors are clear") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  SECTION("zero heads") {
    auto o = SmallOptions(storage);
    o.geometry.kv_heads = 0;
    auto pool = KvPool::Create(o);
    REQUIRE(pool.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(pool.status().message()), Catch::Contains("kv_heads is 0"));
  }
  SECTION("group that does not divide the heads") {
    auto o = SmallOptions(storage);
    o.geometry.heads_per_group = 3;
    auto pool = KvPool::Create(o);
    REQUIRE(pool.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(pool.status().message()), Catch::Contains("does not divide kv_heads"));
  }
  SECTION("cold node that is also a home node") {
    auto o = SmallOptions(storage);
    o.cold_tier = KvColdTier::Node(1);
    auto pool = KvPool::Create(o);
    REQUIRE(pool.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(pool.status().message()), Catch::Contains("both a home node"));
  }
  SECTION("block larger than the budget") {
    numarena::BudgetOptions bo;
    bo.mode = numarena::BudgetMode::kQuota;
    bo.default_quota_bytes = 1024;  // trip at 921 bytes; a block is 4 x 512 bytes? no: 512
    auto budget = numarena::Budget::Create(bo, std::vector<int>{0, 1, 2});
    REQUIRE(budget.ok());
    auto o = SmallOptions(storage);
    o.geometry.tokens_per_block = 16;  // 2048-byte blocks
    o.budget = budget->get();
    auto pool = KvPool::Create(o);
    REQUIRE(pool.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(pool.status().message()),
               Catch::Contains("one block is 2048 bytes but node 0 may hold only 921"));
  }
}

TEST_CASE("block accounting: spans, blocks per node, release into cache and free lists") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto pool = MustCreate(SmallOptions(storage));
  CHECK(pool->head_groups() == 2);
  CHECK(pool->group_node(0) == 0);
  CHECK(pool->group_node(1) == 1);
  CHECK(pool->block_bytes() == 512);

  auto tokens = Tokens(10);  // 2 full spans + 2 tokens
  auto seq = pool->CreateSequence(tokens);
  REQUIRE(seq.ok());
  CHECK(*pool->Length(*seq) == 10);
  auto st = pool->Stats();
  CHECK(st.spans_in_use == 3);
  CHECK(st.hot_blocks == 3 * 4);
  CHECK(st.cold_blocks == 0);
  REQUIRE(st.nodes.size() == 3);
  CHECK(st.nodes[0].hot_blocks == 6);  // group 0, 2 layers, 3 spans
  CHECK(st.nodes[1].hot_blocks == 6);
  std::vector<KvBlockId> blocks;
  REQUIRE(pool->Blocks(*seq, 1, 1, &blocks).ok());
  CHECK(blocks.size() == 3);
  for (KvBlockId id : blocks) {
    auto pin = pool->Pin(id);
    REQUIRE(pin.ok());
    CHECK(pin->node() == 1);
    CHECK(pin->group() == 1);
    CHECK(pin->first_layer() == 1);
    CHECK(pin->first_head() == 2);
    CHECK(reinterpret_cast<std::uintptr_t>(pin->data()) % 64 == 0);
    CHECK(pool->Stats().pinned_blocks == 1);
  }
  CHECK(pool->Stats().pinned_blocks == 0);

  REQUIRE(pool->Append(*seq, Tokens(3, 500)).ok());  // fills span 3 partially: 13 tokens
  CHECK(pool->Stats().spans_in_use == 4);
  auto all_tokens = tokens;
  for (std::int32_t t : Tokens(3, 500)) all_tokens.push_back(t);
  kvtest::WriteTokens(*pool, *seq, all_tokens, 0, 13);
  REQUIRE(pool->MarkComputed(*seq, 13).ok());  // spans 0..2 enter the prefix index
  REQUIRE(pool->Truncate(*seq, 5).ok());
  st = pool->Stats();
  CHECK(st.spans_in_use == 2);
  CHECK(st.spans_free == 1);    // the partial span, which the prefix index never held
  CHECK(st.spans_cached == 1);  // tokens 8..11 filled a span: it stays for prefix reuse
  REQUIRE(pool->FreeSequence(*seq).ok());
  st = pool->Stats();
  CHECK(st.spans_in_use == 0);
  CHECK(st.spans_cached == 3);
  CHECK(st.spans_free == 1);
  CHECK(st.sequences == 0);
  CHECK(pool->FreeSequence(*seq).code() == absl::StatusCode::kNotFound);
  CHECK(pool->Append(*seq, Tokens(1)).code() == absl::StatusCode::kNotFound);

  // Free spans are reused before anything new is mapped (cached ones are kept while
  // memory lasts).
  const std::size_t slabs = storage->slabs(0) + storage->slabs(1);
  auto again = pool->CreateSequence(Tokens(3, 9000));
  REQUIRE(again.ok());
  CHECK(storage->slabs(0) + storage->slabs(1) == slabs);
  CHECK(pool->Stats().spans_free == 0);
}

TEST_CASE("fork shares spans, and appending copies the shared partial span") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto pool = MustCreate(SmallOptions(storage));
  auto tokens = Tokens(6);
  auto parent = pool->CreateSequence(tokens);
  REQUIRE(parent.ok());
  kvtest::WriteTokens(*pool, *parent, tokens, 0, 6);
  auto child = pool->Fork(*parent);
  REQUIRE(child.ok());
  CHECK(pool->Stats().spans_in_use == 2);  // shared, not copied
  CHECK(kvtest::BlockIds(*pool, *child, 0, 0) == kvtest::BlockIds(*pool, *parent, 0, 0));

  auto child_tokens = tokens;
  child_tokens.push_back(777);
  REQUIRE(pool->Append(*child, std::vector<std::int32_t>{777}).ok());
  kvtest::WriteTokens(*pool, *child, child_tokens, 6, 7);
  auto pb = kvtest::BlockIds(*pool, *parent, 0, 0);
  auto cb = kvtest::BlockIds(*pool, *child, 0, 0);
  CHECK(pb[0] == cb[0]);  // the full span is still shared
  CHECK(pb[1] != cb[1]);  // the partial one was copied
  CHECK(pool->Stats().copy_on_writes == 1);
  CHECK(kvtest::CountBadRows(*pool, *child, child_tokens) == 0);  // copied data intact
  CHECK(kvtest::CountBadRows(*pool, *parent, tokens) == 0);       // parent untouched

  // The parent now owns its partial span alone: appending writes in place.
  auto parent_tokens = tokens;
  parent_tokens.push_back(888);
  REQUIRE(pool->Append(*parent, std::vector<std::int32_t>{888}).ok());
  kvtest::WriteTokens(*pool, *parent, parent_tokens, 6, 7);
  CHECK(pool->Stats().copy_on_writes == 1);
  CHECK(kvtest::BlockIds(*pool, *parent, 0, 0) == pb);
  CHECK(kvtest::CountBadRows(*pool, *child, child_tokens) == 0);
  CHECK(kvtest::CountBadRows(*pool, *parent, parent_tokens) == 0);

  REQUIRE(pool->FreeSequence(*parent).ok());
  CHECK(kvtest::CountBadRows(*pool, *child, child_tokens) == 0);
  REQUIRE(pool->FreeSequence(*child).ok());
  CHECK(pool->Stats().spans_in_use == 0);
}

TEST_CASE("prefix reuse: full spans are shared by hash of parent and tokens") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto pool = MustCreate(SmallOptions(storage));
  auto a_tokens = Tokens(12);
  auto a = pool->CreateSequence(a_tokens);
  REQUIRE(a.ok());
  kvtest::WriteTokens(*pool, *a, a_tokens, 0, 12);
  REQUIRE(pool->MarkComputed(*a, 12).ok());
  const auto a_blocks = kvtest::BlockIds(*pool, *a, 1, 0);

  // A live sequence's full spans are found.
  auto b_tokens = Tokens(10);
  b_tokens[9] = 5;  // differs after the second span
  std::size_t reused = 99;
  auto b = pool->CreateSequence(b_tokens, &reused);
  REQUIRE(b.ok());
  CHECK(reused == 8);
  auto b_blocks = kvtest::BlockIds(*pool, *b, 1, 0);
  CHECK(b_blocks[0] == a_blocks[0]);
  CHECK(b_blocks[1] == a_blocks[1]);
  CHECK(b_blocks[2] != a_blocks[2]);
  kvtest::WriteTokens(*pool, *b, b_tokens, 8, 10);
  REQUIRE(pool->MarkComputed(*b, 10).ok());  // its last span is partial: never indexed
  CHECK(kvtest::CountBadRows(*pool, *b, b_tokens) == 0);

  // After every owner is gone the spans stay cached and are still found.
  REQUIRE(pool->FreeSequence(*a).ok());
  REQUIRE(pool->FreeSequence(*b).ok());
  CHECK(pool->Stats().spans_cached == 3);
  CHECK(pool->CachedPrefixTokens(a_tokens) == 12);
  auto c = pool->CreateSequence(a_tokens, &reused);
  REQUIRE(c.ok());
  CHECK(reused == 12);
  CHECK(kvtest::BlockIds(*pool, *c, 1, 0) == a_blocks);
  CHECK(kvtest::CountBadRows(*pool, *c, a_tokens) == 0);

  // Same tokens after a different first span: different parent hash, no reuse.
  auto d_tokens = Tokens(12);
  d_tokens[0] = 1;
  CHECK(pool->CachedPrefixTokens(d_tokens) == 0);
  auto st = pool->Stats();
  CHECK(st.prefix_hits == 2 + 3);
  CHECK(st.prefix_lookups == 3 + 3);  // b: hit, hit, miss; c: three hits
}

TEST_CASE("prefix index: a span is found only after MarkComputed covers it") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto pool = MustCreate(SmallOptions(storage));
  const auto tokens = Tokens(10);  // 2 full spans + 2 tokens
  auto a = pool->CreateSequence(tokens);
  REQUIRE(a.ok());

  // Created but not written: another request with the same prompt must compute its own.
  CHECK(pool->CachedPrefixTokens(tokens) == 0);
  std::size_t reused = 99;
  auto b = pool->CreateSequence(tokens, &reused);
  REQUIRE(b.ok());
  CHECK(reused == 0);
  CHECK(kvtest::BlockIds(*pool, *b, 0, 0).at(0) != kvtest::BlockIds(*pool, *a, 0, 0).at(0));
  // Freed before it was computed: its spans hold no trustworthy K/V, so they are not cached.
  REQUIRE(pool->FreeSequence(*b).ok());
  CHECK(pool->Stats().spans_cached == 0);
  CHECK(pool->CachedPrefixTokens(tokens) == 0);

  // Only spans wholly inside the computed range are published.
  kvtest::WriteTokens(*pool, *a, tokens, 0, 6);
  REQUIRE(pool->MarkComputed(*a, 6).ok());
  CHECK(pool->CachedPrefixTokens(tokens) == 4);
  REQUIRE(pool->MarkComputed(*a, 3).ok());  // below the computed count: nothing changes
  CHECK(pool->CachedPrefixTokens(tokens) == 4);
  kvtest::WriteTokens(*pool, *a, tokens, 6, 10);
  REQUIRE(pool->MarkComputed(*a, 10).ok());
  CHECK(pool->CachedPrefixTokens(tokens) == 8);  // the partial third span is never indexed
  CHECK(pool->MarkComputed(*a, 11).code() == absl::StatusCode::kOutOfRange);

  // Now a request with the same prompt shares the written spans and reads their rows.
  auto c = pool->CreateSequence(tokens, &reused);
  REQUIRE(c.ok());
  CHECK(reused == 8);
  CHECK(kvtest::BlockIds(*pool, *c, 1, 1).at(1) == kvtest::BlockIds(*pool, *a, 1, 1).at(1));
  kvtest::WriteTokens(*pool, *c, tokens, 8, 10);
  CHECK(kvtest::CountBadRows(*pool, *c, tokens) == 0);

  REQUIRE(pool->FreeSequence(*a).ok());
  CHECK(pool->MarkComputed(*a, 1).code() == absl::StatusCode::kNotFound);
  REQUIRE(pool->FreeSequence(*c).ok());
  CHECK(pool->Stats().spans_cached == 2);
}

TEST_CASE("prefix index: forks and truncation publish only computed tokens") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto pool = MustCreate(SmallOptions(storage));
  const auto tokens = Tokens(8);

  SECTION("a fork marks shared spans computed after the parent is gone") {
    auto parent = pool->CreateSequence(tokens);
    REQUIRE(parent.ok());
    auto child = pool->Fork(*parent);
    REQUIRE(child.ok());
    REQUIRE(pool->FreeSequence(*parent).ok());  // still held by the child: not cached
    CHECK(pool->Stats().spans_cached == 0);
    kvtest::WriteTokens(*pool, *child, tokens, 0, 8);
    REQUIRE(pool->MarkComputed(*child, 8).ok());
    CHECK(pool->CachedPrefixTokens(tokens) == 8);
    REQUIRE(pool->FreeSequence(*child).ok());
    CHECK(pool->Stats().spans_cached == 2);  // indexed after the fork, cached on release
    CHECK(pool->Stats().spans_free == 0);
  }
  SECTION("a fork marks shared spans computed while the parent still holds them") {
    auto parent = pool->CreateSequence(tokens);
    REQUIRE(parent.ok());
    auto child = pool->Fork(*parent);
    REQUIRE(child.ok());
    kvtest::WriteTokens(*pool, *child, tokens, 0, 8);
    REQUIRE(pool->MarkComputed(*child, 8).ok());
    REQUIRE(pool->FreeSequence(*child).ok());
    CHECK(pool->Stats().spans_cached == 0);  // the parent holds them
    REQUIRE(pool->FreeSequence(*parent).ok());
    CHECK(pool->Stats().spans_cached == 2);
  }
  SECTION("truncation lowers the computed count") {
    auto seq = pool->CreateSequence(tokens);
    REQUIRE(seq.ok());
    kvtest::WriteTokens(*pool, *seq, tokens, 0, 8);
    REQUIRE(pool->MarkComputed(*seq, 8).ok());
    REQUIRE(pool->Truncate(*seq, 4).ok());
    auto other = Tokens(4);
    for (std::int32_t t : Tokens(4, 700)) other.push_back(t);
    REQUIRE(pool->Append(*seq, Tokens(4, 700)).ok());
    kvtest::WriteTokens(*pool, *seq, other, 4, 8);
    REQUIRE(pool->MarkComputed(*seq, 6).ok());
    CHECK(pool->CachedPrefixTokens(other) == 4);
    REQUIRE(pool->MarkComputed(*seq, 8).ok());  // would be a no-op had truncation kept 8
    CHECK(pool->CachedPrefixTokens(other) == 8);
    CHECK(pool->CachedPrefixTokens(tokens) == 8);  // the truncated span stays cached
  }
  SECTION("a span refilled after truncation is indexed by its new tokens") {
    auto seq = pool->CreateSequence(Tokens(8, 5000));
    REQUIRE(seq.ok());
    REQUIRE(pool->Truncate(*seq, 6).ok());  // span 1 was full and hashed, never computed
    auto refilled = Tokens(6, 5000);
    refilled.push_back(1);
    refilled.push_back(2);
    REQUIRE(pool->Append(*seq, std::vector<std::int32_t>{1, 2}).ok());
    kvtest::WriteTokens(*pool, *seq, refilled, 0, 8);
    REQUIRE(pool->MarkComputed(*seq, 8).ok());
    CHECK(pool->CachedPrefixTokens(refilled) == 8);
    CHECK(pool->CachedPrefixTokens(Tokens(8, 5000)) == 4);
    CHECK(kvtest::CountBadRows(*pool, *seq, refilled) == 0);
  }
}

namespace {
// The lock-free sharing race, made deterministic: the hook runs inside the sharer's lookup,
// between finding prompt P's span in the index and adding its reference. Inside it, P's
// last holder leaves (P is cached), a request that finds no memory evicts P's span and
// reuses it (`then`), and the filler sequence goes, so the sharer has room of its own.
enum class Reuse {
  kOtherPrompt,    // the span is computed and indexed for prompt Q
  kNotIndexedYet,  // the span holds Q, not yet marked computed (not in the index)
  kSamePrompt,     // the span was freed and computed again for P itself
};
struct ReuseRace {
  Reuse then;
  KvPool* pool = nullptr;
  numarena::KvSequenceId p_holder = 0, filler = 0, new_holder = 0;
  std::uint32_t found = 0xffffffffu;
  bool ran = false;
};
ReuseRace* g_race = nullptr;

const std::vector<std::int32_t> kPromptP = Tokens(4, 100), kPromptQ = Tokens(4, 900);

void ReuseInsideLookup(std::uint32_t span) {
  ReuseRace& r = *g_race;
  if (r.ran) return;
  r.ran = true;
  r.found = span;
  REQUIRE(r.pool->FreeSequence(r.p_holder).ok());
  auto q = r.pool->CreateSequence(kPromptQ);  // evicts P's span: the pool is full
  REQUIRE(q.ok());
  kvtest::WriteTokens(*r.pool, *q, kPromptQ, 0, 4);
  r.new_holder = *q;
  if (r.then == Reuse::kOtherPrompt) REQUIRE(r.pool->MarkComputed(*q, 4).ok());
  if (r.then == Reuse::kSamePrompt) {
    REQUIRE(r.pool->FreeSequence(*q).ok());  // not computed: the span goes back free
    auto p = r.pool->CreateSequence(kPromptP);
    REQUIRE(p.ok());
    kvtest::WriteTokens(*r.pool, *p, kPromptP, 0, 4);
    REQUIRE(r.pool->MarkComputed(*p, 4).ok());
    r.new_holder = *p;
  }
  REQUIRE(r.pool->FreeSequence(r.filler).ok());
}

// Runs the race; returns the sharer and how many of P's tokens it reused.
std::pair<numarena::KvSequenceId, std::size_t> RunReuseRace(KvPool& pool, ReuseRace& race) {
  auto p_holder = pool.CreateSequence(kPromptP);
  REQUIRE(p_holder.ok());
  kvtest::WriteTokens(pool, *p_holder, kPromptP, 0, 4);
  REQUIRE(pool.MarkComputed(*p_holder, 4).ok());
  auto filler = pool.CreateSequence(Tokens(4, 5000));  // the second span, never indexed
  REQUIRE(filler.ok());
  race.pool = &pool;
  race.p_holder = *p_holder;
  race.filler = *filler;
  g_race = &race;
  numarena::kv::testing::after_prefix_find = ReuseInsideLookup;
  std::size_t reused = 99;
  auto sharer = pool.CreateSequence(kPromptP, &reused);
  numarena::kv::testing::after_prefix_find = nullptr;
  g_race = nullptr;
  REQUIRE(race.ran);
  REQUIRE(sharer.ok());
  // The scenario happened: the new holder got the very span the lookup had found for P.
  REQUIRE((kvtest::BlockIds(pool, race.new_holder, 0, 0).front() & 0xffffffffu) / 4 == race.found);
  return {*sharer, reused};
}

std::unique_ptr<KvPool> TwoSpanPool() {
  auto o = SmallOptions(std::make_shared<kvtest::HeapStorage>());
  o.cold_tier = KvColdTier::None();
  o.hot_blocks_per_node = 4;  // two spans
  return MustCreate(o);
}
}  // namespace

TEST_CASE("prefix sharing lets go of a span that was evicted and reused for another prompt") {
  auto pool = TwoSpanPool();
  ReuseRace race{Reuse::kOtherPrompt};
  const auto [sharer, reused] = RunReuseRace(*pool, race);
  CHECK(reused == 0);  // P is gone: nothing shared, and never Q's K/V
  CHECK(pool->CachedPrefixTokens(kPromptP) == 0);
  CHECK(kvtest::CountBadRows(*pool, race.new_holder, kPromptQ) == 0);
  CHECK(pool->Stats().spans_in_use == 2);  // the sharer's own span and Q's
  // The lookup's reference on Q's span was given back: when Q's holder leaves, the span is
  // cached (unheld), not kept in use.
  REQUIRE(pool->FreeSequence(race.new_holder).ok());
  CHECK(pool->Stats().spans_in_use == 1);
  CHECK(pool->CachedPrefixTokens(kPromptQ) == 4);
  REQUIRE(pool->FreeSequence(sharer).ok());
  CHECK(pool->Stats().spans_in_use == 0);
}

TEST_CASE("prefix sharing takes no reference on a reused span that is not indexed yet") {
  auto pool = TwoSpanPool();
  ReuseRace race{Reuse::kNotIndexedYet};
  const auto [sharer, reused] = RunReuseRace(*pool, race);
  CHECK(reused == 0);
  CHECK(pool->Stats().spans_in_use == 2);
  // Q's holder is the span's only holder: its release frees the span (it was never
  // indexed), which a stray extra reference would have prevented.
  REQUIRE(pool->FreeSequence(race.new_holder).ok());
  CHECK(pool->Stats().spans_in_use == 1);
  CHECK(pool->CachedPrefixTokens(kPromptQ) == 0);
  REQUIRE(pool->FreeSequence(sharer).ok());
  CHECK(pool->Stats().spans_in_use == 0);
}

TEST_CASE("prefix sharing shares a span that was reused and computed again for the same prompt") {
  auto pool = TwoSpanPool();
  ReuseRace race{Reuse::kSamePrompt};
  const auto [sharer, reused] = RunReuseRace(*pool, race);
  CHECK(reused == 4);  // the same prompt, computed again: shared
  CHECK(kvtest::CountBadRows(*pool, sharer, kPromptP) == 0);
  CHECK(kvtest::BlockIds(*pool, sharer, 0, 0) == kvtest::BlockIds(*pool, race.new_holder, 0, 0));
  CHECK(pool->Stats().spans_in_use == 1);  // one span, two holders
  REQUIRE(pool->FreeSequence(race.new_holder).ok());
  CHECK(pool->Stats().spans_in_use == 1);  // the sharer still holds it
  REQUIRE(pool->FreeSequence(sharer).ok());
  CHECK(pool->Stats().spans_in_use == 0);
  CHECK(pool->CachedPrefixTokens(kPromptP) == 4);
}

TEST_CASE("cached spans are evicted (LRU) when there is no memory left") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto o = SmallOptions(storage);
  o.cold_tier = KvColdTier::None();
  o.hot_blocks_per_node = 6;  // 3 spans
  auto pool = MustCreate(o);
  std::vector<numarena::KvSequenceId> seqs;
  for (int i = 0; i < 3; ++i) {
    auto s = pool->CreateSequence(Tokens(4, 1000 * i));
    REQUIRE(s.ok());
    kvtest::WriteTokens(*pool, *s, Tokens(4, 1000 * i), 0, 4);
    REQUIRE(pool->MarkComputed(*s, 4).ok());
    seqs.push_back(*s);
  }
  auto full = pool->CreateSequence(Tokens(4, 5000));
  REQUIRE(full.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(full.status().message()), Catch::Contains("capacity of 6 blocks"));
  CHECK(pool->Stats().refusals == 1);
  REQUIRE(pool->FreeSequence(seqs[1]).ok());
  REQUIRE(pool->FreeSequence(seqs[0]).ok());
  auto s = pool->CreateSequence(Tokens(4, 5000));
  REQUIRE(s.ok());
  CHECK(pool->Stats().cached_evictions == 1);
  CHECK(pool->CachedPrefixTokens(Tokens(4, 0)) == 4);     // released last: kept
  CHECK(pool->CachedPrefixTokens(Tokens(4, 1000)) == 0);  // released first: evicted
}

TEST_CASE("eviction for an allocation skips cached spans whose blocks are pinned") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto o = SmallOptions(storage);
  o.cold_tier = KvColdTier::None();
  o.hot_blocks_per_node = 6;  // 3 spans
  auto pool = MustCreate(o);
  std::vector<KvBlockId> first_block;  // layer 0, group 0 of each span
  for (int i = 0; i < 3; ++i) {
    auto s = pool->CreateSequence(Tokens(4, 1000 * i));
    REQUIRE(s.ok());
    kvtest::WriteTokens(*pool, *s, Tokens(4, 1000 * i), 0, 4);
    REQUIRE(pool->MarkComputed(*s, 4).ok());
    first_block.push_back(kvtest::BlockIds(*pool, *s, 0, 0).at(0));
    REQUIRE(pool->FreeSequence(*s).ok());  // cached; span 0 is the least recently released
  }
  REQUIRE(pool->Stats().spans_cached == 3);

  {
    // A reader pins the oldest cached span's block: an allocation that finds no memory
    // evicts the next oldest instead, and the pinned rows keep their contents.
    auto pin = pool->Pin(first_block[0]);
    REQUIRE(pin.ok());
    const std::vector<std::byte> before(pin->data(), pin->data() + pool->block_bytes());
    auto s = pool->CreateSequence(Tokens(4, 5000));
    REQUIRE(s.ok());
    kvtest::WriteTokens(*pool, *s, Tokens(4, 5000), 0, 4);
    CHECK(std::equal(before.begin(), before.end(), pin->data()));
    CHECK(pool->Stats().cached_evictions == 1);
    CHECK(pool->CachedPrefixTokens(Tokens(4, 0)) == 4);     // pinned: kept
    CHECK(pool->CachedPrefixTokens(Tokens(4, 1000)) == 0);  // evicted
    CHECK(pool->CachedPrefixTokens(Tokens(4, 2000)) == 4);

    // Every cached span pinned: nothing to evict, so the allocation is refused and both
    // cached spans stay.
    auto pin2 = pool->Pin(first_block[2]);
    REQUIRE(pin2.ok());
    auto refused = pool->CreateSequence(Tokens(4, 6000));
    CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(pool->Stats().cached_evictions == 1);
    CHECK(pool->CachedPrefixTokens(Tokens(4, 0)) == 4);
    CHECK(pool->CachedPrefixTokens(Tokens(4, 2000)) == 4);
    REQUIRE(pool->FreeSequence(*s).ok());  // span 5000 is not computed: freed, not cached
  }
  // Unpinned, the oldest cached span is the victim again (after the free span).
  auto a = pool->CreateSequence(Tokens(4, 7000));
  REQUIRE(a.ok());
  CHECK(pool->Stats().cached_evictions == 1);  // took the free span
  auto b = pool->CreateSequence(Tokens(4, 8000));
  REQUIRE(b.ok());
  CHECK(pool->Stats().cached_evictions == 2);
  CHECK(pool->CachedPrefixTokens(Tokens(4, 0)) == 0);
  CHECK(pool->CachedPrefixTokens(Tokens(4, 2000)) == 4);
}

TEST_CASE(
    "block ids: an id from an earlier owner of the span is refused, shared spans keep theirs") {
  auto pool = MustCreate(SmallOptions(std::make_shared<kvtest::HeapStorage>()));
  const auto tokens = Tokens(6);  // one full span and a partial one
  auto a = pool->CreateSequence(tokens);
  REQUIRE(a.ok());
  kvtest::WriteTokens(*pool, *a, tokens, 0, tokens.size());
  REQUIRE(pool->MarkComputed(*a, tokens.size()).ok());
  const auto a_ids = kvtest::BlockIds(*pool, *a, 0, 0);
  REQUIRE(a_ids.size() == 2);
  REQUIRE(pool->FreeSequence(*a).ok());  // span 0 is cached, span 1 free

  std::size_t reused = 0;
  auto b = pool->CreateSequence(tokens, &reused);
  REQUIRE(b.ok());
  REQUIRE(reused == 4);
  const auto b_ids = kvtest::BlockIds(*pool, *b, 0, 0);
  REQUIRE(b_ids.size() == 2);
  // The shared prefix span has the same contents, so A's id is still good and is B's.
  CHECK(b_ids[0] == a_ids[0]);
  CHECK(pool->Pin(a_ids[0]).ok());
  // B's second span is A's second span again (same slot), with new contents: A's id names
  // a block it no longer owns and is refused everywhere.
  REQUIRE((b_ids[1] & 0xffffffffu) == (a_ids[1] & 0xffffffffu));
  CHECK(b_ids[1] != a_ids[1]);
  auto stale = pool->Pin(a_ids[1]);
  REQUIRE(stale.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(stale.status().message()), Catch::Contains("stale"));
  CHECK(pool->Locate(a_ids[1]).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(pool->DemoteBlock(a_ids[1]).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(pool->PromoteBlock(a_ids[1]).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(pool->Stats().pinned_blocks == 0);  // the refused pins let go
  // B's own ids work, and a pin reports the id it was asked for.
  auto pin = pool->Pin(b_ids[1]);
  REQUIRE(pin.ok());
  CHECK(pin->id() == b_ids[1]);
  CHECK(pool->Locate(b_ids[1]).ok());
  pin->Reset();
  // Truncating B's second span away and growing again makes B's old id stale as well.
  REQUIRE(pool->Truncate(*b, 4).ok());
  REQUIRE(pool->Append(*b, std::vector<std::int32_t>{7, 8}).ok());
  CHECK(pool->Pin(b_ids[1]).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(pool->Pin(kvtest::BlockIds(*pool, *b, 0, 0)[1]).ok());
  REQUIRE(pool->FreeSequence(*b).ok());
}

TEST_CASE("pin by id: a freed block is refused, and Blocks fills the caller's vector") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto o = SmallOptions(storage);
  o.cold_tier = KvColdTier::None();
  auto pool = MustCreate(o);
  auto seq = pool->CreateSequence(Tokens(6));  // 2 spans, the last one partial
  REQUIRE(seq.ok());

  std::vector<KvBlockId> ids{7, 7, 7};
  REQUIRE(pool->Blocks(*seq, 1, 1, &ids).ok());  // replaces what was there
  REQUIRE(ids.size() == 2);
  CHECK(ids[0] != ids[1]);
  for (KvBlockId id : ids) {  // the caller's vector: nothing dangles
    auto pin = pool->Pin(id);
    REQUIRE(pin.ok());
    CHECK(pin->data() != nullptr);
    CHECK(pin->group() == 1);
    CHECK(pin->first_layer() == 1);
  }
  CHECK(pool->Blocks(*seq, 2, 0, &ids).code() == absl::StatusCode::kInvalidArgument);
  CHECK(ids.empty());
  CHECK(pool->Blocks(*seq, 0, 0, nullptr).code() == absl::StatusCode::kInvalidArgument);

  REQUIRE(pool->Blocks(*seq, 0, 0, &ids).ok());
  const KvBlockId first = ids.at(0);
  REQUIRE(pool->FreeSequence(*seq).ok());  // not computed: its spans are free, not cached
  CHECK(pool->Blocks(*seq, 0, 0, &ids).code() == absl::StatusCode::kNotFound);
  CHECK(ids.empty());

  // The block's span is free: Pin refuses it and leaves no pin behind, before and after
  // Reclaim dropped its memory.
  CHECK(pool->Pin(first).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(pool->Locate(first)->pins == 0);
  CHECK(pool->Reclaim(0, SIZE_MAX) > 0);
  CHECK(pool->Locate(first)->tier == KvTier::kNone);
  CHECK(pool->Pin(first).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(pool->Locate(first)->pins == 0);
  CHECK(pool->Stats().pinned_blocks == 0);
  CHECK(pool->Stats().hot_pins == 2);  // only the pins that were taken count
  CHECK(pool->Pin(1u << 30).status().code() == absl::StatusCode::kInvalidArgument);
}

namespace {

// One home node, one group, one layer: every span is one block. Sequences A, B, C, ...
struct OrderFixture {
  explicit OrderFixture(KvHotnessPolicy policy, int count = 4) {
    storage = std::make_shared<kvtest::HeapStorage>();
    KvPoolOptions o;
    o.geometry = {.layers = 1, .kv_heads = 1, .head_dim = 16, .tokens_per_block = 4};
    o.home_nodes = {0};
    o.cold_tier = KvColdTier::Node(1);
    o.hotness = policy;
    o.storage = storage;
    pool = MustCreate(o);
    for (int i = 0; i < count; ++i) {
      auto s = pool->CreateSequence(Tokens(4, 100 * i));
      REQUIRE(s.ok());
      blocks.push_back(kvtest::BlockIds(*pool, *s, 0, 0).at(0));
    }
  }
  void Touch(int i) { REQUIRE(pool->Pin(blocks[i]).ok()); }
  KvTier Tier(int i) { return pool->Locate(blocks[i])->tier; }
  // Demotes one block at a time (Locate does not count as an access); returns the
  // sequence letters in demotion order.
  std::string DemotionOrder(std::size_t steps) {
    std::string order;
    for (std::size_t n = 0; n < steps; ++n) {
      REQUIRE(pool->Demote(0, 1) == 1);
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        const char letter = static_cast<char>('A' + i);
        if (Tier(static_cast<int>(i)) == KvTier::kCold && order.find(letter) == std::string::npos)
          order += letter;
      }
    }
    return order;
  }
  std::shared_ptr<kvtest::HeapStorage> storage;
  std::unique_ptr<KvPool> pool;
  std::vector<KvBlockId> blocks;
};

}  // namespace

TEST_CASE("a pin that outlives its pool is reported and aborts instead of a use-after-free") {
  SECTION("pins let go first: the pool is destroyed quietly") {
    auto storage = std::make_shared<kvtest::HeapStorage>();
    auto pool = MustCreate(SmallOptions(storage));
    auto seq = pool->CreateSequence(Tokens(4));
    REQUIRE(seq.ok());
    auto pin = pool->PinToken(*seq, 0, 0, 0);
    REQUIRE(pin.ok());
    pin->Reset();
    pool.reset();
    CHECK(storage->slabs(0) == 0);
  }
  SECTION("a pin still held") {
    // In a child: the destructor must stop the process (before the change it freed the
    // slabs, and the pin's own destructor then unpinned through the freed pool: ASan's
    // heap-use-after-free, or silence).
    int err[2];
    REQUIRE(pipe(err) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      dup2(err[1], STDERR_FILENO);
      close(err[0]);
      {
        auto storage = std::make_shared<kvtest::HeapStorage>();
        auto pool = KvPool::Create(SmallOptions(storage));
        if (!pool.ok()) _exit(3);
        auto seq = (*pool)->CreateSequence(Tokens(8));
        auto first = (*pool)->PinToken(*seq, 0, 0, 0);
        auto second = (*pool)->PinToken(*seq, 1, 1, 5);
        if (!first.ok() || !second.ok()) _exit(4);
        pool->reset();  // both pins are alive
      }
      _exit(0);
    }
    close(err[1]);
    std::string out;
    char buf[512];
    for (ssize_t n; (n = read(err[0], buf, sizeof buf)) > 0;) out.append(buf, n);
    close(err[0]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    INFO("child stderr: " << out);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);
    CHECK_THAT(out, Catch::Contains("KvPool destroyed while 2 of its blocks are pinned") &&
                        Catch::Contains("must be destroyed or Reset() before its pool"));
  }
}

TEST_CASE("eviction order: LRU demotes the least recently pinned first") {
  OrderFixture f(KvHotnessPolicy::kLru);
  f.Touch(1);
  f.Touch(0);
  f.Touch(3);
  CHECK(f.DemotionOrder(4) == "CBAD");
}

TEST_CASE("eviction order: CLOCK gives referenced blocks a second chance") {
  OrderFixture f(KvHotnessPolicy::kClock);
  f.Touch(0);
  f.Touch(2);
  // Hand at A: referenced, cleared; B taken. Then C cleared, D taken; then A, C.
  CHECK(f.DemotionOrder(4) == "BDAC");
}

TEST_CASE("eviction order: 2Q demotes once-used blocks (FIFO) before reused ones") {
  OrderFixture f(KvHotnessPolicy::kTwoQueue, 8);
  for (int i : {1, 1, 0, 0}) f.Touch(i);  // A and B used twice: frequent
  f.Touch(7);                             // H once: still in the FIFO queue
  // LRU would take C D E F G and then the oldest of A, B, H: H was pinned last, so A B H.
  // 2Q takes the FIFO queue first while it is over a quarter of the hot list.
  CHECK(f.DemotionOrder(5) == "CDEFG");
  CHECK(f.Tier(0) == KvTier::kHot);
  CHECK(f.Tier(1) == KvTier::kHot);

  // A block demoted from the FIFO queue and used again soon comes back as frequent.
  OrderFixture g(KvHotnessPolicy::kTwoQueue, 8);
  for (int i : {1, 1, 0, 0}) g.Touch(i);
  CHECK(g.DemotionOrder(1) == "C");
  g.Touch(2);  // promotes C; the ghost list marks it frequent
  CHECK(g.Tier(2) == KvTier::kHot);
  // D..G leave first-in first-out; then the frequent ones by LRU: B (pinned before A and C).
  CHECK(g.DemotionOrder(5) == "DEFGB");
  CHECK(g.Tier(2) == KvTier::kHot);
}

TEST_CASE("tiers: demote, promote on touch, served cold when the hot tier is full") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto o = SmallOptions(storage);
  o.hot_blocks_per_node = 4;  // two spans' worth of each group
  auto pool = MustCreate(o);
  auto tokens = Tokens(8);
  auto seq = pool->CreateSequence(tokens);
  REQUIRE(seq.ok());
  kvtest::WriteTokens(*pool, *seq, tokens, 0, 8);
  const KvBlockId b0 = kvtest::BlockIds(*pool, *seq, 0, 0).at(0);

  REQUIRE(pool->DemoteBlock(b0).ok());
  CHECK(pool->Locate(b0)->tier == KvTier::kCold);
  CHECK(pool->Locate(b0)->node == 2);
  CHECK(pool->DemoteBlock(b0).code() == absl::StatusCode::kFailedPrecondition);
  {
    auto pin = pool->Pin(b0);  // room at home: promoted
    REQUIRE(pin.ok());
    CHECK(pin->tier() == KvTier::kHot);
    CHECK(pin->node() == 0);
    CHECK(pool->DemoteBlock(b0).code() == absl::StatusCode::kFailedPrecondition);  // pinned
    CHECK(pool->Demote(0, 100) == 3);  // all but the pinned block
  }
  CHECK(kvtest::CountBadRows(*pool, *seq, tokens) == 0);  // pins promote them back

  // Fill node 0's hot tier with another sequence; a cold block is then served cold.
  REQUIRE(pool->Demote(0, 100) == 4);
  auto other = pool->CreateSequence(Tokens(8, 9000));
  REQUIRE(other.ok());
  auto before = pool->Stats();
  {
    auto pin = pool->Pin(b0);
    REQUIRE(pin.ok());
    CHECK(pin->tier() == KvTier::kCold);  // no room to promote
  }
  auto after = pool->Stats();
  CHECK(after.cold_pins == before.cold_pins + 1);
  CHECK(after.promotions == before.promotions);
  CHECK(after.cold_hit_rate > 0);
  CHECK(kvtest::CountBadRows(*pool, *seq, tokens) == 0);  // served from the cold tier
  CHECK(after.bytes_demoted == after.demotions * pool->block_bytes());
}

TEST_CASE("allocation demotes to make room and refuses only when both tiers are full") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto o = SmallOptions(storage);
  o.hot_blocks_per_node = 4;
  o.cold_blocks = 16;
  auto pool = MustCreate(o);
  std::vector<numarena::KvSequenceId> seqs;
  for (int i = 0; i < 6; ++i) {  // 6 spans: 2 hot + 4 cold per group node
    auto s = pool->CreateSequence(Tokens(3, 100 * i));
    INFO(i);
    REQUIRE(s.ok());
    seqs.push_back(*s);
  }
  auto st = pool->Stats();
  CHECK(st.hot_blocks == 8);
  CHECK(st.cold_blocks == 16);
  CHECK(st.demotions > 0);
  auto refused = pool->CreateSequence(Tokens(3, 7000));
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(pool->Stats().refusals == 1);
}

TEST_CASE("data integrity across 100,000 random demote/promote cycles") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto o = SmallOptions(storage);
  o.hot_blocks_per_node = 24;  // of 32 per node: some promotions find no room
  o.retained_empty_slabs = 0;  // slabs come and go too
  auto pool = MustCreate(o);
  std::vector<std::vector<std::int32_t>> tokens;
  std::vector<numarena::KvSequenceId> seqs;
  std::vector<KvBlockId> blocks;
  for (int i = 0; i < 8; ++i) {
    tokens.push_back(Tokens(7, 1000 * i));
    auto s = pool->CreateSequence(tokens.back());
    REQUIRE(s.ok());
    kvtest::WriteTokens(*pool, *s, tokens.back(), 0, 7);
    seqs.push_back(*s);
    for (int layer = 0; layer < 2; ++layer)
      for (int group = 0; group < 2; ++group)
        for (KvBlockId id : kvtest::BlockIds(*pool, *s, layer, group)) blocks.push_back(id);
  }
  std::mt19937 rng(42);
  std::size_t demoted = 0, promoted = 0;
  for (int cycle = 0; demoted + promoted < 100000 && cycle < 2000000; ++cycle) {
    const KvBlockId id = blocks[rng() % blocks.size()];
    switch (rng() % 4) {
      case 0:
      case 1:
        demoted += pool->DemoteBlock(id).ok();
        break;
      case 2:
        promoted += pool->PromoteBlock(id).ok();
        break;
      default:
        pool->Demote(static_cast<int>(rng() % 2), 1 + rng() % 4);
    }
    if (cycle % 10000 == 0) {
      for (std::size_t i = 0; i < seqs.size(); ++i)
        REQUIRE(kvtest::CountBadRows(*pool, seqs[i], tokens[i]) == 0);
    }
  }
  CHECK(demoted + promoted >= 100000);
  CHECK(promoted > 30000);
  CHECK(pool->Stats().cold_pins > 0);  // some checks read blocks in the cold tier
  for (std::size_t i = 0; i < seqs.size(); ++i)
    CHECK(kvtest::CountBadRows(*pool, seqs[i], tokens[i]) == 0);
}

TEST_CASE("budget: the pool demotes at the warn and trip lines instead of failing") {
  numarena::BudgetOptions bo;
  bo.mode = numarena::BudgetMode::kQuota;
  bo.quotas = {{0, 64 * 4096}, {1, 64 * 4096}, {2, 1024 * 4096}};
  auto budget = numarena::Budget::Create(bo, std::vector<int>{0, 1, 2});
  REQUIRE(budget.ok());
  auto storage = std::make_shared<kvtest::HeapStorage>(budget->get());
  auto o = SmallOptions(storage);
  o.budget = budget->get();
  o.geometry.head_dim = 128;  // 8 KiB blocks, one per slab: reclaim is block-exact
  o.slab_bytes = 8192;
  auto pool = MustCreate(o);
  REQUIRE(pool->block_bytes() == 8192);

  std::vector<numarena::KvSequenceId> seqs;
  std::size_t peak = 0;
  for (int i = 0; i < 60; ++i) {  // 60 spans x 2 blocks per node x 8 KiB = 3.75 x quota
    auto s = pool->CreateSequence(Tokens(4, 100 * i));
    INFO(i);
    REQUIRE(s.ok());
    seqs.push_back(*s);
    peak = std::max<std::size_t>(peak, (*budget)->usage(0));
  }
  const auto snap = (*budget)->Snapshot();
  const auto* n0 = snap.node(0);
  REQUIRE(n0 != nullptr);
  CHECK(peak <= n0->trip_bytes);
  CHECK(n0->reclaim_runs > 0);
  CHECK(n0->reclaim_freed > 0);
  CHECK(n0->refusals == 0);
  auto st = pool->Stats();
  CHECK(st.refusals == 0);
  CHECK(st.demotions > 0);
  CHECK(st.cold_blocks > 0);
  CHECK(st.hot_blocks + st.cold_blocks == 60 * 4);
  // Nothing is promoted into a node past its warn line.
  const KvBlockId first = kvtest::BlockIds(*pool, seqs[0], 0, 0).at(0);
  REQUIRE(pool->Locate(first)->tier == KvTier::kCold);
  if ((*budget)->state(0) >= numarena::NodeState::kWarn) {
    CHECK(pool->Pin(first)->tier() == KvTier::kCold);
  }
}

namespace {

// 4 KiB blocks (1 layer, `kv_heads` heads of 128 fp32, 4 tokens), one group per head, one
// block per slab, so every freed block that empties its slab is exactly one slab of memory.
KvPoolOptions PageBlockOptions(std::shared_ptr<kvtest::HeapStorage> storage,
                               std::vector<int> home_nodes, int kv_heads = 1) {
  KvPoolOptions o;
  o.geometry = {.layers = 1,
                .kv_heads = kv_heads,
                .head_dim = 128,
                .dtype = numarena::KvDType::kFp32,
                .tokens_per_block = 4,
                .heads_per_group = 1};
  o.home_nodes = std::move(home_nodes);
  o.cold_tier = KvColdTier::None();
  o.storage = std::move(storage);
  o.slab_bytes = 4096;
  return o;
}

// A sequence of `tokens`, written and marked computed.
numarena::KvSequenceId Computed(KvPool& pool, const std::vector<std::int32_t>& tokens) {
  auto seq = pool.CreateSequence(tokens);
  REQUIRE(seq.ok());
  kvtest::WriteTokens(pool, *seq, tokens, 0, tokens.size());
  REQUIRE(pool.MarkComputed(*seq, tokens.size()).ok());
  return *seq;
}

}  // namespace

TEST_CASE("reclaim: without a cold tier, cached prefix spans go, least recently released first") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto pool = MustCreate(PageBlockOptions(storage, {0}));
  REQUIRE(pool->block_bytes() == 4096);
  const auto live_tokens = Tokens(4, 9000);
  const numarena::KvSequenceId live = Computed(*pool, live_tokens);
  std::vector<KvBlockId> cached_blocks;
  for (int i = 0; i < 6; ++i) {  // released in order 0..5: 0 is the least recent
    const numarena::KvSequenceId seq = Computed(*pool, Tokens(4, 100 * i));
    cached_blocks.push_back(kvtest::BlockIds(*pool, seq, 0, 0).at(0));
    REQUIRE(pool->FreeSequence(seq).ok());
  }
  REQUIRE(pool->Stats().spans_cached == 6);
  REQUIRE(storage->bytes(0) == 7 * 4096);

  CHECK(pool->Reclaim(0, 2 * 4096) == 2 * 4096);
  CHECK(storage->bytes(0) == 5 * 4096);
  auto st = pool->Stats();
  CHECK(st.spans_cached == 4);
  CHECK(st.cached_evictions == 2);
  CHECK(pool->CachedPrefixTokens(Tokens(4, 0)) == 0);
  CHECK(pool->CachedPrefixTokens(Tokens(4, 100)) == 0);
  for (int i = 2; i < 6; ++i) CHECK(pool->CachedPrefixTokens(Tokens(4, 100 * i)) == 4);

  {
    // A pinned cached span is skipped; background reclaim evicts too, as demotion cannot
    // help without a cold tier. The live sequence's span is never a candidate.
    auto pin = pool->Pin(cached_blocks[5]);
    REQUIRE(pin.ok());
    CHECK(pool->Reclaim(0, 100 * 4096, numarena::KvUrgency::kBackground) == 3 * 4096);
    CHECK(pool->CachedPrefixTokens(Tokens(4, 500)) == 4);
    CHECK(pool->CachedPrefixTokens(Tokens(4, 400)) == 0);
  }
  CHECK(pool->Reclaim(0, 100 * 4096) == 4096);
  CHECK(pool->CachedPrefixTokens(Tokens(4, 500)) == 0);
  CHECK(storage->bytes(0) == 4096);  // the live sequence's block
  CHECK(pool->CachedPrefixTokens(live_tokens) == 4);
  CHECK(kvtest::CountBadRows(*pool, live, live_tokens) == 0);
  st = pool->Stats();
  CHECK(st.spans_cached == 0);
  CHECK(st.spans_in_use == 1);
  CHECK(st.cached_evictions == 6);

  // The pool allocates again afterwards, and an evicted prefix is computed anew.
  std::size_t reused = 99;
  auto again = pool->CreateSequence(Tokens(4, 0), &reused);
  REQUIRE(again.ok());
  CHECK(reused == 0);
  CHECK(storage->bytes(0) == 2 * 4096);
}

TEST_CASE("reclaim: memory goes back only on the node asked for") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto o = PageBlockOptions(storage, {0, 1}, /*kv_heads=*/2);  // group 0 on node 0, 1 on 1
  o.retained_empty_slabs = 0;  // a freed block's slab goes back to the storage at once
  auto pool = MustCreate(o);
  REQUIRE(pool->Stats().blocks_per_span == 2);

  // Sequences freed before they were computed leave free spans (memory, no data).
  std::vector<numarena::KvSequenceId> seqs;
  for (int i = 0; i < 4; ++i) {
    auto seq = pool->CreateSequence(Tokens(4, 100 * i));
    REQUIRE(seq.ok());
    seqs.push_back(*seq);
  }
  for (auto seq : seqs) REQUIRE(pool->FreeSequence(seq).ok());
  REQUIRE(pool->Stats().spans_free == 4);
  REQUIRE(storage->bytes(0) == 4 * 4096);
  REQUIRE(storage->bytes(1) == 4 * 4096);

  CHECK(pool->Reclaim(0, 2 * 4096) == 2 * 4096);
  CHECK(storage->bytes(0) == 2 * 4096);
  CHECK(storage->bytes(1) == 4 * 4096);  // node 1 keeps its blocks of those spans
  CHECK(pool->Stats().spans_free == 4);

  // Allocation backs the missing blocks of such spans again; nothing new on node 1.
  seqs.clear();
  std::vector<std::vector<std::int32_t>> tokens;
  for (int i = 0; i < 4; ++i) {
    tokens.push_back(Tokens(4, 1000 * (i + 1)));
    seqs.push_back(Computed(*pool, tokens.back()));
  }
  CHECK(pool->Stats().spans_free == 0);
  CHECK(storage->bytes(0) == 4 * 4096);
  CHECK(storage->bytes(1) == 4 * 4096);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    CHECK(kvtest::CountBadRows(*pool, seqs[i], tokens[i]) == 0);
    for (int group = 0; group < 2; ++group) {
      auto pin = pool->Pin(kvtest::BlockIds(*pool, seqs[i], 0, group).at(0));
      REQUIRE(pin.ok());
      CHECK(pin->node() == group);
    }
  }

  // Cached spans: evicting them for node 0 frees only their node-0 blocks.
  for (auto seq : seqs) REQUIRE(pool->FreeSequence(seq).ok());
  REQUIRE(pool->Stats().spans_cached == 4);
  CHECK(pool->Reclaim(0, 4 * 4096) == 4 * 4096);
  CHECK(storage->bytes(0) == 0);
  CHECK(storage->bytes(1) == 4 * 4096);
  for (const auto& t : tokens) CHECK(pool->CachedPrefixTokens(t) == 0);
  auto st = pool->Stats();
  CHECK(st.spans_cached == 0);
  CHECK(st.spans_free == 4);
  CHECK(st.cached_evictions == 4);

  // Then node 1: the free spans' last blocks go, and the spans hold no memory at all.
  CHECK(pool->Reclaim(1, 4 * 4096) == 4 * 4096);
  CHECK(storage->bytes(1) == 0);
  CHECK(pool->Stats().spans_free == 0);
  CHECK(pool->Reclaim(0, 4096) == 0);  // nothing left to give
}

TEST_CASE("reclaim: background demotes cached spans to the cold tier, urgent evicts them") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  auto o = PageBlockOptions(storage, {0});
  o.cold_tier = KvColdTier::Node(1);
  o.cold_blocks = 2;
  auto pool = MustCreate(o);
  std::vector<std::vector<std::int32_t>> tokens;
  for (int i = 0; i < 4; ++i) {  // touched, and released, in order 0..3
    tokens.push_back(Tokens(4, 100 * i));
    REQUIRE(pool->FreeSequence(Computed(*pool, tokens.back())).ok());
  }
  REQUIRE(pool->Stats().spans_cached == 4);

  // Background: the cold tier takes two blocks, then demotion stops; nothing is evicted.
  CHECK(pool->Reclaim(0, 4 * 4096, numarena::KvUrgency::kBackground) == 2 * 4096);
  auto st = pool->Stats();
  CHECK(st.demotions == 2);
  CHECK(st.cached_evictions == 0);
  for (const auto& t : tokens) CHECK(pool->CachedPrefixTokens(t) == 4);

  // Urgent: the cold tier is full, so the cached spans still on node 0 go (LRU among them).
  CHECK(pool->Reclaim(0, 4096) == 4096);
  CHECK(pool->Stats().cached_evictions == 1);
  CHECK(pool->CachedPrefixTokens(tokens[0]) == 4);  // demoted first, kept cold
  CHECK(pool->CachedPrefixTokens(tokens[1]) == 4);
  CHECK(pool->CachedPrefixTokens(tokens[2]) == 0);
  CHECK(pool->CachedPrefixTokens(tokens[3]) == 4);
  std::size_t reused = 0;
  auto seq = pool->CreateSequence(tokens[0], &reused);
  REQUIRE(seq.ok());
  CHECK(reused == 4);
  CHECK(kvtest::CountBadRows(*pool, *seq, tokens[0]) == 0);
}

TEST_CASE("budget without a cold tier: cached prefix spans give way to other memory") {
  numarena::BudgetOptions bo;
  bo.mode = numarena::BudgetMode::kQuota;
  bo.quotas = {{0, 64 * 4096}};  // warn at 51.2 pages, trip at 57.6
  auto budget = numarena::Budget::Create(bo, std::vector<int>{0});
  REQUIRE(budget.ok());
  auto storage = std::make_shared<kvtest::HeapStorage>(budget->get());
  auto o = PageBlockOptions(storage, {0});
  o.budget = budget->get();
  auto pool = MustCreate(o);

  // Requests come and go; their prompts stay cached. Far more than the quota over time.
  for (int i = 0; i < 120; ++i) {
    INFO(i);
    REQUIRE(pool->FreeSequence(Computed(*pool, Tokens(4, 100 * i))).ok());
  }
  auto st = pool->Stats();
  CHECK(st.refusals == 0);
  CHECK(st.cached_evictions > 0);
  const auto snap = (*budget)->Snapshot();
  const auto* n0 = snap.node(0);
  REQUIRE(n0 != nullptr);
  CHECK(n0->reclaim_freed > 0);
  // The pool gave memory back instead of sitting at the trip line: another user of the
  // node can still charge what the pool took beyond the warn line.
  CHECK((*budget)->usage(0) < n0->trip_bytes);
  REQUIRE((*budget)->Charge(0, 8 * 4096, numarena::Priority::kNormal).ok());
  (*budget)->Release(0, 8 * 4096, numarena::Priority::kNormal);
  // The most recent prompts are still cached.
  CHECK(pool->CachedPrefixTokens(Tokens(4, 100 * 119)) == 4);
  CHECK(pool->CachedPrefixTokens(Tokens(4, 0)) == 0);
}

TEST_CASE("arena storage: blocks come from the home node's arena") {
  KvPoolOptions o;
  o.geometry = {.layers = 2, .kv_heads = 2, .head_dim = 64, .tokens_per_block = 16};
  o.home_nodes = {0};
  o.storage = numarena::MakeArenaStorage();
  auto pool = MustCreate(o);
  auto tokens = Tokens(40);
  auto seq = pool->CreateSequence(tokens);
  REQUIRE(seq.ok());
  kvtest::WriteTokens(*pool, *seq, tokens, 0, tokens.size());
  CHECK(kvtest::CountBadRows(*pool, *seq, tokens) == 0);
  for (KvBlockId id : kvtest::BlockIds(*pool, *seq, 1, 0)) {
    auto pin = pool->Pin(id);
    REQUIRE(pin.ok());
    CHECK(numarena::node_of(pin->data()) == 0);
  }
  REQUIRE(pool->FreeSequence(*seq).ok());
}
