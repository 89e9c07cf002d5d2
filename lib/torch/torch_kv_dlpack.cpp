// KV-pool blocks as DLPack tensors (numarena_torch_kv_block_dlpack, include/numarena/torch.hpp):
// how numarena.torch gives Python a torch.Tensor over a block without a copy
// (torch.utils.dlpack.from_dlpack), with the block's pin released by the DLPack deleter when
// PyTorch drops the tensor. Over numarena's C API (numarena_kv_pin); libtorch's own copy of
// the DLPack header (ATen/dlpack.h, plain C) fixes the ABI to the one this torch reads.
#include <ATen/dlpack.h>

#include <cstdint>
#include <new>

#include "numarena/numarena.h"
#include "numarena/torch.hpp"

namespace {

struct BlockTensor {
  DLManagedTensor managed{};
  numarena_kv_block_pin* pin = nullptr;
  std::int64_t shape[3] = {};
  std::int64_t strides[3] = {};
};

void DeleteBlockTensor(DLManagedTensor* managed) {
  auto* tensor = static_cast<BlockTensor*>(managed->manager_ctx);
  numarena_kv_unpin(tensor->pin);
  delete tensor;
}

DLDataType DLTypeOf(numarena_kv_dtype dtype) {
  switch (dtype) {
    case NUMARENA_KV_FP32: return {kDLFloat, 32, 1};
    case NUMARENA_KV_FP16: return {kDLFloat, 16, 1};
    case NUMARENA_KV_BF16: return {kDLBfloat, 16, 1};
    case NUMARENA_KV_FP8: break;
  }
  return {kDLUInt, 8, 1};  // libtorch 1.13 has no fp8: raw bytes
}

}  // namespace

extern "C" void* numarena_torch_kv_block_dlpack(numarena_kv_pool* pool, uint64_t block,
                                                int layer_in_block, int value) {
  numarena_kv_pool_layout layout;
  if (numarena_kv_pool_layout_of(pool, &layout, nullptr, 0) != NUMARENA_OK) return nullptr;
  if (layer_in_block < 0 || layer_in_block >= layout.layers_per_block) return nullptr;
  auto* tensor = new (std::nothrow) BlockTensor;
  if (tensor == nullptr) return nullptr;
  numarena_kv_pin_info info;
  tensor->pin = numarena_kv_pin(pool, block, &info);
  if (tensor->pin == nullptr) {
    delete tensor;
    return nullptr;
  }
  const DLDataType type = DLTypeOf(layout.dtype);
  const std::int64_t element = type.bits / 8;
  const std::size_t offset = layer_in_block * info.layer_stride_bytes +
                             (value != 0 ? info.value_offset_bytes : 0);
  tensor->shape[0] = layout.tokens_per_block;
  tensor->shape[1] = layout.heads_per_group;
  tensor->shape[2] = layout.head_dim;
  tensor->strides[0] = static_cast<std::int64_t>(info.row_bytes) / element;
  tensor->strides[1] = layout.heads_per_group > 1
                           ? static_cast<std::int64_t>(info.head_stride_bytes) / element
                           : tensor->strides[0] * layout.tokens_per_block;
  tensor->strides[2] = 1;
  DLTensor& dl = tensor->managed.dl_tensor;
  dl.data = static_cast<char*>(info.data) + offset;
  dl.device = {kDLCPU, 0};
  dl.ndim = 3;
  dl.dtype = type;
  dl.shape = tensor->shape;
  dl.strides = tensor->strides;
  dl.byte_offset = 0;
  tensor->managed.manager_ctx = tensor;
  tensor->managed.deleter = &DeleteBlockTensor;
  return &tensor->managed;
}

extern "C" void numarena_torch_dlpack_delete(void* managed) {
  if (managed != nullptr) {
    auto* dl = static_cast<DLManagedTensor*>(managed);
    dl->deleter(dl);
  }
}
