// `numarena advise`: how to run a server next to a GPU, a NIC or a node
// (numarena/advise.hpp): numactl, taskset, docker, a Kubernetes pod and numarena code.
//
//   numarena advise (--gpu BUS_ID | --nic BUS_ID | --node N) [--json]
//                   [--sysfs-root DIR] [--procfs-root DIR]
//
// Exit 0, or 2 with one line on stderr (unknown device, device of unknown node, ...).
// --json: {"schema": "numarena.advise/1", "target": str, "memory_node": int,
//          "cpu_node": int, "cpus": [int], "numactl": str, "taskset": str, "docker": str,
//          "kubernetes": str, "code": str, "notes": [str]}
#include <CLI/CLI.hpp>
#include <charconv>
#include <memory>
#include <iostream>

#include "command.hpp"
#include "numarena/format.hpp"
#include "numarena/ops/advise.hpp"
#include "numarena/ops/json.hpp"
#include "cli_options.hpp"
#include "ops_format.hpp"

namespace numarena::cli {
namespace {

struct AdviseOptions {
  std::string gpu, nic, node;
  bool json = false;
  MachineRoots roots;
};

std::string Indent(const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    out += line.empty() ? "\n" : "    " + line + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

// The text form, shared with `numarena report`.
std::string FormatAdvice(const Advice& a) {
  std::string out = absl::StrCat("# ", a.target, ": memory on node ", a.memory_node, ", CPUs ",
                                 FormatIdList(a.cpus), " (node ", a.cpu_node, ")\n");
  out += absl::StrCat("numactl:\n    ", a.numactl, "\n");
  out += absl::StrCat("taskset:\n    ", a.taskset, "\n");
  out += absl::StrCat("docker:\n    ", a.docker, "\n");
  out += "kubernetes:\n" + Indent(a.kubernetes);
  out += "numarena (C++):\n" + Indent(a.code);
  for (const std::string& note : a.notes) out += "note: " + note + "\n";
  return out;
}

namespace {

int RunAdviseCommand(const AdviseOptions& args) {
  AdviseRequest request;
  if (!args.gpu.empty()) request.gpu_bus_id = args.gpu;
  if (!args.nic.empty()) request.nic_bus_id = args.nic;
  if (const std::string* node = args.node.empty() ? nullptr : &args.node) {
    int value = -1;
    auto [end, ec] = std::from_chars(node->data(), node->data() + node->size(), value);
    if (ec != std::errc() || end != node->data() + node->size() || value < 0) {
      return Fail("advise", absl::StrCat("--node needs a node id, not '", *node, "'"));
    }
    request.node = value;
  }
  auto reader = args.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("advise", std::string(topology.status().message()));
  auto advice = Advise(*topology, request);
  if (!advice.ok()) return Fail("advise", std::string(advice.status().message()));
  if (args.json) {
    JsonWriter json(std::cout);
    json.BeginObject();
    json.Key("schema").String("numarena.advise/1");
    json.Key("target").String(advice->target);
    json.Key("memory_node").Int(advice->memory_node);
    json.Key("cpu_node").Int(advice->cpu_node);
    json.Key("cpus").IntArray(advice->cpus);
    json.Key("numactl").String(advice->numactl);
    json.Key("taskset").String(advice->taskset);
    json.Key("docker").String(advice->docker);
    json.Key("kubernetes").String(advice->kubernetes);
    json.Key("code").String(advice->code);
    json.Key("notes").BeginArray();
    for (const auto& note : advice->notes) json.String(note);
    json.EndArray();
    json.EndObject();
    std::cout << "\n";
    return 0;
  }
  std::cout << FormatAdvice(*advice);
  return 0;
}

CommandRunner SetupAdvise(CLI::App& app) {
  auto options = std::make_shared<AdviseOptions>();
  app.footer(
      "Prints how to run a server next to the device or node: numactl, taskset, docker run, a "
      "Kubernetes pod spec and the numarena code.");
  app.add_option("--gpu", options->gpu, "a GPU by PCI address (0000:41:00.0 or 41:00.0)")
      ->type_name("GPU");
  app.add_option("--nic", options->nic, "a NIC by PCI address")->type_name("BUS_ID");
  app.add_option("--node", options->node, "a NUMA node")->type_name("N");
  app.add_flag("--json", options->json, "one JSON object (schema numarena.advise/1)");
  options->roots.AddTo(app);
  return [options] { return RunAdviseCommand(*options); };
}

}  // namespace

NUMARENA_COMMAND(advise, "how to run a server next to a GPU, NIC or node (numactl, docker, k8s)",
                 SetupAdvise);

}  // namespace numarena::cli
