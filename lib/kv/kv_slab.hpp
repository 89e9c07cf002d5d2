// KV slabs: one tier's memory on one node, carved into fixed-size block slots.
//
// The pool never asks the storage for one block at a time: a `SlabAllocator` maps slabs of
// many blocks and hands out slots. Slots are taken from the lowest-numbered slab that has
// one, so live blocks pack into old slabs and the newest slabs drain and can be given back.
// A slab whose last slot is freed is returned to the storage at once unless fewer than
// `retained_empty` empty slabs are kept (so demote/promote cycles do not remap and re-fault).
// The storage is always called with no lock held: it may call back into the pool (a
// budget's reclaim hook) and that must be able to free slots here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "numarena/kv_types.hpp"
#include "numarena/status.hpp"

namespace numarena::kv {

struct Slot {
  std::byte* data = nullptr;
  std::int32_t slab = -1;
  explicit operator bool() const { return data != nullptr; }
};

// Bytes of a slab of `blocks_per_slab` blocks of `block_bytes` (0 blocks: 1), rounded up to
// whole pages. InvalidArgument when that overflows std::size_t, or when a slab would hold
// more blocks than a slot index (32 bits) can number.
[[nodiscard]] StatusOr<std::size_t> SlabBytes(std::size_t block_bytes, std::size_t blocks_per_slab);

class SlabAllocator {
 public:
  // `capacity_blocks` 0: unlimited (the storage decides). SlabBytes(block_bytes,
  // blocks_per_slab) must be ok (the pool checks it when it is created).
  SlabAllocator(KvStorage* storage, int node, std::size_t block_bytes, std::size_t blocks_per_slab,
                std::size_t capacity_blocks, std::size_t retained_empty);
  ~SlabAllocator();
  SlabAllocator(const SlabAllocator&) = delete;
  SlabAllocator& operator=(const SlabAllocator&) = delete;

  // A free slot, mapping a new slab when none is free, `may_grow` is set and the capacity
  // allows. On failure returns an empty slot and, when `why` is set, the reason
  // (ResourceExhausted naming the node and limit, or the storage's error). Never throws:
  // when the heap cannot hold a new slab's slot list, the slab goes back to the storage and
  // the reason is ResourceExhausted.
  Slot Allocate(bool may_grow, Status* why = nullptr);
  void Free(Slot slot);
  // Gives empty slabs back to the storage until at most `keep` remain; returns the bytes.
  std::size_t ReleaseEmpty(std::size_t keep);
  // Bytes of slabs given back to the storage so far, by ReleaseEmpty or by a Free that left
  // more than `retained_empty` empty slabs (the difference of two readings is what went
  // back in between).
  std::uint64_t released_bytes() const;

  int node() const { return node_; }
  std::size_t slab_bytes() const { return slab_bytes_; }
  std::size_t used_blocks() const;
  std::size_t mapped_bytes() const;
  // A slot is free now, or the capacity allows one more (storage permitting).
  bool HasRoom() const;

 private:
  struct Slab {
    std::byte* base = nullptr;
    std::uint32_t used = 0;
    std::vector<std::uint32_t> free_slots;
  };
  void TakeEmptySlabsLocked(std::size_t keep, std::vector<void*>& out);

  KvStorage* storage_;
  const int node_;
  const std::size_t block_bytes_;
  const std::size_t blocks_per_slab_;
  const std::size_t slab_bytes_;
  const std::size_t capacity_blocks_;
  const std::size_t retained_empty_;

  mutable std::mutex mu_;
  std::vector<Slab> slabs_;           // index is the slot's slab id; base null: released
  std::set<std::int32_t> with_free_;  // slabs that have a free slot, lowest first
  std::vector<std::int32_t> unused_ids_;
  std::size_t used_ = 0;
  std::size_t reserved_ = 0;  // slots promised to growing callers not yet mapped
  std::size_t live_slabs_ = 0;
  std::size_t empty_slabs_ = 0;
  std::uint64_t released_bytes_ = 0;
};

}  // namespace numarena::kv
