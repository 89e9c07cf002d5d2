// The inference server example end to end: the built program (NUMARENA_EXAMPLE_SERVER) is
// started, its /metrics endpoint (cpp-httplib) is scraped over loopback with GET and HEAD,
// checked line by line and by Prometheus's promtool, and it is stopped, by SIGTERM or by its own --seconds, with exit status 0 and a summary
// whose request counts add up. Each run is bounded (a child that hangs is killed and the
// test fails), so the file takes a few seconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// The example running as a child, its stdout and stderr on one pipe.
class Server {
 public:
  explicit Server(std::vector<std::string> args) {
    int out[2];
    REQUIRE(::pipe(out) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(out[1], STDERR_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      std::vector<char*> argv{const_cast<char*>(NUMARENA_EXAMPLE_SERVER)};
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
  }
  ~Server() {
    if (pid_ > 0) {  // a failed REQUIRE left it running
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }

  // Reads stdout until a line contains `needle` or `timeout` passes; returns that line.
  std::string WaitForLine(const std::string& needle, std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      for (std::size_t end; (end = output_.find('\n', scanned_)) != std::string::npos;) {
        std::string line = output_.substr(scanned_, end - scanned_);
        scanned_ = end + 1;
        if (line.find(needle) != std::string::npos) return line;
      }
      if (!ReadSome(deadline)) return "";
    }
  }

  // Waits for exit (killing the child after `timeout`); returns the exit code, -1 when it
  // was killed or died by a signal. Reads the rest of stdout.
  int Wait(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (ReadSome(deadline)) {
    }
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  void Signal(int signal) { ::kill(pid_, signal); }
  const std::string& output() const { return output_; }

 private:
  // False at end of file or at the deadline.
  bool ReadSome(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) return false;
    char buffer[4096];
    const ssize_t n = ::read(out_, buffer, sizeof buffer);
    if (n <= 0) return false;
    output_.append(buffer, std::size_t(n));
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string output_;
  std::size_t scanned_ = 0;
};

// One HTTP request (GET or HEAD) on 127.0.0.1:port; the whole response (headers and body).
std::string HttpRequest(int port, const std::string& method, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(std::uint16_t(port));
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  // Connection: close, so the response ends at end of file (HTTP/1.1 keeps it open else).
  const std::string request =
      method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size()));
  std::string response;
  char buffer[8192];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, n);
  ::close(fd);
  return response;
}
std::string HttpGet(int port, const std::string& path) { return HttpRequest(port, "GET", path); }

// Runs `promtool check metrics` on `text`; its output and exit status.
std::pair<std::string, int> PromtoolCheckMetrics(const std::string& text) {
  char path[] = "/tmp/numarena_example_metrics_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, text.data(), text.size()) == ssize_t(text.size()));
  ::close(fd);
  std::string out;
  FILE* pipe = ::popen((std::string("promtool check metrics < ") + path + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = ::pclose(pipe);
  ::unlink(path);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

int PortOf(const std::string& line) {
  std::smatch m;
  static const std::regex kUrl(R"(^metrics: http://127\.0\.0\.1:([0-9]+)/metrics$)");
  REQUIRE(std::regex_match(line, m, kUrl));
  return std::stoi(m[1]);
}

// Checks every line of a Prometheus text exposition; returns the samples by series
// ("name{labels}") and fills `families` with the TYPE of each family.
std::map<std::string, double> ParseExposition(const std::string& body,
                                              std::map<std::string, std::string>& families) {
  static const std::regex kHelp(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)");
  static const std::regex kType(
      R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")"
      R"((,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")*\})? (-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?|\+Inf|-Inf|NaN)$)");
  std::map<std::string, double> samples;
  std::istringstream in(body);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    INFO("line: " << line);
    if (std::regex_match(line, m, kType)) {
      CHECK(families.emplace(m[1], m[2]).second);  // one TYPE line per family
    } else if (!std::regex_match(line, kHelp)) {
      REQUIRE(std::regex_match(line, m, kSample));
      std::string name = m[1];
      // A histogram's series are its family's name plus _bucket, _sum or _count.
      static const std::regex kHistogramSeries(R"(^(.*)_(bucket|sum|count)$)");
      std::smatch h;
      if (std::regex_match(name, h, kHistogramSeries) && families.count(h[1]) == 1 &&
          families[h[1]] == "histogram") {
        name = h[1];
      }
      // A sample belongs to a declared family; counters end in _total.
      CHECK(families.count(name) == 1);
      if (families[name] == "counter") CHECK(name.size() > 6);
      if (families[name] == "counter") CHECK(name.substr(name.size() - 6) == "_total");
      const std::size_t space = line.rfind(' ');
      samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
  }
  return samples;
}

// "  requests: 20 submitted, 3 completed, ..." -> {"submitted": 20, "completed": 3, ...}
std::map<std::string, std::uint64_t> RequestCounts(const std::string& output) {
  std::map<std::string, std::uint64_t> counts;
  const std::size_t at = output.find("  requests: ");
  REQUIRE(at != std::string::npos);
  const std::string line = output.substr(at, output.find('\n', at) - at);
  static const std::regex kCount(R"(([0-9]+) ([a-z]+( [a-z]+)?))");
  for (auto it = std::sregex_iterator(line.begin(), line.end(), kCount);
       it != std::sregex_iterator(); ++it) {
    counts[(*it)[2]] = std::stoull((*it)[1]);
  }
  return counts;
}

void CheckSummary(const std::string& output) {
  INFO(output);
  CHECK(output.find("summary after ") != std::string::npos);
  CHECK(output.find(" 0 mismatches") != std::string::npos);
  CHECK(output.find("budget: ") != std::string::npos);
  // The KV placement audits: on this host's one node the kernel has nowhere to move pages.
  CHECK(std::regex_search(output, std::regex("[0-9]+ audits, 0 pages moved by the kernel, 0 "
                                             "moved back")));
  CHECK(output.find("KV placement audit stopped") == std::string::npos);
  auto c = RequestCounts(output);
  // Every submitted request is accounted for exactly once.
  CHECK(c["submitted"] == c["completed"] + c["queued at"] + c["running at"] + c["never fit"] +
                              c["queue full"] + c["failed"]);
}

}  // namespace

TEST_CASE("inference server: /metrics on loopback, SIGTERM stops it with a summary") {
  Server server({"--seconds", "15", "--rate", "50", "--kv-mib", "8", "--port", "0"});
  const std::string line = server.WaitForLine("metrics: http://", std::chrono::seconds(10));
  INFO(server.output());
  REQUIRE(!line.empty());
  const int port = PortOf(line);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let some requests arrive

  const std::string response = HttpGet(port, "/metrics");
  const std::size_t body_at = response.find("\r\n\r\n");
  REQUIRE(body_at != std::string::npos);
  const std::string headers = response.substr(0, body_at);
  CHECK(headers.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(headers.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  std::map<std::string, std::string> families;
  const auto samples = ParseExposition(response.substr(body_at + 4), families);
  for (const char* family :
       {"numarena_node_memory_total_bytes", "numarena_budget_capacity_bytes",
        "numarena_budget_state", "numarena_kv_blocks", "numarena_kv_prefix_hits_total",
        "numarena_kv_audits_total", "numarena_kv_kernel_moved_pages_total",
        "inference_server_requests_total", "inference_server_admission_later_total",
        "inference_server_tokens_total", "inference_server_queue_depth"}) {
    INFO(family);
    CHECK(families.count(family) == 1);
  }
  // The latency histograms: requests have arrived, been admitted and generated tokens in the
  // half second, so each has observations, its buckets cumulative up to le="+Inf" = _count.
  for (const char* histogram :
       {"inference_server_time_to_first_token_seconds",
        "inference_server_time_between_tokens_seconds", "inference_server_admission_wait_seconds"}) {
    INFO(histogram);
    CHECK(families[histogram] == "histogram");
    const std::string prefix = std::string(histogram) + "_bucket{node=\"0\",le=\"";
    std::vector<std::pair<double, double>> buckets;  // le, cumulative count
    for (const auto& [series, value] : samples) {
      if (series.rfind(prefix, 0) != 0) continue;
      const std::string le = series.substr(prefix.size(), series.size() - prefix.size() - 2);
      buckets.emplace_back(le == "+Inf" ? HUGE_VAL : std::stod(le), value);
    }
    std::sort(buckets.begin(), buckets.end());
    for (std::size_t i = 1; i < buckets.size(); ++i) CHECK(buckets[i].second >= buckets[i - 1].second);
    CHECK(buckets.size() == 17);  // 16 bounds and +Inf
    const auto count = samples.find(std::string(histogram) + "_count{node=\"0\"}");
    const auto inf = samples.find(std::string(histogram) + "_bucket{node=\"0\",le=\"+Inf\"}");
    REQUIRE(count != samples.end());
    REQUIRE(inf != samples.end());
    CHECK(count->second > 0);
    CHECK(inf->second == count->second);
  }
  // Prometheus's own linter on the real scrape.
  auto [lint, lint_status] = PromtoolCheckMetrics(response.substr(body_at + 4));
  INFO(lint);
  CHECK(lint_status == 0);

  // HEAD: the same status and type, no body (the hand-written endpoint answered 404).
  const std::string head = HttpRequest(port, "HEAD", "/metrics");
  CHECK(head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(head.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(head.find("numarena_") == std::string::npos);

  // Scrapers that connect and say nothing do not hold up the next one: the hand-written
  // endpoint served one connection at a time and waited 1 s for each silent one (4 s here).
  {
    std::vector<int> silent;
    for (int i = 0; i < 4; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      REQUIRE(fd >= 0);
      silent.push_back(fd);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      address.sin_port = htons(std::uint16_t(port));
      REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    }
    const auto begin = Clock::now();
    CHECK(HttpGet(port, "/metrics").rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(Clock::now() - begin < std::chrono::milliseconds(2500));
    for (int fd : silent) ::close(fd);
  }
  // The budget's capacity is the --kv-mib we asked for, on every serving node.
  int budget_nodes = 0;
  for (const auto& [series, value] : samples) {
    if (series.rfind("numarena_budget_capacity_bytes{", 0) != 0) continue;
    CHECK(value == 8.0 * 1024 * 1024);
    ++budget_nodes;
  }
  CHECK(budget_nodes >= 1);

  const std::string missing = HttpGet(port, "/nothing-here");
  CHECK(missing.rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);

  server.Signal(SIGTERM);
  REQUIRE(server.Wait(std::chrono::seconds(10)) == 0);
  CHECK(server.output().find("(stopped by signal)") != std::string::npos);
  CheckSummary(server.output());
  // Two GETs of /metrics (HEAD is not a scrape).
  CHECK(server.output().find("metrics scrapes served: 2\n") != std::string::npos);
}

TEST_CASE("inference server: a bounded run ends by itself and counts every request") {
  Server server({"--seconds", "2", "--rate", "100", "--requests", "20"});
  REQUIRE(server.Wait(std::chrono::seconds(15)) == 0);
  CheckSummary(server.output());
  CHECK(RequestCounts(server.output())["submitted"] == 20);
  CHECK(server.output().find("(stopped by signal)") == std::string::npos);
}

TEST_CASE("inference server: bad options exit 2 naming the option") {
  Server server({"--seconds", "soon"});
  CHECK(server.Wait(std::chrono::seconds(10)) == 2);
  CHECK(server.output().find("--seconds: 'soon' is not a non-negative number") !=
        std::string::npos);
  Server unknown({"--colour", "red"});
  CHECK(unknown.Wait(std::chrono::seconds(10)) == 2);
  CHECK(unknown.output().find("unknown option --colour") != std::string::npos);
}
