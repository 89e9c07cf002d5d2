// KV block layout: validation of the model geometry and the offsets inside a block.
#include "kv/kv_layout.hpp"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace numarena {

std::size_t KvDTypeBytes(KvDType dtype) {
  switch (dtype) {
    case KvDType::kFp32:
      return 4;
    case KvDType::kFp16:
    case KvDType::kBf16:
      return 2;
    case KvDType::kFp8:
      return 1;
  }
  return 0;
}

const char* KvDTypeName(KvDType dtype) {
  switch (dtype) {
    case KvDType::kFp32:
      return "fp32";
    case KvDType::kFp16:
      return "fp16";
    case KvDType::kBf16:
      return "bf16";
    case KvDType::kFp8:
      return "fp8";
  }
  return "unknown";
}

namespace kv {
namespace {

// `*value` times `factor`, or false (and `*value` unchanged) when that overflows.
bool MultiplyBy(std::size_t* value, std::size_t factor) {
  std::size_t product;
  if (__builtin_mul_overflow(*value, factor, &product)) return false;
  *value = product;
  return true;
}

Status TooLarge(const std::string& what, const char* fields) {
  return absl::InvalidArgumentError(absl::StrCat("KV geometry: the size of ", what,
                                                 " overflows std::size_t; use a smaller ", fields));
}

Status Positive(const char* field, int value, const char* meaning) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("KV geometry: ", field, " is ", value,
                                                 "; it must be at least 1 (", meaning, ")"));
}

}  // namespace

StatusOr<Layout> MakeLayout(const KvGeometry& geometry, int home_node_count) {
  if (auto s = Positive("layers", geometry.layers, "transformer layers with a KV cache"); !s.ok())
    return s;
  if (auto s = Positive("kv_heads", geometry.kv_heads, "KV heads per layer"); !s.ok()) return s;
  if (auto s = Positive("head_dim", geometry.head_dim, "elements per head vector"); !s.ok())
    return s;
  if (auto s = Positive("tokens_per_block", geometry.tokens_per_block, "16 is usual"); !s.ok())
    return s;
  if (auto s = Positive("layers_per_block", geometry.layers_per_block, "1 is usual"); !s.ok())
    return s;
  if (KvDTypeBytes(geometry.dtype) == 0) {
    return absl::InvalidArgumentError("KV geometry: unknown dtype; use fp32, fp16, bf16 or fp8");
  }
  if (geometry.layers % geometry.layers_per_block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV geometry: layers_per_block ",
                                                   geometry.layers_per_block,
                                                   " does not divide layers ", geometry.layers));
  }
  if (geometry.heads_per_group < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV geometry: heads_per_group is ", geometry.heads_per_group,
                     "; use 0 (spread over the home nodes) or a divisor of kv_heads"));
  }
  Layout layout;
  layout.geometry = geometry;
  int per_group = geometry.heads_per_group;
  if (per_group == 0) {
    int nodes = home_node_count > 0 ? home_node_count : 1;
    per_group = geometry.kv_heads % nodes == 0 ? geometry.kv_heads / nodes : 1;
  }
  if (geometry.kv_heads % per_group != 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV geometry: heads_per_group ", per_group,
                                                   " does not divide kv_heads ",
                                                   geometry.kv_heads));
  }
  layout.geometry.heads_per_group = per_group;
  layout.head_groups = geometry.kv_heads / per_group;
  layout.layer_ranges = geometry.layers / geometry.layers_per_block;
  // Every size below is checked: a product that wrapped once gave a block of 0 bytes (and a
  // division by zero) or a block far smaller than its rows.
  if (__builtin_mul_overflow(layout.head_groups, layout.layer_ranges, &layout.blocks_per_span)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV geometry: ", layout.layer_ranges,
                     " layer ranges (layers / layers_per_block) x ", layout.head_groups,
                     " head groups (kv_heads / heads_per_group) overflow the blocks per "
                     "span; use a larger layers_per_block or heads_per_group"));
  }
  std::size_t bytes = static_cast<std::size_t>(geometry.head_dim);
  if (!MultiplyBy(&bytes, KvDTypeBytes(geometry.dtype))) {
    return TooLarge(absl::StrCat("a row of head_dim ", geometry.head_dim, " elements"), "head_dim");
  }
  layout.row_bytes = bytes;
  if (!MultiplyBy(&bytes, static_cast<std::size_t>(geometry.tokens_per_block)) ||
      bytes > SIZE_MAX - (kBlockAlignment - 1)) {
    return TooLarge(
        absl::StrCat("an area of tokens_per_block ", geometry.tokens_per_block, " rows of ",
                     layout.row_bytes, " bytes (head_dim ", geometry.head_dim, ")"),
        "head_dim or tokens_per_block");
  }
  layout.area_bytes = (bytes + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
  bytes = layout.area_bytes;
  if (!MultiplyBy(&bytes, 2)) {
    return TooLarge(absl::StrCat("a head's K and V areas of ", layout.area_bytes, " bytes each"),
                    "head_dim or tokens_per_block");
  }
  layout.head_stride = bytes;
  if (!MultiplyBy(&bytes, static_cast<std::size_t>(per_group))) {
    return TooLarge(
        absl::StrCat("heads_per_group ", per_group, " heads of ", layout.head_stride, " bytes"),
        "heads_per_group, head_dim or tokens_per_block");
  }
  layout.layer_stride = bytes;
  if (!MultiplyBy(&bytes, static_cast<std::size_t>(geometry.layers_per_block))) {
    return TooLarge(absl::StrCat("layers_per_block ", geometry.layers_per_block, " layers of ",
                                 layout.layer_stride, " bytes"),
                    "layers_per_block, heads_per_group, head_dim or tokens_per_block");
  }
  layout.block_bytes = bytes;
  if (!MultiplyBy(&bytes, static_cast<std::size_t>(layout.blocks_per_span))) {
    return TooLarge(absl::StrCat("a span of ", layout.blocks_per_span, " blocks of ",
                                 layout.block_bytes, " bytes"),
                    "geometry (fewer layers or kv_heads per span, or a smaller block)");
  }
  layout.span_bytes = bytes;
  return layout;
}

}  // namespace kv
}  // namespace numarena
