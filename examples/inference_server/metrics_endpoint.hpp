// A minimal HTTP endpoint serving `GET /metrics` on 127.0.0.1, for Prometheus to scrape.
//
// One thread, plain POSIX sockets, one request per connection (`Connection: close`): enough
// for a scraper that calls every few seconds, and short enough to read. It listens on the
// loopback address only, never on other interfaces: the figures describe the machine and
// the process, so exposing them further is a decision for a real server's configuration.
// `GET /metrics` answers 200 with the Prometheus text format (version 0.0.4); any other
// request line answers 404; a render error answers 500 with the error text.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "numarena/status.hpp"

namespace inference_server {

class MetricsEndpoint {
 public:
  using Render = std::function<numarena::StatusOr<std::string>()>;

  // Binds 127.0.0.1:`port` (0: a free port the kernel picks) and starts serving. Errors name
  // the socket call that failed and the port.
  [[nodiscard]] static numarena::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(int port,
                                                                                  Render render);
  ~MetricsEndpoint() { Stop(); }
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Stops within about 100 ms (the accept loop polls the stop flag) and closes the socket.
  void Stop();
  int port() const { return port_; }
  std::uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }

 private:
  MetricsEndpoint(int listener, int port, Render render);
  void Serve();
  void Answer(int connection);

  int listener_ = -1;
  int port_ = 0;
  Render render_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> scrapes_{0};
  std::thread thread_;
};

}  // namespace inference_server
