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
  std::vector<std::string>
      notes;  // facts worth knowing: cpuset limits, devices that share the node
};

// InvalidArgument unless exactly one target is set, or for a node that is not online;
// NotFound for an unknown bus id (or a GPU asked as a NIC and the reverse);
// FailedPrecondition for a device whose node is unknown, or a memory-only node when no
// node has CPUs.
[[nodiscard]] StatusOr<Advice> Advise(const Topology& topology, const AdviseRequest& request);

}  // namespace numarena
