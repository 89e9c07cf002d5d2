// A small HTTP/1.x server for a `/metrics` endpoint: one thread, one poll() loop, no
// keep-alive. `numarena exporter` and the malloc override's NUMARENA_METRICS_PORT serve
// through it, and a server that links numarena::ops can too.
//
// Why its own loop: a scrape must not wait behind clients that connect and send nothing. Every
// connection is a buffer in the loop, so an idle one costs a file descriptor, not a thread
// or a turn; it is closed when it has not sent a whole request within the request timeout
// (5 s), or, once `max_connections` are open, when a new client needs its place (the
// oldest idle one goes first). A request whose sender half-closes the connection (shutdown
// SHUT_WR after the request, as `curl --http1.0` or `nc -N` may) is answered like any other.
//
// What it answers: GET and HEAD (HEAD: the same status and headers, no body) for "/metrics"
// (a query string is ignored) with the handler's text; 404 for another path, 405 for another
// method, 400 for a request line it cannot read, 431 for headers over 16 KiB. Every answer
// says "Connection: close" and the connection is closed once it is sent (a client that does
// not read its answer within the timeout is dropped).
//
//   auto server = numarena::MetricsHttpServer::Listen("127.0.0.1:9464", [] {
//     return numarena::RenderMetrics({});
//   });
//   if (!server.ok()) { print(server.status()); return 2; }
//   (*server)->Serve();                 // until Stop() from any thread or a signal handler
//
// Addresses: "HOST:PORT" with a numeric IPv4 address or "localhost", "[IPV6]:PORT", or
// "unix:PATH" for a Unix stream socket (a stale socket file left by a process that is gone
// is replaced; a live one is an error). PORT 0 lets the kernel pick; port() says which.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "numarena/status.hpp"

namespace numarena {

class MetricsHttpServer {
 public:
  // The body of a 200 answer, or an error whose message becomes a 500 answer's text.
  using Handler = std::function<StatusOr<std::string>()>;

  struct Options {
    int max_connections = 256;         // open at once; above, the oldest idle one is closed
    int request_timeout_ms = 5000;     // to send a whole request, and to read the answer
  };

  // Binds and listens (close-on-exec). InvalidArgument for an address it cannot read;
  // Unavailable (with the system's reason) when the address cannot be bound.
  [[nodiscard]] static StatusOr<std::unique_ptr<MetricsHttpServer>> Listen(
      const std::string& address, Handler handler, Options options);
  [[nodiscard]] static StatusOr<std::unique_ptr<MetricsHttpServer>> Listen(
      const std::string& address, Handler handler) {
    return Listen(address, std::move(handler), Options{});
  }

  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Answers requests until Stop(). Runs on the calling thread; call it once.
  void Serve();
  // Makes Serve() return soon. Async-signal-safe (one write() to a pipe), any thread.
  void Stop();

  // For the child of a fork(), where the thread that ran Serve() does not exist: closes the
  // child's copies of the listening socket and the wake pipe (close() only, async-signal-safe),
  // so that the child does not keep the parent's port open once the parent is gone. A Unix
  // socket's file is left to the parent. The object is spent afterwards: never serve it, and
  // leak it rather than destroy it in the child (Serve()'s state belonged to a thread that is
  // not there). Connections Serve() had accepted stay open in the child until it exits or
  // execs (they are close-on-exec); the parent answers and closes its side of them as usual.
  void CloseInForkedChild();

  // The TCP port listened on (the kernel's pick for port 0); 0 for a Unix socket.
  int port() const { return port_; }
  // What Listen() was given, with the picked port ("127.0.0.1:39211", "unix:/run/x.sock").
  const std::string& address() const { return address_; }

 private:
  MetricsHttpServer(int listener, int port, std::string address, std::string unix_path,
                    Handler handler, Options options);
  int listener_;
  int wake_read_ = -1, wake_write_ = -1;
  int port_;
  std::string address_;
  std::string unix_path_;  // removed by the destructor
  Handler handler_;
  Options options_;
};

// "HOST:PORT" from a listen address and a port, e.g. ("127.0.0.1", 9464) or ("::1", 9464)
// -> "[::1]:9464".
std::string MetricsListenAddress(const std::string& host, int port);

}  // namespace numarena
