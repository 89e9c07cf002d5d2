// Launch advice for a GPU, NIC or node (advise.hpp): one placement, rendered for numactl,
// taskset, docker, Kubernetes and numarena code.
#include "numarena/ops/advise.hpp"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ops/ops_common.hpp"
#include "topology/topology_parse.hpp"

namespace numarena {
namespace {

// Share of a node's memory a pod should request: the budget's 15% headroom stays free.
constexpr double kPodMemoryShare = 0.85;

std::string KubernetesSpec(const Advice& a, const Topology& topology, bool gpu) {
  const NodeInfo* memory = topology.node(a.memory_node);
  std::uint64_t gib = static_cast<std::uint64_t>(static_cast<double>(memory->mem_total_bytes) *
                                                 kPodMemoryShare / (1024.0 * 1024 * 1024));
  if (gib == 0) gib = 1;
  std::string resources = absl::StrCat("{cpu: \"", a.cpus.size(), "\", memory: \"", gib, "Gi\"",
                                       gpu ? ", nvidia.com/gpu: \"1\"" : "", "}");
  return absl::StrCat(
      "# kubelet: cpuManagerPolicy: static, topologyManagerPolicy: single-numa-node,\n"
      "#          topologyManagerScope: pod, memoryManagerPolicy: Static (reservedMemory per "
      "node)\n"
      "# Exclusive CPUs need a Guaranteed pod (integer CPUs, requests == limits); the topology\n"
      "# manager then admits it only where CPUs, memory",
      gpu ? " and the GPU" : "", " fit on one node:\n# node ", a.memory_node, " has ",
      a.cpus.size(), " CPUs and ", FormatBytes(memory->mem_total_bytes),
      " (request fewer CPUs if the kubelet reserves some there).\n"
      "apiVersion: v1\n"
      "kind: Pod\n"
      "metadata:\n"
      "  name: inference-node",
      a.memory_node,
      "\n"
      "spec:\n"
      "  containers:\n"
      "  - name: server\n"
      "    image: <image>\n"
      "    resources:\n"
      "      requests: ",
      resources,
      "\n"
      "      limits: ",
      resources, "\n", gpu ? "    env:\n    - {name: CUDA_DEVICE_ORDER, value: PCI_BUS_ID}\n" : "");
}

std::string Code(const Advice& a, const std::optional<std::string>& bus_id) {
  std::string node_line = bus_id ? absl::StrCat("int node = topo->node_of_pci(\"", *bus_id,
                                                "\").value();  // ", a.memory_node)
                                 : absl::StrCat("int node = ", a.memory_node, ";");
  std::string cpu_node =
      a.cpu_node == a.memory_node ? "node" : absl::StrCat(a.cpu_node, " /* nearest CPUs */");
  return absl::StrCat(
      "#include <pthread.h>\n"
      "#include <numarena/arena.hpp>\n"
      "#include <numarena/topology.hpp>\n"
      "\n"
      "const numarena::Topology* topo = numarena::Topology::system().value();\n",
      node_line,
      "\n"
      "// Memory: an arena whose pages are bound to the node before first touch.\n"
      "numarena::Arena* arena = numarena::Arena::ForPolicy(numarena::Policy::Bind(node)).value();\n"
      "void* staging = arena->allocate(std::size_t{64} << 20);\n"
      "// CPUs: pin every worker thread to the node's CPUs (",
      FormatIdList(a.cpus),
      ").\n"
      "cpu_set_t set;\n"
      "CPU_ZERO(&set);\n"
      "for (int cpu : topo->cpus_of_node(",
      cpu_node,
      ")) CPU_SET(cpu, &set);\n"
      "pthread_setaffinity_np(pthread_self(), sizeof set, &set);\n");
}

}  // namespace

StatusOr<Advice> Advise(const Topology& topology, const AdviseRequest& request) {
  int targets =
      (request.gpu_bus_id ? 1 : 0) + (request.nic_bus_id ? 1 : 0) + (request.node ? 1 : 0);
  if (targets != 1) {
    return absl::InvalidArgumentError(
        "give exactly one of a GPU bus id, a NIC bus id or a node to advise for");
  }
  Advice advice;
  std::optional<std::string> bus_id;
  bool gpu = false;
  if (request.node) {
    if (!topology.has_node(*request.node)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node ", *request.node,
          " is not online (online nodes: ", FormatIdList(topology.node_ids()), ")"));
    }
    advice.memory_node = *request.node;
    advice.target = absl::StrCat("node ", *request.node);
  } else {
    gpu = request.gpu_bus_id.has_value();
    auto device = gpu ? ops::FindGpu(topology, *request.gpu_bus_id)
                      : ops::FindDevice(topology, *request.nic_bus_id);
    if (!device.ok()) return device.status();
    const PciDevice& d = **device;
    bool is_gpu = d.kind == DeviceKind::kGpu;
    if (is_gpu != gpu) {
      return absl::NotFoundError(absl::StrCat(d.bus_id, " is a ", DeviceKindName(d.kind),
                                              ", not a ", gpu ? "GPU" : "NIC", " (use --",
                                              is_gpu ? "gpu" : "nic", ")"));
    }
    if (!d.node) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the kernel does not know the NUMA node of ", DeviceKindName(d.kind), " ", d.bus_id,
          " (numa_node is -1), so no binding can be derived from it; find its socket with "
          "`lspci -tv` and use --node N (numarena doctor explains the fix)"));
    }
    bus_id = d.bus_id;
    advice.memory_node = *d.node;
    advice.target = absl::StrCat(gpu ? "GPU " : "NIC ", d.bus_id);
  }

  advice.cpu_node = advice.memory_node;
  if (topology.cpus_of_node(advice.memory_node).empty()) {
    for (int node : topology.nodes_by_distance(advice.memory_node)) {
      if (!topology.cpus_of_node(node).empty()) {
        advice.cpu_node = node;
        break;
      }
    }
    if (advice.cpu_node == advice.memory_node) {
      return absl::FailedPreconditionError("no online node has CPUs");
    }
    advice.notes.push_back(
        absl::StrCat("node ", advice.memory_node,
                     " has no CPUs (memory-only, e.g. CXL); the nearest node with "
                     "CPUs is ",
                     advice.cpu_node, " (distance ",
                     topology.distance(advice.cpu_node, advice.memory_node), ")"));
  }
  advice.cpus = topology.cpus_of_node(advice.cpu_node);
  const std::string cpus = FormatIdList(advice.cpus);
  const int m = advice.memory_node;

  advice.numactl = absl::StrCat("numactl --cpunodebind=", advice.cpu_node, " --membind=", m,
                                " <server command>");
  advice.taskset = absl::StrCat("taskset -c ", cpus,
                                " <server command>   # CPUs only: memory follows first touch");
  advice.docker = absl::StrCat("docker run --cpuset-cpus=", cpus, " --cpuset-mems=", m,
                               gpu ? absl::StrCat(" --gpus '\"device=<index or UUID of ", *bus_id,
                                                  ">\"' -e CUDA_DEVICE_ORDER=PCI_BUS_ID")
                                   : "",
                               " <image>");
  advice.kubernetes = KubernetesSpec(advice, topology, gpu);
  advice.code = Code(advice, bus_id);

  for (const PciDevice& d : topology.devices()) {
    if (d.node == m && d.bus_id != bus_id) {
      advice.notes.push_back(
          absl::StrCat("also on node ", m, ": ", DeviceKindName(d.kind), " ", d.bus_id));
    }
  }
  const ProcessScope& scope = topology.process();
  if (!topology.memory_allowed(m)) {
    advice.notes.push_back(absl::StrCat("this process's cpuset does not allow memory on node ", m,
                                        " (allowed: ", FormatIdList(scope.allowed_mem_nodes),
                                        "); a server started from here inherits that limit"));
  }
  return advice;
}

}  // namespace numarena
