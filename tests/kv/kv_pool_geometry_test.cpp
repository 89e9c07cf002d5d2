// KV pool geometry limits: KvPool::Create refuses every geometry or slab size whose byte
// counts overflow (with the field named), and CreateSequence refuses instead of throwing
// when the metadata a geometry needs cannot be allocated.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "numarena/kv_pool.hpp"

// This binary makes allocations fail on purpose (a capped address space): under ASan they
// must return null, as they do without it, instead of stopping the process.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace {

using numarena::KvDType;
using numarena::KvGeometry;
using numarena::KvPool;
using numarena::KvPoolOptions;

// A storage that never hands out memory (the tests must not map terabytes).
class NoMemory final : public numarena::KvStorage {
 public:
  numarena::StatusOr<void*> AllocateSlab(int, std::size_t bytes) override {
    return absl::ResourceExhaustedError("test storage: no memory for " + std::to_string(bytes));
  }
  void FreeSlab(int, void*, std::size_t) override { FAIL("no slab was handed out"); }
};

KvPoolOptions With(KvGeometry g) {
  KvPoolOptions o;
  o.geometry = g;
  o.home_nodes = {0};
  o.storage = std::make_shared<NoMemory>();
  return o;
}

std::string Refusal(const KvPoolOptions& o) {
  auto pool = KvPool::Create(o);
  if (pool.ok()) return "accepted";
  CHECK(pool.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(pool.status().message());
}

}  // namespace

TEST_CASE("geometry: products that overflow are refused, never wrapped") {
  SECTION("head_dim 2^30 x tokens_per_block 2^30 x 4 heads: once a 0-byte block and SIGFPE") {
    const std::string why = Refusal(With({.layers = 1,
                                          .kv_heads = 4,
                                          .head_dim = 1 << 30,
                                          .dtype = KvDType::kFp16,
                                          .tokens_per_block = 1 << 30}));
    CHECK_THAT(why, Catch::Contains("heads_per_group") && Catch::Contains("overflows"));
  }
  SECTION("2.5 GB rows in a block that wrapped to 512 bytes") {
    // 1.25 G fp16 elements per row; heads_per_group x layers_per_block makes the block
    // 2^64 + 512 bytes, which wrapped to 512.
    const std::string why = Refusal(With({.layers = 187106537,
                                          .kv_heads = 60115809,
                                          .head_dim = 1250000000,
                                          .dtype = KvDType::kFp16,
                                          .tokens_per_block = 1,
                                          .layers_per_block = 187106537,
                                          .heads_per_group = 60115809}));
    CHECK_THAT(why, Catch::Contains("layers_per_block 187106537") && Catch::Contains("overflows"));
  }
  SECTION("INT_MAX fp32 elements x INT_MAX tokens") {
    const std::string why = Refusal(With({.layers = 1,
                                          .kv_heads = 1,
                                          .head_dim = INT_MAX,
                                          .dtype = KvDType::kFp32,
                                          .tokens_per_block = INT_MAX}));
    CHECK_THAT(why, Catch::Contains("K and V areas") &&
                        Catch::Contains("use a smaller head_dim or tokens_per_block"));
  }
  SECTION("more blocks per span than an int holds") {
    const std::string why = Refusal(With({.layers = INT_MAX - 1,
                                          .kv_heads = 1 << 16,
                                          .head_dim = 1,
                                          .dtype = KvDType::kFp8,
                                          .tokens_per_block = 1,
                                          .heads_per_group = 1}));
    CHECK_THAT(why, Catch::Contains("blocks per span"));
  }
}

TEST_CASE("geometry: a block just below SIZE_MAX does not round up into a 0-byte slab") {
  // Rows of 3,626,224 fp32 elements (64 x 226,639 bytes), one token per block, 524,287
  // heads per group and 1,212,847 layers per block: the block is 2^64 - 128 bytes, and a
  // slab of it rounded up to a page wrapped to 0.
  const std::string why = Refusal(With({.layers = 1212847,
                                        .kv_heads = 524287,
                                        .head_dim = 3626224,
                                        .dtype = KvDType::kFp32,
                                        .tokens_per_block = 1,
                                        .layers_per_block = 1212847,
                                        .heads_per_group = 524287}));
  CHECK_THAT(why, Catch::Contains("slab_bytes") && Catch::Contains("18446744073709551488") &&
                      Catch::Contains("overflows"));
}

TEST_CASE("geometry: slab_bytes whose block count a slab cannot number is refused") {
  KvPoolOptions o = With({.layers = 1,
                          .kv_heads = 1,
                          .head_dim = 1,
                          .dtype = KvDType::kFp8,
                          .tokens_per_block = 1});  // 128-byte blocks (64-byte K and V)
  o.slab_bytes = SIZE_MAX;
  const std::string why = Refusal(o);
  CHECK_THAT(why, Catch::Contains("slab_bytes 18446744073709551615") &&
                      Catch::Contains("blocks per slab"));
  o.slab_bytes = std::size_t{128} << 32;  // 2^32 blocks: one more than a slot index numbers
  CHECK_THAT(Refusal(o), Catch::Contains("blocks per slab"));
  o.slab_bytes = (std::size_t{128} << 32) - 128;
  CHECK(KvPool::Create(o).ok());
}

TEST_CASE("geometry: node ids the pool cannot index are refused, not allocated for") {
  KvPoolOptions o = With({.layers = 1, .kv_heads = 1, .head_dim = 8, .tokens_per_block = 4});
  o.home_nodes = {INT_MAX};  // once a 8 GiB node table and a bad_alloc out of Create
  CHECK_THAT(Refusal(o),
             Catch::Contains("home node 2147483647") && Catch::Contains("largest node id"));
  o.home_nodes = {0};
  o.cold_tier = numarena::KvColdTier::Node(1 << 20);
  CHECK_THAT(Refusal(o), Catch::Contains("cold tier node 1048576"));
}

TEST_CASE("geometry: metadata the pool would allocate 256 spans at a time is bounded") {
  // INT_MAX fp8 elements x INT_MAX tokens fits every byte count (a block of about 2^63
  // bytes), but 256 spans of token ids are 2 TiB: refused before anything is allocated.
  const std::string why = Refusal(With({.layers = 1,
                                        .kv_heads = 1,
                                        .head_dim = INT_MAX,
                                        .dtype = KvDType::kFp8,
                                        .tokens_per_block = INT_MAX}));
  CHECK_THAT(why, Catch::Contains("bytes of metadata per 256 spans") &&
                      Catch::Contains("2147483647 tokens_per_block"));
  // 128 layers x 128 single-head groups (16,384 blocks per span) is fine.
  CHECK(KvPool::Create(With({.layers = 128,
                             .kv_heads = 128,
                             .head_dim = 128,
                             .dtype = KvDType::kBf16,
                             .tokens_per_block = 16,
                             .heads_per_group = 1}))
            .ok());
}

TEST_CASE("geometry: CreateSequence refuses, never throws, when its metadata cannot be had") {
  // 2^19 tokens per block: 512 MiB of token ids for the first 256 spans. In a child whose
  // address space is capped just above what it uses, that allocation fails; before, the
  // bad_alloc escaped CreateSequence and terminated the process.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto pool = KvPool::Create(With({.layers = 1,
                                     .kv_heads = 1,
                                     .head_dim = 1,
                                     .dtype = KvDType::kFp8,
                                     .tokens_per_block = 1 << 19}));
    if (!pool.ok()) _exit(2);
    long pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    if (pages <= 0) _exit(3);
    const rlim_t cap = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (rlim_t{256} << 20);
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(4);
    const std::int32_t prompt[] = {1, 2, 3};
    auto seq = (*pool)->CreateSequence(prompt);
    if (seq.status().code() != absl::StatusCode::kResourceExhausted) _exit(5);
    if (std::string(seq.status().message()).find("no heap for the metadata") == std::string::npos)
      _exit(6);
    if ((*pool)->Stats().sequences != 0) _exit(7);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO("exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ", signal "
               << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("geometry: a prompt whose span list the heap cannot hold is refused up front") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped under ASan: its operator new does not throw bad_alloc");
  return;
#else
  // 16 Mi tokens at one token per block: a list of 16 Mi span ids (64 MiB). In a child whose
  // address space is capped 16 MiB above what it uses (the prompt included), the list cannot
  // grow; before, its bad_alloc escaped CreateSequence with spans already taken.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto pool =
        KvPool::Create(With({.layers = 1, .kv_heads = 1, .head_dim = 1, .tokens_per_block = 1}));
    if (!pool.ok()) _exit(2);
    const std::vector<std::int32_t> prompt(std::size_t{16} << 20, 7);
    long pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    if (pages <= 0) _exit(3);
    const rlim_t cap = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (rlim_t{16} << 20);
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(4);
    auto seq = (*pool)->CreateSequence(prompt);
    if (seq.status().code() != absl::StatusCode::kResourceExhausted) _exit(5);
    if (std::string(seq.status().message()).find("no heap for a list of 16777216 spans") ==
        std::string::npos)
      _exit(6);
    const numarena::KvPoolStats stats = (*pool)->Stats();
    if (stats.sequences != 0 || stats.spans_in_use != 0) _exit(7);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO("exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ", signal "
               << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
#endif
}
