// KV block layout: how a model's KV geometry is cut into blocks and where each row sits.
//
// A block holds K and V of one (layer range, head group, token span). Inside it, for each
// layer of the range and each head of the group, the `tokens_per_block` key rows come first
// and the value rows right after, so one head's K and V are adjacent (the head-first
// mapping). Every key area and value area starts on a 64-byte boundary so SIMD loads of a
// row never straddle cache lines needlessly; the block size is a multiple of 64 too, so
// blocks carved back to back from a slab all stay aligned.
#pragma once

#include <cstddef>

#include "numarena/kv_types.hpp"
#include "numarena/status.hpp"

namespace numarena::kv {

inline constexpr std::size_t kBlockAlignment = 64;

struct Layout {
  KvGeometry geometry;
  int head_groups = 0;
  int layer_ranges = 0;
  int blocks_per_span = 0;      // layer_ranges * head_groups
  std::size_t row_bytes = 0;    // head_dim * element size
  std::size_t area_bytes = 0;   // tokens_per_block rows, rounded to kBlockAlignment
  std::size_t head_stride = 0;  // K area + V area
  std::size_t layer_stride = 0;
  std::size_t block_bytes = 0;
  std::size_t span_bytes = 0;  // block_bytes * blocks_per_span

  // Index of a block inside its span.
  int BlockIndex(int layer_range, int group) const { return layer_range * head_groups + group; }
  int LayerRangeOf(int index) const { return index / head_groups; }
  int GroupOf(int index) const { return index % head_groups; }
  std::size_t KeyOffset(int layer_in_block, int head_in_group, int token) const {
    return layer_in_block * layer_stride + head_in_group * head_stride + token * row_bytes;
  }
  std::size_t ValueOffset(int layer_in_block, int head_in_group, int token) const {
    return KeyOffset(layer_in_block, head_in_group, token) + area_bytes;
  }
};

// Validates `geometry` and derives the layout. `home_node_count` resolves a zero
// heads_per_group. InvalidArgument names the bad field and what would be valid, including
// when a size (a row, area, block or span in bytes, or the blocks of a span) would not fit
// its type: every size of the returned layout is exact.
[[nodiscard]] StatusOr<Layout> MakeLayout(const KvGeometry& geometry, int home_node_count);

}  // namespace numarena::kv
