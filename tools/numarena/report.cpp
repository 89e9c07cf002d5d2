// `numarena report`: the whole NUMA picture of this machine on one screen.
//
//   numarena report [--json] [--no-bandwidth] [--sysfs-root DIR] [--procfs-root DIR]
//
// Sections: topology (nodes, CPUs, memory, distances), devices with their node, what this
// process may use, the doctor's audit, the budget view (System mode, default thresholds),
// a quick bandwidth/latency matrix (one pinned thread per node, 64 MiB arrays, about one
// second of timing; skipped on fixture trees and with --no-bandwidth), and the recommended
// binding of each GPU (of each node when there is none). Finishes in well under 30 s.
// Exit 0, or 2 with one line on stderr when discovery fails.
//
// --json: {"schema": "numarena.report/1",
//          "nodes": [{"id", "cpus": [int], "mem_total_bytes", "mem_free_bytes"}],
//          "distances": [[int]],
//          "devices": [{"bus_id", "kind", "node": int | null}],
//          "process": {"allowed_cpus": [int], "allowed_mem_nodes": [int]},
//          "warnings": [str],
//          "kernel_memory": null | {...}  as in numarena.topo/1 (ops_format.hpp),
//          "doctor": {"healthy", "problems", "findings": [{"id", "severity", "subject",
//                     "observed", "expected", "fix"}]},
//          "budget": <numarena.budget/1 object> | null,
//          "bandwidth": null | {"buffer_bytes", "cells": [{"cpu_node", "memory_node",
//                       "distance", "read_bytes_per_second", "latency_ns"}]},
//          "bindings": [{"target", "memory_node", "cpus": [int], "numactl", "docker"}]}
#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
#include <iostream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "budget_view.hpp"
#include "command.hpp"
#include "numarena/format.hpp"
#include "numarena/ops/advise.hpp"
#include "numarena/ops/bandwidth.hpp"
#include "numarena/ops/doctor.hpp"
#include "numarena/ops/json.hpp"
#include "cli_options.hpp"
#include "ops_format.hpp"

namespace numarena::cli {
namespace {

struct ReportOptions {
  bool json = false;
  bool no_bandwidth = false;
  MachineRoots roots;
};

struct ReportData {
  StatusOr<KernelMemorySettings> kernel_memory = absl::UnknownError("not read");
  DoctorReport doctor;
  std::optional<BudgetSnapshot> budget;
  std::string budget_error;
  std::optional<BandwidthMatrix> bandwidth;
  std::string bandwidth_note;
  std::vector<Advice> bindings;
};

void Section(std::ostream& out, const char* title) { out << "\n== " << title << " ==\n"; }

void PrintText(std::ostream& out, const Topology& topo, const ReportData& d) {
  out << "numarena report\n";
  Section(out, "topology");
  for (const NodeInfo& n : topo.nodes()) {
    out << absl::StrFormat("node %-3d cpus %-24s memory %10s  free %10s%s\n", n.id,
                           n.cpus.empty() ? "-" : FormatIdList(n.cpus),
                           FormatBytes(n.mem_total_bytes), FormatBytes(n.mem_free_bytes),
                           n.memory_only() ? "  (memory-only)" : "");
  }
  out << "distances:";
  for (const NodeInfo& n : topo.nodes()) out << absl::StrFormat(" %4d", n.id);
  out << "\n";
  for (const NodeInfo& from : topo.nodes()) {
    out << absl::StrFormat("  %7d:", from.id);
    for (const NodeInfo& to : topo.nodes())
      out << absl::StrFormat(" %4d", topo.distance(from.id, to.id));
    out << "\n";
  }
  Section(out, "devices");
  if (topo.devices().empty()) out << "no GPU, NIC or InfiniBand device found\n";
  for (const PciDevice& dev : topo.devices()) {
    out << absl::StrFormat("%-10s %s  node %s\n", DeviceKindName(dev.kind), dev.bus_id,
                           dev.node ? absl::StrCat(*dev.node) : "unknown (-1)");
  }
  Section(out, "this process may use");
  const ProcessScope& p = topo.process();
  out << "cpus " << FormatIdList(p.allowed_cpus) << " (nodes "
      << FormatIdList(topo.nodes_of_cpus(p.allowed_cpus)) << "), memory nodes "
      << FormatIdList(p.allowed_mem_nodes) << "\n";
  for (const std::string& w : topo.warnings()) out << "warning: " << w << "\n";
  Section(out, "kernel memory policy");
  out << FormatKernelMemory(d.kernel_memory);
  Section(out, "doctor");
  out << FormatDoctorReport(d.doctor);
  Section(out, "budget");
  if (d.budget) {
    PrintBudgetView(out, *d.budget);
  } else {
    out << "unavailable: " << d.budget_error << "\n";
  }
  Section(out, "bandwidth and latency (quick)");
  if (d.bandwidth) {
    const BandwidthMatrix& m = *d.bandwidth;
    out << "read GB/s (idle latency ns), one thread per CPU node, "
        << FormatBytes(m.buffer_bytes) << " arrays\n";
    out << absl::StrFormat("%-10s", "cpu\\mem");
    for (int node : m.memory_nodes) out << absl::StrFormat(" %18s", absl::StrCat("node ", node));
    out << "\n";
    for (const BandwidthRow& row : m.rows) {
      out << absl::StrFormat("%-10s", absl::StrCat("node ", row.cpu_node));
      for (const BandwidthCell& c : row.cells) {
        double gbps = c.bytes_per_second[static_cast<std::size_t>(BandwidthKernel::kRead)] / 1e9;
        out << absl::StrFormat(" %18s", absl::StrFormat("%.1f (%.0f)", gbps, c.latency_ns));
      }
      out << "\n";
    }
    out << absl::StrFormat("memcpy limit %.1f GB/s, memset %.1f GB/s\n",
                           m.limits.memcpy_bytes_per_second / 1e9,
                           m.limits.memset_bytes_per_second / 1e9);
    for (const std::string& note : m.notes) out << "note: " << note << "\n";
  } else {
    out << d.bandwidth_note << "\n";
  }
  Section(out, "recommended binding");
  for (const Advice& a : d.bindings) {
    out << a.target << " (memory node " << a.memory_node << ", CPUs " << FormatIdList(a.cpus)
        << ")\n"
        << "  " << a.numactl << "\n"
        << "  " << a.docker << "\n";
  }
  out << "(numarena advise --gpu BUS_ID prints the Kubernetes pod spec and code as well)\n";
}

void PrintJson(std::ostream& out, const Topology& topo, const ReportData& d) {
  JsonWriter json(out);
  json.BeginObject();
  json.Key("schema").String("numarena.report/1");
  json.Key("nodes").BeginArray();
  for (const NodeInfo& n : topo.nodes()) {
    json.BeginObject();
    json.Key("id").Int(n.id);
    json.Key("cpus").IntArray(n.cpus);
    json.Key("mem_total_bytes").Uint(n.mem_total_bytes);
    json.Key("mem_free_bytes").Uint(n.mem_free_bytes);
    json.EndObject();
  }
  json.EndArray();
  json.Key("distances").BeginArray();
  for (const NodeInfo& from : topo.nodes()) {
    json.BeginArray();
    for (const NodeInfo& to : topo.nodes()) json.Int(topo.distance(from.id, to.id));
    json.EndArray();
  }
  json.EndArray();
  json.Key("devices").BeginArray();
  for (const PciDevice& dev : topo.devices()) {
    json.BeginObject();
    json.Key("bus_id").String(dev.bus_id);
    json.Key("kind").String(DeviceKindName(dev.kind));
    json.Key("node");
    if (dev.node) {
      json.Int(*dev.node);
    } else {
      json.Null();
    }
    json.EndObject();
  }
  json.EndArray();
  json.Key("process").BeginObject();
  json.Key("allowed_cpus").IntArray(topo.process().allowed_cpus);
  json.Key("allowed_mem_nodes").IntArray(topo.process().allowed_mem_nodes);
  json.EndObject();
  json.Key("warnings").BeginArray();
  for (const std::string& w : topo.warnings()) json.String(w);
  json.EndArray();
  WriteKernelMemoryJson(json, d.kernel_memory);
  json.Key("doctor").BeginObject();
  WriteDoctorFindingsJson(json, d.doctor, /*with_explanation=*/false);
  json.EndObject();
  json.Key("budget");
  if (d.budget) {
    WriteBudgetJson(json, *d.budget);
  } else {
    json.Null();
  }
  json.Key("bandwidth");
  if (d.bandwidth) {
    json.BeginObject();
    json.Key("buffer_bytes").Uint(d.bandwidth->buffer_bytes);
    json.Key("cells").BeginArray();
    for (const BandwidthRow& row : d.bandwidth->rows) {
      for (const BandwidthCell& c : row.cells) {
        json.BeginObject();
        json.Key("cpu_node").Int(row.cpu_node);
        json.Key("memory_node").Int(c.memory_node);
        json.Key("distance").Int(c.distance);
        json.Key("read_bytes_per_second")
            .Double(c.bytes_per_second[static_cast<std::size_t>(BandwidthKernel::kRead)]);
        json.Key("latency_ns").Double(c.latency_ns);
        json.EndObject();
      }
    }
    json.EndArray();
    json.EndObject();
  } else {
    json.Null();
  }
  json.Key("bindings").BeginArray();
  for (const Advice& a : d.bindings) {
    json.BeginObject();
    json.Key("target").String(a.target);
    json.Key("memory_node").Int(a.memory_node);
    json.Key("cpus").IntArray(a.cpus);
    json.Key("numactl").String(a.numactl);
    json.Key("docker").String(a.docker);
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  out << "\n";
}

}  // namespace

namespace {

int RunReportCommand(const ReportOptions& args) {
  auto reader = args.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("report", std::string(topology.status().message()));

  ReportData data;
  data.kernel_memory = ReadKernelMemorySettings(*reader);
  auto doctor = RunDoctor(*reader, *topology);
  if (!doctor.ok()) return Fail("report", std::string(doctor.status().message()));
  data.doctor = *std::move(doctor);

  auto budget = SystemBudgetSnapshot(*topology, *reader);
  if (budget.ok()) {
    data.budget = *std::move(budget);
  } else {
    data.budget_error = std::string(budget.status().message());
  }

  if (args.no_bandwidth) {
    data.bandwidth_note = "skipped (--no-bandwidth)";
  } else if (!reader->is_live_system()) {
    data.bandwidth_note = "skipped: a recorded tree is not a machine to measure";
  } else {
    MatrixOptions quick;
    quick.threads_per_node = 1;
    quick.buffer_bytes = std::size_t{64} << 20;
    quick.seconds = 1.0;
    auto matrix = MeasureBandwidthMatrix(*topology, quick);
    if (matrix.ok()) {
      data.bandwidth = *std::move(matrix);
    } else {
      data.bandwidth_note = absl::StrCat("not measured: ", std::string(matrix.status().message()));
    }
  }

  bool any_gpu = false;
  for (const PciDevice& dev : topology->devices()) {
    if (dev.kind != DeviceKind::kGpu) continue;
    any_gpu = true;
    AdviseRequest request;
    request.gpu_bus_id = dev.bus_id;
    if (auto advice = Advise(*topology, request); advice.ok()) {
      data.bindings.push_back(*std::move(advice));
    } else {
      Advice unknown;
      unknown.target = absl::StrCat("GPU ", dev.bus_id);
      unknown.numactl = absl::StrCat("# ", std::string(advice.status().message()));
      data.bindings.push_back(unknown);
    }
  }
  if (!any_gpu) {
    for (const NodeInfo& n : topology->nodes()) {
      AdviseRequest request;
      request.node = n.id;
      if (auto advice = Advise(*topology, request); advice.ok()) {
        data.bindings.push_back(*std::move(advice));
      }
    }
  }

  if (args.json) {
    PrintJson(std::cout, *topology, data);
  } else {
    PrintText(std::cout, *topology, data);
  }
  return 0;
}

CommandRunner SetupReport(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  app.footer(
      "One screen: topology, devices and their nodes, what this process may use, the doctor's "
      "audit, the budget view, a quick bandwidth/latency matrix and the recommended binding of "
      "each GPU.");
  app.add_flag("--json", options->json, "one JSON object (schema numarena.report/1)");
  app.add_flag("--no-bandwidth", options->no_bandwidth, "skip the bandwidth/latency matrix");
  options->roots.AddTo(app);
  return [options] { return RunReportCommand(*options); };
}

}  // namespace

NUMARENA_COMMAND(report, "one screen: topology, devices, audit, budget, bandwidth, GPU bindings",
                 SetupReport);

}  // namespace numarena::cli
