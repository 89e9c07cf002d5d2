// The /metrics HTTP server (metrics_server.hpp): one poll() loop over the listener, a wake-up
// pipe and every open connection, each a small state machine (reading its request, then
// sending its answer, then closed).
#include "numarena/ops/metrics_server.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace numarena {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxRequestBytes = 16384;

struct Connection {
  int fd = -1;
  std::string request;
  std::string answer;
  std::size_t sent = 0;
  bool answering = false;
  Clock::time_point deadline;
  std::uint64_t accepted = 0;  // order of acceptance: the oldest idle one is evicted first
};

std::string Reason(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// Binds `address` (a filled sockaddr) and listens; the listening fd or -1 with errno set.
int BindAndListen(int family, const sockaddr* address, socklen_t length) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  const int yes = 1;
  // SO_REUSEADDR only: with SO_REUSEPORT a second server would bind the same port too and the
  // kernel would split the scrapes between them.
  if ((family == AF_UNIX || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) == 0) &&
      bind(fd, address, length) == 0 && listen(fd, 128) == 0) {
    return fd;
  }
  const int error = errno;
  close(fd);
  errno = error;
  return -1;
}

// A Unix socket file at `path` that no process listens on any more (connect is refused).
bool IsStaleSocket(const std::string& path, const sockaddr_un& address) {
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode)) return false;
  const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return false;
  const bool refused = connect(probe, reinterpret_cast<const sockaddr*>(&address),
                               sizeof address) != 0 &&
                       errno == ECONNREFUSED;
  close(probe);
  return refused;
}

std::string_view HeaderEnd(std::string_view request, std::size_t* end) {
  for (std::string_view mark : {std::string_view("\r\n\r\n"), std::string_view("\n\n")}) {
    if (auto at = request.find(mark); at != std::string_view::npos) {
      *end = at + mark.size();
      return request.substr(0, at);
    }
  }
  *end = std::string_view::npos;
  return {};
}

std::string Answer(int status, const char* reason, const char* type, const std::string& body,
                   bool head) {
  std::string text = absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ", type,
                                  "\r\nContent-Length: ", body.size(),
                                  "\r\nConnection: close\r\n\r\n");
  if (!head) text += body;
  return text;
}

// The answer to the request whose first line is `line`.
std::string AnswerRequest(std::string_view line, const MetricsHttpServer::Handler& handler) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const auto first_space = line.find(' ');
  const auto second_space = line.find(' ', first_space == line.npos ? line.npos : first_space + 1);
  if (first_space == line.npos || second_space == line.npos ||
      line.substr(second_space + 1).rfind("HTTP/1.", 0) != 0) {
    return Answer(400, "Bad Request", "text/plain", "not an HTTP/1.x request line\n", false);
  }
  const std::string_view method = line.substr(0, first_space);
  std::string_view path = line.substr(first_space + 1, second_space - first_space - 1);
  path = path.substr(0, path.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    return Answer(405, "Method Not Allowed", "text/plain", "GET or HEAD /metrics\n", false);
  }
  if (path != "/metrics") {
    return Answer(404, "Not Found", "text/plain", "numarena serves GET /metrics\n", head);
  }
  StatusOr<std::string> body = absl::InternalError("the metrics handler threw an exception");
  try {
    body = handler();
  } catch (...) {
  }
  if (!body.ok()) {
    return Answer(500, "Internal Server Error", "text/plain",
                  absl::StrCat(body.status().message(), "\n"), head);
  }
  return Answer(200, "OK", "text/plain; version=0.0.4; charset=utf-8", *body, head);
}

void CloseConnection(Connection& connection) {
  // Reads what the client sent beyond its request first: closing a socket with unread input
  // resets the connection, and the client may lose the answer it has not read yet.
  char sink[4096];
  while (recv(connection.fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  close(connection.fd);
  connection.fd = -1;
}

// Sends what the kernel takes now; true when the whole answer is out.
bool SendSome(Connection& connection) {
  while (connection.sent < connection.answer.size()) {
    const ssize_t n = send(connection.fd, connection.answer.data() + connection.sent,
                           connection.answer.size() - connection.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) return true;  // the client is gone: nothing more to send
    connection.sent += static_cast<std::size_t>(n);
  }
  shutdown(connection.fd, SHUT_WR);
  return true;
}

}  // namespace

std::string MetricsListenAddress(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Listen(const std::string& address,
                                                                       Handler handler,
                                                                       Options options) {
  if (options.max_connections < 1 || options.request_timeout_ms < 1) {
    return absl::InvalidArgumentError("metrics server: max_connections and the timeout must be > 0");
  }
  int listener = -1;
  int port = 0;
  std::string shown = address;
  std::string unix_path;
  if (address.rfind("unix:", 0) == 0) {
    unix_path = address.substr(5);
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    if (unix_path.empty() || unix_path.size() >= sizeof un.sun_path) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", address, "': a Unix socket path of 1 to ", sizeof un.sun_path - 1,
                       " bytes after 'unix:'"));
    }
    std::memcpy(un.sun_path, unix_path.data(), unix_path.size());
    if (IsStaleSocket(unix_path, un)) unlink(unix_path.c_str());
    listener = BindAndListen(AF_UNIX, reinterpret_cast<sockaddr*>(&un), sizeof un);
  } else {
    const auto colon = address.rfind(':');
    std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
    const std::string port_text = colon == std::string::npos ? "" : address.substr(colon + 1);
    char* end = nullptr;
    const long parsed = std::strtol(port_text.c_str(), &end, 10);
    if (port_text.empty() || *end != '\0' || parsed < 0 || parsed > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", address, "': HOST:PORT with a port from 0 to 65535, [IPV6]:PORT or unix:PATH"));
    }
    if (host == "localhost") host = "127.0.0.1";
    const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
    if (bracketed) host = host.substr(1, host.size() - 2);
    sockaddr_in in4{};
    sockaddr_in6 in6{};
    if (!bracketed && inet_pton(AF_INET, host.c_str(), &in4.sin_addr) == 1) {
      in4.sin_family = AF_INET;
      in4.sin_port = htons(static_cast<std::uint16_t>(parsed));
      listener = BindAndListen(AF_INET, reinterpret_cast<sockaddr*>(&in4), sizeof in4);
    } else if (inet_pton(AF_INET6, host.c_str(), &in6.sin6_addr) == 1) {
      in6.sin6_family = AF_INET6;
      in6.sin6_port = htons(static_cast<std::uint16_t>(parsed));
      listener = BindAndListen(AF_INET6, reinterpret_cast<sockaddr*>(&in6), sizeof in6);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("'", host, "': a numeric IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, "
                       "::1, ::) or localhost"));
    }
    if (listener >= 0) {
      sockaddr_storage bound{};
      socklen_t length = sizeof bound;
      if (getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
        port = ntohs(bound.ss_family == AF_INET
                         ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                         : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
      }
      shown = MetricsListenAddress(host, port);
    }
  }
  if (listener < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", std::strerror(errno)));
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(
      listener, port, std::move(shown), std::move(unix_path), std::move(handler), options));
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::UnavailableError(Reason("metrics server: pipe2"));
  }
  server->wake_read_ = wake[0];
  server->wake_write_ = wake[1];
  return server;
}

MetricsHttpServer::MetricsHttpServer(int listener, int port, std::string address,
                                     std::string unix_path, Handler handler, Options options)
    : listener_(listener),
      port_(port),
      address_(std::move(address)),
      unix_path_(std::move(unix_path)),
      handler_(std::move(handler)),
      options_(options) {}

MetricsHttpServer::~MetricsHttpServer() {
  if (listener_ >= 0) close(listener_);
  if (wake_read_ >= 0) close(wake_read_);
  if (wake_write_ >= 0) close(wake_write_);
  if (!unix_path_.empty()) unlink(unix_path_.c_str());
}

void MetricsHttpServer::CloseInForkedChild() {
  for (int* fd : {&listener_, &wake_read_, &wake_write_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void MetricsHttpServer::Stop() {
  const char byte = 1;
  ssize_t ignored = write(wake_write_, &byte, 1);
  (void)ignored;
}

void MetricsHttpServer::Serve() {
  const auto timeout = std::chrono::milliseconds(options_.request_timeout_ms);
  std::vector<Connection> connections;
  std::vector<pollfd> polled;
  std::uint64_t accepted = 0;
  for (;;) {
    polled.clear();
    polled.push_back({wake_read_, POLLIN, 0});
    polled.push_back({listener_, POLLIN, 0});
    auto now = Clock::now();
    auto next_deadline = Clock::time_point::max();
    for (const Connection& c : connections) {
      polled.push_back({c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    int wait_ms = -1;
    if (next_deadline != Clock::time_point::max()) {
      wait_ms = static_cast<int>(std::max<std::int64_t>(
          0, std::chrono::ceil<std::chrono::milliseconds>(next_deadline - now).count()));
    }
    if (poll(polled.data(), polled.size(), wait_ms) < 0 && errno != EINTR) {
      usleep(10000);  // ENOMEM: try again shortly
      continue;
    }
    if (polled[0].revents & POLLIN) {
      for (Connection& c : connections) CloseConnection(c);
      char drain[64];
      while (read(wake_read_, drain, sizeof drain) > 0) {
      }
      return;
    }
    now = Clock::now();
    for (std::size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      const short events = polled[i + 2].revents;
      if (events == 0) continue;
      if (c.answering) {
        if (SendSome(c)) CloseConnection(c);
        continue;
      }
      char buffer[4096];
      const ssize_t n = recv(c.fd, buffer, sizeof buffer, 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n > 0) c.request.append(buffer, static_cast<std::size_t>(n));
      std::size_t end = 0;
      std::string_view head = HeaderEnd(c.request, &end);
      if (end == std::string::npos && n == 0) {
        // Half-closed: the client sent all it will send; answer a whole request line.
        const auto line_end = c.request.find('\n');
        if (line_end != std::string::npos) head = std::string_view(c.request).substr(0, line_end);
      }
      if (n < 0 || (n == 0 && head.empty())) {
        CloseConnection(c);
        continue;
      }
      if (head.empty() && c.request.size() > kMaxRequestBytes) {
        c.answer = Answer(431, "Request Header Fields Too Large", "text/plain",
                          "request headers over 16 KiB\n", false);
      } else if (head.empty()) {
        continue;  // more to come
      } else {
        c.answer = AnswerRequest(head.substr(0, head.find('\n')), handler_);
      }
      c.answering = true;
      c.deadline = Clock::now() + timeout;
      if (SendSome(c)) CloseConnection(c);
    }
    connections.erase(std::remove_if(connections.begin(), connections.end(),
                                     [](const Connection& c) { return c.fd < 0; }),
                      connections.end());
    if (polled[1].revents & POLLIN) {
      for (;;) {
        const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;  // EAGAIN: all taken; EMFILE and the like: the next round
        if (connections.size() >= static_cast<std::size_t>(options_.max_connections)) {
          // Make room: the idle connection accepted first, else refuse the new one.
          auto oldest = connections.end();
          for (auto it = connections.begin(); it != connections.end(); ++it) {
            if (it->fd >= 0 && !it->answering &&
                (oldest == connections.end() || it->accepted < oldest->accepted)) {
              oldest = it;
            }
          }
          if (oldest == connections.end()) {
            close(fd);
            continue;
          }
          CloseConnection(*oldest);
          connections.erase(oldest);
        }
        Connection c;
        c.fd = fd;
        c.deadline = now + timeout;
        c.accepted = ++accepted;
        connections.push_back(std::move(c));
      }
    }
    now = Clock::now();
    for (Connection& c : connections) {
      if (c.fd >= 0 && c.deadline <= now) CloseConnection(c);
    }
    connections.erase(std::remove_if(connections.begin(), connections.end(),
                                     [](const Connection& c) { return c.fd < 0; }),
                      connections.end());
  }
}

}  // namespace numarena
