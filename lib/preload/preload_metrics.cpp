// NUMARENA_METRICS_PORT for libnumarena_preload.so (preload_metrics.hpp).
#include "preload/preload_metrics.hpp"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/ops/metrics.hpp"
#include "numarena/ops/metrics_server.hpp"

namespace numarena::preload {
namespace {

struct MetricsThread {
  std::unique_ptr<MetricsHttpServer> server;
  void (*mark_thread_inside)();
};

void* ServeMetrics(void* raw) {
  auto* thread = static_cast<MetricsThread*>(raw);
  thread->mark_thread_inside();
  thread->server->Serve();  // for the life of the process
  return nullptr;
}

// "P" or "P-Q" (1 <= P <= Q <= 65535); false when it is neither.
bool ParsePortRange(std::string_view text, int* first, int* last) {
  auto number = [](std::string_view digits, int* out) {
    if (digits.empty() || digits.size() > 5) return false;
    int value = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    *out = value;
    return value >= 1 && value <= 65535;
  };
  const auto dash = text.find('-');
  if (dash == std::string_view::npos) return number(text, first) && number(text, last);
  return number(text.substr(0, dash), first) && number(text.substr(dash + 1), last) &&
         *first <= *last;
}

std::vector<std::string> SplitCommas(const char* text) {
  std::vector<std::string> parts;
  if (text == nullptr) return parts;
  std::string_view rest(text);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    if (comma != 0) parts.emplace_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return parts;
}

void Say(const std::string& message) {
  const std::string line = "numarena preload: pid " + std::to_string(getpid()) + " " + message + "\n";
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace

std::string StartMetrics(Arena* arena, void (*mark_thread_inside)()) {
  const char* port_text = std::getenv("NUMARENA_METRICS_PORT");
  if (port_text == nullptr || *port_text == '\0') return "";
  int first = 0, last = 0;
  if (!ParsePortRange(port_text, &first, &last)) {
    return std::string("NUMARENA_METRICS_PORT='") + std::string(port_text).substr(0, 64) +
           "': a port (1-65535) or a range P-Q";
  }
  const char* listen = std::getenv("NUMARENA_METRICS_LISTEN");
  const std::string host = listen != nullptr && *listen != '\0' ? listen : "127.0.0.1";
  std::vector<std::string> devices = SplitCommas(std::getenv("NUMARENA_METRICS_DEVICES"));
  auto render = [arena, devices]() -> StatusOr<std::string> {
    MetricsSources sources;
    sources.arenas = {arena};
    sources.served_devices = devices;
    BudgetSnapshot snapshot;
    if (auto* budget = dynamic_cast<Budget*>(GetCapacityGate())) {
      snapshot = budget->Snapshot();
      sources.budget = &snapshot;
    }
    return RenderMetrics(sources);
  };
  StatusOr<std::unique_ptr<MetricsHttpServer>> server = absl::UnavailableError("no port tried");
  for (int port = first; port <= last; ++port) {
    server = MetricsHttpServer::Listen(MetricsListenAddress(host, port), render);
    if (server.ok()) break;
    if (absl::IsInvalidArgument(server.status())) {
      return "NUMARENA_METRICS_LISTEN='" + host.substr(0, 64) + "': " +
             std::string(server.status().message());
    }
  }
  if (!server.ok()) {
    Say("serves no metrics: " +
        (first == last ? std::string(server.status().message())
                       : "every port of " + std::string(port_text) + " is taken (the last: " +
                             std::string(server.status().message()) + ")"));
    return "";
  }
  // Lives as long as the process: the thread serves until the process ends.
  auto* thread = new MetricsThread{*std::move(server), mark_thread_inside};
  pthread_t id;
  pthread_attr_t attributes;
  if (pthread_attr_init(&attributes) != 0 ||
      pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED) != 0 ||
      pthread_create(&id, &attributes, ServeMetrics, thread) != 0) {
    Say("serves no metrics: no thread for them");
    delete thread;
  }
  return "";
}

}  // namespace numarena::preload
