// How to run a server next to a GPU, a NIC or a node: the launch lines behind
// `numarena advise`.
//
// Given a device's bus id (or a node), `Advise` finds the node to allocate on and the CPUs
// to run on and renders the same placement for each way people start servers: numactl,
// taskset, `docker run`, a Kubernetes pod (CPU manager `static`, topology manager
// `single-numa-node`, memory manager `Static`) and numarena in code. A memory-only node
// (CXL expander) gets the CPUs of its nearest node with CPUs. A device whose node the kernel
// does not know (-1) is an error that says so: guessing would bind to the wrong socket.
//
//   auto topo = numarena::Topology::discover(*numarena::MakeRootedReader());
//   numarena::AdviseRequest request;
//   request.gpu_bus_id = "0000:41:00.0";
//   auto advice = numarena::Advise(*topo, request);
//   if (advice.ok()) std::cout << advice->numactl << "\n";
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena {

// Exactly one of the three.
struct AdviseRequest {
  // A PCI address, or an index "N" / "cuda:N" among the GPUs in PCI address order; a device
  // that is not a GPU is InvalidArgument.
  std::optional<std::string> gpu_bus_id;
  std::optional<std::string> nic_bus_id;
  std::optional<int> node;

  // Huge pages the server will map on its memory node, in bytes (rounded up to whole pages
  // of `huge_page_bytes`, 2 MiB unless set to another size the node has a pool of). When set,
  // the advice says whether the node's own pool holds them, gives the exact command that
  // reserves the rest on that node, and asks Kubernetes for the `hugepages-<size>` resource.
  std::optional<std::uint64_t> huge_pages;
  std::size_t huge_page_bytes = std::size_t{2} << 20;
};

struct Advice {
  std::string target;      // "GPU 0000:41:00.0", "NIC 0000:21:00.0", "node 1"
  int memory_node = -1;    // where memory goes
  int cpu_node = -1;       // whose CPUs to run on (memory_node unless memory-only)
  std::vector<int> cpus;   // the CPUs of cpu_node
  std::string numactl;     // one line
  std::string taskset;     // one line
  std::string docker;      // one line
  std::string kubernetes;  // a pod spec (YAML) with the kubelet settings as comments
  std::string code;        // C++ using numarena
  // The memory node's hugetlbfs pools and, with AdviseRequest::huge_pages, the reservation:
  // shell lines (comments and `echo N > .../nodeM/hugepages/.../nr_hugepages`); empty when
  // the node has no pools and none were asked for.
  std::string huge_pages;
  // The one command that reserves what AdviseRequest::huge_pages needs on the memory node,
  // e.g. "echo 520 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages";
  // empty when nothing was asked or the pool already has the pages free.
  std::string huge_page_reserve;
  std::vector<std::string>
      notes;  // facts worth knowing: cpuset limits, devices that share the node
};

// InvalidArgument unless exactly one target is set, for a node that is not online, or for
// huge pages of a size the memory node has no pool of (the error lists the sizes it has);
// NotFound for an unknown bus id (or a GPU asked as a NIC and the reverse);
// FailedPrecondition for a device whose node is unknown, or a memory-only node when no
// node has CPUs.
[[nodiscard]] StatusOr<Advice> Advise(const Topology& topology, const AdviseRequest& request);

}  // namespace numarena
