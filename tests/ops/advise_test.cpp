// Tests of the launch advice (numarena/advise.hpp) on the topology fixtures: the EPYC 9654
// in SNC-4 mode (H100 at 0000:41:00.0 on node 0, InfiniBand at 0000:c1:00.0 on node 2),
// the CXL machine (memory-only node), and a GPU of unknown node.
#include "numarena/ops/advise.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "numarena/topology.hpp"

namespace {

numarena::Topology Load(const std::string& name) {
  std::string root = std::string(NUMARENA_FIXTURES) + "/" + name;
  auto reader = numarena::MakeRootedReader(root + "/sys", root + "/proc");
  auto topology = numarena::Topology::discover(*reader);
  REQUIRE(topology.ok());
  return *std::move(topology);
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("advise: the H100 of the EPYC fixture", "[advise]") {
  numarena::Topology topo = Load("epyc9654-snc4");
  numarena::AdviseRequest request;
  request.gpu_bus_id = "41:00.0";
  auto advice = numarena::Advise(topo, request);
  REQUIRE(advice.ok());
  CHECK(advice->target == "GPU 0000:41:00.0");
  CHECK(advice->memory_node == 0);
  CHECK(advice->cpu_node == 0);
  CHECK(advice->cpus.size() == 96);
  CHECK(advice->numactl == "numactl --cpunodebind=0 --membind=0 <server command>");
  CHECK(advice->taskset ==
        "taskset -c 0-47,96-143 <server command>   # CPUs only: memory follows first touch");
  CHECK(advice->docker ==
        "docker run --cpuset-cpus=0-47,96-143 --cpuset-mems=0 --gpus '\"device=<index or UUID "
        "of 0000:41:00.0>\"' -e CUDA_DEVICE_ORDER=PCI_BUS_ID <image>");
  // 85% of the node's 192 GiB (the budget's 15% headroom) is 163 GiB.
  CHECK(Contains(advice->kubernetes,
                 "      requests: {cpu: \"96\", memory: \"163Gi\", nvidia.com/gpu: \"1\"}\n"));
  CHECK(Contains(advice->kubernetes,
                 "      limits: {cpu: \"96\", memory: \"163Gi\", nvidia.com/gpu: \"1\"}\n"));
  CHECK(Contains(advice->kubernetes, "cpuManagerPolicy: static"));
  CHECK(Contains(advice->kubernetes, "topologyManagerPolicy: single-numa-node"));
  CHECK(Contains(advice->kubernetes, "  name: inference-node0\n"));
  CHECK(Contains(advice->code, "int node = topo->node_of_pci(\"0000:41:00.0\").value();  // 0\n"));
  CHECK(Contains(advice->code, "numarena::Policy::Bind(node)"));
  CHECK(advice->notes.empty());
}

TEST_CASE("advise: the InfiniBand NIC and a plain node", "[advise]") {
  numarena::Topology topo = Load("epyc9654-snc4");
  numarena::AdviseRequest nic;
  nic.nic_bus_id = "0000:c1:00.0";
  auto advice = numarena::Advise(topo, nic);
  REQUIRE(advice.ok());
  CHECK(advice->target == "NIC 0000:c1:00.0");
  CHECK(advice->numactl == "numactl --cpunodebind=2 --membind=2 <server command>");
  CHECK(advice->docker == "docker run --cpuset-cpus=192-239,288-335 --cpuset-mems=2 <image>");
  CHECK_FALSE(Contains(advice->kubernetes, "nvidia.com/gpu"));

  numarena::AdviseRequest node;
  node.node = 3;
  auto by_node = numarena::Advise(topo, node);
  REQUIRE(by_node.ok());
  CHECK(by_node->target == "node 3");
  CHECK(by_node->taskset ==
        "taskset -c 240-287,336-383 <server command>   # CPUs only: memory follows first touch");
  CHECK(Contains(by_node->code, "int node = 3;\n"));
}

TEST_CASE("advise: a memory-only node runs on the nearest CPUs", "[advise]") {
  numarena::Topology topo = Load("cxl-hmat");
  int memory_only = -1;
  for (const auto& node : topo.nodes()) {
    if (node.memory_only()) memory_only = node.id;
  }
  REQUIRE(memory_only >= 0);
  numarena::AdviseRequest request;
  request.node = memory_only;
  auto advice = numarena::Advise(topo, request);
  REQUIRE(advice.ok());
  CHECK(advice->memory_node == memory_only);
  CHECK(advice->cpu_node == topo.nodes_by_distance(memory_only)[1]);
  CHECK(advice->numactl == "numactl --cpunodebind=" + std::to_string(advice->cpu_node) +
                               " --membind=" + std::to_string(memory_only) + " <server command>");
  REQUIRE_FALSE(advice->notes.empty());
  CHECK(advice->notes[0].rfind("node " + std::to_string(memory_only) + " has no CPUs", 0) == 0);
}

TEST_CASE("advise: errors", "[advise]") {
  numarena::Topology topo = Load("epyc9654-snc4");
  numarena::AdviseRequest none;
  CHECK(numarena::Advise(topo, none).status().code() == absl::StatusCode::kInvalidArgument);
  numarena::AdviseRequest two;
  two.node = 0;
  two.gpu_bus_id = "41:00.0";
  CHECK(numarena::Advise(topo, two).status().code() == absl::StatusCode::kInvalidArgument);
  numarena::AdviseRequest offline;
  offline.node = 7;
  auto off = numarena::Advise(topo, offline);
  CHECK(off.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(off.status().message()) == "node 7 is not online (online nodes: 0-3)");
  numarena::AdviseRequest wrong_kind;
  wrong_kind.nic_bus_id = "41:00.0";
  auto kind = numarena::Advise(topo, wrong_kind);
  CHECK(kind.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(kind.status().message()) == "0000:41:00.0 is a gpu, not a NIC (use --gpu)");

  numarena::Topology unknown = Load("ops-unknown-node");
  numarena::AdviseRequest gpu;
  gpu.gpu_bus_id = "0000:41:00.0";
  auto refused = numarena::Advise(unknown, gpu);
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(std::string(refused.status().message()), "numa_node is -1"));
}

TEST_CASE("advise: huge pages from the memory node's own pool", "[advise][hugetlb]") {
  // cxl-hmat: node 0 has 500 of 512 2 MiB pages free and 4 of 4 1 GiB pages; node 1 has
  // empty pools; node 2 (CXL, memory only) has no hugetlbfs pools at all.
  numarena::Topology topo = Load("cxl-hmat");
  const std::string node0_2m = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/";
  const std::string node1_2m = "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/";

  numarena::AdviseRequest plain;
  plain.node = 0;
  auto shown = numarena::Advise(topo, plain);
  REQUIRE(shown.ok());
  CHECK(shown->huge_pages ==
        "# node 0's own huge page pools (memory bound to the node draws only from these): "
        "2 MiB: 500 free of 512; 1 GiB: 4 free of 4\n"
        "# reserve on node 0 (root): echo COUNT > " +
            node0_2m + "nr_hugepages\n");
  CHECK(shown->huge_page_reserve.empty());
  CHECK_FALSE(Contains(shown->kubernetes, "hugepages"));

  // 1000 MiB is exactly the 500 free pages; 1 GiB is 512 pages, 12 more than are free.
  numarena::AdviseRequest fits = plain;
  fits.huge_pages = std::uint64_t{1000} << 20;
  auto enough = numarena::Advise(topo, fits);
  REQUIRE(enough.ok());
  CHECK(Contains(enough->huge_pages, "# enough free for 500 pages of 2 MiB; nothing to reserve\n"));
  CHECK(enough->huge_page_reserve.empty());
  numarena::AdviseRequest more = plain;
  more.huge_pages = std::uint64_t{1} << 30;
  auto short_by_12 = numarena::Advise(topo, more);
  REQUIRE(short_by_12.ok());
  CHECK(short_by_12->huge_page_reserve == "echo 524 > " + node0_2m + "nr_hugepages");
  CHECK(Contains(short_by_12->huge_pages, "echo 524 > " + node0_2m + "nr_hugepages\n"));
  CHECK(Contains(short_by_12->kubernetes, "      requests: {cpu: \"8\", memory: \""));
  CHECK(Contains(short_by_12->kubernetes, ", hugepages-2Mi: \"1Gi\"}\n"));
  CHECK(Contains(short_by_12->kubernetes, "    emptyDir: {medium: HugePages-2Mi}\n"));

  // Node 1's pool is empty: every page is reserved there, never counted from node 0's.
  numarena::AdviseRequest node1 = more;
  node1.node = 1;
  auto empty = numarena::Advise(topo, node1);
  REQUIRE(empty.ok());
  CHECK(empty->huge_page_reserve == "echo 512 > " + node1_2m + "nr_hugepages");

  // A size rounds up to whole pages; 1 GiB pages come from their own pool.
  numarena::AdviseRequest gig = plain;
  gig.huge_pages = (std::uint64_t{5} << 30) + 1;
  gig.huge_page_bytes = std::size_t{1} << 30;
  auto six = numarena::Advise(topo, gig);
  REQUIRE(six.ok());
  CHECK(six->huge_page_reserve ==
        "echo 6 > /sys/devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages");
  CHECK(Contains(six->kubernetes, ", hugepages-1Gi: \"6Gi\"}\n"));

  // Sizes the node has no pool of are refused with the sizes it has.
  numarena::AdviseRequest odd = plain;
  odd.huge_pages = std::uint64_t{1} << 30;
  odd.huge_page_bytes = std::size_t{16} << 20;
  auto no_pool = numarena::Advise(topo, odd);
  CHECK(no_pool.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(no_pool.status().message()) ==
        "node 0 has no pool of 16 MiB huge pages (it has 2 MiB, 1 GiB); choose one of its sizes");
  numarena::AdviseRequest cxl = more;
  cxl.node = 2;
  auto none = numarena::Advise(topo, cxl);
  CHECK(none.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(std::string(none.status().message()), "it has no hugetlbfs pools at all"));
}
