// A KV-cache server in miniature: a few concurrent synthetic sequences that share a system
// prompt, decoded by their own threads over numarena's KV pool, with a small hot tier so
// cold blocks are demoted and promoted, and the tier statistics printed at the end.
//
//   ./example_kv_cache            (uses the machine's nodes; the cold tier is the farthest
//                                  node when there is one, otherwise a second slab set on
//                                  the same node stands in for it)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <numeric>
#include <thread>
#include <vector>

#include "numarena/kv_pool.hpp"
#include "numarena/topology.hpp"

namespace {

// Deterministic stand-in for a model's K/V projection of a token.
void ProjectToken(std::int32_t token, std::size_t position, int layer, int head, float* k, float* v,
                  int dim) {
  for (int d = 0; d < dim; ++d) {
    k[d] = std::sin(0.01f * static_cast<float>(token * 7 + layer * 3 + head + d));
    v[d] = std::cos(0.01f * static_cast<float>(position + static_cast<std::size_t>(d)));
  }
}

// Writes K/V of tokens [from, to) of the sequence into its blocks.
void WriteKv(numarena::KvPool& pool, numarena::KvSequenceId seq,
             const std::vector<std::int32_t>& tokens, std::size_t from, std::size_t to) {
  const auto& g = pool.geometry();
  std::vector<float> k(static_cast<std::size_t>(g.head_dim)), v(k.size());
  for (std::size_t t = from; t < to; ++t)
    for (int layer = 0; layer < g.layers; ++layer)
      for (int group = 0; group < pool.head_groups(); ++group) {
        auto pin = pool.PinToken(seq, layer, group, t);
        if (!pin.ok()) continue;
        for (int h = 0; h < g.heads_per_group; ++h) {
          ProjectToken(tokens[t], t, layer, pin->first_head() + h, k.data(), v.data(), g.head_dim);
          std::memcpy(pin->key(layer - pin->first_layer(), h, pin->token_in_block()), k.data(),
                      pin->row_bytes());
          std::memcpy(pin->value(layer - pin->first_layer(), h, pin->token_in_block()), v.data(),
                      pin->row_bytes());
        }
      }
}

// One decode step: attention of a query over every layer and head (online softmax).
float Attend(numarena::KvPool& pool, numarena::KvSequenceId seq) {
  const auto& g = pool.geometry();
  const int dim = g.head_dim;
  std::vector<float> acc(static_cast<std::size_t>(dim));
  float out = 0;
  for (int layer = 0; layer < g.layers; ++layer)
    for (int group = 0; group < pool.head_groups(); ++group)
      for (int h = 0; h < g.heads_per_group; ++h) {
        float m = -INFINITY, l = 0;
        std::fill(acc.begin(), acc.end(), 0.f);
        (void)pool.ForEachBlock(seq, layer, group, [&](const numarena::KvBlockPin& b) {
          const auto* k = reinterpret_cast<const float*>(b.key(layer - b.first_layer(), h));
          const auto* v = reinterpret_cast<const float*>(b.value(layer - b.first_layer(), h));
          for (int t = 0; t < b.tokens(); ++t) {
            float s = 0;
            for (int d = 0; d < dim; ++d) s += 0.05f * k[t * dim + d];
            const float m2 = std::max(m, s), c = std::exp(m - m2), p = std::exp(s - m2);
            l = l * c + p;
            for (int d = 0; d < dim; ++d) acc[d] = acc[d] * c + p * v[t * dim + d];
            m = m2;
          }
        });
        out += acc[0] / l;
      }
  return out;
}

// The same memory ids for hot and cold on a one-node machine: slabs of "node 1" come from
// node 0, so the example still shows demotion and promotion there.
class OneNodeStorage final : public numarena::KvStorage {
 public:
  numarena::StatusOr<void*> AllocateSlab(int, std::size_t bytes) override {
    return real_->AllocateSlab(0, bytes);
  }
  void FreeSlab(int, void* slab, std::size_t bytes) override { real_->FreeSlab(0, slab, bytes); }

 private:
  std::shared_ptr<numarena::KvStorage> real_ = numarena::MakeBoundMmapStorage();
};

}  // namespace

int main() {
  numarena::KvPoolOptions options;
  options.geometry = {.layers = 4,
                      .kv_heads = 4,
                      .head_dim = 64,
                      .dtype = numarena::KvDType::kFp32,
                      .tokens_per_block = 16};
  options.hotness = numarena::KvHotnessPolicy::kTwoQueue;
  options.hot_blocks_per_node = 192;  // a small hot tier, so the cold tier gets used
  auto topology = numarena::Topology::system();
  if (topology.ok() && (*topology)->nodes().size() > 1) {
    options.cold_tier = numarena::KvColdTier::Farthest();
  } else {
    options.home_nodes = {0};
    options.cold_tier = numarena::KvColdTier::Node(1);
    options.storage = std::make_shared<OneNodeStorage>();
  }
  auto created = numarena::KvPool::Create(options);
  if (!created.ok()) {
    std::cerr << "KV pool: " << created.status() << "\n";
    return 1;
  }
  numarena::KvPool& pool = **created;
  std::printf("KV pool: %d head groups on nodes", pool.head_groups());
  for (int g = 0; g < pool.head_groups(); ++g) std::printf(" %d", pool.group_node(g));
  std::printf(", cold tier on");
  for (int n : pool.cold_nodes()) std::printf(" %d", n);
  std::printf(", %zu-byte blocks\n", pool.block_bytes());

  // A shared 64-token system prompt, then each user's own question.
  std::vector<std::int32_t> system_prompt(64);
  std::iota(system_prompt.begin(), system_prompt.end(), 1);
  constexpr int kUsers = 4;
  std::vector<std::thread> threads;
  std::vector<float> results(kUsers);
  for (int u = 0; u < kUsers; ++u) {
    threads.emplace_back([&, u] {
      for (int request = 0; request < 3; ++request) {
        std::vector<std::int32_t> tokens = system_prompt;
        for (int i = 0; i < 20 + 5 * u; ++i) tokens.push_back(1000 * (u + 1) + 100 * request + i);
        std::size_t reused = 0;
        auto seq = pool.CreateSequence(tokens, &reused);
        if (!seq.ok()) {
          std::cerr << "user " << u << ": " << seq.status() << "\n";
          return;
        }
        WriteKv(pool, *seq, tokens, reused, tokens.size());  // prefill what is not cached
        // Written: the prompt's full spans may now be shared with other users' requests.
        if (!pool.MarkComputed(*seq, tokens.size()).ok()) return;
        for (int step = 0; step < 32; ++step) {  // decode
          results[u] += Attend(pool, *seq);
          tokens.push_back(5000 + step);
          if (!pool.Append(*seq, std::span(&tokens.back(), 1)).ok()) break;
          WriteKv(pool, *seq, tokens, tokens.size() - 1, tokens.size());
          if (!pool.MarkComputed(*seq, tokens.size()).ok()) break;
          if (step % 8 == 0) {  // the budget would do this under pressure
            for (int node : pool.home_nodes()) pool.Demote(node, 16);
          }
        }
        (void)pool.FreeSequence(*seq);
      }
    });
  }
  for (auto& t : threads) t.join();

  const numarena::KvPoolStats st = pool.Stats();
  std::printf("\nnode   hot blocks  cold blocks  hot MiB  cold MiB\n");
  for (const auto& n : st.nodes) {
    std::printf("%4d %12zu %12zu %8.2f %9.2f\n", n.node, n.hot_blocks, n.cold_blocks,
                n.hot_slab_bytes / 1048576.0, n.cold_slab_bytes / 1048576.0);
  }
  std::printf("\npins: %llu hot, %llu cold (hot hit rate %.1f %%)\n",
              static_cast<unsigned long long>(st.hot_pins),
              static_cast<unsigned long long>(st.cold_pins), 100 * st.hot_hit_rate);
  std::printf("demoted %llu blocks (%.1f MiB, %.0f MB/s), promoted %llu (%.1f MiB, %.0f MB/s)\n",
              static_cast<unsigned long long>(st.demotions), st.bytes_demoted / 1048576.0,
              st.demotion_mbps, static_cast<unsigned long long>(st.promotions),
              st.bytes_promoted / 1048576.0, st.promotion_mbps);
  std::printf("prefix cache: %llu of %llu span lookups hit; %zu spans cached, %zu free\n",
              static_cast<unsigned long long>(st.prefix_hits),
              static_cast<unsigned long long>(st.prefix_lookups), st.spans_cached, st.spans_free);
  std::printf("copy-on-write %llu, refusals %llu, pinned now %zu\n",
              static_cast<unsigned long long>(st.copy_on_writes),
              static_cast<unsigned long long>(st.refusals), st.pinned_blocks);
  float checksum = 0;
  for (float r : results) checksum += r;
  std::printf("attention checksum %.4f\n", checksum);
  return 0;
}
