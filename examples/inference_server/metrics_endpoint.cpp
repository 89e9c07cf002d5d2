// The /metrics HTTP endpoint on cpp-httplib.
#include "metrics_endpoint.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>

namespace inference_server {

MetricsEndpoint::MetricsEndpoint(Render render)
    : server_(std::make_unique<httplib::Server>()), render_(std::move(render)) {}

numarena::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(int port,
                                                                            Render render) {
  auto endpoint = std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(render)));
  httplib::Server& server = *endpoint->server_;
  // httplib's default sets SO_REUSEPORT too, with which a second server on the same port
  // binds as well and the kernel splits the scrapes between the two: only SO_REUSEADDR.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // GET and HEAD (httplib answers HEAD from the GET handler, without the body).
  server.Get("/metrics", [e = endpoint.get()](const httplib::Request& request,
                                              httplib::Response& response) {
    auto text = e->render_();
    if (!text.ok()) {
      response.status = 500;
      response.set_content(std::string(text.status().message()) + "\n", "text/plain");
      return;
    }
    if (request.method == "GET") e->scrapes_.fetch_add(1, std::memory_order_relaxed);
    response.set_content(*std::move(text), "text/plain; version=0.0.4; charset=utf-8");
  });
  const bool bound = port == 0 ? (endpoint->port_ = server.bind_to_any_port("127.0.0.1")) > 0
                               : server.bind_to_port("127.0.0.1", port);
  if (!bound) {
    return absl::UnavailableError("metrics endpoint: cannot listen on 127.0.0.1:" +
                                  std::to_string(port) +
                                  " (in use?); choose another --port, or 0 for any free port");
  }
  if (port != 0) endpoint->port_ = port;
  endpoint->thread_ = std::thread([e = endpoint.get()] {
    e->server_->listen_after_bind();
    e->listen_returned_.store(true);
  });
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() { Stop(); }

void MetricsEndpoint::Stop() {
  if (!thread_.joinable()) return;
  // httplib's stop() does nothing until its accept loop runs (is_running()): a Stop() right
  // after Start() waits for that, or for the loop to have ended on its own.
  while (!server_->is_running() && !listen_returned_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->stop();
  thread_.join();
}

}  // namespace inference_server
