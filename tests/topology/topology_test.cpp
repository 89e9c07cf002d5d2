// Topology discovery: the fixture machines under tests/fixtures (read through
// MakeRootedReader, as `numarena topo --sysfs-root` does), in-memory trees for the rules
// that need a specific combination of files (cpuset walk-up, affinity intersection,
// error codes), the queries, and the live machine this test runs on.
#include "numarena/topology.hpp"
#include "os/os.hpp"
#include "topology/node_room.hpp"
#include "topology/topology_parse.hpp"
#include "map_reader.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using numarena::PciDevice;
using numarena::StatusOr;
using numarena::SystemReader;
using numarena::Topology;
using Ids = std::vector<int>;

namespace {

std::string Fixture(const std::string& name) { return std::string(NUMARENA_FIXTURES) + "/" + name; }

StatusOr<Topology> DiscoverFixture(const std::string& name) {
  auto reader = numarena::MakeRootedReader(Fixture(name) + "/sys", Fixture(name) + "/proc");
  return Topology::discover(*reader);
}

Ids Range(int first, int last) {
  Ids out;
  for (int i = first; i <= last; ++i) out.push_back(i);
  return out;
}

Ids Concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool AnyWarningContains(const Topology& topo, const std::string& needle) {
  for (const std::string& w : topo.warnings()) {
    if (w.find(needle) != std::string::npos) return true;
  }
  return false;
}

const PciDevice* DeviceAt(const Topology& topo, const std::string& bus_id) {
  for (const PciDevice& d : topo.devices()) {
    if (d.bus_id == bus_id) return &d;
  }
  return nullptr;
}

using numarena::testing::MapReader;

}  // namespace

TEST_CASE("epyc9654-snc4: the seed machine") {
  auto topo = DiscoverFixture("epyc9654-snc4");
  REQUIRE(topo.ok());
  CHECK(topo->node_ids() == Ids{0, 1, 2, 3});
  CHECK(topo->cpus_of_node(0) == Concat(Range(0, 47), Range(96, 143)));
  CHECK(topo->cpus_of_node(1) == Concat(Range(48, 95), Range(144, 191)));
  CHECK(topo->cpus_of_node(2) == Concat(Range(192, 239), Range(288, 335)));
  CHECK(topo->cpus_of_node(3) == Concat(Range(240, 287), Range(336, 383)));
  const int expected[4][4] = {
      {10, 12, 32, 32}, {12, 10, 32, 32}, {32, 32, 10, 12}, {32, 32, 12, 10}};
  for (int from = 0; from < 4; ++from) {
    for (int to = 0; to < 4; ++to) CHECK(topo->distance(from, to) == expected[from][to]);
  }
  for (const auto& node : topo->nodes()) {
    CHECK(node.mem_total_bytes == 196608ull << 20);
    CHECK(node.mem_free_bytes + node.mem_used_bytes == node.mem_total_bytes);
    CHECK(!node.memory_only());
    CHECK(!node.access.has_value());
  }
  CHECK(topo->node(0)->mem_free_bytes == 180224ull << 20);

  // GPU and InfiniBand NIC with their nodes; the host bridge is not reported.
  REQUIRE(topo->devices().size() == 2);
  const PciDevice* gpu = DeviceAt(*topo, "0000:41:00.0");
  REQUIRE(gpu != nullptr);
  CHECK(gpu->kind == numarena::DeviceKind::kGpu);
  CHECK(gpu->vendor == 0x10de);
  CHECK(gpu->device == 0x2330);
  CHECK(gpu->class_code == 0x030200u);
  CHECK(gpu->node == std::optional<int>(0));
  const PciDevice* hca = DeviceAt(*topo, "0000:c1:00.0");
  REQUIRE(hca != nullptr);
  CHECK(hca->kind == numarena::DeviceKind::kInfiniband);
  CHECK(hca->vendor == 0x15b3);
  CHECK(*topo->node_of_pci("0000:41:00.0") == 0);
  CHECK(*topo->node_of_pci("41:00.0") == 0);       // short form
  CHECK(*topo->node_of_pci("0000:C1:00.0") == 2);  // case-insensitive
  CHECK(absl::IsNotFound(topo->node_of_pci("0000:00:00.0").status()));

  // Process: everything; the cpuset files exist only at the cgroup root (walk-up).
  const auto& p = topo->process();
  CHECK(p.allowed_cpus == Range(0, 383));
  CHECK(p.allowed_mem_nodes == Ids{0, 1, 2, 3});
  CHECK(p.cgroup == std::optional<std::string>("/system.slice/vllm.service"));
  CHECK(p.cgroup_cpus == std::optional<Ids>(Range(0, 383)));
  CHECK(p.cgroup_mems == std::optional<Ids>(Ids{0, 1, 2, 3}));
  CHECK(AnyWarningContains(*topo, "CPUs of 4 nodes (0-3)"));
  CHECK(topo->warnings().size() == 1);
}

TEST_CASE("epyc9654-snc4: queries") {
  auto topo = DiscoverFixture("epyc9654-snc4");
  REQUIRE(topo.ok());
  CHECK(topo->nodes_by_distance(0) == Ids{0, 1, 2, 3});
  CHECK(topo->nodes_by_distance(1) == Ids{1, 0, 2, 3});
  CHECK(topo->nodes_by_distance(2) == Ids{2, 3, 0, 1});
  CHECK(topo->nodes_by_distance(3) == Ids{3, 2, 0, 1});
  CHECK(topo->nodes_by_distance(7).empty());
  CHECK(topo->distance(0, 7) == -1);
  CHECK(topo->distance(-1, 0) == -1);
  CHECK(*topo->node_of_cpu(0) == 0);
  CHECK(*topo->node_of_cpu(96) == 0);
  CHECK(*topo->node_of_cpu(144) == 1);
  CHECK(*topo->node_of_cpu(383) == 3);
  auto missing = topo->node_of_cpu(384);
  CHECK(absl::IsNotFound(missing.status()));
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("CPU 384"));
  CHECK(topo->cpus_of_node(9).empty());
  CHECK(topo->node(9) == nullptr);
  CHECK(!topo->has_node(-1));
  CHECK(topo->memory_allowed(3));
  CHECK(!topo->memory_allowed(4));
  CHECK(topo->nodes_of_cpus(Ids{0, 50, 1000}) == Ids{0, 1});
}

TEST_CASE("xeon-2s: a pod's cpuset restricts CPUs and memory to node 0") {
  auto topo = DiscoverFixture("xeon-2s");
  REQUIRE(topo.ok());
  CHECK(topo->node_ids() == Ids{0, 1});
  CHECK(topo->distance(0, 1) == 21);
  CHECK(topo->distance(1, 0) == 21);
  CHECK(topo->distance(1, 1) == 10);
  CHECK(*topo->node_of_pci("0000:b1:00.0") == 1);
  CHECK(DeviceAt(*topo, "0000:17:00.0")->kind == numarena::DeviceKind::kNic);

  // The nearest cpuset files (the pod's) win over the root's.
  const auto& p = topo->process();
  CHECK(p.cgroup_cpus == std::optional<Ids>(Concat(Range(0, 27), Range(112, 139))));
  CHECK(p.allowed_cpus == Concat(Range(0, 27), Range(112, 139)));
  CHECK(p.allowed_mem_nodes == Ids{0});
  CHECK(topo->memory_allowed(0));
  CHECK(!topo->memory_allowed(1));
  CHECK(AnyWarningContains(*topo, "allows CPUs of nodes 0 only, of 0-1"));
  CHECK(AnyWarningContains(*topo, "limits memory to nodes 0 of 0-1"));
  CHECK(AnyWarningContains(*topo, "kubepods-pod1.slice/cpuset.mems.effective"));
  CHECK(!AnyWarningContains(*topo, "CPUs of 2 nodes"));
}

TEST_CASE("cxl-hmat: a memory-only node with slower HMAT attributes") {
  auto topo = DiscoverFixture("cxl-hmat");
  REQUIRE(topo.ok());
  CHECK(topo->node_ids() == Ids{0, 1, 2});
  const auto* cxl = topo->node(2);
  REQUIRE(cxl != nullptr);
  CHECK(cxl->memory_only());
  CHECK(cxl->mem_total_bytes == 131072ull << 20);
  REQUIRE(cxl->access.has_value());
  CHECK(cxl->access->read_bandwidth_mbps == 25600);
  CHECK(cxl->access->write_bandwidth_mbps == 20480);
  CHECK(cxl->access->read_latency_ns == 250);
  CHECK(cxl->access->write_latency_ns == 300);
  CHECK(cxl->access->initiators == Ids{0});
  const auto* dram = topo->node(0);
  REQUIRE(dram->access.has_value());
  CHECK(dram->access->read_bandwidth_mbps > cxl->access->read_bandwidth_mbps);
  CHECK(dram->access->read_latency_ns < cxl->access->read_latency_ns);
  CHECK(topo->node(1)->access->initiators == Ids{1});
  CHECK(!topo->node(1)->memory_only());
  CHECK(topo->cpus_of_node(2).empty());
  CHECK(topo->nodes_by_distance(2) == Ids{2, 0, 1});
  CHECK(topo->nodes_by_distance(0) == Ids{0, 2, 1});

  // No proc tree: the process may use everything in the fixture.
  const auto& p = topo->process();
  CHECK(p.allowed_cpus == Range(0, 15));
  CHECK(p.allowed_mem_nodes == Ids{0, 1, 2});
  CHECK(!p.cgroup.has_value());
  CHECK(!p.cgroup_cpus.has_value());
  CHECK(topo->memory_allowed(2));
}

TEST_CASE("laptop-1node: one node, a GPU of unknown node, no cpuset files") {
  auto topo = DiscoverFixture("laptop-1node");
  REQUIRE(topo.ok());
  CHECK(topo->node_ids() == Ids{0});
  CHECK(topo->nodes_by_distance(0) == Ids{0});
  REQUIRE(topo->devices().size() == 1);  // the Wi-Fi (class 0x0280) is not reported
  CHECK(!topo->devices()[0].node.has_value());
  CHECK(AnyWarningContains(*topo, "the machine has one node, 0"));
  CHECK(topo->process().cgroup.has_value());
  CHECK(!topo->process().cgroup_cpus.has_value());
  CHECK(topo->process().allowed_cpus == Range(0, 7));
}

TEST_CASE("gpu-unknown-node: numa_node -1 is unknown, never node 0") {
  auto topo = DiscoverFixture("gpu-unknown-node");
  REQUIRE(topo.ok());
  const PciDevice* gpu = DeviceAt(*topo, "0000:17:00.0");
  REQUIRE(gpu != nullptr);
  CHECK(!gpu->node.has_value());
  auto node = topo->node_of_pci("0000:17:00.0");
  CHECK(absl::IsFailedPrecondition(node.status()));
  CHECK_THAT(std::string(node.status().message()), Catch::Contains("numa_node is -1"));
  CHECK(AnyWarningContains(*topo, "gpu 0000:17:00.0 (10de:2330) has numa_node -1"));
  CHECK(!AnyWarningContains(*topo, "the machine has one node"));
  CHECK(*topo->node_of_pci("0000:ca:00.0") == 1);
}

TEST_CASE("sparse-ids: nodes 0, 1, 4") {
  auto topo = DiscoverFixture("sparse-ids");
  REQUIRE(topo.ok());
  CHECK(topo->node_ids() == Ids{0, 1, 4});
  CHECK(topo->distance(0, 4) == 40);
  CHECK(topo->distance(4, 1) == 40);
  CHECK(topo->distance(4, 4) == 10);
  CHECK(topo->distance(0, 2) == -1);
  CHECK(topo->nodes_by_distance(4) == Ids{4, 0, 1});
  CHECK(*topo->node_of_cpu(9) == 4);
  CHECK(topo->cpus_of_node(4) == Range(8, 11));
  CHECK(*topo->node_of_pci("0000:c3:00.0") == 4);  // AMD Instinct, class 0x0380
  // A device claiming a node that is not online is reported as unknown.
  CHECK(!DeviceAt(*topo, "0000:3b:00.0")->node.has_value());
  CHECK(AnyWarningContains(*topo, "reports numa_node 3, which is not an online node"));
  CHECK(topo->process().allowed_mem_nodes == Ids{0, 1, 4});
}

TEST_CASE("malformed and incomplete fixtures fail naming the file") {
  struct Case {
    const char* fixture;
    absl::StatusCode code;
    const char* file;
    const char* why;
  };
  const Case cases[] = {
      {"malformed-distance", absl::StatusCode::kDataLoss, "/sys/devices/system/node/node1/distance",
       "'1O'"},
      {"malformed-cpulist", absl::StatusCode::kDataLoss, "/sys/devices/system/node/node0/cpulist",
       "reversed range"},
      {"malformed-meminfo", absl::StatusCode::kDataLoss, "/sys/devices/system/node/node0/meminfo",
       "'lots'"},
      {"distance-size-mismatch", absl::StatusCode::kDataLoss,
       "/sys/devices/system/node/node0/distance", "has 3 entries but 2 nodes are online"},
      {"missing-online", absl::StatusCode::kNotFound, "/sys/devices/system/node/online", "missing"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.fixture);
    auto topo = DiscoverFixture(c.fixture);
    REQUIRE(!topo.ok());
    CHECK(topo.status().code() == c.code);
    std::string message(topo.status().message());
    CHECK_THAT(message, Catch::Contains(Fixture(c.fixture) + c.file));
    CHECK_THAT(message, Catch::Contains(c.why));
  }
}

TEST_CASE("in-memory trees: required files and consistency checks") {
  SECTION("a minimal two-node machine") {
    MapReader r = MapReader::TwoNodes();
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    CHECK(topo->node_ids() == Ids{0, 1});
    CHECK(topo->devices().empty());  // no PCI tree: no devices, no error
    CHECK(topo->process().allowed_cpus == Range(0, 7));
    CHECK(topo->node(1)->mem_used_bytes == 512ull << 20);
  }
  SECTION("missing meminfo is NotFound naming it") {
    MapReader r = MapReader::TwoNodes();
    r.files.erase("/sys/devices/system/node/node1/meminfo");
    auto topo = Topology::discover(r);
    CHECK(absl::IsNotFound(topo.status()));
    CHECK_THAT(std::string(topo.status().message()),
               Catch::Contains("/sys/devices/system/node/node1/meminfo: missing"));
  }
  SECTION("meminfo of another node") {
    MapReader r = MapReader::TwoNodes();
    r.files["/sys/devices/system/node/node1/meminfo"] =
        "Node 0 MemTotal: 2 kB\nNode 0 MemFree: 1 kB\n";
    auto topo = Topology::discover(r);
    CHECK(absl::IsDataLoss(topo.status()));
    CHECK_THAT(std::string(topo.status().message()), Catch::Contains("expected node 1"));
  }
  SECTION("a CPU listed by two nodes") {
    MapReader r = MapReader::TwoNodes();
    r.files["/sys/devices/system/node/node1/cpulist"] = "3-7\n";
    auto topo = Topology::discover(r);
    CHECK(absl::IsDataLoss(topo.status()));
    CHECK_THAT(std::string(topo.status().message()),
               Catch::Contains("node1/cpulist: CPU 3 is also listed by node 0"));
  }
  SECTION("an empty online list") {
    MapReader r = MapReader::TwoNodes();
    r.files["/sys/devices/system/node/online"] = "\n";
    CHECK(absl::IsDataLoss(Topology::discover(r).status()));
  }
  SECTION("a malformed optional file is still an error") {
    MapReader r = MapReader::TwoNodes();
    r.files["/sys/bus/pci/devices/0000:41:00.0/class"] = "0x0302zz\n";
    auto topo = Topology::discover(r);
    CHECK(absl::IsDataLoss(topo.status()));
    CHECK_THAT(std::string(topo.status().message()),
               Catch::Contains("/sys/bus/pci/devices/0000:41:00.0/class: PCI class"));
  }
  SECTION("a device without numa_node file is unknown, with a warning") {
    MapReader r = MapReader::TwoNodes();
    r.files["/sys/bus/pci/devices/0000:41:00.0/class"] = "0x030200\n";
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    REQUIRE(topo->devices().size() == 1);
    CHECK(!topo->devices()[0].node.has_value());
    CHECK(topo->devices()[0].vendor == 0);
    CHECK(AnyWarningContains(*topo, "no numa_node file"));
  }
  SECTION("HMAT attributes the kernel leaves out stay 0") {
    MapReader r = MapReader::TwoNodes();
    r.files["/sys/devices/system/node/node1/access0/initiators/read_bandwidth"] = "5000\n";
    r.files["/sys/devices/system/node/node1/access0/initiators/node0"] = "";
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    REQUIRE(topo->node(1)->access.has_value());
    CHECK(topo->node(1)->access->read_bandwidth_mbps == 5000);
    CHECK(topo->node(1)->access->write_latency_ns == 0);
    CHECK(topo->node(1)->access->initiators == Ids{0});
    CHECK(!topo->node(0)->access.has_value());
  }
}

TEST_CASE("in-memory trees: per-node huge page pools") {
  MapReader r = MapReader::TwoNodes();
  const std::string pools = "/sys/devices/system/node/node1/hugepages/";
  r.files[pools + "hugepages-2048kB/nr_hugepages"] = "8\n";
  r.files[pools + "hugepages-2048kB/free_hugepages"] = "5\n";
  r.files[pools + "hugepages-2048kB/surplus_hugepages"] = "1\n";
  r.files[pools + "hugepages-1048576kB/nr_hugepages"] = "0\n";
  r.files[pools + "README"] = "not a pool\n";
  SECTION("read per node, ascending by page size") {
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    CHECK(topo->node(0)->huge_pages.empty());
    const auto& p = topo->node(1)->huge_pages;
    REQUIRE(p.size() == 2);
    CHECK(p[0].page_bytes == (std::size_t{2} << 20));
    CHECK(p[0].total == 8);
    CHECK(p[0].free == 5);
    CHECK(p[0].surplus == 1);
    CHECK(p[1].page_bytes == (std::size_t{1} << 30));
    CHECK(p[1].total == 0);
    CHECK(p[1].free == 0);  // absent file: 0
  }
  SECTION("a malformed count is DataLoss naming the file") {
    r.files[pools + "hugepages-2048kB/free_hugepages"] = "lots\n";
    auto topo = Topology::discover(r);
    CHECK(absl::IsDataLoss(topo.status()));
    CHECK_THAT(std::string(topo.status().message()),
               Catch::Contains("node1/hugepages/hugepages-2048kB/free_hugepages"));
  }
  CHECK(numarena::NodeHugePagePoolFile(1, std::size_t{2} << 20, "nr_hugepages") ==
        "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages");
}

TEST_CASE("in-memory trees: process scope") {
  MapReader r = MapReader::TwoNodes();
  r.files["/proc/self/cgroup"] = "0::/a/b/c\n";

  SECTION("status ∩ cgroup, nearest cpuset files win") {
    r.files["/proc/self/status"] = "Cpus_allowed_list:\t2-5\nMems_allowed_list:\t0-1\n";
    r.files["/sys/fs/cgroup/cpuset.cpus.effective"] = "0-7\n";
    r.files["/sys/fs/cgroup/a/cpuset.cpus.effective"] = "3-7\n";
    r.files["/sys/fs/cgroup/a/b/cpuset.mems.effective"] = "1\n";
    r.files["/sys/fs/cgroup/a/b/c/cpuset.cpus.effective"] = "\n";  // empty: inherit
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    const auto& p = topo->process();
    CHECK(p.cgroup_cpus == std::optional<Ids>(Range(3, 7)));
    CHECK(p.cgroup_mems == std::optional<Ids>(Ids{1}));
    CHECK(p.allowed_cpus == Ids{3, 4, 5});
    CHECK(p.allowed_mem_nodes == Ids{1});
    CHECK(AnyWarningContains(*topo, "CPUs of 2 nodes (0-1)"));
    CHECK(AnyWarningContains(*topo,
                             "/sys/fs/cgroup/a/b/cpuset.mems.effective) limits memory "
                             "to nodes 1 of 0-1"));
  }
  SECTION("the live affinity replaces Cpus_allowed_list") {
    r.files["/proc/self/status"] = "Cpus_allowed_list:\t0-7\n";
    r.affinity = Ids{4, 5};
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    CHECK(topo->process().allowed_cpus == Ids{4, 5});
    CHECK(topo->warnings().empty());  // one node, no cpuset, every memory node allowed
  }
  SECTION("Mems_allowed_list alone restricts memory") {
    r.files["/proc/self/status"] = "Mems_allowed_list:\t0\n";
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    CHECK(topo->process().allowed_mem_nodes == Ids{0});
    CHECK(AnyWarningContains(*topo, "Mems_allowed_list of /proc/self/status limits memory"));
  }
  SECTION("affinity and cpuset that do not intersect") {
    r.affinity = Ids{0, 1};
    r.files["/sys/fs/cgroup/cpuset.cpus.effective"] = "4-7\n";
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    CHECK(topo->process().allowed_cpus.empty());
    CHECK(AnyWarningContains(*topo, "no CPU is allowed"));
  }
  SECTION("cgroup v1 cpuset hierarchy") {
    r.files["/proc/self/cgroup"] = "3:cpuset:/docker/abc\n0::/\n";
    r.files["/sys/fs/cgroup/cpuset/docker/cpuset.effective_cpus"] = "0-3\n";
    r.files["/sys/fs/cgroup/cpuset/cpuset.effective_mems"] = "0\n";
    auto topo = Topology::discover(r);
    REQUIRE(topo.ok());
    CHECK(topo->process().cgroup_cpus == std::optional<Ids>(Range(0, 3)));
    CHECK(topo->process().cgroup_mems == std::optional<Ids>(Ids{0}));
    CHECK(topo->process().allowed_cpus == Range(0, 3));
  }
  SECTION("malformed cgroup files name the file") {
    r.files["/sys/fs/cgroup/a/cpuset.cpus.effective"] = "0-3:2/4\n";
    auto topo = Topology::discover(r);
    CHECK(absl::IsDataLoss(topo.status()));
    CHECK_THAT(std::string(topo.status().message()),
               Catch::Contains("/sys/fs/cgroup/a/cpuset.cpus.effective: CPU list") &&
                   Catch::Contains("stride"));
  }
  SECTION("an affinity error other than Unimplemented is returned") {
    struct FailingAffinity : MapReader {
      StatusOr<Ids> CpuAffinity() const override {
        return absl::PermissionDeniedError("sched_getaffinity: denied");
      }
    } failing;
    failing.files = r.files;
    CHECK(absl::IsPermissionDenied(Topology::discover(failing).status()));
  }
}

TEST_CASE("MakeRootedReader maps /sys and /proc only") {
  auto reader = numarena::MakeRootedReader("/nonexistent-root/sys/", "/nonexistent-root/proc");
  CHECK(!reader->is_live_system());
  CHECK(reader->DisplayPath("/sys/devices/system/node/online") ==
        "/nonexistent-root/sys/devices/system/node/online");
  CHECK(reader->DisplayPath("/proc/self/status") == "/nonexistent-root/proc/self/status");
  CHECK(reader->DisplayPath("/system/x") == "/system/x");  // not under /sys
  CHECK(absl::IsInvalidArgument(reader->Read("/etc/passwd").status()));
  CHECK(absl::IsNotFound(reader->Read("/sys/devices/system/node/online").status()));
  CHECK(absl::IsUnimplemented(reader->CpuAffinity().status()));
  auto live = numarena::MakeRootedReader();
  CHECK(live->is_live_system());
  CHECK(live->CpuAffinity().ok());
}

TEST_CASE("the live machine") {
  auto topo = Topology::discover();
  REQUIRE(topo.ok());
  REQUIRE(!topo->nodes().empty());
  for (const auto& node : topo->nodes()) {
    CHECK(topo->distance(node.id, node.id) == 10);
    CHECK(node.mem_free_bytes <= node.mem_total_bytes);
  }
  // Every CPU this thread may run on belongs to an online node, and the thread runs on one.
  for (int cpu : topo->process().allowed_cpus) CHECK(topo->node_of_cpu(cpu).ok());
  CHECK(!topo->process().allowed_mem_nodes.empty());
  int here = Topology::current_node();
  CHECK(topo->has_node(here));
  CHECK(topo->memory_allowed(here));
  for (const PciDevice& d : topo->devices()) {
    if (d.node) CHECK(topo->has_node(*d.node));
  }
}

TEST_CASE("Topology::system() is discovered once and shared across threads") {
  std::vector<const Topology*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] {
      auto topo = Topology::system();
      if (topo.ok()) seen[i] = *topo;
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(seen[0] != nullptr);
  for (const Topology* t : seen) CHECK(t == seen[0]);
  CHECK(*Topology::system() == seen[0]);
  CHECK(seen[0]->node_ids() == Topology::discover()->node_ids());
}

TEST_CASE("a thread pinned to one CPU discovers the process's CPUs, not its own") {
  // Topology::system() is discovered by whichever thread asks first, often a worker that
  // has already pinned itself to one node.
  auto unpinned = Topology::discover();
  REQUIRE(unpinned.ok());
  const std::vector<int> process_cpus = unpinned->process().allowed_cpus;
  REQUIRE_FALSE(process_cpus.empty());
  if (process_cpus.size() < 2) {
    WARN("one allowed CPU: pinning cannot narrow it, nothing to tell apart");
    return;
  }
  const int only[] = {process_cpus.back()};
  numarena::Status pinned;
  numarena::StatusOr<std::vector<int>> own = absl::UnknownError("not run");
  std::vector<int> discovered;
  std::thread([&] {  // records only (Catch2 is not thread-safe)
    pinned = numarena::os::SetThreadAffinity(only);
    own = numarena::os::ThreadAffinity();
    auto topo = Topology::discover();
    if (topo.ok()) discovered = topo->process().allowed_cpus;
  })
      .join();
  REQUIRE(pinned.ok());
  REQUIRE(own.ok());
  CHECK(*own == std::vector<int>{only[0]});
  CHECK(discovered == process_cpus);
}

TEST_CASE("node room: the allocation-free readers agree with the parser on this host") {
  // Node 0 exists on every Linux machine that has NUMA sysfs; without it there is nothing to
  // compare, and the readers must say so.
  const std::string path = "/sys/devices/system/node/node0/meminfo";
  auto text = numarena::os::ReadFile(path);
  numarena::parse::NodeMeminfo read;
  if (!text.ok()) {
    CHECK_FALSE(numarena::ReadNodeMeminfoNoAlloc(0, &read));
    return;
  }
  auto parsed = numarena::parse::ParseNodeMeminfo(*text);
  REQUIRE(parsed.ok());
  REQUIRE(numarena::ReadNodeMeminfoNoAlloc(0, &read));
  CHECK(read.node == 0);
  CHECK(read.total_bytes == parsed->total_bytes);  // MemTotal does not move; MemFree does
  CHECK(read.free_bytes <= read.total_bytes);
  CHECK_FALSE(numarena::ReadNodeMeminfoNoAlloc(-1, &read));
  CHECK_FALSE(numarena::ReadNodeMeminfoNoAlloc(numarena::parse::kMaxNodeId + 1, &read));

  std::uint64_t low = 0, high = 0;
  if (numarena::os::ReadFile("/proc/zoneinfo").ok()) {
    CHECK(numarena::ReadNodeWatermarksNoAlloc(0, &low, &high));
    CHECK(low > 0);
    CHECK(high > low);
  }
  low = high = 7;
  CHECK_FALSE(numarena::ReadNodeWatermarksNoAlloc(numarena::parse::kMaxNodeId + 1, &low, &high));
  CHECK(low == 7);  // left as they were
  CHECK(high == 7);
}
