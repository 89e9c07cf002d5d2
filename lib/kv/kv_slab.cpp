// KV slabs: slot allocation inside one (tier, node) slab set (see kv_slab.hpp).
#include "kv/kv_slab.hpp"

#include <cstdint>
#include <new>

#include "absl/strings/str_cat.h"
#include "os/os.hpp"

namespace numarena::kv {

namespace {
std::size_t RoundUp(std::size_t value, std::size_t to) { return (value + to - 1) / to * to; }
}  // namespace

StatusOr<std::size_t> SlabBytes(std::size_t block_bytes, std::size_t blocks_per_slab) {
  if (blocks_per_slab == 0) blocks_per_slab = 1;
  if (blocks_per_slab > std::size_t{UINT32_MAX}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV slab: ", blocks_per_slab, " blocks per slab is more than a slab can hold (", UINT32_MAX,
        "); use a smaller slab_bytes"));
  }
  const std::size_t page = os::PageSize();
  std::size_t bytes;
  if (__builtin_mul_overflow(block_bytes, blocks_per_slab, &bytes) ||
      bytes > SIZE_MAX - (page - 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV slab: a slab of ", blocks_per_slab, " blocks of ", block_bytes,
                     " bytes, rounded up to whole pages, overflows std::size_t; use a smaller "
                     "block (geometry) or slab_bytes"));
  }
  return RoundUp(bytes, page);
}

SlabAllocator::SlabAllocator(KvStorage* storage, int node, std::size_t block_bytes,
                             std::size_t blocks_per_slab, std::size_t capacity_blocks,
                             std::size_t retained_empty)
    : storage_(storage),
      node_(node),
      block_bytes_(block_bytes),
      blocks_per_slab_(blocks_per_slab == 0 ? 1 : blocks_per_slab),
      slab_bytes_(
          RoundUp(block_bytes * (blocks_per_slab == 0 ? 1 : blocks_per_slab), os::PageSize())),
      capacity_blocks_(capacity_blocks),
      retained_empty_(retained_empty) {}

SlabAllocator::~SlabAllocator() {
  for (Slab& slab : slabs_)
    if (slab.base != nullptr) storage_->FreeSlab(node_, slab.base, slab_bytes_);
}

Slot SlabAllocator::Allocate(bool may_grow, Status* why) {
  {
    std::lock_guard lock(mu_);
    if (capacity_blocks_ != 0 && used_ + reserved_ >= capacity_blocks_) {
      if (why != nullptr) {
        *why = absl::ResourceExhaustedError(absl::StrCat(
            "KV tier on node ", node_, " holds its capacity of ", capacity_blocks_, " blocks"));
      }
      return {};
    }
    if (!with_free_.empty()) {
      const std::int32_t id = *with_free_.begin();
      Slab& slab = slabs_[id];
      const std::uint32_t index = slab.free_slots.back();
      slab.free_slots.pop_back();
      if (slab.used++ == 0) --empty_slabs_;
      if (slab.free_slots.empty()) with_free_.erase(with_free_.begin());
      ++used_;
      return {slab.base + index * block_bytes_, id};
    }
    if (!may_grow) {
      if (why != nullptr) {
        *why = absl::ResourceExhaustedError(
            absl::StrCat("KV tier on node ", node_, " has no free block and may not grow"));
      }
      return {};
    }
    ++reserved_;
  }
  // Map outside the lock: the storage may run a reclaim hook that frees slots here.
  auto mapped = storage_->AllocateSlab(node_, slab_bytes_);
  std::unique_lock lock(mu_);
  --reserved_;
  if (!mapped.ok()) {
    if (why != nullptr) *why = mapped.status();
    return {};
  }
  // The slot list grows with the slab's block count (reserved for all of them, so Free never
  // allocates): a heap that cannot hold it is a refusal like the storage's, not an exception
  // out of the pool. (A slab entry added before the failure stays released: base null.)
  const bool reuse = !unused_ids_.empty();
  const std::int32_t id = reuse ? unused_ids_.back() : static_cast<std::int32_t>(slabs_.size());
  try {
    if (!reuse) slabs_.emplace_back();
    slabs_[id].free_slots.reserve(blocks_per_slab_);
  } catch (const std::bad_alloc&) {
    lock.unlock();
    storage_->FreeSlab(node_, *mapped, slab_bytes_);
    if (why != nullptr) {
      *why = absl::ResourceExhaustedError(absl::StrCat("KV tier on node ", node_,
                                                       ": no heap for the slot list of a slab of ",
                                                       blocks_per_slab_, " blocks"));
    }
    return {};
  }
  if (reuse) unused_ids_.pop_back();
  Slab& slab = slabs_[id];
  slab.base = static_cast<std::byte*>(*mapped);
  slab.used = 1;
  slab.free_slots.clear();
  for (std::size_t i = blocks_per_slab_; i-- > 1;)
    slab.free_slots.push_back(static_cast<std::uint32_t>(i));
  if (!slab.free_slots.empty()) with_free_.insert(id);
  ++live_slabs_;
  ++used_;
  return {slab.base, id};
}

void SlabAllocator::Free(Slot slot) {
  std::vector<void*> release;
  {
    std::lock_guard lock(mu_);
    Slab& slab = slabs_[slot.slab];
    const auto index = static_cast<std::uint32_t>((slot.data - slab.base) / block_bytes_);
    if (slab.free_slots.empty()) with_free_.insert(slot.slab);
    slab.free_slots.push_back(index);
    --used_;
    if (--slab.used == 0) {
      ++empty_slabs_;
      if (empty_slabs_ > retained_empty_) TakeEmptySlabsLocked(retained_empty_, release);
    }
  }
  for (void* base : release) storage_->FreeSlab(node_, base, slab_bytes_);
}

void SlabAllocator::TakeEmptySlabsLocked(std::size_t keep, std::vector<void*>& out) {
  // Release the highest-numbered empty slabs: allocation prefers low ids, so those are the
  // ones least likely to be wanted again.
  for (std::int32_t id = static_cast<std::int32_t>(slabs_.size());
       id-- > 0 && empty_slabs_ > keep;) {
    Slab& slab = slabs_[id];
    if (slab.base == nullptr || slab.used != 0) continue;
    out.push_back(slab.base);
    slab.base = nullptr;
    slab.free_slots.clear();
    with_free_.erase(id);
    unused_ids_.push_back(id);
    --empty_slabs_;
    --live_slabs_;
    released_bytes_ += slab_bytes_;
  }
}

std::size_t SlabAllocator::ReleaseEmpty(std::size_t keep) {
  std::vector<void*> release;
  {
    std::lock_guard lock(mu_);
    TakeEmptySlabsLocked(keep, release);
  }
  for (void* base : release) storage_->FreeSlab(node_, base, slab_bytes_);
  return release.size() * slab_bytes_;
}

std::uint64_t SlabAllocator::released_bytes() const {
  std::lock_guard lock(mu_);
  return released_bytes_;
}

std::size_t SlabAllocator::used_blocks() const {
  std::lock_guard lock(mu_);
  return used_;
}

std::size_t SlabAllocator::mapped_bytes() const {
  std::lock_guard lock(mu_);
  return live_slabs_ * slab_bytes_;
}

bool SlabAllocator::HasRoom() const {
  std::lock_guard lock(mu_);
  if (capacity_blocks_ != 0 && used_ + reserved_ >= capacity_blocks_) return false;
  return !with_free_.empty() || !storage_->UnderPressure(node_);
}

}  // namespace numarena::kv
