// KV-cache pool under concurrency (run under TSan): decode threads create sequences that
// share prompt prefixes, fork, append, write and verify K/V, while another thread demotes
// and reclaims node by node (dropping free spans' memory, evicting cached spans). Every row
// must keep its contents through all of it. Threads mark tokens computed right after
// writing them, as a server would: a prefix hit may only hand out spans whose rows were
// written before they were marked.
#include <catch2/catch.hpp>

#include <atomic>
#include <random>
#include <thread>

#include "kv_test_support.hpp"
#include "numarena/kv_pool.hpp"

TEST_CASE("concurrent sequences, prefix sharing, forks and tier moves keep data intact") {
  auto storage = std::make_shared<kvtest::HeapStorage>();
  numarena::KvPoolOptions o;
  o.geometry = {.layers = 2,
                .kv_heads = 4,
                .head_dim = 8,
                .dtype = numarena::KvDType::kFp16,
                .tokens_per_block = 4,
                .heads_per_group = 2};
  o.home_nodes = {0, 1};
  o.cold_tier = numarena::KvColdTier::Node(2);
  o.hot_blocks_per_node = 64;
  o.hotness = numarena::KvHotnessPolicy::kTwoQueue;
  o.storage = storage;
  o.slab_bytes = 8192;
  auto created = numarena::KvPool::Create(o);
  REQUIRE(created.ok());
  numarena::KvPool& pool = **created;

  std::atomic<bool> stop{false};
  std::atomic<std::size_t> bad{0}, failures{0}, rounds{0};
  auto worker = [&](int id) {
    std::mt19937 rng(static_cast<unsigned>(id));
    for (int round = 0; round < 60; ++round) {
      // Prompts share one of three prefixes of 8 tokens, then differ.
      std::vector<std::int32_t> tokens;
      const int prefix = static_cast<int>(rng() % 3);
      for (int i = 0; i < 8; ++i) tokens.push_back(prefix * 100 + i);
      const std::size_t extra = 1 + rng() % 7;
      for (std::size_t i = 0; i < extra; ++i) tokens.push_back(10000 + id * 1000 + round);
      std::size_t reused = 0;
      auto seq = pool.CreateSequence(tokens, &reused);
      if (!seq.ok()) {
        ++failures;
        continue;
      }
      kvtest::WriteTokens(pool, *seq, tokens, reused, tokens.size());
      if (!pool.MarkComputed(*seq, tokens.size()).ok()) ++failures;
      auto child = pool.Fork(*seq);
      if (child.ok()) {
        auto child_tokens = tokens;
        child_tokens.push_back(-id);
        if (pool.Append(*child, std::vector<std::int32_t>{-id}).ok()) {
          kvtest::WriteTokens(pool, *child, child_tokens, tokens.size(), child_tokens.size());
          if (!pool.MarkComputed(*child, child_tokens.size()).ok()) ++failures;
          bad += kvtest::CountBadRows(pool, *child, child_tokens);
        }
        (void)pool.FreeSequence(*child);
      }
      // Decode a few tokens.
      for (int step = 0; step < 3; ++step) {
        tokens.push_back(20000 + step);
        if (!pool.Append(*seq, std::vector<std::int32_t>{tokens.back()}).ok()) {
          tokens.pop_back();
          ++failures;
          break;
        }
        kvtest::WriteTokens(pool, *seq, tokens, tokens.size() - 1, tokens.size());
        if (!pool.MarkComputed(*seq, tokens.size()).ok()) ++failures;
      }
      bad += kvtest::CountBadRows(pool, *seq, tokens);
      (void)pool.FreeSequence(*seq);
      ++rounds;
    }
  };
  std::thread mover([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      const int node = static_cast<int>(rng() % 3);  // 2 is the cold tier
      if (rng() % 4 == 0) {
        // Drops free spans' and cached spans' memory on that node (cached spans only at
        // times, so some prefixes stay cached between requests).
        pool.Reclaim(node, 16384,
                     rng() % 2 ? numarena::KvUrgency::kUrgent : numarena::KvUrgency::kBackground);
      } else {
        pool.Demote(node, 1 + rng() % 8);
      }
      (void)pool.Stats();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int i = 0; i < 3; ++i) workers.emplace_back(worker, i);
  for (auto& t : workers) t.join();
  stop = true;
  mover.join();

  CHECK(bad.load() == 0);
  CHECK(failures.load() == 0);
  CHECK(rounds.load() == 180);
  const auto st = pool.Stats();
  CHECK(st.sequences == 0);
  CHECK(st.spans_in_use == 0);
  CHECK(st.pinned_blocks == 0);
  CHECK(st.prefix_hits > 0);
  CHECK(st.demotions > 0);
}
