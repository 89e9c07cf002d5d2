// `numarena doctor`: the NUMA health audit (numarena/doctor.hpp) as a command.
//
//   numarena doctor [--check] [--json] [--gpu BUS_ID] [--pid PID] [--policy POLICY]
//                   [--kv-tiers HOME:COLD] [--sysfs-root DIR] [--procfs-root DIR]
//
// Read-only. Without --check it prints every finding with its explanation and fix and exits
// 0. With --check it is a start-up health check: exit 0 when there is no problem (notes do
// not count), else 1 with one line per problem on stdout:
//   "<severity> <id>: <subject>: <observed> (expected <expected>); fix: <fix>"
// Exit 2 with one line on stderr for bad options or unreadable input.
//
// --json prints one object (compact):
//   {"schema": "numarena.doctor/1", "healthy": bool, "problems": int,
//    "findings": [{"id", "severity": "info"|"warning"|"critical", "subject", "observed",
//                  "expected", "explanation", "fix"}],
//    "passed": [str], "skipped": [str]}
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "command.hpp"
#include "numarena/ops/doctor.hpp"
#include "numarena/ops/json.hpp"
#include "numarena/policy.hpp"
#include "cli_options.hpp"
#include "ops_format.hpp"

namespace numarena::cli {
namespace {

constexpr const char* kDescription =
    "Audits the NUMA settings of this machine, read-only: kernel.numa_balancing, "
    "vm.zone_reclaim_mode, transparent hugepages, vm.min_free_kbytes, "
    "vm.watermark_scale_factor, devices of unknown node, NIC IRQ affinity, whether mbind, "
    "get_mempolicy, set_mempolicy and move_pages are allowed (seccomp, CAP_SYS_NICE), "
    "demotion and the kernel's memory tiers; with --policy whether the cpuset allows its "
    "nodes, with --kv-tiers whether the KV cold tier is a lower kernel tier, and with --gpu "
    "whether the process runs and allocates on the GPU's node.";

struct DoctorCommandOptions {
  bool check = false;
  bool json = false;
  std::string gpu;
  std::string pid;
  std::string policy;
  std::string kv_tiers;
  MachineRoots roots;
};

std::string Headline(const Finding& f) {
  return absl::StrCat(f.subject, ": ", f.observed, " (expected ", f.expected, ")");
}

void PrintJson(const DoctorReport& report) {
  JsonWriter json(std::cout);
  json.BeginObject();
  json.Key("schema").String("numarena.doctor/1");
  WriteDoctorFindingsJson(json, report, /*with_explanation=*/true);
  json.Key("passed").BeginArray();
  for (const auto& id : report.passed) json.String(id);
  json.EndArray();
  json.Key("skipped").BeginArray();
  for (const auto& note : report.skipped) json.String(note);
  json.EndArray();
  json.EndObject();
  std::cout << "\n";
}

}  // namespace

void WriteDoctorFindingsJson(JsonWriter& json, const DoctorReport& report, bool with_explanation) {
  json.Key("healthy").Bool(report.healthy());
  json.Key("problems").Uint(report.problem_count());
  json.Key("findings").BeginArray();
  for (const Finding& f : report.findings) {
    json.BeginObject();
    json.Key("id").String(f.id);
    json.Key("severity").String(SeverityName(f.severity));
    json.Key("subject").String(f.subject);
    json.Key("observed").String(f.observed);
    json.Key("expected").String(f.expected);
    if (with_explanation) json.Key("explanation").String(f.explanation);
    json.Key("fix").String(f.fix);
    json.EndObject();
  }
  json.EndArray();
}

// The text report, shared with `numarena report`.
std::string FormatDoctorReport(const DoctorReport& report) {
  std::string out;
  std::size_t notes = report.findings.size() - report.problem_count();
  out += absl::StrCat(report.problem_count(), " problem", report.problem_count() == 1 ? "" : "s",
                      ", ", notes, " note", notes == 1 ? "" : "s", ", ", report.passed.size(),
                      " check", report.passed.size() == 1 ? "" : "s", " passed\n");
  for (const Finding& f : report.findings) {
    out += absl::StrCat("\n[", SeverityName(f.severity), "] ", f.id, ": ", Headline(f), "\n");
    AppendWrapped(out, f.explanation, "    ");
    if (!f.fix.empty()) out += absl::StrCat("    fix: ", f.fix, "\n");
  }
  if (!report.passed.empty()) {
    out += "\n";
    AppendWrapped(out, absl::StrCat("passed: ", absl::StrJoin(report.passed, ", ")), "");
  }
  for (const auto& note : report.skipped) out += absl::StrCat("skipped: ", note, "\n");
  return out;
}

namespace {

int RunDoctorCommand(const DoctorCommandOptions& args) {
  auto reader = args.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("doctor", std::string(topology.status().message()));
  DoctorOptions options;
  if (!args.gpu.empty()) options.gpu_bus_id = args.gpu;
  options.pid = args.pid.empty() ? "self" : args.pid;
  if (!args.pid.empty() && !options.gpu_bus_id && args.policy.empty()) {
    return Fail("doctor", "--pid needs --gpu or --policy (what the process is judged against)");
  }
  if (!args.policy.empty()) options.policy = args.policy;
  if (!args.kv_tiers.empty()) {
    // Each side in the policy syntax's node list form ("0-1", "0,2").
    const std::size_t colon = args.kv_tiers.find(':');
    auto home = Policy::Parse(absl::StrCat("bind(", args.kv_tiers.substr(0, colon), ")"));
    auto cold = Policy::Parse(absl::StrCat(
        "bind(", colon == std::string::npos ? "" : args.kv_tiers.substr(colon + 1), ")"));
    if (!home.ok() || !cold.ok()) {
      return Fail("doctor", absl::StrCat("--kv-tiers wants HOME:COLD node lists such as 0-1:2, "
                                         "not '", args.kv_tiers, "'"));
    }
    options.kv_home_nodes = home->nodes();
    options.kv_cold_nodes = cold->nodes();
  }
  auto report = RunDoctor(*reader, *topology, options);
  if (!report.ok()) return Fail("doctor", std::string(report.status().message()));

  if (args.json) {
    PrintJson(*report);
    return args.check && !report->healthy() ? 1 : 0;
  }
  if (args.check) {
    if (report->healthy()) {
      std::cout << "numarena doctor: ok (" << report->passed.size() << " checks passed)\n";
      return 0;
    }
    for (const Finding& f : report->findings) {
      if (f.severity == Severity::kInfo) continue;
      std::cout << SeverityName(f.severity) << " " << f.id << ": " << Headline(f);
      if (!f.fix.empty()) std::cout << "; fix: " << f.fix;
      std::cout << "\n";
    }
    return 1;
  }
  std::cout << "numarena doctor: " << FormatDoctorReport(*report);
  return 0;
}

CommandRunner SetupDoctor(CLI::App& app) {
  auto options = std::make_shared<DoctorCommandOptions>();
  app.footer(kDescription);
  app.add_flag("--check", options->check,
               "health check: exit 0 if all is well, 1 and one line per problem");
  app.add_flag("--json", options->json, "one JSON object (schema numarena.doctor/1)");
  app.add_option("--gpu", options->gpu,
                 "the GPU the process serves: its PCI address (0000:41:00.0 or 41:00.0), or its "
                 "index N or cuda:N counting the GPUs in PCI address order "
                 "(CUDA_DEVICE_ORDER=PCI_BUS_ID); a device that is not a GPU is refused")
      ->type_name("GPU");
  app.add_option("--pid", options->pid,
                 "the process to judge against --gpu and --policy (default: this one)")
      ->type_name("PID");
  app.add_option("--policy", options->policy,
                 "the server's placement policy (interleave(0-3), bind(1)/advisory, ...): are "
                 "its nodes inside the process's cpuset.mems?")
      ->type_name("POLICY");
  app.add_option("--kv-tiers", options->kv_tiers,
                 "the KV pool's home and cold nodes, HOME:COLD (0-1:2): is the cold tier a "
                 "lower kernel memory tier?")
      ->type_name("HOME:COLD");
  options->roots.AddTo(app);
  return [options] { return RunDoctorCommand(*options); };
}

}  // namespace

NUMARENA_COMMAND(doctor, "audit NUMA kernel settings, device nodes, IRQs (--check: health check)",
                 SetupDoctor);

}  // namespace numarena::cli
