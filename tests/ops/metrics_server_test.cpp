// numarena::MetricsHttpServer (ops/metrics_server.hpp) on loopback and on a Unix socket: what
// it answers, what it refuses, and that idle or oversized clients cannot hold a scrape up.
#include "numarena/ops/metrics_server.hpp"

#include <catch2/catch.hpp>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using numarena::MetricsHttpServer;

// Serve() on a thread for the life of the object.
struct Running {
  std::unique_ptr<MetricsHttpServer> server;
  std::thread thread;
  explicit Running(std::unique_ptr<MetricsHttpServer> s) : server(std::move(s)) {
    thread = std::thread([this] { server->Serve(); });
  }
  ~Running() {
    server->Stop();
    thread.join();
  }
};

int ConnectTcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

// Sends `request` on `fd`, half-closes, and returns everything read until the server closes.
std::string Exchange(int fd, const std::string& request) {
  if (!request.empty()) REQUIRE(send(fd, request.data(), request.size(), MSG_NOSIGNAL) > 0);
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof buffer, 0)) > 0) answer.append(buffer, n);
  close(fd);
  return answer;
}

std::string Get(int port, const std::string& request) {
  return Exchange(ConnectTcp(port), request);
}

MetricsHttpServer::Handler Text(const std::string& text) {
  return [text] { return numarena::StatusOr<std::string>(text); };
}

TEST_CASE("metrics server: GET, HEAD, 404, 405, 400 and the handler's errors", "[metrics]") {
  auto listening = MetricsHttpServer::Listen("127.0.0.1:0", Text("up 1\n"));
  REQUIRE(listening.ok());
  const int port = (*listening)->port();
  CHECK(port > 0);
  CHECK((*listening)->address() == "127.0.0.1:" + std::to_string(port));
  Running running(*std::move(listening));

  const std::string ok = Get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.find("Content-Length: 5\r\n") != std::string::npos);
  CHECK(ok.find("Connection: close\r\n") != std::string::npos);
  CHECK(ok.substr(ok.size() - 5) == "up 1\n");
  CHECK(Get(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
  const std::string head = Get(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  CHECK(head.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(head.find("Content-Length: 5\r\n") != std::string::npos);
  CHECK(head.find("up 1") == std::string::npos);
  CHECK(Get(port, "GET /other HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(Get(port, "DELETE /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
  CHECK(Get(port, "GET /metrics\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(Get(port, std::string(20000, 'a')).rfind("HTTP/1.1 431", 0) == 0);
  // Half-closed after the request line only: still a request.
  CHECK(Get(port, "GET /metrics HTTP/1.0\r\n").rfind("HTTP/1.1 200", 0) == 0);
  // Nothing sent, then closed: no answer, and the server goes on.
  CHECK(Get(port, "").empty());
  CHECK(Get(port, "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("metrics server: a failing or throwing handler is a 500 with its reason",
          "[metrics]") {
  auto failing = MetricsHttpServer::Listen(
      "127.0.0.1:0", [] { return numarena::StatusOr<std::string>(absl::NotFoundError("gone")); });
  REQUIRE(failing.ok());
  const int port = (*failing)->port();
  Running running(*std::move(failing));
  const std::string answer = Get(port, "GET /metrics HTTP/1.1\r\n\r\n");
  CHECK(answer.rfind("HTTP/1.1 500", 0) == 0);
  CHECK(answer.substr(answer.size() - 5) == "gone\n");

  auto throwing = MetricsHttpServer::Listen("127.0.0.1:0", []() -> numarena::StatusOr<std::string> {
    throw std::runtime_error("boom");
  });
  REQUIRE(throwing.ok());
  const int port2 = (*throwing)->port();
  Running running2(*std::move(throwing));
  CHECK(Get(port2, "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 500", 0) == 0);
}

TEST_CASE("metrics server: idle clients neither delay a scrape nor hold their place forever",
          "[metrics]") {
  MetricsHttpServer::Options options;
  options.max_connections = 8;
  options.request_timeout_ms = 300;
  auto listening = MetricsHttpServer::Listen("127.0.0.1:0", Text("x 1\n"), options);
  REQUIRE(listening.ok());
  const int port = (*listening)->port();
  Running running(*std::move(listening));

  // Twice the connection limit, all idle: the newest push the oldest out, and a scrape is
  // answered at once.
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(ConnectTcp(port));
  const auto start = std::chrono::steady_clock::now();
  CHECK(Get(port, "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  // After the request timeout every idle connection has been closed by the server.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  for (int fd : idle) {
    char byte;
    CHECK(recv(fd, &byte, 1, 0) == 0);  // orderly close, no answer
    close(fd);
  }
}

TEST_CASE("metrics server: addresses, a Unix socket, a stale socket file, a taken port",
          "[metrics]") {
  for (const char* bad : {"127.0.0.1", "127.0.0.1:70000", "example.com:80", "unix:", ":80"}) {
    INFO(bad);
    auto server = MetricsHttpServer::Listen(bad, Text(""));
    CHECK(absl::IsInvalidArgument(server.status()));
  }
  auto v6 = MetricsHttpServer::Listen("[::1]:0", Text(""));
  if (v6.ok()) CHECK((*v6)->address().rfind("[::1]:", 0) == 0);  // hosts without IPv6: skip

  auto first = MetricsHttpServer::Listen("127.0.0.1:0", Text(""));
  REQUIRE(first.ok());
  auto taken = MetricsHttpServer::Listen("127.0.0.1:" + std::to_string((*first)->port()), Text(""));
  CHECK(absl::IsUnavailable(taken.status()));
  CHECK(std::string(taken.status().message()).find("Address already in use") != std::string::npos);

  const std::string path = "/tmp/numarena_metrics_server_test." + std::to_string(getpid());
  std::remove(path.c_str());
  {
    // A socket file left by a process that is gone: bound and listened on, never accepted.
    const int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
    REQUIRE(bind(stale, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    close(stale);  // the file stays, nobody listens
  }
  auto unix_server = MetricsHttpServer::Listen("unix:" + path, Text("u 1\n"));
  REQUIRE(unix_server.ok());
  CHECK((*unix_server)->port() == 0);
  // A live one is not taken over.
  CHECK(absl::IsUnavailable(MetricsHttpServer::Listen("unix:" + path, Text("")).status()));
  {
    Running running(*std::move(unix_server));
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    CHECK(Exchange(fd, "GET /metrics HTTP/1.1\r\n\r\n").find("\r\n\r\nu 1\n") != std::string::npos);
  }
  struct stat info {};
  CHECK(lstat(path.c_str(), &info) != 0);  // removed with the server
  // A regular file at the path is never replaced.
  std::fclose(std::fopen(path.c_str(), "w"));
  CHECK(absl::IsUnavailable(MetricsHttpServer::Listen("unix:" + path, Text("")).status()));
  CHECK(lstat(path.c_str(), &info) == 0);
  std::remove(path.c_str());
}

TEST_CASE("metrics server: a forked child closes its copy of the listening socket",
          "[metrics]") {
  auto server = MetricsHttpServer::Listen("127.0.0.1:0", Text(""));
  REQUIRE(server.ok());
  const int port = (*server)->port();
  int closed[2], hold[2];
  REQUIRE(pipe(closed) == 0);
  REQUIRE(pipe(hold) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    (*server)->CloseInForkedChild();
    (void)server->release();  // spent in the child: leaked, as the method asks
    close(hold[1]);
    const char byte = 1;
    ssize_t ignored = write(closed[1], &byte, 1);
    char wait_for_parent;
    ignored = read(hold[0], &wait_for_parent, 1);  // alive until the parent has checked
    (void)ignored;
    _exit(0);
  }
  char byte;
  REQUIRE(read(closed[0], &byte, 1) == 1);
  server->reset();  // the parent's copy; the child, still alive, must hold none
  auto again = MetricsHttpServer::Listen("127.0.0.1:" + std::to_string(port), Text(""));
  CHECK(again.ok());
  close(hold[1]);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  for (int fd : {closed[0], closed[1], hold[0]}) close(fd);
}

}  // namespace
