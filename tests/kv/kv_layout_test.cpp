// KV block layout (lib/kv/kv_layout.hpp) on its own: derived sizes, offsets that tile a
// block exactly, head groups from the home node count, every refused geometry, and size
// arithmetic that would overflow (refused with the field named, never wrapped).
#include "kv/kv_layout.hpp"

#include <catch2/catch.hpp>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using numarena::KvDType;
using numarena::KvGeometry;
using numarena::kv::MakeLayout;

KvGeometry Small() {
  return {.layers = 4,
          .kv_heads = 4,
          .head_dim = 8,
          .dtype = KvDType::kFp32,
          .tokens_per_block = 4,
          .layers_per_block = 2,
          .heads_per_group = 2};
}

std::string Message(const numarena::Status& s) { return std::string(s.message()); }

}  // namespace

TEST_CASE("layout: block size, alignment and offsets") {
  KvGeometry g{.layers = 32,
               .kv_heads = 8,
               .head_dim = 128,
               .dtype = KvDType::kBf16,
               .tokens_per_block = 16};
  auto layout = MakeLayout(g, 4);
  REQUIRE(layout.ok());
  CHECK(layout->head_groups == 4);  // 8 heads over 4 home nodes
  CHECK(layout->geometry.heads_per_group == 2);
  CHECK(layout->blocks_per_span == 32 * 4);
  CHECK(layout->row_bytes == 256);
  CHECK(layout->block_bytes == 2 * 2 * 16 * 256);  // heads x (K+V) x tokens x row
  CHECK(layout->span_bytes == layout->block_bytes * 32 * 4);
  CHECK(layout->ValueOffset(0, 1, 0) == layout->KeyOffset(0, 1, 0) + 16 * 256);

  g.head_dim = 3;  // 16 x 3 x 1 = 48 bytes: areas pad to 64
  g.dtype = KvDType::kFp8;
  layout = MakeLayout(g, 3);  // 8 heads do not split over 3 nodes: 1 per group
  REQUIRE(layout.ok());
  CHECK(layout->head_groups == 8);
  CHECK(layout->area_bytes == 64);
  CHECK(layout->block_bytes % 64 == 0);
}

TEST_CASE("layout: the rows of a block tile it without overlap, K before V of each head") {
  for (KvDType dtype : {KvDType::kFp32, KvDType::kFp16, KvDType::kBf16, KvDType::kFp8}) {
    KvGeometry g = Small();
    g.dtype = dtype;
    g.head_dim = 5;  // rows that do not fill 64-byte areas: padding between areas
    auto layout = MakeLayout(g, 1);
    REQUIRE(layout.ok());
    const std::size_t row = layout->row_bytes;
    CHECK(row == 5 * numarena::KvDTypeBytes(dtype));
    std::vector<int> owner(layout->block_bytes, -1);  // which row covers each byte
    int rows = 0;
    for (int l = 0; l < g.layers_per_block; ++l) {
      for (int h = 0; h < g.heads_per_group; ++h) {
        CHECK(layout->KeyOffset(l, h, 0) % numarena::kv::kBlockAlignment == 0);
        CHECK(layout->ValueOffset(l, h, 0) % numarena::kv::kBlockAlignment == 0);
        CHECK(layout->ValueOffset(l, h, 0) == layout->KeyOffset(l, h, 0) + layout->area_bytes);
        for (int t = 0; t < g.tokens_per_block; ++t) {
          for (std::size_t start : {layout->KeyOffset(l, h, t), layout->ValueOffset(l, h, t)}) {
            REQUIRE(start + row <= layout->block_bytes);
            for (std::size_t i = start; i < start + row; ++i) {
              CHECK(owner[i] == -1);
              owner[i] = rows;
            }
            ++rows;
          }
        }
      }
    }
    CHECK(rows == 2 * g.layers_per_block * g.heads_per_group * g.tokens_per_block);
    CHECK(layout->block_bytes % numarena::kv::kBlockAlignment == 0);
  }
}

TEST_CASE("layout: block index, layer range and group round-trip") {
  auto layout = MakeLayout(Small(), 1);
  REQUIRE(layout.ok());
  CHECK(layout->layer_ranges == 2);
  CHECK(layout->head_groups == 2);
  REQUIRE(layout->blocks_per_span == 4);
  std::vector<bool> used(4, false);
  for (int r = 0; r < layout->layer_ranges; ++r) {
    for (int g = 0; g < layout->head_groups; ++g) {
      const int index = layout->BlockIndex(r, g);
      REQUIRE(index >= 0);
      REQUIRE(index < layout->blocks_per_span);
      CHECK_FALSE(used[index]);
      used[index] = true;
      CHECK(layout->LayerRangeOf(index) == r);
      CHECK(layout->GroupOf(index) == g);
    }
  }
}

TEST_CASE("layout: heads_per_group 0 spreads the heads over the home nodes") {
  KvGeometry g = Small();
  g.kv_heads = 8;
  g.heads_per_group = 0;
  auto two = MakeLayout(g, 2);
  REQUIRE(two.ok());
  CHECK(two->geometry.heads_per_group == 4);
  CHECK(two->head_groups == 2);
  auto three = MakeLayout(g, 3);  // does not divide: one head per group
  REQUIRE(three.ok());
  CHECK(three->geometry.heads_per_group == 1);
  CHECK(three->head_groups == 8);
  auto none = MakeLayout(g, 0);  // no home node count: as one node
  REQUIRE(none.ok());
  CHECK(none->geometry.heads_per_group == 8);
  CHECK(none->head_groups == 1);
}

TEST_CASE("layout: every refused geometry names its field") {
  struct Case {
    const char* what;
    void (*edit)(KvGeometry&);
    const char* says;
  };
  const Case cases[] = {
      {"no layers", [](KvGeometry& g) { g.layers = 0; }, "layers is 0"},
      {"negative layers", [](KvGeometry& g) { g.layers = -3; }, "layers is -3"},
      {"no heads", [](KvGeometry& g) { g.kv_heads = 0; }, "kv_heads is 0"},
      {"no head_dim", [](KvGeometry& g) { g.head_dim = 0; }, "head_dim is 0"},
      {"no tokens", [](KvGeometry& g) { g.tokens_per_block = -1; }, "tokens_per_block is -1"},
      {"no layer range", [](KvGeometry& g) { g.layers_per_block = 0; }, "layers_per_block is 0"},
      {"unknown dtype", [](KvGeometry& g) { g.dtype = static_cast<KvDType>(9); }, "dtype"},
      {"range does not divide", [](KvGeometry& g) { g.layers_per_block = 3; },
       "layers_per_block 3 does not divide layers 4"},
      {"negative group", [](KvGeometry& g) { g.heads_per_group = -2; }, "heads_per_group is -2"},
      {"group does not divide", [](KvGeometry& g) { g.heads_per_group = 3; },
       "heads_per_group 3 does not divide kv_heads 4"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    KvGeometry g = Small();
    c.edit(g);
    auto layout = MakeLayout(g, 1);
    REQUIRE(layout.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(layout.status()), Catch::Contains(c.says));
  }
}

TEST_CASE("layout: sizes that overflow are refused with the field named") {
  SECTION("head_dim 2^30 x tokens_per_block 2^30 (once a block of 0 bytes and a SIGFPE)") {
    KvGeometry g{.layers = 1,
                 .kv_heads = 4,
                 .head_dim = 1 << 30,
                 .dtype = KvDType::kFp16,
                 .tokens_per_block = 1 << 30};
    auto layout = MakeLayout(g, 1);
    REQUIRE(layout.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(layout.status()),
               Catch::Contains("heads_per_group") && Catch::Contains("overflow"));
  }
  SECTION("a product that wraps to a small block") {
    // 2^31-1 fp32 elements x 2^31-1 tokens: the area alone is about 2^64.
    KvGeometry g{.layers = 1,
                 .kv_heads = 1,
                 .head_dim = INT_MAX,
                 .dtype = KvDType::kFp32,
                 .tokens_per_block = INT_MAX};
    auto layout = MakeLayout(g, 1);
    REQUIRE(layout.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(layout.status()),
               Catch::Contains("head_dim") && Catch::Contains("tokens_per_block"));
  }
  SECTION("layers_per_block multiplies a large layer stride") {
    // A layer of 2^43 bytes (2^22-byte rows x 2^20 tokens x K and V) x 2^21 layers.
    KvGeometry g{.layers = 1 << 21,
                 .kv_heads = 1,
                 .head_dim = 1 << 20,
                 .dtype = KvDType::kFp32,
                 .tokens_per_block = 1 << 20,
                 .layers_per_block = 1 << 21};
    auto layout = MakeLayout(g, 1);
    REQUIRE(layout.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(layout.status()), Catch::Contains("layers_per_block"));
  }
  SECTION("blocks per span overflow an int") {
    // INT_MAX-1 layer ranges x 2^16 head groups.
    KvGeometry g{.layers = INT_MAX - 1,
                 .kv_heads = 1 << 16,
                 .head_dim = 1,
                 .dtype = KvDType::kFp8,
                 .tokens_per_block = 1,
                 .layers_per_block = 1,
                 .heads_per_group = 1};
    auto layout = MakeLayout(g, 1);
    REQUIRE(layout.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(layout.status()), Catch::Contains("blocks per span"));
  }
  SECTION("a span of blocks larger than memory can address") {
    // Each block is 2^40 bytes; 2^24 blocks per span is 2^64.
    KvGeometry g{.layers = 1 << 12,
                 .kv_heads = 1 << 12,
                 .head_dim = 1 << 20,
                 .dtype = KvDType::kFp8,
                 .tokens_per_block = 1 << 19,
                 .layers_per_block = 1,
                 .heads_per_group = 1};
    auto layout = MakeLayout(g, 1);
    REQUIRE(layout.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(layout.status()), Catch::Contains("span"));
  }
  SECTION("the largest geometry that fits is accepted with exact sizes") {
    // 2^31-1 fp8 elements x 2^31-1 tokens: about 2^62 per area, 2^63 per block.
    KvGeometry g{.layers = 1,
                 .kv_heads = 1,
                 .head_dim = INT_MAX,
                 .dtype = KvDType::kFp8,
                 .tokens_per_block = INT_MAX};
    auto layout = MakeLayout(g, 1);
    REQUIRE(layout.ok());
    const std::size_t area = std::size_t{INT_MAX} * INT_MAX;
    CHECK(layout->area_bytes == (area + 63) / 64 * 64);
    CHECK(layout->block_bytes == 2 * layout->area_bytes);
    CHECK(layout->span_bytes == layout->block_bytes);
  }
}

TEST_CASE("layout: dtype sizes and names") {
  CHECK(numarena::KvDTypeBytes(KvDType::kFp32) == 4);
  CHECK(numarena::KvDTypeBytes(KvDType::kFp16) == 2);
  CHECK(numarena::KvDTypeBytes(KvDType::kBf16) == 2);
  CHECK(numarena::KvDTypeBytes(KvDType::kFp8) == 1);
  CHECK(numarena::KvDTypeBytes(static_cast<KvDType>(9)) == 0);
  CHECK(std::string(numarena::KvDTypeName(KvDType::kBf16)) == "bf16");
  CHECK(std::string(numarena::KvDTypeName(static_cast<KvDType>(9))) == "unknown");
}
