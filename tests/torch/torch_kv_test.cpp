// KV-pool blocks as tensors (include/numarena/torch_kv.hpp) on the host, with the KV tests'
// heap storage and logical nodes (home node 0, cold node 1): the views are the block's memory
// (no copy), they read back what was written across demotion and promotion, and a live view
// pins its block exactly as the header says. Cold blocks on the slow node: tests/lab/torch_lab.py.
#include <ATen/ops/arange.h>
#include <ATen/ops/add.h>
#include <ATen/ops/neg.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "kv_test_support.hpp"
#include "numarena/torch_kv.hpp"

using numarena::KvBlockId;
using numarena::KvColdTier;
using numarena::KvPool;
using numarena::KvPoolOptions;
using numarena::KvTier;
using numarena::torch::BlockTensors;

namespace {

// 2 layers, 4 KV heads in 2 groups, head_dim 8, fp32, 4 tokens per block.
KvPoolOptions Options(bool promote_on_touch) {
  KvPoolOptions o;
  o.geometry = {.layers = 2, .kv_heads = 4, .head_dim = 8, .dtype = numarena::KvDType::kFp32,
                .tokens_per_block = 4, .layers_per_block = 1, .heads_per_group = 2};
  o.home_nodes = {0};
  o.cold_tier = KvColdTier::Node(1);
  o.storage = std::make_shared<kvtest::HeapStorage>();
  o.slab_bytes = 4096;
  o.promote_on_touch = promote_on_touch;
  return o;
}

std::unique_ptr<KvPool> MustCreate(KvPoolOptions o) {
  auto pool = KvPool::Create(std::move(o));
  INFO((pool.ok() ? std::string("ok") : std::string(pool.status().message())));
  REQUIRE(pool.ok());
  return *std::move(pool);
}

// Every block id of the sequence, all layers and groups.
std::vector<KvBlockId> AllBlocks(const KvPool& pool, numarena::KvSequenceId seq) {
  std::vector<KvBlockId> all;
  for (int layer = 0; layer < pool.geometry().layers; ++layer) {
    for (int group = 0; group < pool.head_groups(); ++group) {
      for (KvBlockId id : kvtest::BlockIds(pool, seq, layer, group)) all.push_back(id);
    }
  }
  return all;
}

// What block number `i` holds: K = i*1000 + 0..63, V = -(that).
at::Tensor Expected(std::size_t i, bool value) {
  at::Tensor t = at::arange(64, at::kFloat).reshape({4, 2, 8}).add(static_cast<double>(i) * 1000);
  return value ? t.neg() : t;
}

numarena::torch::KvBlockTensors MustView(KvPool& pool, KvBlockId id) {
  auto kv = BlockTensors(pool, id);
  INFO((kv.ok() ? std::string("ok") : std::string(kv.status().message())));
  REQUIRE(kv.ok());
  return *std::move(kv);
}

}  // namespace

TEST_CASE("torch kv: block tensors view the block's memory in place, shaped [tokens, heads, dim]") {
  auto pool = MustCreate(Options(true));
  auto seq = pool->CreateSequence(std::vector<std::int32_t>{1, 2, 3, 4});
  REQUIRE(seq.ok());
  const KvBlockId id = kvtest::BlockIds(*pool, *seq, 1, 1).at(0);
  auto kv = MustView(*pool, id);
  CHECK(kv.key.sizes() == at::IntArrayRef({4, 2, 8}));
  CHECK(kv.value.sizes() == at::IntArrayRef({4, 2, 8}));
  CHECK(kv.key.scalar_type() == at::kFloat);
  CHECK(kv.key.device().is_cpu());
  kv.key.copy_(Expected(7, false));
  kv.value.copy_(Expected(7, true));
  // The pool's own pointers see what the views wrote: (token t, head h) row.
  auto pin = pool->Pin(id);
  REQUIRE(pin.ok());
  for (int head = 0; head < 2; ++head) {
    for (int token = 0; token < 4; ++token) {
      float k[8], v[8];
      std::memcpy(k, pin->key(0, head, token), sizeof k);
      std::memcpy(v, pin->value(0, head, token), sizeof v);
      for (int d = 0; d < 8; ++d) {
        CHECK(k[d] == 7000.0f + static_cast<float>((token * 2 + head) * 8 + d));
        CHECK(v[d] == -k[d]);
      }
    }
  }
  CHECK(kv.key.data_ptr() == static_cast<void*>(pin->key(0, 0, 0)));
  CHECK(kv.value.data_ptr() == static_cast<void*>(pin->value(0, 0, 0)));
  CHECK_FALSE(kv.key.is_contiguous());  // head-major in the pool: a strided view
  CHECK(kv.key.contiguous().equal(Expected(7, false)));
}

TEST_CASE("torch kv: block tensors read back what was written across demotion and promotion") {
  for (bool promote_on_touch : {false, true}) {
    INFO("promote_on_touch " << promote_on_touch);
    auto pool = MustCreate(Options(promote_on_touch));
    std::vector<std::int32_t> prompt(8);
    std::iota(prompt.begin(), prompt.end(), 10);
    auto seq = pool->CreateSequence(prompt);
    REQUIRE(seq.ok());
    const std::vector<KvBlockId> blocks = AllBlocks(*pool, *seq);
    REQUIRE(blocks.size() == 8);  // 2 spans x 2 layers x 2 groups
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto kv = MustView(*pool, blocks[i]);
      kv.key.copy_(Expected(i, false));
      kv.value.copy_(Expected(i, true));
    }
    for (KvBlockId id : blocks) REQUIRE(pool->DemoteBlock(id).ok());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto where = pool->Locate(blocks[i]);
      REQUIRE(where.ok());
      CHECK(where->tier == KvTier::kCold);
      CHECK(where->node == 1);
      auto kv = MustView(*pool, blocks[i]);  // pins: promotes first when promote_on_touch
      CHECK(kv.key.equal(Expected(i, false)));
      CHECK(kv.value.equal(Expected(i, true)));
      CHECK(pool->Locate(blocks[i])->tier == (promote_on_touch ? KvTier::kHot : KvTier::kCold));
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (pool->Locate(blocks[i])->tier == KvTier::kCold) REQUIRE(pool->PromoteBlock(blocks[i]).ok());
      CHECK(pool->Locate(blocks[i])->tier == KvTier::kHot);
      auto kv = MustView(*pool, blocks[i]);
      CHECK(kv.key.equal(Expected(i, false)));
      CHECK(kv.value.equal(Expected(i, true)));
    }
    REQUIRE(pool->FreeSequence(*seq).ok());
  }
}

TEST_CASE("torch kv: a live view, or any tensor on its storage, pins the block") {
  auto pool = MustCreate(Options(false));
  auto seq = pool->CreateSequence(std::vector<std::int32_t>{5, 6, 7, 8});
  REQUIRE(seq.ok());
  const KvBlockId id = kvtest::BlockIds(*pool, *seq, 0, 0).at(0);
  at::Tensor slice;
  {
    auto kv = MustView(*pool, id);
    kv.key.copy_(Expected(3, false));
    CHECK(pool->Locate(id)->pins == 1);
    auto refused = pool->DemoteBlock(id);
    CHECK(refused.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(pool->Demote(0, 100) == 3);  // the three other blocks of the span; not this one
    CHECK(pool->Locate(id)->tier == KvTier::kHot);
    slice = kv.key.select(0, 2);  // token 2's rows: a tensor on the same storage
  }
  CHECK(pool->Locate(id)->pins == 1);  // the slice keeps the pin
  CHECK(pool->DemoteBlock(id).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(slice.equal(Expected(3, false).select(0, 2)));
  slice.reset();
  CHECK(pool->Locate(id)->pins == 0);
  REQUIRE(pool->DemoteBlock(id).ok());
  CHECK(MustView(*pool, id).key.equal(Expected(3, false)));
}

TEST_CASE("torch kv: stale ids, layers outside the block and dtypes") {
  auto pool = MustCreate(Options(true));
  auto seq = pool->CreateSequence(std::vector<std::int32_t>{1, 2, 3, 4});
  REQUIRE(seq.ok());
  const KvBlockId id = kvtest::BlockIds(*pool, *seq, 0, 0).at(0);
  auto bad_layer = BlockTensors(*pool, id, 1);
  CHECK(bad_layer.status().code() == absl::StatusCode::kOutOfRange);
  CHECK(bad_layer.status().message().find("layer_in_block 1 is outside the 1 layer(s)") !=
        std::string::npos);
  CHECK(BlockTensors(*pool, id, -1).status().code() == absl::StatusCode::kOutOfRange);
  REQUIRE(pool->FreeSequence(*seq).ok());
  auto reuse = pool->CreateSequence(std::vector<std::int32_t>{9, 9, 9, 9});
  REQUIRE(reuse.ok());
  CHECK(BlockTensors(*pool, id).status().code() == absl::StatusCode::kFailedPrecondition);

  CHECK(numarena::torch::KvScalarType(numarena::KvDType::kFp16) == at::kHalf);
  CHECK(numarena::torch::KvScalarType(numarena::KvDType::kBf16) == at::kBFloat16);
  CHECK(numarena::torch::KvScalarType(numarena::KvDType::kFp8) == at::kByte);
  auto o = Options(true);
  o.geometry.dtype = numarena::KvDType::kBf16;
  o.geometry.heads_per_group = 1;  // one head per group: the head stride is one K+V area
  auto bf16 = MustCreate(std::move(o));
  auto s = bf16->CreateSequence(std::vector<std::int32_t>{1, 2, 3, 4});
  REQUIRE(s.ok());
  auto kv = MustView(*bf16, kvtest::BlockIds(*bf16, *s, 0, 3).at(0));
  CHECK(kv.key.sizes() == at::IntArrayRef({4, 1, 8}));
  CHECK(kv.key.scalar_type() == at::kBFloat16);
  kv.value.fill_(1.5);
  CHECK(kv.value.sum().item<float>() == 48.0f);
}
