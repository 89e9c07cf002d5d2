// Checked mode: the table of allocations and its reports (see checked.hpp).
#include "alloc/checked.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "alloc/heap_table.hpp"
#include "alloc/node_pages.hpp"
#include "os/fork.hpp"
#include "os/os.hpp"

namespace numarena::checked {

std::atomic<bool> g_enabled{false};

namespace {

struct Record {
  std::size_t size = 0;
  std::size_t alignment = 0;
  bool live = false;
};

struct alignas(64) Shard {
  std::mutex mutex;
  absl::flat_hash_map<std::uintptr_t, Record> records;
};

constexpr int kShardBits = 6;
constexpr int kShards = 1 << kShardBits;

// Made by Decide in checked mode, never freed (frees may come from static destructors).
Shard* g_shards = nullptr;

Shard& ShardOf(const void* p) {
  // Objects are at least 8-byte aligned; a multiplicative hash spreads neighbours.
  std::uint64_t key = reinterpret_cast<std::uintptr_t>(p) >> 3;
  return g_shards[(key * 0x9E3779B97F4A7C15ull) >> (64 - kShardBits)];
}

std::size_t NormalSize(std::size_t size) { return size == 0 ? 1 : size; }
std::size_t NormalAlignment(std::size_t alignment) {
  return alignment <= alignof(std::max_align_t) ? alignof(std::max_align_t) : alignment;
}

// "heap 3 (bind(0))": whose memory `p` lies in.
std::string HeapName(const void* p) {
  int id = arena_internal::HeapOf(p);
  Heap* heap = HeapById(id);
  if (heap == nullptr) return "no numarena heap";
  return "numarena heap " + std::to_string(id) + " (" + heap->pages->placement().ToString() + ")";
}

constexpr const char* kHint =
    " (found by NUMARENA_CHECK; unchecked, this corrupts the heap or crashes later)";

[[noreturn]] void ReportNotLive(const char* call, const void* p, const Record* record,
                                bool freeing) {
  if (record != nullptr) {
    std::fprintf(stderr,
                 "%s(%p): %s: the %zu-byte allocation at %p in %s was already "
                 "freed%s\n",
                 call, p, freeing ? "double free" : "use after free", record->size, p,
                 HeapName(p).c_str(), kHint);
  } else {
    std::fprintf(stderr,
                 "%s(%p): invalid pointer: %p lies in the memory of %s, but numarena "
                 "never handed out an allocation that starts there (a pointer into the middle "
                 "of an allocation, or a stray one)%s\n",
                 call, p, p, HeapName(p).c_str(), kHint);
  }
  std::abort();
}

// The live record of `p`, or a report. Shard lock held.
Record& LiveRecord(Shard& shard, const char* call, const void* p, bool freeing) {
  auto it = shard.records.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == shard.records.end()) ReportNotLive(call, p, nullptr, freeing);
  if (!it->second.live) ReportNotLive(call, p, &it->second, freeing);
  return it->second;
}

void ReadSetting() {
  std::string value = os::GetEnv("NUMARENA_CHECK");
  bool on;
  if (value.empty() || value == "0" || value == "false" || value == "no" || value == "off") {
    on = false;
  } else if (value == "1" || value == "true" || value == "yes" || value == "on") {
    on = true;
  } else {
    std::fprintf(stderr, "numarena: NUMARENA_CHECK=%s is not 0 or 1; checking is on\n",
                 value.c_str());
    on = true;
  }
  if (on) {
    g_shards = new Shard[kShards];  // its fork stage is set at load (end of this file)
  }
  g_enabled.store(on, std::memory_order_release);
}

// Fork: the shard locks are held while the table allocates (outer to jemalloc's locks).
void LockAll() {
  if (g_shards == nullptr) return;
  for (int i = 0; i < kShards; ++i) g_shards[i].mutex.lock();
}
void UnlockAll() {
  if (g_shards == nullptr) return;
  for (int i = kShards - 1; i >= 0; --i) g_shards[i].mutex.unlock();
}

}  // namespace

void Decide() {
  static std::once_flag once;
  std::call_once(once, ReadSetting);
}

void RecordAllocation(void* p, std::size_t size, std::size_t alignment) noexcept {
  Shard& shard = ShardOf(p);
  std::lock_guard<std::mutex> lock(shard.mutex);
  Record& record = shard.records[reinterpret_cast<std::uintptr_t>(p)];
  if (record.live) {
    std::fprintf(stderr,
                 "numarena: allocate: %p was handed out while the %zu-byte allocation there is "
                 "still live: the heap is corrupt (a double free numarena did not see, or a "
                 "write past the end of an object)\n",
                 p, record.size);
    std::abort();
  }
  record = Record{NormalSize(size), NormalAlignment(alignment), true};
}

void CheckFree(void* p) noexcept {
  Shard& shard = ShardOf(p);
  std::lock_guard<std::mutex> lock(shard.mutex);
  LiveRecord(shard, "numarena::deallocate", p, /*freeing=*/true).live = false;
}

void CheckSizedFree(void* p, std::size_t size, std::size_t alignment) noexcept {
  Shard& shard = ShardOf(p);
  std::lock_guard<std::mutex> lock(shard.mutex);
  Record& record = LiveRecord(shard, "numarena::deallocate", p, /*freeing=*/true);
  if (record.size != NormalSize(size) || record.alignment != NormalAlignment(alignment)) {
    std::fprintf(stderr,
                 "numarena::deallocate(%p, %zu, %zu): wrong size: the allocation at "
                 "%p was made with size %zu and alignment %zu, and a sized free must repeat "
                 "both (or free it unsized)%s\n",
                 p, size, alignment, p, record.size, record.alignment, kHint);
    std::abort();
  }
  record.live = false;
}

void CheckLive(const void* p, const char* caller) noexcept {
  Shard& shard = ShardOf(p);
  std::lock_guard<std::mutex> lock(shard.mutex);
  (void)LiveRecord(shard, caller, p, /*freeing=*/false);
}

void ForgetHeap(int heap) noexcept {
  if (g_shards == nullptr) return;
  for (int i = 0; i < kShards; ++i) {
    Shard& shard = g_shards[i];
    std::lock_guard<std::mutex> lock(shard.mutex);
    for (auto it = shard.records.begin(); it != shard.records.end();) {
      if (arena_internal::HeapOf(reinterpret_cast<const void*>(it->first)) == heap) {
        shard.records.erase(it++);
      } else {
        ++it;
      }
    }
  }
}

namespace {
// Set when the library is loaded (os/fork.hpp); its handlers do nothing until the table
// exists.
[[maybe_unused]] const bool g_checked_fork_stage_set = [] {
  static const os::ForkStageHandlers handlers{LockAll, UnlockAll, UnlockAll};
  os::SetForkStage(os::ForkStage::kCheckedTable, &handlers);
  return true;
}();
}  // namespace

}  // namespace numarena::checked
