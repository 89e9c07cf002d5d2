// The HTTP endpoint serving `/metrics` on 127.0.0.1, for Prometheus to scrape.
//
// An HTTP server from a maintained library (cpp-httplib, Debian's libcpp-httplib-dev, as
// `numarena exporter` uses) on its own threads: HTTP/1.1 with keep-alive, several scrapers
// at once. It listens on the loopback address only, never on other interfaces: the figures
// describe the machine and the process, so exposing them further is a decision for a real
// server's configuration. `GET /metrics` answers 200 with the Prometheus text format
// (version 0.0.4); `HEAD /metrics` the same status and headers without the body; any other
// path 404; a render error 500 with the error text. `render` may be called from several
// threads at once.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "numarena/status.hpp"

namespace httplib {
class Server;
}

namespace inference_server {

class MetricsEndpoint {
 public:
  using Render = std::function<numarena::StatusOr<std::string>()>;

  // Binds 127.0.0.1:`port` (0: a free port the kernel picks) and starts serving.
  // Unavailable naming the port when it cannot be bound (in use, or not allowed).
  [[nodiscard]] static numarena::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(int port,
                                                                                  Render render);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Stops serving, within about a tenth of a second, and closes the socket; idempotent.
  void Stop();
  int port() const { return port_; }
  // GET /metrics requests answered 200 (HEAD requests are not scrapes).
  std::uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }

 private:
  MetricsEndpoint(Render render);

  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  Render render_;
  std::atomic<std::uint64_t> scrapes_{0};
  std::atomic<bool> listen_returned_{false};
  std::thread thread_;
};

}  // namespace inference_server
