// `numarena exporter`: a standalone Prometheus exporter, so that a server that links nothing
// of numarena can be watched. It answers GET and HEAD /metrics (numarena::MetricsHttpServer,
// <numarena/ops/metrics_server.hpp>: idle clients never delay a scrape) with one scrape, read
// afresh each time, under the same metric names as a process's own endpoint:
//   - numarena_build_info{version};
//   - the kernel's per-node numastat counters, node memory and CPUs, devices and their node
//     (the families of numarena::RenderMetrics, <numarena/ops/metrics.hpp>);
//   - the budget state a System-mode budget with the default thresholds gives each node
//     (numarena_budget_*{node}, the series the shipped alert rules watch);
//   - with --pid (and --tree: every descendant of each --pid too, e.g. the workers of a
//     multi-process server): numarena_processes{command},
//     numarena_process_memory_bytes{command,node,kind} and
//     numarena_process_local_memory_ratio{command} (the processes of one command summed),
//     numarena_device_distance{command,bus_id,kind} for each --device, and
//     numarena_exporter_targets{state="up"|"gone"} (a process that is gone does not stop the
//     scrape).
// numarena_exporter_scrape_duration_seconds says how long the scrape took. Any other path is
// 404; a scrape whose kernel files cannot be read is 500 with the reason as text.
//
//   numarena exporter [--port P] [--listen ADDR] [--pid PID ... [--tree]] [--device BUS_ID ...]
//                     [--sysfs-root DIR] [--procfs-root DIR]
//
// Runs until SIGINT/SIGTERM, then exits 0. Exit 2 with one line on stderr when the port
// cannot be bound or an option is bad.
#include <CLI/CLI.hpp>
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
#include "numarena/ops/metrics_server.hpp"
#include "numarena/ops/stat.hpp"

namespace numarena::cli {
namespace {

struct ExporterOptions {
  std::string port = "9464";
  std::string listen = "127.0.0.1";
  std::vector<std::string> pids;
  std::vector<std::string> devices;
  bool tree = false;
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
  AppendBuildInfo(out);
  AppendNodeCounterMetrics(out, *counters);
  AppendTopologyMetrics(out, *topology);
  auto budget = SystemBudgetSnapshot(*topology, *reader);
  if (!budget.ok()) return budget.status();
  AppendBudgetMetrics(out, *budget);
  std::vector<ProcessNumaStat> targets;
  std::size_t targets_up = 0;
  for (const std::string& pid : options.pids) {
    auto stat = StatProcess(*reader, *topology, pid);
    if (!stat.ok()) continue;
    ++targets_up;
    targets.push_back(*std::move(stat));
    if (!options.tree) continue;
    for (const std::string& child : ProcessDescendants(*reader, pid)) {
      auto child_stat = StatProcess(*reader, *topology, child);
      if (child_stat.ok()) targets.push_back(*std::move(child_stat));  // else: exited since
    }
  }
  if (!options.pids.empty()) {
    AppendProcessMetrics(out, *topology, targets, options.devices);
    out.Family("numarena_exporter_targets", MetricType::kGauge,
               "The --pid processes: readable now (up) or gone.");
    out.Sample({{"state", "up"}}, static_cast<double>(targets_up));
    out.Sample({{"state", "gone"}}, static_cast<double>(options.pids.size() - targets_up));
  }
  out.Family("numarena_exporter_scrape_duration_seconds", MetricType::kGauge,
             "How long this scrape took to read the kernel files.");
  out.Sample(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out.Finish();
}

MetricsHttpServer* g_server = nullptr;

void Stop(int) {
  if (g_server != nullptr) g_server->Stop();
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
  const std::string address = MetricsListenAddress(options.listen, static_cast<int>(*port));
  auto server = MetricsHttpServer::Listen(address, [&options] { return Scrape(options); });
  if (!server.ok()) {
    if (absl::IsInvalidArgument(server.status())) {
      return Fail("exporter", absl::StrCat("--listen ", server.status().message()));
    }
    return Fail("exporter", absl::StrCat("cannot listen on ", options.listen, ":", *port,
                                         " (in use, or not an address of this machine); choose "
                                         "another --port or --listen"));
  }
  g_server = server->get();
  struct sigaction action {};
  action.sa_handler = Stop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::cerr << "numarena exporter: serving http://" << (*server)->address() << "/metrics\n";
  (*server)->Serve();
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
  app.add_flag("--tree", options->tree,
               "each --pid with all its descendants (the workers of `numarena run -- vllm "
               "serve ...`), summed per command");
  app.add_option("--device", options->devices,
                 "bus id of a GPU or NIC the --pid processes use (repeatable): reports "
                 "numarena_device_distance, which the DeviceOnRemoteNumaNode alert watches")
      ->type_name("BUS_ID")
      ->expected(1, 1 << 20);
  options->roots.AddTo(app);
  return [options] { return RunExporter(*options); };
}

}  // namespace
}  // namespace numarena::cli

NUMARENA_COMMAND(exporter, "Prometheus exporter: node memory, budget, per-process node usage",
                 numarena::cli::SetupExporter);
