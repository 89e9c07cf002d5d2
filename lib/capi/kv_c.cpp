// The C API of the KV-cache pool (include/numarena/numarena.h, "the KV-cache pool"): a thin
// layer over numarena::KvPool. What it adds is the lifetime rule C and Python need: the pool
// is reference counted by its handle and its pins, so releasing the handle while a pin (a
// tensor view) lives defers the destruction instead of aborting (~KvPool's rule).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capi/capi_errors.hpp"
#include "numarena/arena.hpp"
#include "numarena/capacity.hpp"
#include "numarena/kv_pool.hpp"
#include "numarena/numarena.h"

struct numarena_kv_pool {
  std::unique_ptr<numarena::KvPool> pool;
  std::atomic<long> holds{1};  // the caller's handle + one per live pin
};

struct numarena_kv_block_pin {
  numarena_kv_pool* owner = nullptr;
  numarena::KvBlockPin pin;
};

namespace numarena {
namespace {

using capi::RecordError;

numarena_code Invalid(std::string message) {
  return RecordError(absl::InvalidArgumentError(std::move(message)));
}

void Release(numarena_kv_pool* pool) {
  if (pool->holds.fetch_sub(1, std::memory_order_acq_rel) == 1) delete pool;
}

// "node:N", "farthest", "interleave:0,2", "target:capacity|bandwidth|latency"; NULL or "": none.
StatusOr<KvColdTier> ParseColdTier(const char* text) {
  if (text == nullptr || *text == '\0') return KvColdTier::None();
  const std::string_view spec(text);
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "numarena_kv_pool_create: cold_tier \"", std::string(spec),
        "\" is not one of \"node:N\", \"farthest\", \"interleave:N,N,...\", "
        "\"target:capacity\", \"target:bandwidth\", \"target:latency\" (or NULL for none)"));
  };
  const auto nodes_of = [&](std::string_view list) -> StatusOr<std::vector<int>> {
    std::vector<int> nodes;
    while (!list.empty()) {
      const std::size_t comma = list.find(',');
      const std::string_view item = list.substr(0, comma);
      int node = -1;
      auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), node);
      if (error != std::errc() || end != item.data() + item.size() || item.empty()) return bad();
      nodes.push_back(node);
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
      if (list.empty()) return bad();
    }
    if (nodes.empty()) return bad();
    return nodes;
  };
  if (spec == "farthest") return KvColdTier::Farthest();
  if (spec.starts_with("node:")) {
    StatusOr<std::vector<int>> nodes = nodes_of(spec.substr(5));
    if (!nodes.ok() || nodes->size() != 1) return bad();
    return KvColdTier::Node(nodes->front());
  }
  if (spec.starts_with("interleave:")) {
    StatusOr<std::vector<int>> nodes = nodes_of(spec.substr(11));
    if (!nodes.ok()) return nodes.status();
    return KvColdTier::Interleave(*std::move(nodes));
  }
  if (spec == "target:capacity") return KvColdTier::Target(MemoryAttribute::kCapacity);
  if (spec == "target:bandwidth") return KvColdTier::Target(MemoryAttribute::kBandwidth);
  if (spec == "target:latency") return KvColdTier::Target(MemoryAttribute::kLatency);
  return bad();
}

numarena_kv_dtype CDType(KvDType dtype) {
  switch (dtype) {
    case KvDType::kFp32: return NUMARENA_KV_FP32;
    case KvDType::kFp16: return NUMARENA_KV_FP16;
    case KvDType::kBf16: return NUMARENA_KV_BF16;
    case KvDType::kFp8: break;
  }
  return NUMARENA_KV_FP8;
}

bool NullPool(const numarena_kv_pool* pool, const char* function) {
  if (pool != nullptr) return false;
  Invalid(absl::StrCat(function, ": NULL pool"));
  return true;
}

}  // namespace
}  // namespace numarena

using numarena::Invalid;
using numarena::capi::RecordError;

extern "C" {

numarena_kv_pool* numarena_kv_pool_create(const numarena_kv_pool_options* options) {
  using namespace numarena;
  if (options == nullptr || options->size < sizeof(numarena_kv_pool_options) ||
      options->size > 4096) {
    Invalid(absl::StrCat("numarena_kv_pool_create: options must not be NULL and options->size "
                         "must be sizeof(numarena_kv_pool_options) (",
                         sizeof(numarena_kv_pool_options), "), not ",
                         options == nullptr ? 0 : options->size));
    return nullptr;
  }
  const auto* extra = reinterpret_cast<const unsigned char*>(options);
  for (std::size_t i = sizeof(numarena_kv_pool_options); i < options->size; ++i) {
    if (extra[i] != 0) {
      Invalid("numarena_kv_pool_create: options has nonzero bytes past the fields this "
              "numarena knows (built against a newer numarena.h?)");
      return nullptr;
    }
  }
  // Read as the int a C caller stored: loading an out-of-range value as the C++ enum type
  // is undefined (UBSan: -fsanitize=enum), and a C caller can store any int there.
  static_assert(sizeof(numarena_kv_dtype) == sizeof(int), "numarena_kv_dtype is a C int enum");
  int dtype = 0;
  std::memcpy(&dtype, &options->dtype, sizeof dtype);
  if (dtype < NUMARENA_KV_FP32 || dtype > NUMARENA_KV_FP8) {
    Invalid(absl::StrCat("numarena_kv_pool_create: dtype ", dtype,
                         " is not a numarena_kv_dtype (0 fp32, 1 fp16, 2 bf16, 3 fp8)"));
    return nullptr;
  }
  if (options->home_nodes == nullptr && options->home_node_count > 0) {
    Invalid("numarena_kv_pool_create: NULL home_nodes with a home_node_count");
    return nullptr;
  }
  // Node ids stop below 1024 (KvPool::Create), so a longer list repeats a node or is garbage.
  if (options->home_node_count > 1024) {
    Invalid(absl::StrCat("numarena_kv_pool_create: home_node_count ", options->home_node_count,
                         " is more than the 1024 nodes numarena supports"));
    return nullptr;
  }
  StatusOr<KvColdTier> cold = ParseColdTier(options->cold_tier);
  if (!cold.ok()) {
    RecordError(cold.status());
    return nullptr;
  }
  KvPoolOptions o;
  o.geometry.layers = options->layers;
  o.geometry.kv_heads = options->kv_heads;
  o.geometry.head_dim = options->head_dim;
  o.geometry.dtype = static_cast<KvDType>(options->dtype);
  if (options->tokens_per_block != 0) o.geometry.tokens_per_block = options->tokens_per_block;
  if (options->layers_per_block != 0) o.geometry.layers_per_block = options->layers_per_block;
  o.geometry.heads_per_group = options->heads_per_group;
  o.home_nodes.assign(options->home_nodes, options->home_nodes + options->home_node_count);
  o.cold_tier = *std::move(cold);
  o.hot_blocks_per_node = options->hot_blocks_per_node;
  o.cold_blocks = options->cold_blocks;
  o.promote_on_touch = options->no_promote_on_touch == 0;
  o.storage = MakeBoundMmapStorage(GetCapacityGate());
  StatusOr<std::unique_ptr<KvPool>> pool = KvPool::Create(std::move(o));
  if (!pool.ok()) {
    RecordError(pool.status());
    return nullptr;
  }
  auto* handle = new (std::nothrow) numarena_kv_pool;
  if (handle == nullptr) {
    RecordError(absl::ResourceExhaustedError("numarena_kv_pool_create: no memory for the handle"));
    return nullptr;
  }
  handle->pool = *std::move(pool);
  return handle;
}

void numarena_kv_pool_destroy(numarena_kv_pool* pool) {
  if (pool != nullptr) numarena::Release(pool);
}

numarena_code numarena_kv_pool_layout_of(const numarena_kv_pool* pool, numarena_kv_pool_layout* out,
                                         int* group_nodes, size_t group_capacity) {
  if (numarena::NullPool(pool, "numarena_kv_pool_layout_of")) return NUMARENA_INVALID_ARGUMENT;
  if (out == nullptr || (group_nodes == nullptr && group_capacity > 0)) {
    return Invalid("numarena_kv_pool_layout_of: NULL out, or NULL group_nodes with a capacity");
  }
  const numarena::KvPool& p = *pool->pool;
  const numarena::KvGeometry& g = p.geometry();
  *out = {p.head_groups(),         g.kv_heads / p.head_groups(), p.layer_ranges(),
          g.layers_per_block,      g.tokens_per_block,           g.head_dim,
          numarena::CDType(g.dtype), p.block_bytes()};
  for (int group = 0; group < p.head_groups() && static_cast<size_t>(group) < group_capacity;
       ++group) {
    group_nodes[group] = p.group_node(group);
  }
  return NUMARENA_OK;
}

numarena_code numarena_kv_sequence_create(numarena_kv_pool* pool, const int32_t* tokens,
                                          size_t count, uint64_t* sequence, size_t* reused) {
  if (numarena::NullPool(pool, "numarena_kv_sequence_create")) return NUMARENA_INVALID_ARGUMENT;
  if (sequence == nullptr || (tokens == nullptr && count > 0)) {
    return Invalid("numarena_kv_sequence_create: NULL sequence, or NULL tokens with a count");
  }
  numarena::StatusOr<numarena::KvSequenceId> made =
      pool->pool->CreateSequence(std::span<const std::int32_t>(tokens, count), reused);
  if (!made.ok()) return RecordError(made.status());
  *sequence = *made;
  return NUMARENA_OK;
}

numarena_code numarena_kv_sequence_append(numarena_kv_pool* pool, uint64_t sequence,
                                          const int32_t* tokens, size_t count) {
  if (numarena::NullPool(pool, "numarena_kv_sequence_append")) return NUMARENA_INVALID_ARGUMENT;
  if (tokens == nullptr && count > 0) {
    return Invalid("numarena_kv_sequence_append: NULL tokens with a count");
  }
  return RecordError(
      pool->pool->Append(sequence, std::span<const std::int32_t>(tokens, count)));
}

numarena_code numarena_kv_sequence_mark_computed(numarena_kv_pool* pool, uint64_t sequence,
                                                 size_t tokens) {
  if (numarena::NullPool(pool, "numarena_kv_sequence_mark_computed")) {
    return NUMARENA_INVALID_ARGUMENT;
  }
  return RecordError(pool->pool->MarkComputed(sequence, tokens));
}

numarena_code numarena_kv_sequence_free(numarena_kv_pool* pool, uint64_t sequence) {
  if (numarena::NullPool(pool, "numarena_kv_sequence_free")) return NUMARENA_INVALID_ARGUMENT;
  return RecordError(pool->pool->FreeSequence(sequence));
}

numarena_code numarena_kv_blocks(const numarena_kv_pool* pool, uint64_t sequence, int layer,
                                 int group, uint64_t* blocks, size_t capacity, size_t* count) {
  if (numarena::NullPool(pool, "numarena_kv_blocks")) return NUMARENA_INVALID_ARGUMENT;
  if (count == nullptr || (blocks == nullptr && capacity > 0)) {
    return Invalid("numarena_kv_blocks: NULL count, or NULL blocks with a capacity");
  }
  std::vector<numarena::KvBlockId> ids;
  if (numarena::Status s = pool->pool->Blocks(sequence, layer, group, &ids); !s.ok()) {
    return RecordError(s);
  }
  *count = ids.size();
  if (blocks != nullptr) {
    std::memcpy(blocks, ids.data(), std::min(capacity, ids.size()) * sizeof(uint64_t));
  }
  if (capacity < ids.size()) {
    return RecordError(absl::OutOfRangeError(
        absl::StrCat("numarena_kv_blocks: ", ids.size(), " blocks, room for ", capacity)));
  }
  return NUMARENA_OK;
}

numarena_kv_block_pin* numarena_kv_pin(numarena_kv_pool* pool, uint64_t block,
                                 numarena_kv_pin_info* info) {
  if (numarena::NullPool(pool, "numarena_kv_pin")) return nullptr;
  auto* handle = new (std::nothrow) numarena_kv_block_pin;
  if (handle == nullptr) {
    RecordError(absl::ResourceExhaustedError("numarena_kv_pin: no memory for the pin"));
    return nullptr;
  }
  numarena::StatusOr<numarena::KvBlockPin> pinned = pool->pool->Pin(block);
  if (!pinned.ok()) {
    delete handle;
    RecordError(pinned.status());
    return nullptr;
  }
  handle->pin = *std::move(pinned);
  handle->owner = pool;
  pool->holds.fetch_add(1, std::memory_order_relaxed);
  if (info != nullptr) {
    const numarena::KvBlockPin& p = handle->pin;
    std::byte* base = p.key(0, 0, 0);
    const bool two_layers = pool->pool->geometry().layers_per_block > 1;
    const bool two_heads = pool->pool->geometry().kv_heads / pool->pool->head_groups() > 1;
    *info = {p.data(),
             static_cast<int>(p.tier()),
             p.node(),
             p.first_layer(),
             p.first_head(),
             p.group(),
             p.row_bytes(),
             two_heads ? static_cast<size_t>(p.key(0, 1) - base) : 0,
             two_layers ? static_cast<size_t>(p.key(1, 0) - base) : 0,
             static_cast<size_t>(p.value(0, 0) - base)};
  }
  return handle;
}

void numarena_kv_unpin(numarena_kv_block_pin* pin) {
  if (pin == nullptr) return;
  numarena_kv_pool* owner = pin->owner;
  pin->pin.Reset();
  delete pin;
  numarena::Release(owner);
}

numarena_code numarena_kv_locate(const numarena_kv_pool* pool, uint64_t block, int* tier,
                                 int* node, int* pins) {
  if (numarena::NullPool(pool, "numarena_kv_locate")) return NUMARENA_INVALID_ARGUMENT;
  numarena::StatusOr<numarena::KvPool::BlockLocation> where = pool->pool->Locate(block);
  if (!where.ok()) return RecordError(where.status());
  if (tier != nullptr) *tier = static_cast<int>(where->tier);
  if (node != nullptr) *node = where->node;
  if (pins != nullptr) *pins = where->pins;
  return NUMARENA_OK;
}

numarena_code numarena_kv_demote_block(numarena_kv_pool* pool, uint64_t block) {
  if (numarena::NullPool(pool, "numarena_kv_demote_block")) return NUMARENA_INVALID_ARGUMENT;
  return RecordError(pool->pool->DemoteBlock(block));
}

numarena_code numarena_kv_promote_block(numarena_kv_pool* pool, uint64_t block) {
  if (numarena::NullPool(pool, "numarena_kv_promote_block")) return NUMARENA_INVALID_ARGUMENT;
  return RecordError(pool->pool->PromoteBlock(block));
}

size_t numarena_kv_demote(numarena_kv_pool* pool, int node, size_t max_blocks) {
  if (numarena::NullPool(pool, "numarena_kv_demote")) return 0;
  return pool->pool->Demote(node, max_blocks);
}

numarena_code numarena_kv_audit(numarena_kv_pool* pool, int correct, size_t max_blocks,
                                size_t max_corrected_blocks, numarena_kv_audit_report* report) {
  if (numarena::NullPool(pool, "numarena_kv_audit")) return NUMARENA_INVALID_ARGUMENT;
  numarena::KvAuditOptions options;
  options.mode = correct != 0 ? numarena::KvKernelMoves::kCorrect : numarena::KvKernelMoves::kReport;
  options.max_blocks = max_blocks;
  options.max_corrected_blocks = max_corrected_blocks;
  numarena::StatusOr<numarena::KvAuditReport> audit = pool->pool->AuditPlacement(options);
  if (!audit.ok()) return RecordError(audit.status());
  if (report != nullptr) {
    *report = {audit->blocks_checked,        audit->pages_checked,
               audit->hot_blocks_misplaced,  audit->cold_blocks_misplaced,
               audit->hot_pages_misplaced,   audit->cold_pages_misplaced,
               audit->pages_moved_back,      audit->pages_not_moved,
               audit->blocks_left,           audit->wrapped ? 1 : 0};
  }
  return NUMARENA_OK;
}

}  // extern "C"
