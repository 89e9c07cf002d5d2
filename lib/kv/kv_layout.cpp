// KV block layout: validation of the model geometry and the offsets inside a block.
#include "kv/kv_layout.hpp"

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

std::size_t RoundUp(std::size_t value, std::size_t to) { return (value + to - 1) / to * to; }

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
  layout.blocks_per_span = layout.head_groups * layout.layer_ranges;
  layout.row_bytes = static_cast<std::size_t>(geometry.head_dim) * KvDTypeBytes(geometry.dtype);
  layout.area_bytes = RoundUp(
      layout.row_bytes * static_cast<std::size_t>(geometry.tokens_per_block), kBlockAlignment);
  layout.head_stride = 2 * layout.area_bytes;
  layout.layer_stride = layout.head_stride * static_cast<std::size_t>(per_group);
  layout.block_bytes = layout.layer_stride * static_cast<std::size_t>(geometry.layers_per_block);
  return layout;
}

}  // namespace kv
}  // namespace numarena
