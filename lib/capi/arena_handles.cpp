// The C API's arena handle table (arena_handles.hpp).
//
// A handle's value is (generation << 32) | (slot + 1). Slots live in chunks that are made on
// first need and never freed, so a stale handle can always be looked up. A slot's generation
// moves on when its arena is destroyed; the slot is then reused by the next new arena with
// the new generation, so the old handle matches nothing until the 32-bit generation wraps.
#include "capi/arena_handles.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace numarena::capi {
namespace {

constexpr std::uint32_t kChunkSlots = 1024;
constexpr std::uint32_t kChunks = 64;

struct Slot {
  std::atomic<Arena*> arena{nullptr};
  std::atomic<std::uint32_t> generation{1};
};

std::atomic<Slot*> g_chunks[kChunks];

struct Table {
  std::mutex mutex;
  absl::flat_hash_map<Arena*, std::uint32_t> slot_of;  // live arenas -> slot
  std::vector<std::uint32_t> free_slots;
  std::uint32_t used = 0;  // slots handed out at least once
};

Table& TheTable() {
  static Table* table = new Table;  // never destroyed: handles work until the process ends
  return *table;
}

std::uintptr_t Encode(std::uint32_t slot, std::uint32_t generation) {
  return (std::uintptr_t{generation} << 32) | (std::uintptr_t{slot} + 1);
}

Slot* SlotAt(std::uint32_t slot) noexcept {
  if (slot >= kChunks * kChunkSlots) return nullptr;
  Slot* chunk = g_chunks[slot / kChunkSlots].load(std::memory_order_acquire);
  return chunk == nullptr ? nullptr : &chunk[slot % kChunkSlots];
}

// The slot and generation `handle` encodes, or false when it cannot be a handle.
bool Decode(const numarena_arena* handle, std::uint32_t* slot, std::uint32_t* generation) {
  const auto value = reinterpret_cast<std::uintptr_t>(handle);
  const auto low = static_cast<std::uint32_t>(value & 0xffffffffu);
  if (low == 0) return false;
  *slot = low - 1;
  *generation = static_cast<std::uint32_t>(value >> 32);
  return true;
}

}  // namespace

StatusOr<numarena_arena*> HandleOf(Arena* arena) {
  Table& table = TheTable();
  std::lock_guard<std::mutex> lock(table.mutex);
  std::uint32_t slot;
  if (auto found = table.slot_of.find(arena); found != table.slot_of.end()) {
    slot = found->second;
  } else {
    if (!table.free_slots.empty()) {
      slot = table.free_slots.back();
      table.free_slots.pop_back();
    } else if (table.used < kChunks * kChunkSlots) {
      slot = table.used++;
      std::atomic<Slot*>& chunk = g_chunks[slot / kChunkSlots];
      if (chunk.load(std::memory_order_relaxed) == nullptr) {
        chunk.store(new Slot[kChunkSlots], std::memory_order_release);
      }
    } else {
      return absl::ResourceExhaustedError(absl::StrCat(
          "numarena C API: ", kChunks * kChunkSlots,
          " arenas are alive, the most the handle table holds; destroy arenas made by "
          "numarena_arena_create that are no longer used"));
    }
    SlotAt(slot)->arena.store(arena, std::memory_order_release);
    table.slot_of.emplace(arena, slot);
  }
  const std::uint32_t generation = SlotAt(slot)->generation.load(std::memory_order_relaxed);
  return reinterpret_cast<numarena_arena*>(Encode(slot, generation));
}

Arena* ArenaOfHandle(const numarena_arena* handle) noexcept {
  std::uint32_t slot = 0, generation = 0;
  if (!Decode(handle, &slot, &generation)) return nullptr;
  Slot* entry = SlotAt(slot);
  if (entry == nullptr || entry->generation.load(std::memory_order_acquire) != generation) {
    return nullptr;
  }
  return entry->arena.load(std::memory_order_acquire);
}

Status DestroyByHandle(numarena_arena* handle) {
  Table& table = TheTable();
  std::lock_guard<std::mutex> lock(table.mutex);
  Arena* arena = ArenaOfHandle(handle);
  if (arena == nullptr) {
    return absl::FailedPreconditionError(StaleHandleMessage("numarena_arena_destroy"));
  }
  if (Status status = Arena::Destroy(arena); !status.ok()) return status;
  std::uint32_t slot = 0, generation = 0;
  Decode(handle, &slot, &generation);
  Slot* entry = SlotAt(slot);
  entry->arena.store(nullptr, std::memory_order_release);
  entry->generation.store(generation + 1, std::memory_order_release);
  table.slot_of.erase(arena);
  table.free_slots.push_back(slot);
  return Status();
}

std::string StaleHandleMessage(const char* function) {
  return absl::StrCat(function,
                      ": the arena handle is stale or not an arena handle: its arena was "
                      "destroyed (numarena_arena_destroy), so neither it nor the memory it "
                      "handed out may be used; get a live arena from numarena_arena_create, "
                      "numarena_arena_for_node or numarena_arena_for_policy");
}

}  // namespace numarena::capi
