// The decode-table experiment on a two-socket lab machine: all five configurations run to
// completion with the KV pool and real attention, the table and JSON are complete and
// well-formed, the math is identical under every placement (equal checksums), and the
// placements are what their names say, page by page: with KV bound to each head group's node
// and the worker pinned there every KV page is node-local; bound to the other node, none is.
// Timings under TCG mean nothing and are only checked to be positive. Sizes are tiny.
// lab-topologies: 2s
#include <catch2/catch.hpp>

#include <string>

#include "numarena/ops/decode.hpp"
#include "json_check.hpp"
#include "lab_support.hpp"

namespace numarena {
namespace {

TEST_CASE("the decode table on two sockets: complete, same math, placements as named") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name << ": " << lab.summary);
  decode::DecodeOptions options;
  options.sequences = 2;
  options.prompt_tokens = 40;  // three blocks of 16, the last partial
  options.decode_steps = 3;
  options.layers = 2;
  options.kv_heads = 4;
  options.head_dim = 16;
  auto table = decode::RunDecodeExperiment(options);
  INFO((table.ok() ? std::string("ok") : std::string(table.status().message())));
  REQUIRE(table.ok());

  REQUIRE(table->cpu_nodes == std::vector<int>{0, 1});
  REQUIRE(table->threads == 2);
  REQUIRE(table->notes.empty());  // two nodes: the configurations differ
  REQUIRE(table->configurations.size() == decode::ConfigurationNames().size());
  const double checksum = table->configurations.front().checksum;
  for (std::size_t i = 0; i < table->configurations.size(); ++i) {
    const auto& r = table->configurations[i];
    INFO("configuration " << r.name);
    REQUIRE(r.name == decode::ConfigurationNames()[i]);
    REQUIRE(r.p50_ttft_ms > 0);
    REQUIRE(r.p99_tbt_ms > 0);
    REQUIRE(r.decode_tokens_per_second > 0);
    REQUIRE(r.kv_pages > 0);
    REQUIRE(r.checksum == checksum);
    REQUIRE(std::isfinite(r.checksum));
    REQUIRE(r.worker_nodes.size() == 4);
  }
  auto find = [&](const std::string& name) {
    for (const auto& r : table->configurations) {
      if (r.name == name) return r;
    }
    FAIL("no configuration " << name);
    return decode::ConfigurationResult{};
  };
  // Pinned workers: head group g runs on node g % 2, and its KV is where the name says.
  for (const char* name : {"membind_cpubind", "full"}) {
    auto r = find(name);
    INFO(name);
    for (int g = 0; g < 4; ++g) {
      REQUIRE(r.worker_nodes[g] == g % 2);
      REQUIRE(r.kv_nodes[g] == g % 2);
    }
    REQUIRE(r.kv_local_fraction == 1.0);
  }
  auto wrong = find("wrong_node");
  for (int g = 0; g < 4; ++g) {
    REQUIRE(wrong.worker_nodes[g] == g % 2);
    REQUIRE(wrong.kv_nodes[g] == (g + 1) % 2);
  }
  REQUIRE(wrong.kv_local_fraction == 0.0);
  for (int node : find("membind").kv_nodes) REQUIRE((node == 0 || node == 1));
  for (int node : find("no_binding").kv_nodes) REQUIRE(node == -1);

  const std::string text = decode::RenderDecodeTable(*table);
  for (const std::string& name : decode::ConfigurationNames()) {
    REQUIRE(text.find(name) != std::string::npos);
  }
  REQUIRE(text.find("P50 TTFT (ms)") != std::string::npos);
  auto doc = testing::ParseJson(decode::RenderDecodeJson(*table));
  REQUIRE(doc.has_value());
  REQUIRE(doc->at("schema").string == "numarena.decode/1");
  REQUIRE(doc->at("configurations").array.size() == 5);
  for (const auto& c : doc->at("configurations").array) {
    for (const char* key : {"p50_ttft_ms", "p99_tbt_ms", "decode_tokens_per_second",
                            "kv_local_fraction", "checksum"}) {
      REQUIRE(c.at(key).is_number());
    }
  }
}

}  // namespace
}  // namespace numarena
