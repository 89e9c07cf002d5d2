// `numarena advise`: how to run a server next to a GPU, a NIC or a node
// (numarena/advise.hpp): numactl, taskset, docker, a Kubernetes pod and numarena code.
//
//   numarena advise (--gpu BUS_ID | --nic BUS_ID | --node N) [--json]
//                   [--hugepages SIZE [--hugepage-size 2M|1G]]
//                   [--sysfs-root DIR] [--procfs-root DIR]
//   numarena advise --policy 'weighted(0:3,1:1)' [--json] [--sysfs-root DIR]
//
// --policy, for a weighted interleave policy: the kernel's weights now, whether the kernel
// (MPOL_WEIGHTED_INTERLEAVE, Linux 6.9+) or numarena's chunked emulation places the policy,
// and the command (as root) that sets the kernel's system-wide weights so the kernel does.
// numarena never runs it: the weights are shared by every process on the machine.
// --json: {"schema": "numarena.advise-policy/1", "policy": str,
//          "kernel_memory": {...} (as in numarena.topo/1: the kernel's weights, tiers, demotion),
//          "placed_by": "kernel" | "emulation", "command": str | null, "note": str}
//
// Exit 0, or 2 with one line on stderr (unknown device, device of unknown node, ...).
// --json: {"schema": "numarena.advise/1", "target": str, "memory_node": int,
//          "cpu_node": int, "cpus": [int], "numactl": str, "taskset": str, "docker": str,
//          "kubernetes": str, "code": str, "huge_pages": str, "huge_page_reserve": str,
//          "notes": [str]}
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/str_join.h"
#include "cli_options.hpp"
#include "command.hpp"
#include "numarena/format.hpp"
#include "numarena/interleave.hpp"
#include "numarena/ops/advise.hpp"
#include "numarena/policy.hpp"
#include "numarena/ops/json.hpp"
#include "ops_format.hpp"

namespace numarena::cli {
namespace {

struct AdviseOptions {
  std::string gpu, nic, node, target, huge_pages, huge_page_size, policy;
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
  if (!a.huge_pages.empty()) out += "huge pages:\n" + Indent(a.huge_pages);
  for (const std::string& note : a.notes) out += "note: " + note + "\n";
  return out;
}

namespace {

constexpr const char* kTargets = "vllm, sglang, llama.cpp, torchrun, systemd, k8s";

// The GPUs a server started from this advice drives: for a GPU, that one; for a node or a
// NIC, the GPUs attached to the CPU node (none on a machine without GPUs there). Indices
// count the machine's GPUs in PCI address order (CUDA's numbering under
// CUDA_DEVICE_ORDER=PCI_BUS_ID).
struct GpuPlan {
  std::vector<int> indices;  // ascending
  std::vector<std::string> bus_ids;
};

GpuPlan PlanGpus(const Topology& topology, const Advice& advice) {
  std::vector<const PciDevice*> gpus;
  for (const PciDevice& d : topology.devices()) {
    if (d.kind == DeviceKind::kGpu) gpus.push_back(&d);
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const PciDevice* x, const PciDevice* y) { return x->bus_id < y->bus_id; });
  const bool one_gpu = advice.target.rfind("GPU ", 0) == 0;
  GpuPlan plan;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const bool chosen = one_gpu ? "GPU " + gpus[i]->bus_id == advice.target
                                : gpus[i]->node && *gpus[i]->node == advice.cpu_node;
    if (!chosen) continue;
    plan.indices.push_back(static_cast<int>(i));
    plan.bus_ids.push_back(gpus[i]->bus_id);
  }
  return plan;
}

// "0,2" or "1 1" from the plan's indices / one `node` per GPU.
std::string Indices(const GpuPlan& plan) { return absl::StrJoin(plan.indices, ","); }
std::string NodePerGpu(const GpuPlan& plan, int node) {
  return absl::StrJoin(std::vector<int>(plan.indices.size(), node), " ");
}

// The `numarena` binary running now, so that a printed command runs as printed wherever it
// is installed (the configure-time install path may not be where this binary is).
std::string SelfPath() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string("numarena") : self.string();
}

constexpr const char* kNumactlCheck =
    "command -v numactl >/dev/null || echo \"numactl is not on PATH: apt-get install numactl "
    "(or your distribution's package)\" >&2\n";

// What `advise --for TARGET` prints: the server's own flags and files for the advice's nodes
// and CPUs. Shell for the launchers (bash -n accepts it), a systemd drop-in (INI), a
// Kubernetes Pod (YAML). nullopt for an unknown target.
std::optional<std::string> RenderFor(const std::string& target, const Topology& topology,
                                     const Advice& a) {
  const std::string cpus = FormatIdList(a.cpus);
  const int m = a.memory_node;
  const int c = a.cpu_node;
  const GpuPlan gpus = PlanGpus(topology, a);
  const int count = static_cast<int>(gpus.indices.size());
  const std::string numactl = absl::StrCat("numactl --cpunodebind=", c, " --membind=", m);
  std::string head =
      absl::StrCat("# ", a.target, ": memory on node ", m, ", CPUs ", cpus, " (node ", c, ")\n");
  std::string gpu_env;
  if (count > 0) {
    absl::StrAppend(&head, "# GPU ", count == 1 ? "index " : "indices ", Indices(gpus), " (",
                    absl::StrJoin(gpus.bus_ids, ", "), ") ", count == 1 ? "counts" : "count",
                    " the GPUs in PCI address order (CUDA_DEVICE_ORDER=PCI_BUS_ID)\n");
    gpu_env = absl::StrCat("export CUDA_DEVICE_ORDER=PCI_BUS_ID\nexport CUDA_VISIBLE_DEVICES=",
                           Indices(gpus), "\n");
  } else if (target == "vllm" || target == "sglang" || target == "torchrun") {
    absl::StrAppend(&head, "# no GPU is attached to node ", c,
                    ": the whole server runs under numactl (its processes inherit the binding)\n");
  }
  if (target == "vllm") {
    if (count == 0) {
      return absl::StrCat(
          head, numactl, " vllm serve \"$MODEL\"\n",
          "# vLLM's CPU backend: its OpenMP threads on the node's CPUs as well\n",
          "# VLLM_CPU_OMP_THREADS_BIND=", cpus, " ", numactl, " vllm serve \"$MODEL\"\n");
    }
    return absl::StrCat(
        head, gpu_env,
        "# vLLM starts each GPU worker under numactl on the node listed for its GPU: one node\n"
        "# per visible GPU in --numa-bind-nodes. The flags came with vLLM pull request #38635\n"
        "# (2026); an older vLLM stops with \"unrecognized arguments: --numa-bind\". vLLM needs\n"
        "# numactl on PATH and workers started by spawn (with fork it only warns).\n",
        kNumactlCheck, "export VLLM_WORKER_MULTIPROC_METHOD=spawn\n",
        count > 1 ? absl::StrCat("# ", count, " GPUs visible: use them all with --tensor-parallel-size ",
                                 count, " (or --data-parallel-size)\n")
                  : "",
        "vllm serve \"$MODEL\" --numa-bind --numa-bind-nodes ", NodePerGpu(gpus, c), "\n",
        "# an older vLLM: the whole server under numactl instead\n", "# ", numactl,
        " vllm serve \"$MODEL\"\n");
  }
  if (target == "sglang") {
    if (count == 0) {
      return absl::StrCat(head, numactl,
                          " python3 -m sglang.launch_server --model-path \"$MODEL\"\n");
    }
    return absl::StrCat(
        head, gpu_env,
        "# SGLang starts each GPU's scheduler process under numactl on the node listed for its\n"
        "# GPU: one node per visible GPU in --numa-node (SGLang pull request #10006, September\n"
        "# 2025; newer releases also bind on their own, SGLANG_AUTO_NUMA_BIND). An older SGLang\n"
        "# rejects the flag. SGLang needs numactl on PATH for it.\n",
        kNumactlCheck,
        count > 1 ? absl::StrCat("# ", count, " GPUs visible: use them all with --tp-size ", count,
                                 " (or --dp-size)\n")
                  : "",
        "python3 -m sglang.launch_server --model-path \"$MODEL\" --numa-node ", NodePerGpu(gpus, c),
        "\n",
        "# an older SGLang: the whole server under numactl instead\n", "# ", numactl,
        " python3 -m sglang.launch_server --model-path \"$MODEL\"\n");
  }
  if (target == "llama.cpp") {
    return absl::StrCat(
        head,
        "# --numa numactl: llama.cpp keeps to the CPU set numactl gives it (one node here);\n"
        "# --numa distribute spreads threads over all nodes, --numa isolate keeps them on the\n"
        "# node the program started on\n",
        numactl, " llama-server -m \"$MODEL\" --numa numactl --threads ", a.cpus.size(), "\n");
  }
  if (target == "torchrun") {
    const int workers = std::max(count, 1);
    if (count == 0) {
      return absl::StrCat(head, numactl, " torchrun --nproc_per_node=1 \"$SCRIPT\"\n");
    }
    return absl::StrCat(
        head, gpu_env,
        "# torchrun --numa-binding (PyTorch 2.9 and later) runs the worker of local rank i on\n"
        "# the CPUs of the node of visible GPU i; some releases do it through numactl, so keep\n"
        "# numactl on PATH\n",
        kNumactlCheck, "torchrun --numa-binding=node --nproc_per_node=", workers,
        " \"$SCRIPT\"\n",
        "# an older torchrun: the launcher under numactl (its workers inherit the binding)\n",
        "# ", numactl, " torchrun --nproc_per_node=", workers, " \"$SCRIPT\"\n");
  }
  if (target == "systemd") {
    std::string check = absl::StrCat("ExecStartPre=", SelfPath(), " doctor --check");
    if (count == 1 && a.target.rfind("GPU ", 0) == 0) {
      absl::StrAppend(&check, " --gpu ", gpus.bus_ids[0]);
    }
    return absl::StrCat(
        "# ", a.target, ": memory on node ", m, ", CPUs ", cpus, " (node ", c, ")\n",
        "# a drop-in: /etc/systemd/system/<service>.service.d/numa.conf, then\n",
        "# systemctl daemon-reload && systemctl restart <service>\n", "[Service]\n",
        "CPUAffinity=", cpus, "\n", "NUMAPolicy=bind\n", "NUMAMask=", m, "\n",
        count > 0 ? absl::StrCat("Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=",
                                 Indices(gpus), "\n")
                  : "",
        a.huge_page_reserve.empty()
            ? ""
            : absl::StrCat("# reserve the server's huge pages in the node's own pool ('+': as "
                           "root)\nExecStartPre=+/bin/sh -c '",
                           a.huge_page_reserve, "'\n"),
        "# refuse to start on a machine whose NUMA settings or device nodes are wrong (the\n"
        "# numarena binary that printed this; change the path if the service sees another)\n",
        check, "\n");
  }
  if (target == "k8s") return a.kubernetes;
  return std::nullopt;
}

// `advise --policy`: the kernel's weights for a weighted interleave policy.
int RunAdvisePolicy(const AdviseOptions& args) {
  auto policy = Policy::Parse(args.policy);
  if (!policy.ok()) return Fail("advise", std::string(policy.status().message()));
  if (policy->kind() != PolicyKind::kWeightedInterleave) {
    return Fail("advise", absl::StrCat("--policy ", policy->ToString(),
                                       ": only weighted interleave has kernel weights to set; "
                                       "give weighted(NODE:WEIGHT,...)"));
  }
  auto reader = args.roots.reader();
  auto kernel = ReadKernelMemorySettings(*reader);
  if (!kernel.ok()) return Fail("advise", std::string(kernel.status().message()));
  const bool has = kernel->has_weighted_interleave();
  std::optional<std::string> command;
  std::string note;
  bool by_kernel = false;
  if (policy->uses_kernel_weights()) {
    by_kernel = has;
    note = has ? "weighted(auto) takes the kernel's weights as they are; set them with "
                 "echo W > /sys/kernel/mm/mempolicy/weighted_interleave/nodeN"
               : "this kernel has no weighted interleave (Linux before 6.9): weighted(auto) "
                 "fails here; give the weights, e.g. weighted(0:3,1:1)";
  } else {
    auto text = KernelWeightsCommand(policy->weights());
    if (text.ok()) command = *text;
    by_kernel = has && KernelWeightsExpress(policy->weights(), kernel->interleave_weights);
    note = !text.ok() ? std::string(text.status().message())
           : by_kernel ? "the kernel's weights already express this policy: the kernel places it"
           : has ? "the kernel's weights differ, so numarena places it in chunks; the command "
                   "changes the weights for every process on this machine that uses "
                   "MPOL_WEIGHTED_INTERLEAVE"
                 : "this kernel has no weighted interleave (Linux before 6.9): numarena places "
                   "the policy in chunks; the command is for a 6.9+ kernel";
  }
  if (args.json) {
    JsonWriter json(std::cout);
    json.BeginObject();
    json.Key("schema").String("numarena.advise-policy/1");
    json.Key("policy").String(policy->ToString());
    WriteKernelMemoryJson(json, *kernel);
    json.Key("placed_by").String(by_kernel ? "kernel" : "emulation");
    json.Key("command");
    if (command) {
      json.String(*command);
    } else {
      json.Null();
    }
    json.Key("note").String(note);
    json.EndObject();
    std::cout << "\n";
    return 0;
  }
  std::cout << "# " << policy->ToString() << ": placed by "
            << (by_kernel ? "the kernel (MPOL_WEIGHTED_INTERLEAVE)" : "numarena's chunks (MPOL_BIND)")
            << "\n" << FormatKernelMemory(*kernel) << "# " << note << "\n";
  if (command) std::cout << "# the kernel's weights for this policy (as root):\n" << *command << "\n";
  return 0;
}

int RunAdviseCommand(const AdviseOptions& args) {
  if (!args.policy.empty()) {
    if (!args.gpu.empty() || !args.nic.empty() || !args.node.empty() || !args.target.empty()) {
      return Fail("advise", "--policy stands alone (not with --gpu, --nic, --node or --for)");
    }
    return RunAdvisePolicy(args);
  }
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
  if (!args.huge_pages.empty()) {
    auto bytes = ParseByteSize(args.huge_pages);
    if (!bytes.ok() || *bytes == 0) {
      return Fail("advise",
                  absl::StrCat("--hugepages needs a size such as 4G, not '", args.huge_pages, "'"));
    }
    request.huge_pages = *bytes;
  }
  if (!args.huge_page_size.empty()) {
    auto bytes = ParseByteSize(args.huge_page_size);
    if (!bytes.ok() || *bytes == 0) {
      return Fail("advise", absl::StrCat("--hugepage-size needs a page size such as 2M or 1G, "
                                         "not '",
                                         args.huge_page_size, "'"));
    }
    request.huge_page_bytes = *bytes;
  }
  auto reader = args.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("advise", std::string(topology.status().message()));
  auto advice = Advise(*topology, request);
  if (!advice.ok()) return Fail("advise", std::string(advice.status().message()));
  if (!args.target.empty()) {
    auto text = RenderFor(args.target, *topology, *advice);
    if (!text) {
      return Fail("advise", absl::StrCat("--for '", args.target, "': use one of ", kTargets));
    }
    std::cout << *text;
    return 0;
  }
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
    json.Key("huge_pages").String(advice->huge_pages);
    json.Key("huge_page_reserve").String(advice->huge_page_reserve);
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
  app.add_option("--gpu", options->gpu,
                 "a GPU: its PCI address (0000:41:00.0 or 41:00.0), or its index N or cuda:N "
                 "counting the GPUs in PCI address order (CUDA_DEVICE_ORDER=PCI_BUS_ID)")
      ->type_name("GPU");
  app.add_option("--nic", options->nic, "a NIC by PCI address")->type_name("BUS_ID");
  app.add_option("--node", options->node, "a NUMA node")->type_name("N");
  app.add_option("--for", options->target,
                 "only the flags and files of one server or launcher: vllm, sglang, llama.cpp, "
                 "torchrun (shell), systemd (a unit drop-in), k8s (a Pod)")
      ->type_name("TARGET");
  app.add_option("--hugepages", options->huge_pages,
                 "huge pages the server maps on its node (4G): the node's own pool is checked, "
                 "the command that reserves the rest is printed, and the Pod asks for "
                 "hugepages-2Mi")
      ->type_name("SIZE");
  app.add_option("--hugepage-size", options->huge_page_size,
                 "the page size for --hugepages: 2M (default) or 1G")
      ->type_name("SIZE");
  app.add_option("--policy", options->policy,
                 "a weighted interleave policy (weighted(0:3,1:1)): the kernel's weights now, "
                 "who places it, and the command that sets the kernel's weights for it")
      ->type_name("POLICY");
  app.add_flag("--json", options->json, "one JSON object (schema numarena.advise/1)");
  options->roots.AddTo(app);
  return [options] { return RunAdviseCommand(*options); };
}

}  // namespace

NUMARENA_COMMAND(advise, "how to run a server next to a GPU, NIC or node (numactl, docker, k8s)",
                 SetupAdvise);

}  // namespace numarena::cli
