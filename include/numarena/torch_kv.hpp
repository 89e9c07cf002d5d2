// KV-pool blocks as at::Tensor views, without a copy: what a paged-attention loop over a
// vLLM-style block table reads and writes.
//
// BlockTensors(pool, block, layer_in_block) pins `block` and returns its keys and values for
// one layer of the block's layer range as two tensors of shape
// [tokens_per_block, heads_in_group, head_dim] (the pool's dtype: fp32 -> float32,
// fp16 -> float16, bf16 -> bfloat16, fp8 -> uint8, since libtorch 1.13 has no fp8), viewing
// the block's memory in place. The pool stores each head's rows together (head-major), so
// the views are strided, not contiguous: strides {head_dim, head_stride, 1} elements, where
// head_stride covers one head's K and V areas. `.contiguous()` makes a packed copy when a
// kernel needs one.
//
// What a view means for its block -- the contract, tested in tests/torch/torch_kv_test.cpp:
//   * The views hold a pin (KvBlockPin) until the last of them (and every tensor viewing
//     their storage) is destroyed. A pinned block never moves: DemoteBlock refuses it
//     (FailedPrecondition), Demote, Reclaim and the budget's reclaim hook skip it. So a view
//     always reads and writes the block's current memory; it never goes stale by migration.
//   * Once every view is gone the block may be demoted to the cold tier (its data is copied
//     there) and promoted back. Views taken afterwards see the same data: a view of a cold
//     block pins it where it is (in the cold tier when promote_on_touch is off or the hot tier
//     has no room; otherwise Pin promotes it first).
//   * A view kept after its sequence is freed (or truncated past the block) keeps the
//     memory, not the contents: when the span is reused, its new owner writes there. The
//     block id is then refused (stale) by BlockTensors like by Pin.
//   * The pool must outlive every view: destroying a KvPool while a view lives aborts with a
//     message, as for any pin (kv_pool.hpp). Python's numarena.torch keeps the pool alive
//     from its views instead.
// Writing through a view is writing the block: the pool's MarkComputed contract applies.
//
//   for (numarena::KvBlockId id : block_table[seq]) {
//     auto kv = numarena::torch::BlockTensors(*pool, id, /*layer_in_block=*/0);
//     if (!kv.ok()) return kv.status();
//     scores = at::einsum("hd,thd->ht", {q, kv->key});   // no copy of the cache
//   }
#pragma once

#include <ATen/ops/from_blob.h>
#include <absl/strings/str_cat.h>

#include <cstdint>
#include <memory>

#include "numarena/kv_pool.hpp"

namespace numarena::torch {

struct KvBlockTensors {
  at::Tensor key;    // [tokens_per_block, heads_in_group, head_dim]
  at::Tensor value;  // same shape, the value rows
};

inline c10::ScalarType KvScalarType(KvDType dtype) {
  switch (dtype) {
    case KvDType::kFp32: return c10::ScalarType::Float;
    case KvDType::kFp16: return c10::ScalarType::Half;
    case KvDType::kBf16: return c10::ScalarType::BFloat16;
    case KvDType::kFp8: break;
  }
  return c10::ScalarType::Byte;
}

// Pins `block` and views its K and V rows of layer `layer_in_block` (0 .. layers_per_block-1)
// in place. Errors: Pin's (FailedPrecondition for a stale or unused block id), OutOfRange for
// a layer outside the block's range.
inline StatusOr<KvBlockTensors> BlockTensors(KvPool& pool, KvBlockId block,
                                             int layer_in_block = 0) {
  const KvGeometry& geometry = pool.geometry();
  if (layer_in_block < 0 || layer_in_block >= geometry.layers_per_block) {
    return absl::OutOfRangeError(absl::StrCat(
        "numarena::torch::BlockTensors: layer_in_block ", layer_in_block, " is outside the ",
        geometry.layers_per_block, " layer(s) of a block; pass 0 .. ",
        geometry.layers_per_block - 1, " (model layer L is layer L % layers_per_block of its "
        "block)"));
  }
  StatusOr<KvBlockPin> pinned = pool.Pin(block);
  if (!pinned.ok()) return pinned.status();
  auto pin = std::make_shared<KvBlockPin>(*std::move(pinned));

  const std::int64_t element = static_cast<std::int64_t>(KvDTypeBytes(geometry.dtype));
  const std::int64_t heads = geometry.kv_heads / pool.head_groups();
  const std::int64_t row = static_cast<std::int64_t>(pin->row_bytes()) / element;
  const std::int64_t head_stride =
      heads > 1 ? (pin->key(layer_in_block, 1) - pin->key(layer_in_block, 0)) / element
                : row * geometry.tokens_per_block;
  const at::TensorOptions options =
      at::TensorOptions().dtype(KvScalarType(geometry.dtype)).device(c10::DeviceType::CPU);
  const auto view = [&](std::byte* data) {
    // The deleter owns a reference to the pin: the block stays pinned while any view lives.
    return at::from_blob(data, {geometry.tokens_per_block, heads, geometry.head_dim},
                         {row, head_stride, 1}, [pin](void*) {}, options);
  };
  return KvBlockTensors{view(pin->key(layer_in_block, 0)), view(pin->value(layer_in_block, 0))};
}

}  // namespace numarena::torch
