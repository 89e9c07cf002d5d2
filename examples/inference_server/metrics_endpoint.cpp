// The /metrics HTTP endpoint: a poll/accept loop on a loopback socket.
#include "metrics_endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace inference_server {
namespace {

numarena::Status SocketError(const char* call, int port) {
  return absl::UnavailableError(
      std::string("metrics endpoint: ") + call + " on 127.0.0.1:" + std::to_string(port) +
      " failed: " + std::strerror(errno) + " (choose another --port, or 0 for any free port)");
}

void SendAll(int fd, const std::string& data) {
  for (std::size_t sent = 0; sent < data.size();) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the scraper went away; nothing to do about it
    sent += std::size_t(n);
  }
}

std::string Response(const char* status, const char* content_type, const std::string& body) {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

numarena::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(int port,
                                                                            Render render) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return SocketError("socket", port);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // 127.0.0.1 only
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, 16) != 0) {
    auto error = SocketError("bind/listen", port);
    ::close(fd);
    return error;
  }
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    auto error = SocketError("getsockname", port);
    ::close(fd);
    return error;
  }
  auto endpoint = std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(fd, ntohs(address.sin_port), std::move(render)));
  endpoint->thread_ = std::thread([e = endpoint.get()] { e->Serve(); });
  return endpoint;
}

MetricsEndpoint::MetricsEndpoint(int listener, int port, Render render)
    : listener_(listener), port_(port), render_(std::move(render)) {}

void MetricsEndpoint::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
  if (listener_ >= 0) ::close(listener_);
  listener_ = -1;
}

void MetricsEndpoint::Serve() {
  while (!stop_.load(std::memory_order_relaxed)) {
    pollfd waiting{listener_, POLLIN, 0};
    // A timeout rather than blocking in accept, so Stop() needs no signal or extra pipe.
    if (::poll(&waiting, 1, 100) <= 0) continue;
    const int connection = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    ::close(connection);
  }
}

void MetricsEndpoint::Answer(int connection) {
  // A scraper that connects and says nothing must not hold up the loop (or Stop()).
  timeval timeout{1, 0};
  ::setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 8192) {
    const ssize_t n = ::recv(connection, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    request.append(buffer, std::size_t(n));
  }
  const std::string line = request.substr(0, request.find("\r\n"));
  // "GET /metrics HTTP/1.1", also with a query string ("GET /metrics?x=y HTTP/1.1").
  const bool metrics = line.rfind("GET /metrics ", 0) == 0 || line.rfind("GET /metrics?", 0) == 0;
  if (!metrics) {
    SendAll(connection, Response("404 Not Found", "text/plain", "only GET /metrics is here\n"));
    return;
  }
  auto text = render_();
  if (!text.ok()) {
    SendAll(connection, Response("500 Internal Server Error", "text/plain",
                                 std::string(text.status().message()) + "\n"));
    return;
  }
  scrapes_.fetch_add(1, std::memory_order_relaxed);
  SendAll(connection, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", *text));
}

}  // namespace inference_server
