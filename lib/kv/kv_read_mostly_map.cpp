// KV read-mostly map: seqlock-validated open addressing (see kv_read_mostly_map.hpp).
#include "kv/kv_read_mostly_map.hpp"

#include <cassert>
#include <thread>
#include <utility>

namespace numarena::kv {

namespace {

constexpr std::size_t kInitialCapacity = 16;
constexpr std::uint64_t kEmpty = 0;
constexpr std::uint64_t kTombstone = 1;

std::size_t HomeSlot(std::uint64_t key, std::size_t mask) {
  // Keys are hashes already; the multiply only spreads keys that are not (tests, small ids).
  return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

// The seqlock needs no fences: writers store slots (and the table pointer) with release, so
// each such store carries the odd version written before it, and lookups load them with
// acquire, so a lookup that read anything a writer wrote while moving entries also sees the
// odd version (or a later one) when it reads the version again. On x86 these are plain
// moves, and ThreadSanitizer, which does not model fences, checks exactly this algorithm.

}  // namespace

ReadMostlyMap::ReadMostlyMap() : capacity_(kInitialCapacity) {
  tables_.push_back(std::make_unique<Table>(kInitialCapacity));
  table_.store(tables_.back().get(), std::memory_order_release);
}

ReadMostlyMap::~ReadMostlyMap() = default;

std::uint32_t ReadMostlyMap::Probe(const Table& table, std::uint64_t key) {
  std::size_t i = HomeSlot(key, table.mask);
  // Bounded by the capacity: a lookup racing a purge may see no empty slot at all (the
  // version check then discards what it found).
  for (std::size_t n = 0; n <= table.mask; ++n, i = (i + 1) & table.mask) {
    const std::uint64_t k = table.slots[i].key.load(std::memory_order_acquire);
    if (k == key) return table.slots[i].value.load(std::memory_order_acquire);
    if (k == kEmpty) return kAbsent;
  }
  return kAbsent;
}

void ReadMostlyMap::Place(Table& table, std::uint64_t key, std::uint32_t value) {
  std::size_t i = HomeSlot(key, table.mask);
  while (table.slots[i].key.load(std::memory_order_relaxed) != kEmpty) i = (i + 1) & table.mask;
  table.slots[i].value.store(value, std::memory_order_release);
  table.slots[i].key.store(key, std::memory_order_release);  // publishes the value with it
}

std::uint32_t ReadMostlyMap::Find(std::uint64_t key) const {
  for (;;) {
    const std::uint64_t before = version_.load(std::memory_order_acquire);
    if (before & 1) {  // a writer is moving entries
      std::this_thread::yield();
      continue;
    }
    const std::uint32_t value = Probe(*table_.load(std::memory_order_acquire), key);
    if (version_.load(std::memory_order_relaxed) == before) return value;
  }
}

bool ReadMostlyMap::Insert(std::uint64_t key, std::uint32_t value) {
  assert(key >= kFirstKey);
  if (Probe(*table_.load(std::memory_order_relaxed), key) != kAbsent) return false;
  // Keep at least half the slots empty, so probes stay short and always end.
  if (2 * (live_ + tombstones_ + 1) > capacity_) {
    Rebuild(4 * (live_ + 1) > capacity_ ? 2 * capacity_ : capacity_);
  }
  Place(*table_.load(std::memory_order_relaxed), key, value);
  ++live_;
  return true;
}

bool ReadMostlyMap::Erase(std::uint64_t key) {
  Table& table = *table_.load(std::memory_order_relaxed);
  std::size_t i = HomeSlot(key, table.mask);
  for (std::size_t n = 0; n <= table.mask; ++n, i = (i + 1) & table.mask) {
    const std::uint64_t k = table.slots[i].key.load(std::memory_order_relaxed);
    if (k == kEmpty) return false;
    if (k != key) continue;
    // The value stays: a lookup that read the key just before may still read it.
    table.slots[i].key.store(kTombstone, std::memory_order_release);
    --live_;
    ++tombstones_;
    return true;
  }
  return false;
}

void ReadMostlyMap::Rebuild(std::size_t capacity) {
  Table& current = *table_.load(std::memory_order_relaxed);
  std::vector<std::pair<std::uint64_t, std::uint32_t>> entries;
  entries.reserve(live_);
  for (std::size_t i = 0; i <= current.mask; ++i) {
    const std::uint64_t k = current.slots[i].key.load(std::memory_order_relaxed);
    if (k >= kFirstKey)
      entries.emplace_back(k, current.slots[i].value.load(std::memory_order_relaxed));
  }
  const std::uint64_t version = version_.load(std::memory_order_relaxed);
  if (capacity > capacity_) {
    // Grow: fill the new table privately, then switch lookups over to it.
    auto grown = std::make_unique<Table>(capacity);
    for (const auto& [k, v] : entries) Place(*grown, k, v);
    // Kept first: if this throws, lookups still use the current table.
    tables_.push_back(std::move(grown));
    version_.store(version + 1, std::memory_order_relaxed);
    table_.store(tables_.back().get(), std::memory_order_release);
  } else {
    // Purge tombstones in place; lookups wait for the odd version to end.
    version_.store(version + 1, std::memory_order_relaxed);
    for (std::size_t i = 0; i <= current.mask; ++i) {
      current.slots[i].key.store(kEmpty, std::memory_order_release);
      current.slots[i].value.store(kAbsent, std::memory_order_release);
    }
    for (const auto& [k, v] : entries) Place(current, k, v);
  }
  version_.store(version + 2, std::memory_order_release);
  capacity_ = capacity;
  tombstones_ = 0;
}

}  // namespace numarena::kv
