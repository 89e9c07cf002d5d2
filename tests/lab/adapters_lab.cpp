// lab-topologies: 2s snc4
//
// The adapters place memory where their policy says, page by page, on a real multi-node
// kernel: a numarena::vector, a std::pmr container on a node resource, and a TensorBuffer,
// once per node of the topology; and a vector that grows (reallocates) stays on its node.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory_resource>
#include <vector>

#include "lab_support.hpp"
#include "numarena/allocator.hpp"
#include "numarena/memory_resource.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/tensor_buffer.hpp"

namespace {

// Every page of [p, p+bytes) is resident on `node`.
void RequireAllPagesOn(const void* p, std::size_t bytes, int node, const char* what) {
  auto pages = numarena::page_node_list(p, bytes);
  REQUIRE(pages.ok());
  INFO(what << " on node " << node << ": " << numarena::lab::SummarizePageNodes(*pages));
  for (std::size_t i = 0; i < pages->size(); ++i) {
    INFO("page " << i);
    REQUIRE((*pages)[i] == node);
  }
}

}  // namespace

TEST_CASE("adapters: vector pages are on the policy's node, also after growing", "[lab]") {
  for (const auto& node : numarena::lab::Expected().nodes) {
    numarena::vector<float> v{numarena::allocator<float>(numarena::Policy::Bind(node.id))};
    const float* last_storage = nullptr;
    int reallocations = 0;
    for (int i = 0; i < (1 << 20); ++i) {
      v.push_back(static_cast<float>(i));
      if (v.data() != last_storage) {
        last_storage = v.data();
        ++reallocations;
        RequireAllPagesOn(v.data(), v.size() * sizeof(float), node.id, "vector while growing");
      }
    }
    CHECK(reallocations > 10);
    RequireAllPagesOn(v.data(), v.size() * sizeof(float), node.id, "grown vector");
  }
}

TEST_CASE("adapters: pmr containers on a node resource", "[lab]") {
  for (const auto& node : numarena::lab::Expected().nodes) {
    auto resource = numarena::node_resource(node.id);
    REQUIRE(resource.ok());
    std::pmr::unsynchronized_pool_resource pool(*resource);
    std::pmr::vector<double> direct(*resource);
    std::pmr::vector<int> pooled(&pool);
    direct.resize(1 << 18, 1.0);  // 2 MiB
    pooled.resize(1 << 16, 7);    // through the pool
    RequireAllPagesOn(direct.data(), direct.size() * sizeof(double), node.id, "pmr vector");
    RequireAllPagesOn(pooled.data(), pooled.size() * sizeof(int), node.id, "pooled vector");
  }
}

TEST_CASE("adapters: tensor buffers on each node", "[lab]") {
  for (const auto& node : numarena::lab::Expected().nodes) {
    for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{16} << 20}) {
      auto buffer = numarena::TensorBuffer::OnNode(bytes, node.id);
      REQUIRE(buffer.ok());
      CHECK(buffer->node() == node.id);
      std::memset(buffer->data(), 0x5a, buffer->size());
      RequireAllPagesOn(buffer->data(), buffer->size(), node.id, "tensor buffer");
    }
  }
}
