// The decode-table experiment on this machine with tiny sizes: every configuration runs,
// the attention math gives the same checksum under every placement, the one-node note is
// there when the machine has one node, the renderers are complete, and bad options are
// refused naming the option.
#include "numarena/ops/decode.hpp"

#include <catch2/catch.hpp>

#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "json_check.hpp"
#include "numarena/topology.hpp"

namespace {

numarena::decode::DecodeOptions Tiny() {
  numarena::decode::DecodeOptions options;
  options.sequences = 2;
  options.prompt_tokens = 20;
  options.decode_steps = 3;
  options.layers = 2;
  options.kv_heads = 2;
  options.head_dim = 8;
  return options;
}

TEST_CASE("decode experiment: five configurations, same math, complete output", "[decode]") {
  auto table = numarena::decode::RunDecodeExperiment(Tiny());
  INFO((table.ok() ? std::string("ok") : std::string(table.status().message())));
  REQUIRE(table.ok());
  REQUIRE(table->configurations.size() == 5);
  REQUIRE(table->kv_bytes_per_token == 2u * 2 * 8 * 4 * 2);
  for (const auto& r : table->configurations) {
    INFO(r.name);
    REQUIRE(r.p50_ttft_ms > 0);
    REQUIRE(r.p99_tbt_ms > 0);
    REQUIRE(r.decode_tokens_per_second > 0);
    REQUIRE(r.kv_pages > 0);
    REQUIRE(std::isfinite(r.checksum));
    REQUIRE(r.checksum == table->configurations[0].checksum);
    REQUIRE(r.kv_local_fraction >= 0);
    REQUIRE(r.kv_local_fraction <= 1);
  }
  auto topology = numarena::Topology::system();
  REQUIRE(topology.ok());
  if (table->cpu_nodes.size() == 1) {
    REQUIRE(table->notes.size() == 1);
    REQUIRE(table->notes[0].find("one NUMA node") == 0);
    for (const auto& r : table->configurations) REQUIRE(r.kv_local_fraction == 1.0);
  }
  const std::string text = numarena::decode::RenderDecodeTable(*table);
  REQUIRE(text.find("membind_cpubind") != std::string::npos);
  auto doc = numarena::testing::ParseJson(numarena::decode::RenderDecodeJson(*table));
  REQUIRE(doc.has_value());
  REQUIRE(doc->at("configurations").array.size() == 5);
}

TEST_CASE("decode experiment: a chosen subset runs in the order given", "[decode]") {
  auto options = Tiny();
  options.configurations = {"full", "no_binding"};
  auto table = numarena::decode::RunDecodeExperiment(options);
  REQUIRE(table.ok());
  REQUIRE(table->configurations.size() == 2);
  REQUIRE(table->configurations[0].name == "full");
  REQUIRE(table->configurations[1].name == "no_binding");
}

TEST_CASE("decode experiment: bad options are refused naming the option", "[decode]") {
  auto options = Tiny();
  options.prompt_tokens = 0;
  auto refused = numarena::decode::RunDecodeExperiment(options);
  REQUIRE(refused.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(refused.status().message()).find("prompt_tokens is 0") != std::string::npos);
  options = Tiny();
  options.threads = numarena::decode::kMaxDecodeThreads + 1;
  refused = numarena::decode::RunDecodeExperiment(options);
  REQUIRE(refused.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(refused.status().message()).find("threads is 1025; use 1 to 1024") !=
          std::string::npos);
  options = Tiny();
  options.configurations = {"turbo"};
  refused = numarena::decode::RunDecodeExperiment(options);
  REQUIRE(refused.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(refused.status().message()).find("unknown configuration 'turbo'") !=
          std::string::npos);
}

TEST_CASE("decode experiment: sizes beyond free memory are refused before the run", "[decode]") {
  auto options = Tiny();
  options.sequences = 100000;
  options.prompt_tokens = 100000;  // 100000 x 100016 tokens x 2 x 2 x 8 x 8 bytes: 2.3 TiB
  auto refused = numarena::decode::RunDecodeExperiment(options);
  REQUIRE(refused.status().code() == absl::StatusCode::kResourceExhausted);
  const std::string message(refused.status().message());
  INFO(message);
  CHECK(message.find("the run needs ") == 0);
  CHECK(message.find("(KV cache 2.3 TiB, worker scratch ") != std::string::npos);
  CHECK(message.find(" free on CPU node(s) ") != std::string::npos);

  // Every count at INT_MAX with a real model shape: the product does not fit in 64 bits, and
  // is not wrapped.
  options.sequences = options.prompt_tokens = options.decode_steps = INT_MAX;
  refused = numarena::decode::RunDecodeExperiment(options);
  REQUIRE(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(refused.status().message()).find("the run would need more than 16 EiB") == 0);
}

TEST_CASE("decode experiment: the JSON carries any text and non-finite figures validly",
          "[decode]") {
  numarena::decode::DecodeTable t;
  t.timestamp_utc = "2025-01-31T12:00:00Z";
  t.cpu_nodes = {0};
  t.notes = {"newline\nand \"quotes\", control \x01, bad UTF-8 \x80\xe2\x82"};
  numarena::decode::ConfigurationResult r;
  r.name = "full";
  r.description = "back\\slash";
  r.p50_ttft_ms = std::nan("");
  r.checksum = -INFINITY;
  r.kv_nodes = {0, -1};
  t.configurations.push_back(r);
  const std::string json = numarena::decode::RenderDecodeJson(t);
  INFO(json);
  auto doc = numarena::testing::ParseJson(json);
  REQUIRE(doc.has_value());
  REQUIRE(doc->at("notes").array.at(0).string ==
          "newline\nand \"quotes\", control \x01, bad UTF-8 \xEF\xBF\xBD\xEF\xBF\xBD");
  const auto& c = doc->at("configurations").array.at(0);
  REQUIRE(c.at("description").string == "back\\slash");
  REQUIRE(c.at("p50_ttft_ms").kind == numarena::testing::JsonValue::Kind::kNull);
  REQUIRE(c.at("checksum").kind == numarena::testing::JsonValue::Kind::kNull);
  REQUIRE(c.at("kv_nodes").array.at(1).number == -1);
}

TEST_CASE("decode experiment: a model shape whose KV bytes per token overflow is refused",
          "[decode]") {
  auto options = Tiny();
  options.layers = 1 << 30;
  options.kv_heads = 1 << 30;
  options.head_dim = 1 << 30;
  auto refused = numarena::decode::RunDecodeExperiment(options);
  REQUIRE(refused.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(refused.status().message()).find("does not fit in 64 bits") !=
          std::string::npos);
}

}  // namespace

TEST_CASE("decode experiment: progress before each prefill and decode step, then at the end",
          "[decode]") {
  auto options = Tiny();
  options.configurations = {"full", "no_binding"};
  std::vector<std::string> events;
  options.progress = [&events](const numarena::decode::DecodeProgress& p) {
    events.push_back(p.configuration + " " + p.phase + " " + std::to_string(p.step) + "/" +
                     std::to_string(p.steps) + " " + std::to_string(p.done) + "/" +
                     std::to_string(p.total));
  };
  auto table = numarena::decode::RunDecodeExperiment(options);
  REQUIRE(table.ok());
  CHECK(events == std::vector<std::string>{
                      "full prefill 0/3 0/2", "full decode 0/3 0/2", "full decode 1/3 0/2",
                      "full decode 2/3 0/2", "no_binding prefill 0/3 1/2",
                      "no_binding decode 0/3 1/2", "no_binding decode 1/3 1/2",
                      "no_binding decode 2/3 1/2", "  0/3 2/2"});
}
