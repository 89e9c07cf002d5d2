// `numarena exporter` end to end on loopback: the real program, asked by curl with GET and
// HEAD, its scrape checked by Prometheus's own promtool (Debian's prometheus package), and
// stopped by SIGTERM.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace {

// A TCP port free on loopback now (the kernel's pick for port 0).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  close(fd);
  return ntohs(address.sin_port);
}

// Runs a shell command; its stdout and exit status.
std::pair<std::string, int> Shell(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int status = pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

struct Exporter {
  pid_t pid = -1;
  std::string url;

  explicit Exporter(int port) {
    url = "http://127.0.0.1:" + std::to_string(port);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const std::string p = std::to_string(port);
      execl(NUMARENA_CLI, "numarena", "exporter", "--port", p.c_str(), "--pid", "self", "--pid",
            "999999999", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 200; ++i) {  // up to 20 s to listen
      if (Shell("curl -s -o /dev/null " + url + "/metrics").second == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL("the exporter did not answer on " << url);
  }
  int Stop() {
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~Exporter() {
    if (pid > 0) Stop();
  }
};

TEST_CASE("exporter: GET and HEAD /metrics on loopback, promtool accepts the scrape",
          "[cli][exporter]") {
  Exporter exporter(FreePort());
  auto [get, get_status] =
      Shell("curl -s -D - -o /dev/stdout " + exporter.url + "/metrics");
  REQUIRE(get_status == 0);
  INFO(get.substr(0, 2000));
  CHECK(get.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(get.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  for (const char* series :
       {"\nnumarena_node_memory_total_bytes{node=\"0\"} ", "\nnumarena_budget_state{node=\"0\",",
        "\nnumarena_budget_usage_ratio{node=\"0\"} ",
        "\nnumarena_kernel_numa_hit_total{node=\"0\"} ",
        "\nnumarena_process_memory_bytes{command=\"numarena\",node=\"0\",kind=\"anonymous\"} ",
        "\nnumarena_process_local_memory_ratio{command=\"numarena\"} ",
        "\nnumarena_build_info{version=\"",
        "\nnumarena_exporter_targets{state=\"up\"} 1\n",
        "\nnumarena_exporter_targets{state=\"gone\"} 1\n"}) {
    INFO(series);
    CHECK(get.find(series) != std::string::npos);
  }

  // HEAD: the same status and type, no body (the hand-written endpoint answered 404).
  auto [head, head_status] = Shell("curl -s -I " + exporter.url + "/metrics");
  REQUIRE(head_status == 0);
  CHECK(head.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(head.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(head.find("numarena_") == std::string::npos);

  auto [missing, missing_status] =
      Shell("curl -s -o /dev/null -w '%{http_code}' " + exporter.url + "/other");
  CHECK(missing == "404");

  // Prometheus's own linter on the real scrape.
  auto [lint, lint_status] =
      Shell("curl -s " + exporter.url + "/metrics | promtool check metrics 2>&1");
  INFO(lint);
  CHECK(lint_status == 0);

  CHECK(exporter.Stop() == 0);
}

TEST_CASE("exporter: a port in use or a bad option is one line on stderr, exit 2",
          "[cli][exporter]") {
  Exporter first(FreePort());
  const std::string port = first.url.substr(first.url.rfind(':') + 1);
  // Under timeout: an exporter that wrongly binds the taken port would serve forever.
  auto [out, status] = Shell(std::string("timeout -k 2 10 '") + NUMARENA_CLI +
                             "' exporter --port " + port + " 2>&1 >/dev/null");
  CHECK(status == 2);
  CHECK(out == "numarena exporter: cannot listen on 127.0.0.1:" + port +
                   " (in use, or not an address of this machine); choose another --port or "
                   "--listen\n");
  auto [bad, bad_status] =
      Shell(std::string("'") + NUMARENA_CLI + "' exporter --port 70000 2>&1 >/dev/null");
  CHECK(bad_status == 2);
  CHECK(bad == "numarena exporter: --port '70000': a TCP port number from 1 to 65535\n");
}

}  // namespace
