// `numarena topo` as a user runs it: the built binary (NUMARENA_CLI) on the fixture trees
// (NUMARENA_FIXTURES). The --json output is parsed by a small strict JSON reader below, so
// the tests also prove the output is valid JSON.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "cli_run.hpp"

namespace {

using Run = numarena::testing::CliRun;
using numarena::testing::RunCli;

std::string Fixture(const std::string& name) { return std::string(NUMARENA_FIXTURES) + "/" + name; }

// ---- a strict, minimal JSON reader (objects, arrays, strings, integers, literals) -----

struct Json;
using JsonObject = std::map<std::string, Json>;
using JsonArray = std::vector<Json>;
struct Json {
  std::variant<std::nullptr_t, bool, long long, std::string, JsonArray, JsonObject, double> value;

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(value); }
  bool boolean() const { return std::get<bool>(value); }
  long long integer() const { return std::get<long long>(value); }
  double real() const {
    return std::holds_alternative<double>(value) ? std::get<double>(value)
                                                 : static_cast<double>(integer());
  }
  const std::string& string() const { return std::get<std::string>(value); }
  const JsonArray& array() const { return std::get<JsonArray>(value); }
  const JsonObject& object() const { return std::get<JsonObject>(value); }
  const Json& operator[](const std::string& key) const {
    auto it = object().find(key);
    if (it == object().end()) throw std::runtime_error("no member " + key);
    return it->second;
  }
  const Json& operator[](std::size_t i) const { return array().at(i); }
  std::vector<long long> integers() const {
    std::vector<long long> out;
    for (const Json& j : array()) out.push_back(j.integer());
    return out;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  Json ReadDocument() {
    Json j = ReadValue();
    SkipSpace();
    if (i_ != s_.size()) Fail("trailing characters");
    return j;
  }

 private:
  [[noreturn]] void Fail(const std::string& why) {
    throw std::runtime_error("JSON: " + why + " at offset " + std::to_string(i_));
  }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  void Expect(char c) {
    SkipSpace();
    if (i_ >= s_.size() || s_[i_] != c) Fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool Peek(char c) {
    SkipSpace();
    return i_ < s_.size() && s_[i_] == c;
  }
  Json ReadValue() {
    SkipSpace();
    if (i_ >= s_.size()) Fail("unexpected end");
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      JsonObject object;
      if (Peek('}')) {
        ++i_;
        return Json{object};
      }
      do {
        SkipSpace();
        std::string key = ReadString();
        Expect(':');
        if (!object.emplace(key, ReadValue()).second) Fail("duplicate key " + key);
      } while (Peek(',') && ++i_);
      Expect('}');
      return Json{object};
    }
    if (c == '[') {
      ++i_;
      JsonArray array;
      if (Peek(']')) {
        ++i_;
        return Json{array};
      }
      do {
        array.push_back(ReadValue());
      } while (Peek(',') && ++i_);
      Expect(']');
      return Json{array};
    }
    if (c == '"') return Json{ReadString()};
    for (auto [word, value] : {std::pair{"null", Json{nullptr}}, std::pair{"true", Json{true}},
                               std::pair{"false", Json{false}}}) {
      std::string w(word);
      if (s_.compare(i_, w.size(), w) == 0) {
        i_ += w.size();
        return value;
      }
    }
    std::size_t start = i_;
    if (s_[i_] == '-') ++i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    if (i_ == start || (i_ == start + 1 && s_[start] == '-')) Fail("unexpected character");
    bool fraction = false;
    if (i_ < s_.size() && s_[i_] == '.') {
      fraction = true;
      ++i_;
      std::size_t digits = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == digits) Fail("digits expected after '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      fraction = true;
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      std::size_t digits = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == digits) Fail("digits expected in exponent");
    }
    if (fraction) return Json{std::stod(s_.substr(start, i_ - start))};
    return Json{std::stoll(s_.substr(start, i_ - start))};
  }
  std::string ReadString() {
    if (i_ >= s_.size() || s_[i_] != '"') Fail("expected a string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) Fail("raw control character in string");
      if (c == '\\') {
        if (i_ >= s_.size()) Fail("bad escape");
        char e = s_[i_++];
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case '"':
          case '\\':
          case '/':
            out += e;
            break;
          case 'u':
            if (i_ + 4 > s_.size()) Fail("bad \\u escape");
            out += static_cast<char>(std::stoi(s_.substr(i_, 4), nullptr, 16));
            i_ += 4;
            break;
          default:
            Fail("bad escape");
        }
      } else {
        out += c;
      }
    }
    if (i_ >= s_.size()) Fail("unterminated string");
    ++i_;
    return out;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

Json ParseJson(const std::string& text) { return JsonReader(text).ReadDocument(); }

bool AnyContains(const Json& strings, const std::string& needle) {
  for (const Json& s : strings.array()) {
    if (s.string().find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("topo --json on the seed machine: 4 nodes, 10/12/32, the GPU on node 0") {
  Run run = RunCli("topo --json --sysfs-root '" + Fixture("epyc9654-snc4") + "/sys'");
  REQUIRE(run.exit_code == 0);
  CHECK(run.err.empty());
  Json j = ParseJson(run.out);
  CHECK(j["schema"].string() == "numarena.topo/1");
  CHECK(j["source"]["procfs_root"].string() == Fixture("epyc9654-snc4") + "/proc");

  const JsonArray& nodes = j["nodes"].array();
  REQUIRE(nodes.size() == 4);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    CHECK(nodes[i]["id"].integer() == static_cast<long long>(i));
    CHECK(nodes[i]["cpus"].array().size() == 96);
    CHECK(nodes[i]["mem_total_bytes"].integer() == 196608LL << 20);
    CHECK(nodes[i]["access"].is_null());
  }
  CHECK(nodes[0]["cpus"][48].integer() == 96);  // 0-47 then 96-143

  const std::vector<std::vector<long long>> matrix = {
      {10, 12, 32, 32}, {12, 10, 32, 32}, {32, 32, 10, 12}, {32, 32, 12, 10}};
  REQUIRE(j["distances"].array().size() == 4);
  for (std::size_t row = 0; row < 4; ++row) CHECK(j["distances"][row].integers() == matrix[row]);

  const JsonArray& devices = j["devices"].array();
  REQUIRE(devices.size() == 2);
  const Json& gpu = devices[0];
  CHECK(gpu["bus_id"].string() == "0000:41:00.0");
  CHECK(gpu["kind"].string() == "gpu");
  CHECK(gpu["vendor"].string() == "0x10de");
  CHECK(gpu["class"].string() == "0x030200");
  CHECK(gpu["vendor_name"].string() == "NVIDIA");
  CHECK(gpu["node"].integer() == 0);
  CHECK(devices[1]["kind"].string() == "infiniband");
  CHECK(devices[1]["node"].integer() == 2);

  CHECK(j["process"]["allowed_cpus"].array().size() == 384);
  CHECK(j["process"]["allowed_mem_nodes"].integers() == std::vector<long long>{0, 1, 2, 3});
  CHECK(j["process"]["cgroup"].string() == "/system.slice/vllm.service");
  CHECK(AnyContains(j["warnings"], "CPUs of 4 nodes"));

  // The budget view: each node's capacity is its MemTotal, usage its MemTotal - MemFree,
  // under the default thresholds.
  const Json& budget = j["budget"];
  CHECK(budget["schema"].string() == "numarena.budget/1");
  CHECK(budget["thresholds"]["warn"].real() == Approx(0.80));
  CHECK(budget["thresholds"]["admission_closed"].real() == Approx(0.85));
  CHECK(budget["thresholds"]["trip"].real() == Approx(0.90));
  REQUIRE(budget["nodes"].array().size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    const Json& node = budget["nodes"][i];
    CHECK(node["capacity_bytes"].integer() == nodes[i]["mem_total_bytes"].integer());
    CHECK(node["usage_bytes"].integer() == nodes[i]["mem_used_bytes"].integer());
    CHECK(node["state"].string() == "normal");
  }
}

TEST_CASE("topo text output starts like numactl --hardware") {
  Run run = RunCli("topo --sysfs-root " + Fixture("epyc9654-snc4") + "/sys");
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.rfind("available: 4 nodes (0-3)\nnode 0 cpus: 0 1 2 ", 0) == 0);
  CHECK_THAT(run.out, Catch::Contains("node 0 size: 196608 MB\nnode 0 free: 180224 MB\n"));
  CHECK_THAT(run.out, Catch::Contains("node distances:\n"
                                      "node   0   1   2   3 \n"
                                      "  0:  10  12  32  32 \n"
                                      "  1:  12  10  32  32 \n"
                                      "  2:  32  32  10  12 \n"
                                      "  3:  32  32  12  10 \n"));
  CHECK_THAT(run.out, Catch::Contains("gpu        0000:41:00.0  10de:2330  NVIDIA    node 0"));
  CHECK_THAT(run.out, Catch::Contains("allowed cpus: 0-383 (nodes 0-3)"));
}

TEST_CASE("topo reports a GPU with numa_node -1 as unknown, with a warning") {
  Run run = RunCli("topo --json --sysfs-root " + Fixture("gpu-unknown-node") + "/sys");
  REQUIRE(run.exit_code == 0);
  Json j = ParseJson(run.out);
  const Json& gpu = j["devices"][0];
  CHECK(gpu["bus_id"].string() == "0000:17:00.0");
  CHECK(gpu["node"].is_null());
  CHECK(AnyContains(j["warnings"], "0000:17:00.0 (10de:2330) has numa_node -1"));
  // No proc tree beside the fixture: the process may use everything.
  CHECK(j["process"]["allowed_mem_nodes"].integers() == std::vector<long long>{0, 1});
  CHECK(j["process"]["cgroup"].is_null());

  Run text = RunCli("topo --sysfs-root " + Fixture("gpu-unknown-node") + "/sys");
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("0000:17:00.0  10de:2330  NVIDIA    node unknown"));
  CHECK_THAT(text.out, Catch::Contains("warnings:\n  - gpu 0000:17:00.0"));
}

TEST_CASE("topo shows HMAT attributes and memory-only nodes") {
  Run run = RunCli("topo --json --sysfs-root=" + Fixture("cxl-hmat") + "/sys");
  REQUIRE(run.exit_code == 0);
  Json j = ParseJson(run.out);
  const Json& cxl = j["nodes"][2];
  CHECK(cxl["memory_only"].boolean());
  CHECK(!j["nodes"][0]["memory_only"].boolean());
  CHECK(cxl["cpus"].array().empty());
  CHECK(cxl["access"]["read_bandwidth_mbps"].integer() == 25600);
  CHECK(cxl["access"]["write_latency_ns"].integer() == 300);
  CHECK(cxl["access"]["initiators"].integers() == std::vector<long long>{0});

  Run text = RunCli("topo --sysfs-root " + Fixture("cxl-hmat") + "/sys");
  CHECK_THAT(text.out, Catch::Contains("node 2 cpus:\n"));
  CHECK_THAT(text.out, Catch::Contains("node 2: read 25600 MB/s, write 20480 MB/s, read latency "
                                       "250 ns, write latency 300 ns; initiators: 0"));
}

TEST_CASE("topo shows per-node huge page pools and where each memory target resolves") {
  Run run = RunCli("topo --json --sysfs-root " + Fixture("cxl-hmat") + "/sys");
  REQUIRE(run.exit_code == 0);
  Json j = ParseJson(run.out);
  const Json& pools = j["nodes"][0]["huge_pages"];
  REQUIRE(pools.array().size() == 2);
  CHECK(pools[0]["page_bytes"].integer() == 2 << 20);
  CHECK(pools[0]["total"].integer() == 512);
  CHECK(pools[0]["free"].integer() == 500);
  CHECK(pools[1]["page_bytes"].integer() == 1LL << 30);
  CHECK(j["nodes"][2]["huge_pages"].array().empty());
  bool seen_capacity = false;
  for (const Json& t : j["memory_targets"].array()) {
    if (t["attribute"].string() != "capacity") continue;
    if (!std::holds_alternative<long long>(t["from"].value) || t["from"].integer() != 0) continue;
    seen_capacity = true;
    CHECK(t["best"].integers() == std::vector<long long>{2});  // the 128 GiB expander
    CHECK(t["ranked"].integers() == std::vector<long long>{2, 0});
    CHECK(t["basis"].string() == "hmat");
  }
  CHECK(seen_capacity);

  Run text = RunCli("topo --sysfs-root " + Fixture("cxl-hmat") + "/sys");
  CHECK_THAT(text.out, Catch::Contains("  node 0: 2048 kB: 512 reserved, 500 free; 1048576 kB: "
                                       "4 reserved, 4 free\n  node 1: 2048 kB: 0 reserved"));
  CHECK_THAT(text.out, Catch::Contains("  node 2: none\n"));
  CHECK_THAT(text.out, Catch::Contains("echo COUNT > /sys/devices/system/node/node0/hugepages/"
                                       "hugepages-2048kB/nr_hugepages"));
  CHECK_THAT(text.out, Catch::Contains("  capacity  @0 -> 2, @1 -> 1, any -> 2\n"));
  CHECK_THAT(text.out, Catch::Contains("  bandwidth @0 -> 0, @1 -> 1, any -> 0-1\n"));

  Run snc = RunCli("topo --sysfs-root " + Fixture("epyc9654-snc4") + "/sys");
  CHECK_THAT(snc.out, Catch::Contains("no usable HMAT: chosen by SLIT distance"));
}

TEST_CASE("topo --procfs-root overrides the proc tree beside the fixture") {
  // The xeon fixture's own proc tree puts the process in a node-0 cpuset; pointing
  // --procfs-root at a tree without files gives it everything instead.
  Run own = RunCli("topo --json --sysfs-root " + Fixture("xeon-2s") + "/sys");
  REQUIRE(own.exit_code == 0);
  CHECK(ParseJson(own.out)["process"]["allowed_mem_nodes"].integers() == std::vector<long long>{0});
  Run other = RunCli("topo --json --sysfs-root " + Fixture("xeon-2s") + "/sys --procfs-root " +
                     Fixture("cxl-hmat") + "/proc");
  REQUIRE(other.exit_code == 0);
  CHECK(ParseJson(other.out)["process"]["allowed_mem_nodes"].integers() ==
        std::vector<long long>{0, 1});
}

TEST_CASE("topo fails with exit 2 and one line naming the file") {
  struct Case {
    const char* fixture;
    const char* file;
  };
  for (Case c : {Case{"malformed-distance", "/sys/devices/system/node/node1/distance"},
                 Case{"malformed-cpulist", "/sys/devices/system/node/node0/cpulist"},
                 Case{"missing-online", "/sys/devices/system/node/online"}}) {
    CAPTURE(c.fixture);
    Run run = RunCli("topo --json --sysfs-root " + Fixture(c.fixture) + "/sys");
    CHECK(run.exit_code == 2);
    CHECK(run.out.empty());
    CHECK(run.err.rfind("numarena topo: " + Fixture(c.fixture) + c.file, 0) == 0);
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  }
}

TEST_CASE("topo usage errors exit 2, --help exits 0") {
  Run unknown = RunCli("topo --frobnicate");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("unknown option '--frobnicate'"));
  Run missing = RunCli("topo --sysfs-root");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("--sysfs-root needs a directory"));
  Run help = RunCli("topo --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("--sysfs-root DIR"));
}

TEST_CASE("topo on the live machine") {
  Run run = RunCli("topo --json");
  REQUIRE(run.exit_code == 0);
  Json j = ParseJson(run.out);
  CHECK(!j["nodes"].array().empty());
  CHECK(!j["process"]["allowed_cpus"].array().empty());
  Run text = RunCli("topo");
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.rfind("available: ", 0) == 0);
}
