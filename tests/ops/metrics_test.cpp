// Tests of the Prometheus exposition (numarena/metrics.hpp). Every rendered text goes
// through `Validate`, an independent line-by-line checker of the text format (0.0.4):
// HELP/TYPE once per family and before its samples, samples of a family contiguous, names
// and label names well-formed, label values escaped, values parseable, no duplicate series.
#include "numarena/ops/metrics.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fixture_machine.hpp"
#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/first_touch.hpp"
#include "numarena/kv_pool.hpp"
#include "numarena/topology.hpp"

namespace {

bool NameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool NameChar(char c) { return NameStart(c) || (c >= '0' && c <= '9'); }

// Reads a metric name at `pos`; empty when there is none.
std::string ReadName(const std::string& line, std::size_t& pos, bool colons) {
  std::size_t start = pos;
  if (pos < line.size() && (NameStart(line[pos]) || (colons && line[pos] == ':'))) {
    ++pos;
    while (pos < line.size() && (NameChar(line[pos]) || (colons && line[pos] == ':'))) ++pos;
  }
  return line.substr(start, pos - start);
}

bool ValidValue(const std::string& text) {
  if (text == "+Inf" || text == "-Inf" || text == "NaN") return true;
  if (text.empty()) return false;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

// Returns the problems found (empty when the text is valid), one per bad line.
std::vector<std::string> Validate(const std::string& text) {
  std::vector<std::string> problems;
  if (text.empty() || text.back() != '\n') problems.push_back("text must end in a newline");
  std::set<std::string> helped, typed, finished, series;
  std::map<std::string, std::string> types;
  std::string current;  // family of the samples being read
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    auto bad = [&](const std::string& why) {
      problems.push_back("line " + std::to_string(number) + ": " + why + ": " + line);
    };
    if (line.empty()) {
      bad("empty line");
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      bool help = line[2] == 'H';
      std::size_t pos = 7;
      std::string name = ReadName(line, pos, true);
      if (name.empty() || pos >= line.size() || line[pos] != ' ') {
        bad("bad name");
        continue;
      }
      std::string rest = line.substr(pos + 1);
      if (finished.count(name) ||
          (!current.empty() && current != name && (helped.count(name) || typed.count(name)))) {
        bad("family seen before");
      }
      if (current != name && !current.empty()) finished.insert(current);
      current = name;
      if (help) {
        if (!helped.insert(name).second) bad("second HELP");
        for (std::size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] == '\\' &&
              (i + 1 == rest.size() || (rest[i + 1] != '\\' && rest[i + 1] != 'n'))) {
            bad("bad escape in HELP");
          }
          if (rest[i] == '\\') ++i;
        }
      } else {
        if (!typed.insert(name).second) bad("second TYPE");
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (!kTypes.count(rest)) bad("unknown type");
        types[name] = rest;
        if (rest == "counter" && (name.size() < 6 || name.substr(name.size() - 6) != "_total")) {
          bad("counter without _total");
        }
      }
      continue;
    }
    if (line[0] == '#') {
      bad("comment that is neither HELP nor TYPE");
      continue;
    }
    std::size_t pos = 0;
    std::string name = ReadName(line, pos, true);
    if (name.empty()) {
      bad("no metric name");
      continue;
    }
    // A histogram's series are its family's name plus _bucket, _sum or _count.
    std::string family = name;
    if (types.count(current) && types[current] == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (name == current + suffix) family = current;
      }
      if (family == name) bad("histogram sample without _bucket, _sum or _count");
    }
    if (family != current) bad("sample outside its family's block");
    if (!typed.count(family)) bad("sample before TYPE");
    std::string labels;
    if (pos < line.size() && line[pos] == '{') {
      std::size_t open = pos++;
      std::set<std::string> seen;
      while (pos < line.size() && line[pos] != '}') {
        std::string label = ReadName(line, pos, false);
        if (label.empty() || label.rfind("__", 0) == 0) bad("bad label name");
        if (!seen.insert(label).second) bad("label twice");
        if (pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"') {
          bad("label without =\"");
          break;
        }
        pos += 2;
        while (pos < line.size() && line[pos] != '"') {
          if (line[pos] == '\\') {
            if (pos + 1 >= line.size() ||
                (line[pos + 1] != '\\' && line[pos + 1] != '"' && line[pos + 1] != 'n')) {
              bad("bad escape in label value");
            }
            ++pos;
          }
          ++pos;
        }
        if (pos >= line.size()) {
          bad("unterminated label value");
          break;
        }
        ++pos;  // closing quote
        if (pos < line.size() && line[pos] == ',') ++pos;
      }
      if (pos >= line.size()) {
        bad("unterminated labels");
        continue;
      }
      ++pos;  // '}'
      labels = line.substr(open, pos - open);
    }
    if (pos >= line.size() || line[pos] != ' ') {
      bad("no space before the value");
      continue;
    }
    std::string value = line.substr(pos + 1);
    if (std::size_t space = value.find(' '); space != std::string::npos) {
      std::string timestamp = value.substr(space + 1);
      value = value.substr(0, space);
      if (timestamp.empty() || timestamp.find_first_not_of("-0123456789") != std::string::npos) {
        bad("bad timestamp");
      }
    }
    if (!ValidValue(value)) bad("bad value");
    if (!series.insert(name + labels).second) bad("duplicate series");
  }
  return problems;
}

// The value of the sample whose line starts with `series + " "`; fails the test when absent.
std::string ValueOf(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return line.substr(series.size() + 1);
  }
  FAIL("no sample " << series);
  return "";
}

using Machine = numarena::testing::FixtureMachine;
Machine Load(const std::string& name) { return numarena::testing::LoadFixtureMachine(name); }

}  // namespace

TEST_CASE("metrics: the validator rejects what Prometheus would", "[metrics]") {
  CHECK(Validate("# HELP a x\n# TYPE a gauge\na 1\n").empty());
  CHECK(Validate("# TYPE a gauge\na{b=\"c\\\"d\"} 1 1700000000000\n").empty());
  CHECK_FALSE(Validate("a 1\n").empty());                                            // no TYPE
  CHECK_FALSE(Validate("# TYPE a gauge\na{b=\"c} 1\n").empty());                     // unterminated
  CHECK_FALSE(Validate("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n").empty());  // split
  CHECK_FALSE(Validate("# TYPE a gauge\na one\n").empty());                          // value
  CHECK_FALSE(Validate("# TYPE a gauge\na 1\na 2\n").empty());                       // duplicate
  CHECK_FALSE(Validate("# TYPE a counter\na 1\n").empty());                          // no _total
  CHECK_FALSE(Validate("# TYPE a gauge\na{__x=\"1\"} 1\n").empty());                 // reserved
  CHECK_FALSE(Validate("# TYPE a gauge\na 1").empty());                              // no newline
}

TEST_CASE("metrics: writer escapes, merges families and reports misuse", "[metrics]") {
  numarena::ExpositionWriter out;
  out.Family("x_bytes", numarena::MetricType::kGauge, "a \\ back\nslash");
  out.Sample({{"path", "a\"b\\c\nd"}}, 1.5);
  out.Family("y_total", numarena::MetricType::kCounter, "count");
  out.Sample(3);
  out.Family("x_bytes", numarena::MetricType::kGauge, "a \\ back\nslash");  // re-opened
  out.Sample({{"path", "e"}}, 1e20);
  out.Family("z", numarena::MetricType::kGauge, "special");
  out.Sample({{"v", "inf"}}, 1.0 / 0.0);
  out.Sample({{"v", "nan"}}, 0.0 / 0.0);
  auto text = out.Finish();
  REQUIRE(text.ok());
  CHECK(*text ==
        "# HELP x_bytes a \\\\ back\\nslash\n"
        "# TYPE x_bytes gauge\n"
        "x_bytes{path=\"a\\\"b\\\\c\\nd\"} 1.5\n"
        "x_bytes{path=\"e\"} 1e+20\n"
        "# HELP y_total count\n"
        "# TYPE y_total counter\n"
        "y_total 3\n"
        "# HELP z special\n"
        "# TYPE z gauge\n"
        "z{v=\"inf\"} +Inf\n"
        "z{v=\"nan\"} NaN\n");
  CHECK(Validate(*text).empty());

  numarena::ExpositionWriter bad_name;
  bad_name.Family("1abc", numarena::MetricType::kGauge, "h").Sample(1);
  CHECK(bad_name.Finish().status().code() == absl::StatusCode::kInvalidArgument);
  numarena::ExpositionWriter bad_counter;
  bad_counter.Family("requests", numarena::MetricType::kCounter, "h").Sample(1);
  CHECK(std::string(bad_counter.Finish().status().message()) ==
        "counter 'requests' must end in _total");
  numarena::ExpositionWriter bad_label;
  bad_label.Family("a", numarena::MetricType::kGauge, "h").Sample({{"no-dash", "x"}}, 1);
  CHECK_FALSE(bad_label.Finish().ok());
  numarena::ExpositionWriter retyped;
  retyped.Family("a", numarena::MetricType::kGauge, "h").Sample(1);
  retyped.Family("a_total", numarena::MetricType::kCounter, "h").Sample(1);
  retyped.Family("a", numarena::MetricType::kCounter, "h");
  CHECK_FALSE(retyped.Finish().ok());
}

TEST_CASE("metrics: kernel counters, topology, process and served devices", "[metrics]") {
  Machine good = Load("ops-good");
  numarena::MetricsSources sources;
  sources.reader = good.reader.get();
  sources.topology = &good.topology;
  sources.pid = "4242";
  sources.served_devices = {"0000:41:00.0", "c1:00.0", "0000:99:00.0"};
  auto text = numarena::RenderMetrics(sources);
  INFO(text.status());
  REQUIRE(text.ok());
  INFO(*text);
  CHECK(Validate(*text).empty());
  CHECK(ValueOf(*text, "numarena_kernel_numa_hit_total{node=\"0\"}") == "996318");
  CHECK(ValueOf(*text, "numarena_kernel_other_node_total{node=\"1\"}") == "108021");
  CHECK(ValueOf(*text, "numarena_node_memory_total_bytes{node=\"1\"}") == "68719476736");
  CHECK(ValueOf(*text, "numarena_node_cpus{node=\"0\"}") == "8");
  CHECK(ValueOf(*text, "numarena_device_node{bus_id=\"0000:21:00.0\",kind=\"nic\"}") == "0");
  CHECK(ValueOf(*text, "numarena_device_node_unknown{bus_id=\"0000:41:00.0\",kind=\"gpu\"}") ==
        "0");
  CHECK(ValueOf(*text, "numarena_process_memory_bytes{command=\"llm-server\",node=\"0\",kind=\"hugetlb\"}") == "33554432");
  // The server runs on node 0: its GPU is local (10), the node-1 GPU is remote (21).
  CHECK(ValueOf(*text, "numarena_device_distance{command=\"llm-server\",bus_id=\"0000:41:00.0\",kind=\"gpu\"}") == "10");
  CHECK(ValueOf(*text, "numarena_device_distance{command=\"llm-server\",bus_id=\"0000:c1:00.0\",kind=\"gpu\"}") == "21");
  CHECK(text->find("0000:99:00.0") == std::string::npos);  // unknown devices are left out
  double local = std::stod(
      ValueOf(*text, "numarena_device_local_memory_ratio{command=\"llm-server\",bus_id=\"0000:41:00.0\",kind=\"gpu\"}"));
  CHECK(local > 0.99);

  Machine unknown = Load("ops-unknown-node");
  sources.reader = unknown.reader.get();
  sources.topology = &unknown.topology;
  sources.served_devices = {"0000:41:00.0"};
  auto text2 = numarena::RenderMetrics(sources);
  REQUIRE(text2.ok());
  CHECK(Validate(*text2).empty());
  CHECK(ValueOf(*text2, "numarena_device_node{bus_id=\"0000:41:00.0\",kind=\"gpu\"}") == "-1");
  CHECK(ValueOf(*text2, "numarena_device_distance{command=\"llm-server\",bus_id=\"0000:41:00.0\",kind=\"gpu\"}") == "-1");
}

TEST_CASE("metrics: budget snapshot", "[metrics]") {
  numarena::BudgetOptions options;
  options.mode = numarena::BudgetMode::kQuota;
  options.default_quota_bytes = 100 << 20;
  auto budget = numarena::Budget::Create(options, std::vector<int>{0, 1});
  REQUIRE(budget.ok());
  REQUIRE((*budget)->Charge(1, 82 << 20, numarena::Priority::kNormal).ok());
  auto snapshot = (*budget)->Snapshot();
  numarena::ExpositionWriter out;
  numarena::AppendBudgetMetrics(out, snapshot);
  auto text = out.Finish();
  REQUIRE(text.ok());
  INFO(*text);
  CHECK(Validate(*text).empty());
  CHECK(ValueOf(*text, "numarena_budget_capacity_bytes{node=\"1\"}") == "104857600");
  CHECK(ValueOf(*text, "numarena_budget_usage_bytes{node=\"1\"}") == "85983232");
  CHECK(ValueOf(*text, "numarena_budget_usage_ratio{node=\"1\"}") == "0.82");
  CHECK(ValueOf(*text, "numarena_budget_state{node=\"1\",state=\"warn\"}") == "1");
  CHECK(ValueOf(*text, "numarena_budget_state{node=\"1\",state=\"normal\"}") == "0");
  CHECK(ValueOf(*text, "numarena_budget_state{node=\"0\",state=\"normal\"}") == "1");
  CHECK(ValueOf(*text, "numarena_budget_threshold_ratio{node=\"0\",threshold=\"trip\"}") == "0.9");
  CHECK(ValueOf(*text, "numarena_budget_numarena_bytes{node=\"1\",priority=\"normal\"}") ==
        "85983232");
  (*budget)->Release(1, 82 << 20, numarena::Priority::kNormal);
}

TEST_CASE("metrics: arenas, KV pool figures and migrations", "[metrics]") {
  auto arena = numarena::Arena::ForNode(0);
  REQUIRE(arena.ok());
  void* p = (*arena)->allocate(std::size_t{4} << 20);
  REQUIRE(p != nullptr);
  numarena::KvPoolStats kv;
  kv.nodes = {numarena::KvNodeStats{0, 10, 4, 1 << 20, 1 << 19}};
  kv.spans_in_use = 3;
  kv.hot_pins = 90;
  kv.cold_pins = 10;
  kv.hot_hit_rate = 0.9;
  kv.demotions = 7;
  kv.kernel_demoted_pages = 12;
  kv.kernel_promoted_pages = 3;
  kv.pages_moved_back = 10;
  kv.hot_blocks_misplaced = 1;
  kv.hot_pages_misplaced = 2;
  kv.audits = 5;
  numarena::PlacementReport report;
  report.pages_checked = 512;
  report.already_local = 384;
  report.moved = 128;
  numarena::MigrationTotals migrations;
  migrations.Add(report);
  migrations.Add(report);

  numarena::ExpositionWriter out;
  numarena::AppendArenaMetrics(out, {*arena});
  numarena::AppendKvPoolMetrics(out, "llama\"70b", kv);
  numarena::AppendMigrationMetrics(out, migrations);
  auto text = out.Finish();
  REQUIRE(text.ok());
  INFO(*text);
  CHECK(Validate(*text).empty());
  CHECK(std::stod(ValueOf(*text, "numarena_arena_allocated_bytes{policy=\"bind(0)\"}")) >= 4 << 20);
  CHECK(ValueOf(*text, "numarena_arena_fallbacks_total{policy=\"bind(0)\"}") == "0");
  CHECK(ValueOf(*text, "numarena_kv_blocks{pool=\"llama\\\"70b\",node=\"0\",tier=\"cold\"}") ==
        "4");
  CHECK(ValueOf(*text, "numarena_kv_pins_total{pool=\"llama\\\"70b\",tier=\"hot\"}") == "90");
  CHECK(ValueOf(*text, "numarena_kv_demotions_total{pool=\"llama\\\"70b\"}") == "7");
  CHECK(ValueOf(*text, "numarena_kv_kernel_moved_pages_total{pool=\"llama\\\"70b\",tier=\"hot\"}") == "12");
  CHECK(ValueOf(*text, "numarena_kv_kernel_moved_pages_total{pool=\"llama\\\"70b\",tier=\"cold\"}") == "3");
  CHECK(ValueOf(*text, "numarena_kv_pages_moved_back_total{pool=\"llama\\\"70b\"}") == "10");
  CHECK(ValueOf(*text, "numarena_kv_misplaced_blocks{pool=\"llama\\\"70b\",tier=\"hot\"}") == "1");
  CHECK(ValueOf(*text, "numarena_kv_misplaced_pages{pool=\"llama\\\"70b\",tier=\"hot\"}") == "2");
  CHECK(ValueOf(*text, "numarena_kv_audits_total{pool=\"llama\\\"70b\"}") == "5");
  CHECK(ValueOf(*text, "numarena_migration_calls_total") == "2");
  CHECK(ValueOf(*text, "numarena_migration_pages_moved_total") == "256");
  numarena::deallocate(p);
}

TEST_CASE("metrics: live scrape of this process", "[metrics]") {
  numarena::MetricsSources sources;  // live reader and Topology::system()
  auto text = numarena::RenderMetrics(sources);
  INFO(text.status());
  REQUIRE(text.ok());
  CHECK(Validate(*text).empty());
  CHECK(text->find("# TYPE numarena_kernel_numa_hit_total counter\n") != std::string::npos);
  CHECK(text->find("numarena_process_local_memory_ratio{command=\"") != std::string::npos);
  CHECK(text->find("numarena_build_info{version=\"") != std::string::npos);
}

TEST_CASE("metrics: every series the shipped alert rules use is rendered", "[metrics]") {
  std::string path = std::string(NUMARENA_FIXTURES) + "/../../cmake/prometheus/numarena-rules.yml";
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string rules((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  Machine good = Load("ops-good");
  numarena::BudgetOptions options;
  options.mode = numarena::BudgetMode::kQuota;
  options.default_quota_bytes = 1 << 30;
  auto budget = numarena::Budget::Create(options, good.topology);
  REQUIRE(budget.ok());
  auto snapshot = (*budget)->Snapshot();
  numarena::MetricsSources sources;
  sources.reader = good.reader.get();
  sources.topology = &good.topology;
  sources.pid = "4242";
  sources.served_devices = {"0000:41:00.0"};
  sources.budget = &snapshot;
  auto text = numarena::RenderMetrics(sources);
  REQUIRE(text.ok());
  CHECK(Validate(*text).empty());

  std::set<std::string> used;
  for (std::size_t pos = rules.find("numarena_"); pos != std::string::npos;
       pos = rules.find("numarena_", pos + 1)) {
    if (pos > 0 && (NameChar(rules[pos - 1]) || rules[pos - 1] == '-')) continue;
    std::size_t end = pos;
    while (end < rules.size() && NameChar(rules[end])) ++end;
    used.insert(rules.substr(pos, end - pos));
  }
  CHECK(used.size() >= 8);
  for (const std::string& name : used) {
    INFO(name);
    // The exporter's own families (numarena_exporter_*) are checked on its real scrapes by
    // tests/cli/rules_on_real_scrapes_test.py.
    if (name.rfind("numarena_exporter_", 0) == 0) continue;
    CHECK(text->find("# TYPE " + name + " ") != std::string::npos);
  }
}

namespace {

// Runs `promtool check metrics` on `text`; its output and exit status.
std::pair<std::string, int> PromtoolCheckMetrics(const std::string& text) {
  char path[] = "/tmp/numarena_metrics_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  std::string out;
  FILE* pipe = popen((std::string("promtool check metrics < ") + path + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (std::size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  unlink(path);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

}  // namespace

TEST_CASE("metrics: histogram buckets are cumulative, le is inclusive, NaN is ignored",
          "[metrics][histogram]") {
  auto h = numarena::Histogram::Create({0.1, 1, 10});
  REQUIRE(h.ok());
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0, std::nan("")}) h->Observe(v);
  const numarena::HistogramSnapshot snap = h->Snapshot();
  CHECK(snap.bucket_counts == std::vector<std::uint64_t>{2, 3, 4});
  CHECK(snap.count == 5);
  CHECK(snap.sum == Approx(55.65));

  numarena::ExpositionWriter out;
  out.Family("server_wait_seconds", numarena::MetricType::kHistogram, "Wait.");
  out.HistogramSample({{"node", "0"}}, snap);
  out.HistogramSample({{"node", "1"}}, numarena::Histogram::Create({0.1, 1, 10})->Snapshot());
  out.Family("server_plain_seconds", numarena::MetricType::kHistogram, "No labels.");
  out.HistogramSample(numarena::Histogram::Create({0.25})->Snapshot());
  auto text = out.Finish();
  REQUIRE(text.ok());
  CHECK(*text ==
        "# HELP server_wait_seconds Wait.\n"
        "# TYPE server_wait_seconds histogram\n"
        "server_wait_seconds_bucket{node=\"0\",le=\"0.1\"} 2\n"
        "server_wait_seconds_bucket{node=\"0\",le=\"1\"} 3\n"
        "server_wait_seconds_bucket{node=\"0\",le=\"10\"} 4\n"
        "server_wait_seconds_bucket{node=\"0\",le=\"+Inf\"} 5\n"
        "server_wait_seconds_sum{node=\"0\"} 55.65\n"
        "server_wait_seconds_count{node=\"0\"} 5\n"
        "server_wait_seconds_bucket{node=\"1\",le=\"0.1\"} 0\n"
        "server_wait_seconds_bucket{node=\"1\",le=\"1\"} 0\n"
        "server_wait_seconds_bucket{node=\"1\",le=\"10\"} 0\n"
        "server_wait_seconds_bucket{node=\"1\",le=\"+Inf\"} 0\n"
        "server_wait_seconds_sum{node=\"1\"} 0\n"
        "server_wait_seconds_count{node=\"1\"} 0\n"
        "# HELP server_plain_seconds No labels.\n"
        "# TYPE server_plain_seconds histogram\n"
        "server_plain_seconds_bucket{le=\"0.25\"} 0\n"
        "server_plain_seconds_bucket{le=\"+Inf\"} 0\n"
        "server_plain_seconds_sum 0\n"
        "server_plain_seconds_count 0\n");
  CHECK(Validate(*text).empty());
  auto [lint, status] = PromtoolCheckMetrics(*text);
  INFO(lint);
  CHECK(status == 0);

  auto buckets = numarena::ExponentialBuckets(0.001, 2, 4);
  REQUIRE(buckets.ok());
  CHECK(*buckets == std::vector<double>{0.001, 0.002, 0.004, 0.008});
  // Bounds as Prometheus's clients write them: %g style, not the shortest "5e-04".
  CHECK(numarena::FormatMetricValue(0.0005) == "0.0005");
  CHECK(numarena::FormatMetricValue(1.5e-7) == "1.5e-07");
}

TEST_CASE("metrics: a value is written in the fewest digits that read back as it",
          "[metrics]") {
  using numarena::FormatMetricValue;
  CHECK(FormatMetricValue(0.1) == "0.1");
  CHECK(FormatMetricValue(0.875) == "0.875");
  CHECK(FormatMetricValue(-2.5e-300) == "-2.5e-300");
  CHECK(FormatMetricValue(1e20) == "1e+20");
  CHECK(FormatMetricValue(1.0 / 3) == "0.3333333333333333");
  CHECK(FormatMetricValue(0.1 + 0.2) == "0.30000000000000004");
  CHECK(FormatMetricValue(5e-324) == "5e-324");  // the smallest subnormal
  CHECK(FormatMetricValue(1.7976931348623157e308) == "1.7976931348623157e+308");
  // Every value reads back exactly, and one digit fewer would not.
  std::uint64_t state = 12345;
  for (int i = 0; i < 2000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double value;
    const std::uint64_t bits = (state >> 1) | (std::uint64_t{1} << 62 >> (i % 3));
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isfinite(value) || value == std::floor(value)) continue;
    const std::string text = FormatMetricValue(value);
    INFO(text);
    REQUIRE(std::strtod(text.c_str(), nullptr) == value);
    std::size_t digits = 0;
    for (char c : text.substr(0, text.find('e'))) digits += c >= '0' && c <= '9';
    if (text.rfind("0.", 0) == 0) {  // leading zeros of 0.000ddd are not significant
      digits -= text.find_first_not_of("0.") - 0 - 1;
    }
    if (digits > 1) {
      char shorter[40];
      std::snprintf(shorter, sizeof shorter, "%.*g", static_cast<int>(digits - 1), value);
      CHECK(std::strtod(shorter, nullptr) != value);
    }
  }
}

TEST_CASE("metrics: histogram misuse is an error naming it", "[metrics][histogram]") {
  using numarena::Histogram;
  CHECK(Histogram::Create({}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(Histogram::Create({1, 1}).status().message()) ==
        "histogram bound 1 (1) is not above the one before (1): bounds must increase strictly");
  CHECK(std::string(Histogram::Create({1, 1.0 / 0.0}).status().message()) ==
        "histogram bound 1 is not finite (+Inf is implicit)");
  CHECK_FALSE(numarena::ExponentialBuckets(0, 2, 3).ok());
  CHECK_FALSE(numarena::ExponentialBuckets(1, 1, 3).ok());
  CHECK_FALSE(numarena::ExponentialBuckets(1, 2, 0).ok());
  CHECK_FALSE(numarena::ExponentialBuckets(1e300, 1e10, 3).ok());  // overflows to +Inf

  const numarena::HistogramSnapshot empty = Histogram::Create({1})->Snapshot();
  auto error = [](numarena::ExpositionWriter& w) {
    auto text = w.Finish();
    CHECK(text.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(text.status().message());
  };
  numarena::ExpositionWriter suffix;
  suffix.Family("wait_count", numarena::MetricType::kHistogram, "h").HistogramSample(empty);
  CHECK(error(suffix) ==
        "histogram 'wait_count' must not end in _count (its series add _bucket, _sum and _count)");
  numarena::ExpositionWriter plain_sample;
  plain_sample.Family("wait_seconds", numarena::MetricType::kHistogram, "h").Sample(1);
  CHECK(error(plain_sample) == "Sample() on histogram 'wait_seconds': use HistogramSample()");
  numarena::ExpositionWriter on_gauge;
  on_gauge.Family("depth", numarena::MetricType::kGauge, "h").HistogramSample(empty);
  CHECK(error(on_gauge) == "HistogramSample() on 'depth', which is not a histogram");
  numarena::ExpositionWriter le_label;
  le_label.Family("wait_seconds", numarena::MetricType::kHistogram, "h")
      .HistogramSample({{"le", "1"}}, empty);
  CHECK(error(le_label) == "histogram 'wait_seconds' has a label 'le', which its buckets use");
  numarena::HistogramSnapshot broken = empty;
  broken.bucket_counts = {2};  // more in a bucket than in all
  numarena::ExpositionWriter not_cumulative;
  not_cumulative.Family("wait_seconds", numarena::MetricType::kHistogram, "h")
      .HistogramSample(broken);
  CHECK(error(not_cumulative).find("not cumulative") != std::string::npos);
}

TEST_CASE("metrics: histogram observed from threads while scraped stays consistent",
          "[metrics][histogram]") {
  auto h = numarena::Histogram::Create({0.5, 1, 2});
  REQUIRE(h.ok());
  constexpr int kThreads = 4;
  constexpr int kEach = 50000;
  std::atomic<bool> done{false};
  std::vector<std::string> problems;
  std::thread scraper([&] {
    std::uint64_t last_count = 0;
    while (!done.load()) {
      const numarena::HistogramSnapshot s = h->Snapshot();
      // What a scrape needs: cumulative buckets, count = the +Inf bucket, never decreasing.
      if (s.bucket_counts[0] > s.bucket_counts[1] || s.bucket_counts[1] > s.bucket_counts[2] ||
          s.bucket_counts[2] > s.count || s.count < last_count) {
        problems.push_back("inconsistent snapshot");
      }
      last_count = s.count;
    }
  });
  std::vector<std::thread> observers;
  for (int t = 0; t < kThreads; ++t) {
    observers.emplace_back([&h] {
      // 0.5 and 1.5 and 4 are exact in binary: the sum is exact too.
      for (int i = 0; i < kEach; ++i) h->Observe(i % 3 == 0 ? 0.5 : i % 3 == 1 ? 1.5 : 4.0);
    });
  }
  for (std::thread& t : observers) t.join();
  done.store(true);
  scraper.join();
  CHECK(problems.empty());
  const numarena::HistogramSnapshot s = h->Snapshot();
  const std::uint64_t per_kind = kThreads * ((kEach + 2) / 3);  // i % 3 == 0 occurs 16667 times
  CHECK(s.count == std::uint64_t{kThreads} * kEach);
  CHECK(s.bucket_counts[0] == per_kind);
  CHECK(s.bucket_counts[1] == per_kind);
  CHECK(s.bucket_counts[2] == per_kind + kThreads * ((kEach + 1) / 3));
  CHECK(s.sum == kThreads * (((kEach + 2) / 3) * 0.5 + ((kEach + 1) / 3) * 1.5 + (kEach / 3) * 4.0));
}
