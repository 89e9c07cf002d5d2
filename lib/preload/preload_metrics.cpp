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

// What StartMetrics read, kept for a forked child's restart (the child's environment may
// have changed since; the process's settings are the ones it started with).
struct MetricsSettings {
  int first_port = 0, last_port = 0;
  std::string port_text;  // as given, for messages
  std::string host;
  MetricsHttpServer::Handler render;
  void (*mark_thread_inside)() = nullptr;
};

// Both set once by StartMetrics, and in a forked child by the functions below; never freed
// (the server serves for the life of the process).
MetricsSettings* g_settings = nullptr;
MetricsThread* g_serving = nullptr;

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

// Listens on the first free port of the range and starts the thread that serves it. Returns
// what is wrong with an address that cannot be read; "" otherwise (every port taken is said
// on stderr: the program runs on).
std::string ListenAndServe(const MetricsSettings& settings) {
  StatusOr<std::unique_ptr<MetricsHttpServer>> server = absl::UnavailableError("no port tried");
  for (int port = settings.first_port; port <= settings.last_port; ++port) {
    server = MetricsHttpServer::Listen(MetricsListenAddress(settings.host, port), settings.render);
    if (server.ok()) break;
    if (absl::IsInvalidArgument(server.status())) {
      return "NUMARENA_METRICS_LISTEN='" + settings.host.substr(0, 64) + "': " +
             std::string(server.status().message());
    }
  }
  if (!server.ok()) {
    Say("serves no metrics: " +
        (settings.first_port == settings.last_port
             ? std::string(server.status().message())
             : "every port of " + settings.port_text + " is taken (the last: " +
                   std::string(server.status().message()) + ")"));
    return "";
  }
  auto* thread = new MetricsThread{*std::move(server), settings.mark_thread_inside};
  pthread_t id;
  pthread_attr_t attributes;
  if (pthread_attr_init(&attributes) != 0 ||
      pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED) != 0 ||
      pthread_create(&id, &attributes, ServeMetrics, thread) != 0) {
    Say("serves no metrics: no thread for them");
    delete thread;
    return "";
  }
  g_serving = thread;
  return "";
}

}  // namespace

std::string StartMetrics(Arena* arena, void (*mark_thread_inside)()) {
  const char* port_text = std::getenv("NUMARENA_METRICS_PORT");
  if (port_text == nullptr || *port_text == '\0') return "";
  auto settings = std::make_unique<MetricsSettings>();
  if (!ParsePortRange(port_text, &settings->first_port, &settings->last_port)) {
    return std::string("NUMARENA_METRICS_PORT='") + std::string(port_text).substr(0, 64) +
           "': a port (1-65535) or a range P-Q";
  }
  settings->port_text = port_text;
  const char* listen = std::getenv("NUMARENA_METRICS_LISTEN");
  settings->host = listen != nullptr && *listen != '\0' ? listen : "127.0.0.1";
  std::vector<std::string> devices = SplitCommas(std::getenv("NUMARENA_METRICS_DEVICES"));
  settings->render = [arena, devices]() -> StatusOr<std::string> {
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
  settings->mark_thread_inside = mark_thread_inside;
  g_settings = settings.release();
  return ListenAndServe(*g_settings);
}

bool AbandonMetricsInForkedChild() {
  if (g_settings == nullptr) return false;
  if (g_serving != nullptr) {
    g_serving->server->CloseInForkedChild();
    g_serving = nullptr;  // leaked: its thread is not in this process
  }
  return true;
}

void RestartMetricsInForkedChild() {
  // The address was read when the parent started: nothing can be wrong with it now.
  if (g_settings != nullptr) (void)ListenAndServe(*g_settings);
}

}  // namespace numarena::preload
