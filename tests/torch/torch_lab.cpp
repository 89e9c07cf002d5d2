// numarena::torch in the NUMA lab: where libtorch tensors' pages really are, by the kernel's
// answer (move_pages through numarena::page_node_list), against what QEMU was given.
//
// In 2s and cxl (cxl's two sockets as in 2s, plus a memory-only slow node):
//   - a tensor made in a Scope for bind(1) by a thread on node 0's CPU (its storage written
//     there, and an operator's output too) has every page on node 1; Use() does the same
//     for another thread; "weights" made under interleave over every node have an equal
//     share of pages on each node;
//   - KV-pool blocks viewed as tensors (torch_kv.hpp): after demotion every page of the
//     views is on the memory-only (slow) node and they read back what was written; after
//     promotion they are back on the head group's home node (cxl: 2s has no slow node).
// libtorch_cpu and the 300-odd libraries it loads (about 470 MB) are not copied into the VM:
// the VM sees the host's /usr read-only (run.sh --share), so the nodes keep their usual size.
// lab-topologies: 2s cxl
// lab-share: /usr
// lab-timeout: 600 libtorch's start-up under TCG
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lab_support.hpp"
#include "numarena/kv_pool.hpp"
#include "numarena/numarena.h"
#include "numarena/page_nodes.hpp"
#include "numarena/torch.hpp"
#include "numarena/torch_kv.hpp"

namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

std::vector<int> PagesOf(const at::Tensor& t) {
  auto pages = numarena::page_node_list(t.data_ptr(), t.nbytes());
  INFO((pages.ok() ? std::string("ok") : std::string(pages.status().message())));
  REQUIRE(pages.ok());
  return *pages;
}

void RequireAllOn(const at::Tensor& t, int node, const char* what) {
  const std::vector<int> pages = PagesOf(t);
  INFO(what << ": " << numarena::lab::SummarizePageNodes(pages));
  REQUIRE(!pages.empty());
  for (int page_node : pages) REQUIRE(page_node == node);
}

numarena_arena* ArenaFor(const std::string& policy) {
  numarena_arena* arena = numarena_arena_for_policy(policy.c_str());
  INFO(policy << ": " << numarena_last_error_message());
  REQUIRE(arena != nullptr);
  return arena;
}

const std::vector<int>& CpusOf(int node) {
  const auto& lab = numarena::lab::Expected();
  for (const auto& n : lab.nodes)
    if (n.id == node) return n.cpus;
  throw std::runtime_error("no node " + std::to_string(node));
}

}  // namespace

TEST_CASE("lab torch: a tensor made under bind(1) from a CPU of node 0 is on node 1") {
  numarena::lab::PinnedTo on_node0(CpusOf(0));
  at::Tensor weights, product;
  {
    numarena::torch::Scope scope(ArenaFor("bind(1)"));
    weights = at::randn({1024, 256});        // 1 MiB, written by this node-0 thread
    product = at::mm(weights, weights.narrow(0, 0, 256));  // an operator's output, 1 MiB
  }
  RequireAllOn(weights, 1, "randn under bind(1)");
  RequireAllOn(product, 1, "mm output under bind(1)");
  // Outside the scope the thread's tensors are libtorch's (where first touch puts them: not
  // checked, node 0 holds most of the VM's initramfs).
  at::Tensor plain = at::empty({kMiB}, at::kByte).fill_(1);
  CHECK(numarena_owns(plain.data_ptr()) == 0);
}

TEST_CASE("lab torch: Use() places another thread's tensors") {
  numarena::torch::Use(ArenaFor("bind(0)"));
  at::Tensor made;
  std::thread([&] {
    numarena::lab::PinnedTo on_node1(CpusOf(1));
    made = at::empty({2 * kMiB}, at::kByte).fill_(3);
  }).join();
  numarena::torch::Use(nullptr);
  RequireAllOn(made, 0, "a node-1 thread's tensor under Use(bind(0))");
}

TEST_CASE("lab torch: weights made under interleave spread over every node") {
  const auto& lab = numarena::lab::Expected();
  std::string policy = "interleave(";
  for (std::size_t i = 0; i < lab.nodes.size(); ++i) {
    policy += (i == 0 ? "" : ",") + std::to_string(lab.nodes[i].id);
  }
  policy += ")";
  std::vector<at::Tensor> layers;
  {
    numarena::torch::Scope scope(ArenaFor(policy));
    for (int i = 0; i < 4; ++i) layers.push_back(at::empty({512, 1024}).fill_(i));  // 2 MiB each
  }
  std::map<int, std::size_t> per_node;
  std::size_t total = 0;
  for (const at::Tensor& layer : layers) {
    for (int node : PagesOf(layer)) {
      ++per_node[node];
      ++total;
    }
  }
  INFO(policy);
  for (const auto& [node, pages] : per_node) {
    INFO("node " << node << ": " << pages << " of " << total << " pages");
    CHECK(node >= 0);  // every page resident
  }
  for (const auto& n : lab.nodes) {
    INFO("node " << n.id << ": " << per_node[n.id] << " of " << total << " pages");
    // Page interleave: an equal share per node, give or take a little.
    CHECK(per_node[n.id] * lab.nodes.size() * 10 >= total * 8);
  }
}

TEST_CASE("lab torch: KV block tensors of cold blocks are on the slow node") {
  const auto& lab = numarena::lab::Expected();
  int memory_only = -1;
  for (const auto& n : lab.nodes)
    if (n.memory_only()) memory_only = n.id;
  if (memory_only < 0) {
    WARN("no memory-only (slow) node in " << lab.name << ": the cold tier is checked in cxl");
    return;
  }
  numarena::KvPoolOptions o;
  o.geometry = {.layers = 1, .kv_heads = 4, .head_dim = 128,
                .dtype = numarena::KvDType::kFp16, .tokens_per_block = 16,
                .layers_per_block = 1, .heads_per_group = 2};
  o.cold_tier = numarena::KvColdTier::Farthest();
  o.promote_on_touch = false;
  auto pool = numarena::KvPool::Create(o);
  INFO((pool.ok() ? std::string("ok") : std::string(pool.status().message())));
  REQUIRE(pool.ok());
  REQUIRE((*pool)->cold_nodes() == std::vector<int>{memory_only});
  auto seq = (*pool)->CreateSequence(std::vector<std::int32_t>(32, 5));
  REQUIRE(seq.ok());
  std::vector<std::pair<numarena::KvBlockId, int>> blocks;  // id, home node
  for (int group = 0; group < (*pool)->head_groups(); ++group) {
    std::vector<numarena::KvBlockId> ids;
    REQUIRE((*pool)->Blocks(*seq, 0, group, &ids).ok());
    for (numarena::KvBlockId id : ids) blocks.emplace_back(id, (*pool)->group_node(group));
  }
  const auto expected = [](std::size_t i) {
    return at::arange(16 * 2 * 128, at::kFloat).reshape({16, 2, 128}).add(double(i)).to(at::kHalf);
  };
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto kv = numarena::torch::BlockTensors(**pool, blocks[i].first);
    REQUIRE(kv.ok());
    kv->key.copy_(expected(i));
    kv->value.copy_(expected(i).neg());
    RequireAllOn(kv->key, blocks[i].second, "a hot block's K view");
  }
  for (const auto& [id, home] : blocks) REQUIRE((*pool)->DemoteBlock(id).ok());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto kv = numarena::torch::BlockTensors(**pool, blocks[i].first);
    REQUIRE(kv.ok());
    RequireAllOn(kv->key, memory_only, "a cold block's K view");
    RequireAllOn(kv->value, memory_only, "a cold block's V view");
    CHECK(kv->key.equal(expected(i)));
    CHECK(kv->value.equal(expected(i).neg()));
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    REQUIRE((*pool)->PromoteBlock(blocks[i].first).ok());
    auto kv = numarena::torch::BlockTensors(**pool, blocks[i].first);
    REQUIRE(kv.ok());
    RequireAllOn(kv->key, blocks[i].second, "a promoted block's K view");
    CHECK(kv->key.equal(expected(i)));
    CHECK(kv->value.equal(expected(i).neg()));
  }
  REQUIRE((*pool)->FreeSequence(*seq).ok());
}
