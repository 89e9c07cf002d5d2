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

// What a server's huge pages need on its memory node: whole pages of one size, and the
// pool's nr_hugepages that leaves that many free (0 when the pool already has them).
struct HugePagePlan {
  std::size_t page_bytes = 0;
  std::uint64_t pages = 0;
  std::uint64_t reserve_total = 0;
};

// A byte count as a Kubernetes quantity: "2Mi", "4Gi".
std::string KubernetesQuantity(std::uint64_t bytes) {
  constexpr std::uint64_t kGi = std::uint64_t{1} << 30;
  return bytes % kGi == 0 ? absl::StrCat(bytes / kGi, "Gi") : absl::StrCat(bytes >> 20, "Mi");
}

StatusOr<std::optional<HugePagePlan>> PlanHugePages(const NodeInfo& node,
                                                    const AdviseRequest& request) {
  if (!request.huge_pages) return std::optional<HugePagePlan>();
  const std::size_t page = request.huge_page_bytes;
  const HugePagePool* pool = ops::HugePagePoolOf(node, page);
  if (page == 0 || pool == nullptr) {
    std::vector<std::string> sizes;
    for (const HugePagePool& p : node.huge_pages)
      sizes.push_back(ops::FormatPageSize(p.page_bytes));
    return absl::InvalidArgumentError(absl::StrCat(
        "node ", node.id, " has no pool of ", ops::FormatPageSize(page), " huge pages (",
        sizes.empty() ? "it has no hugetlbfs pools at all"
                      : absl::StrCat("it has ", absl::StrJoin(sizes, ", ")),
        "); choose one of its sizes"));
  }
  HugePagePlan plan;
  plan.page_bytes = page;
  plan.pages = *request.huge_pages / page + (*request.huge_pages % page != 0 ? 1 : 0);
  if (plan.pages == 0) plan.pages = 1;
  if (pool->free < plan.pages) plan.reserve_total = pool->total + (plan.pages - pool->free);
  return std::optional<HugePagePlan>(plan);
}

// The node's pools as shell comments, and the reservation the plan needs.
std::string HugePageLines(const NodeInfo& node, const std::optional<HugePagePlan>& plan) {
  if (node.huge_pages.empty() && !plan) return "";
  std::string out = absl::StrCat("# node ", node.id, "'s own huge page pools (memory bound to ",
                                 "the node draws only from these):");
  for (const HugePagePool& pool : node.huge_pages) {
    absl::StrAppend(&out, " ", ops::FormatPageSize(pool.page_bytes), ": ", pool.free, " free of ",
                    pool.total, ";");
  }
  out.back() = '\n';
  const std::size_t page = plan ? plan->page_bytes : node.huge_pages.front().page_bytes;
  const std::string nr = NodeHugePagePoolFile(node.id, page, "nr_hugepages");
  if (!plan) {
    absl::StrAppend(&out, "# reserve on node ", node.id, " (root): echo COUNT > ", nr, "\n");
    return out;
  }
  if (plan->reserve_total == 0) {
    absl::StrAppend(&out, "# enough free for ", plan->pages, " pages of ",
                    ops::FormatPageSize(plan->page_bytes), "; nothing to reserve\n");
    return out;
  }
  absl::StrAppend(&out, "# ", plan->pages, " pages of ", ops::FormatPageSize(plan->page_bytes),
                  " needed: reserve on node ", node.id,
                  " (root), then check free_hugepages "
                  "(the kernel reserves fewer when the node's memory is fragmented)\n",
                  "echo ", plan->reserve_total, " > ", nr, "\n", "cat ",
                  NodeHugePagePoolFile(node.id, page, "free_hugepages"), "\n");
  return out;
}

std::string KubernetesSpec(const Advice& a, const Topology& topology, bool gpu,
                           const std::optional<HugePagePlan>& huge) {
  const NodeInfo* memory = topology.node(a.memory_node);
  std::uint64_t gib = static_cast<std::uint64_t>(static_cast<double>(memory->mem_total_bytes) *
                                                 kPodMemoryShare / (1024.0 * 1024 * 1024));
  if (gib == 0) gib = 1;
  std::string huge_resource =
      huge ? absl::StrCat(", hugepages-", KubernetesQuantity(huge->page_bytes), ": \"",
                          KubernetesQuantity(huge->pages * huge->page_bytes), "\"")
           : "";
  std::string resources = absl::StrCat("{cpu: \"", a.cpus.size(), "\", memory: \"", gib, "Gi\"",
                                       gpu ? ", nvidia.com/gpu: \"1\"" : "", huge_resource, "}");
  // Huge pages reach the container through a HugePages emptyDir; the kubelet counts them per
  // NUMA node (memory manager Static) once the host has reserved them on the node.
  std::string huge_mount =
      huge ? "    volumeMounts:\n    - {name: hugepages, mountPath: /hugepages}\n" : "";
  std::string huge_volume =
      huge ? absl::StrCat("  volumes:\n  - name: hugepages\n    emptyDir: {medium: HugePages-",
                          KubernetesQuantity(huge->page_bytes), "}\n")
           : "";
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
      resources, "\n", gpu ? "    env:\n    - {name: CUDA_DEVICE_ORDER, value: PCI_BUS_ID}\n" : "",
      huge_mount, huge_volume,
      huge ? absl::StrCat("# the host reserves the pages on node ", a.memory_node,
                          " first (numarena advise --hugepages prints the command)\n")
           : "");
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
      return absl::InvalidArgumentError(
          absl::StrCat("node ", *request.node,
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
  const NodeInfo& memory = *topology.node(m);
  auto huge = PlanHugePages(memory, request);
  if (!huge.ok()) return huge.status();
  advice.huge_pages = HugePageLines(memory, *huge);
  if (*huge && (*huge)->reserve_total != 0) {
    advice.huge_page_reserve =
        absl::StrCat("echo ", (*huge)->reserve_total, " > ",
                     NodeHugePagePoolFile(m, (*huge)->page_bytes, "nr_hugepages"));
  }
  advice.kubernetes = KubernetesSpec(advice, topology, gpu, *huge);
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
