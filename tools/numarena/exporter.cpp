// `numarena exporter`: a standalone Prometheus exporter, so that a server that links nothing
// of numarena can be watched. An HTTP server (cpp-httplib, Debian's libcpp-httplib-dev) that
// answers GET and HEAD /metrics with one scrape, read afresh each time:
//   - the kernel's per-node numastat counters, node memory and CPUs, devices and their node
//     (the families of numarena::RenderMetrics, <numarena/ops/metrics.hpp>);
//   - the budget state a System-mode budget with the default thresholds gives each node
//     (numarena_budget_*{node}, the series the shipped alert rules watch);
//   - for each --pid: numarena_exporter_process_memory_bytes{pid,command,node,kind},
//     numarena_exporter_process_local_memory_ratio{pid,command} and
//     numarena_exporter_process_up{pid} (0 once the process is gone: the scrape goes on).
// numarena_exporter_scrape_duration_seconds says how long the scrape took. Any other path is
// 404; a scrape whose kernel files cannot be read is 500 with the reason as text.
//
//   numarena exporter [--port P] [--listen ADDR] [--pid PID ...] [--sysfs-root DIR]
//                     [--procfs-root DIR]
//
// Runs until SIGINT/SIGTERM, then exits 0. Exit 2 with one line on stderr when the port
// cannot be bound or an option is bad.
#include <CLI/CLI.hpp>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "budget_view.hpp"
#include "cli_options.hpp"
#include "command.hpp"
#include "numarena/ops/metrics.hpp"
#include "numarena/ops/stat.hpp"

namespace numarena::cli {
namespace {

struct ExporterOptions {
  std::string port = "9464";
  std::string listen = "127.0.0.1";
  std::vector<std::string> pids;
  MachineRoots roots;
};

// One scrape, or the reason it failed.
StatusOr<std::string> Scrape(const ExporterOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto reader = options.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return topology.status();
  ExpositionWriter out;
  auto counters = ReadNodeCounters(*reader, *topology);
  if (!counters.ok()) return counters.status();
  AppendNodeCounterMetrics(out, *counters);
  AppendTopologyMetrics(out, *topology);
  auto budget = SystemBudgetSnapshot(*topology, *reader);
  if (!budget.ok()) return budget.status();
  AppendBudgetMetrics(out, *budget);
  for (const std::string& pid : options.pids) {
    auto stat = StatProcess(*reader, *topology, pid);
    out.Family("numarena_exporter_process_up", MetricType::kGauge,
               "1 while the --pid process can be read, 0 once it is gone.");
    out.Sample({{"pid", pid}}, stat.ok() ? 1 : 0);
    if (!stat.ok()) continue;
    out.Family("numarena_exporter_process_memory_bytes", MetricType::kGauge,
               "Resident memory of a --pid process per node, from /proc/PID/numa_maps.");
    for (const auto& [node, usage] : stat->by_node) {
      const std::string n = absl::StrCat(node);
      const std::pair<const char*, std::uint64_t> kinds[] = {{"anonymous", usage.anonymous_bytes},
                                                             {"hugetlb", usage.hugetlb_bytes},
                                                             {"file", usage.file_bytes}};
      for (auto [kind, bytes] : kinds) {
        out.Sample({{"pid", pid}, {"command", stat->command}, {"node", n}, {"kind", kind}},
                   static_cast<double>(bytes));
      }
    }
    out.Family("numarena_exporter_process_local_memory_ratio", MetricType::kGauge,
               "Share of a --pid process's private memory on the nodes its threads run on.");
    out.Sample({{"pid", pid}, {"command", stat->command}}, stat->local_fraction);
  }
  out.Family("numarena_exporter_scrape_duration_seconds", MetricType::kGauge,
             "How long this scrape took to read the kernel files.");
  out.Sample(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out.Finish();
}

httplib::Server* g_server = nullptr;

void Stop(int) {
  if (g_server != nullptr) g_server->stop();
}

int RunExporter(const ExporterOptions& options) {
  auto port = ParseCount(options.port, 65535);
  if (!port || *port == 0) {
    return Fail("exporter", absl::StrCat("--port '", options.port,
                                         "': a TCP port number from 1 to 65535"));
  }
  for (const std::string& pid : options.pids) {
    if (pid != "self" && !ParseCount(pid, 999999999)) {
      return Fail("exporter", absl::StrCat("--pid '", pid, "': a process id, or 'self'"));
    }
  }
  // The first scrape before listening: a tree that cannot be read is an error now, not a
  // stream of 500s later.
  if (auto first = Scrape(options); !first.ok()) {
    return Fail("exporter", std::string(first.status().message()));
  }
  httplib::Server server;
  // httplib's default sets SO_REUSEPORT too, with which a second exporter on the same port
  // binds as well and the kernel splits the scrapes between the two: only SO_REUSEADDR.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // GET and HEAD (httplib answers HEAD from the GET handler, without the body).
  server.Get("/metrics", [&options](const httplib::Request&, httplib::Response& response) {
    auto text = Scrape(options);
    if (!text.ok()) {
      response.status = 500;
      response.set_content(absl::StrCat(text.status().message(), "\n"), "text/plain");
      return;
    }
    response.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
  });
  if (!server.bind_to_port(options.listen.c_str(), static_cast<int>(*port))) {
    return Fail("exporter", absl::StrCat("cannot listen on ", options.listen, ":", *port,
                                         " (in use, or not an address of this machine); choose "
                                         "another --port or --listen"));
  }
  g_server = &server;
  struct sigaction action {};
  action.sa_handler = Stop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::cerr << "numarena exporter: serving http://" << options.listen << ":" << *port
            << "/metrics\n";
  server.listen_after_bind();
  g_server = nullptr;
  return 0;
}

CommandRunner SetupExporter(CLI::App& app) {
  auto options = std::make_shared<ExporterOptions>();
  app.footer(
      "A Prometheus exporter: GET or HEAD /metrics gives node memory and numastat counters, "
      "devices and their node, the per-node budget state (default thresholds) and, for each "
      "--pid, the process's memory per node. Runs until SIGINT or SIGTERM.");
  app.add_option("--port", options->port, "TCP port (default 9464)")->type_name("P");
  app.add_option("--listen", options->listen,
                 "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
      ->type_name("ADDR");
  app.add_option("--pid", options->pids, "a process to report per node (repeatable; or 'self')")
      ->type_name("PID")
      ->expected(1, 1 << 20);
  options->roots.AddTo(app);
  return [options] { return RunExporter(*options); };
}

}  // namespace
}  // namespace numarena::cli

NUMARENA_COMMAND(exporter, "Prometheus exporter: node memory, budget, per-process node usage",
                 numarena::cli::SetupExporter);
