// KV prefix index: sharded hash -> span map with a cache of unowned spans
// (see kv_prefix_index.hpp).
#include "kv/kv_prefix_index.hpp"

namespace numarena::kv {

namespace {
inline std::uint64_t Mix(std::uint64_t h, std::uint64_t v) {
  // A multiply-xorshift round (splitmix64 finaliser over the running state).
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}
}  // namespace

std::uint64_t HashSpan(std::uint64_t parent, std::span<const std::int32_t> tokens) {
  std::uint64_t h = Mix(parent, tokens.size());
  std::size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    h = Mix(h, (static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[i])) << 32) |
                   static_cast<std::uint32_t>(tokens[i + 1]));
  }
  if (i < tokens.size()) h = Mix(h, static_cast<std::uint32_t>(tokens[i]));
  return h < ReadMostlyMap::kFirstKey ? h + ReadMostlyMap::kFirstKey : h;
}

std::uint32_t PrefixIndex::FindLocked(std::uint64_t hash) const {
  return shard(hash).by_hash.Find(hash);
}

bool PrefixIndex::InsertLocked(std::uint64_t hash, std::uint32_t span) {
  const bool inserted = shard(hash).by_hash.Insert(hash, span);
  if (inserted) indexed_.fetch_add(1, std::memory_order_relaxed);
  return inserted;
}

void PrefixIndex::CacheLocked(std::uint64_t hash, std::uint32_t span) {
  Shard& s = shard(hash);
  s.lru.push_back({hash, span, tick_.fetch_add(1, std::memory_order_relaxed)});
  s.lru_position[span] = std::prev(s.lru.end());
  cached_.fetch_add(1, std::memory_order_relaxed);
}

void PrefixIndex::UncacheLocked(std::uint64_t hash, std::uint32_t span) {
  Shard& s = shard(hash);
  auto it = s.lru_position.find(span);
  if (it == s.lru_position.end()) return;
  s.lru.erase(it->second);
  s.lru_position.erase(it);
  cached_.fetch_sub(1, std::memory_order_relaxed);
}

std::uint32_t PrefixIndex::EvictOldest(const std::function<bool(std::uint32_t)>& eligible,
                                       const std::function<bool(std::uint32_t)>& try_claim) {
  // The oldest eligible entry of a shard's cached list (its front when all are eligible).
  auto oldest = [&eligible](const Shard& s) -> const Shard::Cached* {
    for (const Shard::Cached& c : s.lru)
      if (eligible(c.span)) return &c;
    return nullptr;
  };
  while (cached() != 0) {
    // Find the shard whose oldest eligible entry is oldest overall, then take it if it is
    // still there (and still eligible).
    std::size_t best = kShards;
    Shard::Cached victim{};
    for (std::size_t k = 0; k < kShards; ++k) {
      std::lock_guard lock(shards_[k].mu);
      const Shard::Cached* c = oldest(shards_[k]);
      if (c != nullptr && (best == kShards || c->tick < victim.tick)) {
        best = k;
        victim = *c;
      }
    }
    if (best == kShards) return kNone;
    Shard& s = shards_[best];
    std::lock_guard lock(s.mu);
    auto it = s.lru_position.find(victim.span);
    if (it == s.lru_position.end() || it->second->tick != victim.tick || !eligible(victim.span) ||
        !try_claim(victim.span)) {
      continue;  // reused, re-cached, pinned or moved meanwhile: look again
    }
    s.lru.erase(it->second);
    s.lru_position.erase(it);
    s.by_hash.Erase(victim.hash);
    cached_.fetch_sub(1, std::memory_order_relaxed);
    indexed_.fetch_sub(1, std::memory_order_relaxed);
    return victim.span;
  }
  return kNone;
}

}  // namespace numarena::kv
