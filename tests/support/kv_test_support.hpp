// Helpers shared by the KV pool tests: a storage with logical nodes (so a one-node host can
// exercise several home nodes and a cold tier) and deterministic K/V contents.
#pragma once

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "numarena/capacity.hpp"
#include "numarena/kv_pool.hpp"

namespace kvtest {

// Heap-backed slabs. Node ids are labels only. Optionally charges a gate and limits the
// number of slabs per node.
class HeapStorage final : public numarena::KvStorage {
 public:
  explicit HeapStorage(numarena::CapacityGate* gate = nullptr) : gate_(gate) {}
  numarena::StatusOr<void*> AllocateSlab(int node, std::size_t bytes) override {
    {
      std::lock_guard lock(mu_);
      auto it = slab_limit_.find(node);
      if (it != slab_limit_.end() && slabs_[node] >= it->second)
        return absl::ResourceExhaustedError("test storage: slab limit");
    }
    if (gate_ != nullptr) {
      if (auto s = gate_->Charge(node, bytes, numarena::Priority::kNormal); !s.ok()) return s;
    }
    void* p = std::aligned_alloc(4096, bytes);
    std::memset(p, 0xEE, bytes);
    std::lock_guard lock(mu_);
    ++slabs_[node];
    bytes_[node] += bytes;
    return p;
  }
  void FreeSlab(int node, void* slab, std::size_t bytes) override {
    std::free(slab);
    if (gate_ != nullptr) gate_->Release(node, bytes, numarena::Priority::kNormal);
    std::lock_guard lock(mu_);
    --slabs_[node];
    bytes_[node] -= bytes;
  }
  void LimitSlabs(int node, std::size_t slabs) {
    std::lock_guard lock(mu_);
    slab_limit_[node] = slabs;
  }
  std::size_t slabs(int node) {
    std::lock_guard lock(mu_);
    return slabs_[node];
  }
  std::size_t bytes(int node) {
    std::lock_guard lock(mu_);
    return bytes_[node];
  }

 private:
  numarena::CapacityGate* gate_;
  std::mutex mu_;
  std::map<int, std::size_t> slabs_, bytes_, slab_limit_;
};

// The byte at `i` of the K (kv=0) or V (kv=1) row of (token id, position, layer, head):
// equal tokens at equal positions give equal rows, whatever the sequence, so shared prefix
// blocks have one expected content.
inline std::uint8_t RowByte(std::int32_t token, std::size_t position, int layer, int head, int kv,
                            std::size_t i) {
  std::uint64_t h = static_cast<std::uint64_t>(token) * 0x9E3779B97F4A7C15ull ^
                    (position + 1) * 0xBF58476D1CE4E5B9ull ^
                    static_cast<std::uint64_t>(layer * 131 + head * 7 + kv) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  return static_cast<std::uint8_t>((h >> ((i % 8) * 8)) + i);
}

// Block ids of (sequence, layer, group) in token order, through KvPool::Blocks; throws
// when it fails. Returned by value, so `for (auto id : BlockIds(...))` is safe.
inline std::vector<numarena::KvBlockId> BlockIds(const numarena::KvPool& pool,
                                                 numarena::KvSequenceId sequence, int layer,
                                                 int group) {
  std::vector<numarena::KvBlockId> ids;
  if (numarena::Status st = pool.Blocks(sequence, layer, group, &ids); !st.ok())
    throw std::runtime_error(std::string(st.message()));
  return ids;
}

// Writes K and V of tokens [from, to) of `sequence` (whose ids are `tokens`).
inline void WriteTokens(numarena::KvPool& pool, numarena::KvSequenceId sequence,
                        const std::vector<std::int32_t>& tokens, std::size_t from, std::size_t to) {
  const auto& g = pool.geometry();
  for (std::size_t t = from; t < to; ++t) {
    for (int layer = 0; layer < g.layers; ++layer) {
      for (int group = 0; group < pool.head_groups(); ++group) {
        auto pin = pool.PinToken(sequence, layer, group, t);
        if (!pin.ok()) throw std::runtime_error(std::string(pin.status().message()));
        for (int h = 0; h < g.heads_per_group; ++h) {
          const int head = group * g.heads_per_group + h;
          for (int kv = 0; kv < 2; ++kv) {
            std::byte* row = kv == 0
                                 ? pin->key(layer - pin->first_layer(), h, pin->token_in_block())
                                 : pin->value(layer - pin->first_layer(), h, pin->token_in_block());
            for (std::size_t i = 0; i < pin->row_bytes(); ++i)
              row[i] = std::byte{RowByte(tokens[t], t, layer, head, kv, i)};
          }
        }
      }
    }
  }
}

// Counts rows of the sequence whose contents differ from RowByte (0: all intact).
inline std::size_t CountBadRows(numarena::KvPool& pool, numarena::KvSequenceId sequence,
                                const std::vector<std::int32_t>& tokens) {
  const auto& g = pool.geometry();
  std::size_t bad = 0;
  for (int layer = 0; layer < g.layers; ++layer) {
    for (int group = 0; group < pool.head_groups(); ++group) {
      auto st = pool.ForEachBlock(sequence, layer, group, [&](const numarena::KvBlockPin& pin) {
        for (int tb = 0; tb < pin.tokens(); ++tb) {
          const std::size_t t = pin.first_token() + static_cast<std::size_t>(tb);
          for (int h = 0; h < g.heads_per_group; ++h) {
            const int head = group * g.heads_per_group + h;
            for (int kv = 0; kv < 2; ++kv) {
              const std::byte* row = kv == 0 ? pin.key(layer - pin.first_layer(), h, tb)
                                             : pin.value(layer - pin.first_layer(), h, tb);
              for (std::size_t i = 0; i < pin.row_bytes(); ++i) {
                if (row[i] != std::byte{RowByte(tokens[t], t, layer, head, kv, i)}) {
                  ++bad;
                  break;
                }
              }
            }
          }
        }
      });
      if (!st.ok()) throw std::runtime_error(std::string(st.message()));
    }
  }
  return bad;
}

}  // namespace kvtest
