// KV read-mostly map: the prefix index's hash -> span table, whose lookups take no lock.
//
// Every request that carries a popular system prompt looks up the same few hashes. With one
// mutex per index shard, two threads doing that bounced the mutex's cache line between them
// and each ran at a quarter of one thread's speed. Here a lookup writes nothing shared: the
// table is open addressing with linear probing over atomic slots, and a sequence counter
// (a seqlock) validates the lookup against the only two writes that move entries, growing the
// table and purging tombstones. A slot is filled once from empty and can then only become a
// tombstone, so a lookup that overlaps an insert or an erase sees the map either before or
// after it, never a key with another key's value. Writers must be serialised by the caller
// (the index's shard mutex). A table that was outgrown stays allocated until the map is
// destroyed, because a lookup may still be reading it; tables double, so the outgrown ones
// together are smaller than the live one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace numarena::kv {

class ReadMostlyMap {
 public:
  static constexpr std::uint32_t kAbsent = 0xffffffffu;
  // Keys 0 and 1 mark empty slots and tombstones; HashSpan never returns them.
  static constexpr std::uint64_t kFirstKey = 2;

  ReadMostlyMap();
  ~ReadMostlyMap();
  ReadMostlyMap(const ReadMostlyMap&) = delete;
  ReadMostlyMap& operator=(const ReadMostlyMap&) = delete;

  // The value of `key`, or kAbsent. Any thread, concurrently with one writer; it waits only
  // while a writer is moving entries (a growth or a purge, once per many inserts or erases).
  std::uint32_t Find(std::uint64_t key) const;

  // Writers (serialised by the caller). `key` >= kFirstKey. Insert returns false, changing
  // nothing, when the key is present; Erase returns false when it is absent.
  bool Insert(std::uint64_t key, std::uint32_t value);
  bool Erase(std::uint64_t key);

  std::size_t size() const { return live_; }          // writer side only
  std::size_t capacity() const { return capacity_; }  // writer side only

 private:
  struct Slot {
    std::atomic<std::uint64_t> key{0};
    std::atomic<std::uint32_t> value{kAbsent};
  };
  struct Table {
    explicit Table(std::size_t capacity) : mask(capacity - 1), slots(new Slot[capacity]) {}
    std::size_t mask;
    std::unique_ptr<Slot[]> slots;
  };

  static std::uint32_t Probe(const Table& table, std::uint64_t key);
  // Puts `key` in the first empty slot of its probe sequence (the key is known absent).
  static void Place(Table& table, std::uint64_t key, std::uint32_t value);
  // Rebuilds the entries into a table of `capacity` slots: a new one when it grows, the
  // current one (cleared) when only tombstones are dropped.
  void Rebuild(std::size_t capacity);

  // What lookups read, on its own cache-line pair: the writer fields below change at every
  // insert and erase, and the index shard's mutex sits right before this map.
  alignas(128) std::atomic<Table*> table_;
  std::atomic<std::uint64_t> version_{0};                    // odd while entries move
  alignas(128) std::vector<std::unique_ptr<Table>> tables_;  // all tables; the live one last
  std::size_t capacity_;
  std::size_t live_ = 0;
  std::size_t tombstones_ = 0;
};

}  // namespace numarena::kv
