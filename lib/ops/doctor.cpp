// The NUMA health audit (doctor.hpp): one function per check, each reading its files
// through the SystemReader and appending findings, or its id to `passed`, or a note to
// `skipped` when the kernel does not have the file at all.
#include "numarena/ops/doctor.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "numarena/ops/stat.hpp"
#include "numarena/policy.hpp"
#include "os/os.hpp"
#include "ops/ops_common.hpp"
#include "ops/ops_parse.hpp"
#include "topology/topology_parse.hpp"

namespace numarena {
namespace {

constexpr const char* kThpDir = "/sys/kernel/mm/transparent_hugepage/";
// Fraction of a process's private memory that must sit on its GPU's node.
constexpr double kMinGpuLocalFraction = 0.9;
// Recommended floor of vm.min_free_kbytes: 1% of memory, capped at 2 GiB.
constexpr std::int64_t kMinFreeCapKb = 2 * 1024 * 1024;
constexpr std::int64_t kWatermarkScaleFactor = 300;

class Audit {
 public:
  Audit(const SystemReader& reader, const Topology& topology, DoctorReport& report)
      : reader_(reader), topology_(topology), report_(report) {}

  // Reads an optional file; nullopt (and a `skipped` note) when absent.
  StatusOr<std::optional<std::string>> ReadForCheck(const char* id, const std::string& path) {
    auto text = ops::ReadOptional(reader_, path);
    if (text.ok() && !text->has_value()) {
      report_.skipped.push_back(absl::StrCat(id, ": ", reader_.DisplayPath(path), " not found"));
    }
    return text;
  }

  // An integer sysctl at /proc/sys/<dotted name with '/'>.
  StatusOr<std::optional<std::int64_t>> ReadSysctl(const char* id, const std::string& name) {
    std::string path = "/proc/sys/" + name;
    std::replace(path.begin() + 10, path.end(), '.', '/');
    auto text = ReadForCheck(id, path);
    if (!text.ok()) return text.status();
    if (!text->has_value()) return std::optional<std::int64_t>();
    auto value = parse::ParseSysctlInteger(**text);
    if (!value.ok()) return ops::FileError(reader_, path, value.status());
    return std::optional<std::int64_t>(*value);
  }

  StatusOr<std::optional<parse::Selector>> ReadSelector(const char* id, const char* file) {
    std::string path = absl::StrCat(kThpDir, file);
    auto text = ReadForCheck(id, path);
    if (!text.ok()) return text.status();
    if (!text->has_value()) return std::optional<parse::Selector>();
    auto selector = parse::ParseSelector(**text);
    if (!selector.ok()) return ops::FileError(reader_, path, selector.status());
    return std::optional<parse::Selector>(*std::move(selector));
  }

  void Add(Finding finding) { report_.findings.push_back(std::move(finding)); }
  void Pass(const char* id) { report_.passed.emplace_back(id); }

  Status CheckSysctlZero(const char* id, const char* name, const char* explanation) {
    auto value = ReadSysctl(id, name);
    if (!value.ok()) return value.status();
    if (!value->has_value()) return absl::OkStatus();
    if (**value == 0) {
      Pass(id);
      return absl::OkStatus();
    }
    Add({id, Severity::kWarning, name, absl::StrCat(**value), "0", explanation,
         absl::StrCat("sysctl -w ", name, "=0   # persist in /etc/sysctl.d/90-numa.conf")});
    return absl::OkStatus();
  }

  Status CheckNumaBalancing() {
    auto value = ReadSysctl("numa_balancing", "kernel.numa_balancing");
    if (!value.ok()) return value.status();
    // Bit 1 (NUMA_BALANCING_MEMORY_TIERING): the tiering mode has its own explanation.
    if (value->has_value() && (**value & 2) != 0) {
      Add({"numa_balancing", Severity::kWarning, "kernel.numa_balancing", absl::StrCat(**value),
           "0",
           "NUMA balancing is in memory tiering mode: the kernel samples accesses and promotes "
           "pages it finds hot on a slow tier (a CXL or other memory-only node) to a fast one, "
           "and with demotion moves cold ones down. It moves memory numarena placed on purpose "
           "(the KV pool's cold blocks come back to DRAM, bound weights leave their node), so "
           "numarena's tiering, budgets and page_nodes() no longer describe the server.",
           "sysctl -w kernel.numa_balancing=0   # persist in /etc/sysctl.d/90-numa.conf"});
      return absl::OkStatus();
    }
    return CheckSysctlZero(
        "numa_balancing", "kernel.numa_balancing",
        "Automatic NUMA balancing periodically unmaps pages to sample who touches them and "
        "migrates pages and tasks on its own. A server whose threads and memory are already "
        "bound gains nothing and pays in page faults and latency jitter.");
  }

  Status CheckZoneReclaim() {
    return CheckSysctlZero(
        "zone_reclaim_mode", "vm.zone_reclaim_mode",
        "With zone reclaim the kernel reclaims (drops page cache, writes back, swaps) on "
        "the local node before it allocates on a neighbour, which stalls allocations when "
        "a node fills up.");
  }

  Status CheckThpEnabled() {
    auto selector = ReadSelector("thp_enabled", "enabled");
    if (!selector.ok()) return selector.status();
    if (!selector->has_value()) return absl::OkStatus();
    const std::string& value = (*selector)->selected;
    if (value == "always" || value == "madvise") {
      Pass("thp_enabled");
      return absl::OkStatus();
    }
    Add({"thp_enabled", Severity::kWarning, "transparent_hugepage/enabled", value,
         "always or madvise",
         "numarena's linked arenas (and `numarena run --huge-pages`) ask for transparent huge "
         "pages on large spans (MADV_HUGEPAGE); with 'never' every tensor and KV block is "
         "mapped with 4 KiB pages, which multiplies TLB misses.",
         absl::StrCat("echo madvise > ", kThpDir, "enabled")});
    return absl::OkStatus();
  }

  Status CheckThpDefrag() {
    auto selector = ReadSelector("thp_defrag", "defrag");
    if (!selector.ok()) return selector.status();
    if (!selector->has_value()) return absl::OkStatus();
    const std::string& value = (*selector)->selected;
    std::string fix = absl::StrCat("echo defer+madvise > ", kThpDir, "defrag");
    if (value == "defer+madvise" || value == "madvise") {
      Pass("thp_defrag");
    } else if (value == "always") {
      Add({"thp_defrag", Severity::kWarning, "transparent_hugepage/defrag", value,
           "defer+madvise or madvise",
           "With 'always' every page fault that wants a huge page compacts memory "
           "synchronously when none is free, which shows up as latency spikes in requests.",
           fix});
    } else {
      Add({"thp_defrag", Severity::kInfo, "transparent_hugepage/defrag", value,
           "defer+madvise or madvise",
           "Ranges that ask for huge pages (MADV_HUGEPAGE) do not get direct compaction, so "
           "they get huge pages only when khugepaged collapses them later.",
           fix});
    }
    return absl::OkStatus();
  }

  Status CheckMinFree() {
    auto value = ReadSysctl("min_free_kbytes", "vm.min_free_kbytes");
    if (!value.ok()) return value.status();
    if (!value->has_value()) return absl::OkStatus();
    std::uint64_t total_kb = 0;
    for (const NodeInfo& node : topology_.nodes()) total_kb += node.mem_total_bytes / 1024;
    std::int64_t floor_kb = std::min<std::int64_t>(kMinFreeCapKb, total_kb / 100);
    if (**value >= floor_kb) {
      Pass("min_free_kbytes");
      return absl::OkStatus();
    }
    Add({"min_free_kbytes", Severity::kInfo, "vm.min_free_kbytes", absl::StrCat(**value),
         absl::StrCat(">= ", floor_kb, " (1% of memory, at most 2 GiB)"),
         "A small free-page reserve lets bursts of allocation fall into direct reclaim, "
         "which stalls the allocating thread; a larger reserve keeps kswapd ahead.",
         absl::StrCat("sysctl -w vm.min_free_kbytes=", floor_kb)});
    return absl::OkStatus();
  }

  Status CheckWatermarkScale() {
    auto value = ReadSysctl("watermark_scale_factor", "vm.watermark_scale_factor");
    if (!value.ok()) return value.status();
    if (!value->has_value()) return absl::OkStatus();
    if (**value >= kWatermarkScaleFactor) {
      Pass("watermark_scale_factor");
      return absl::OkStatus();
    }
    Add({"watermark_scale_factor", Severity::kInfo, "vm.watermark_scale_factor",
         absl::StrCat(**value), absl::StrCat(">= ", kWatermarkScaleFactor),
         "The gap between the low and high watermarks (in 1/10000 of memory) decides how "
         "early kswapd starts; the default of 10 wakes it late on large nodes.",
         absl::StrCat("sysctl -w vm.watermark_scale_factor=", kWatermarkScaleFactor)});
    return absl::OkStatus();
  }

  void CheckDeviceNodes() {
    bool found = false;
    bool multi_node = topology_.nodes().size() > 1;
    for (const PciDevice& device : topology_.devices()) {
      if (device.node) continue;
      found = true;
      Add({"device_node_unknown", multi_node ? Severity::kWarning : Severity::kInfo, device.bus_id,
           absl::StrCat(DeviceKindName(device.kind), " numa_node = -1"),
           "the node of the socket the device is attached to",
           multi_node ? "The firmware (ACPI _PXM) does not tell the kernel where the device is, so "
                        "nothing can place threads and memory next to it automatically; tools that "
                        "read -1 as node 0 silently bind to the wrong socket."
                      : "The kernel does not know the device's node; harmless on a one-node "
                        "machine, but the BIOS NUMA settings are worth checking.",
           absl::StrCat("echo <node> > /sys/bus/pci/devices/", device.bus_id,
                        "/numa_node   # the node of its root port (lspci -tv); or enable "
                        "NUMA/SRAT reporting in the BIOS")});
    }
    if (!found) Pass("device_node_unknown");
  }

  // Per-node hugetlbfs pools, one finding per page size that has pages reserved anywhere.
  // Memory bound to a node draws huge pages only from that node's pool, so a pool reserved on
  // some nodes with CPUs and left empty on others makes the same server start on one node and
  // fail on the next (a hugetlb arena refuses; a plain mmap(MAP_HUGETLB) under mbind dies of
  // SIGBUS at first write). Pools on every node with CPUs (or none anywhere) pass; memory-only
  // nodes (CXL) are listed but never asked to reserve. `topo` prints every pool.
  void CheckHugePagePools() {
    std::set<std::size_t> sizes;
    for (const NodeInfo& node : topology_.nodes()) {
      for (const HugePagePool& pool : node.huge_pages) sizes.insert(pool.page_bytes);
    }
    if (sizes.empty()) {
      report_.skipped.push_back("hugetlb_node_pools: no node has hugetlbfs pools in sysfs");
      return;
    }
    bool balanced = true;
    for (std::size_t page_bytes : sizes) {
      std::uint64_t most = 0;
      std::vector<std::string> per_node;
      for (const NodeInfo& node : topology_.nodes()) {
        const HugePagePool* pool = ops::HugePagePoolOf(node, page_bytes);
        std::uint64_t total = pool ? pool->total : 0;
        std::uint64_t free = pool ? pool->free : 0;
        most = std::max(most, total);
        per_node.push_back(absl::StrCat("node ", node.id, ": ", free, " free of ", total));
      }
      if (most == 0) continue;
      std::vector<std::string> fixes;
      std::vector<int> short_nodes;
      for (const NodeInfo& node : topology_.nodes()) {
        const HugePagePool* pool = ops::HugePagePoolOf(node, page_bytes);
        if (node.memory_only() || (pool && pool->total > 0)) continue;
        short_nodes.push_back(node.id);
        fixes.push_back(absl::StrCat("echo ", most, " > ",
                                     NodeHugePagePoolFile(node.id, page_bytes, "nr_hugepages")));
      }
      const std::string subject = absl::StrCat(ops::FormatPageSize(page_bytes), " huge pages");
      const std::string observed = absl::StrJoin(per_node, ", ");
      if (short_nodes.empty()) continue;
      balanced = false;
      Add({"hugetlb_node_pools", Severity::kWarning, subject, observed,
           "a pool on every node with CPUs",
           absl::StrCat(
               "Huge pages are reserved on some nodes but none on node",
               short_nodes.size() == 1 ? " " : "s ", FormatIdList(short_nodes),
               ". Memory bound to a node draws only from that node's pool, so a server started "
               "there with huge pages fails (numarena's hugetlb arenas refuse with the node's "
               "pool named; a plain MAP_HUGETLB mapping under mbind dies of SIGBUS at first "
               "write), although the machine-wide count looks sufficient."),
           absl::StrJoin(fixes, "; ")});
    }
    if (balanced) Pass("hugetlb_node_pools");
  }


  // The placement calls themselves, tried once each (live system only: a recorded tree has no
  // kernel to ask).
  Status CheckPlacementCalls() {
    if (!reader_.is_live_system()) return absl::OkStatus();  // a recorded tree: no kernel
    int node = topology_.nodes().front().id;
    if (!topology_.process().allowed_mem_nodes.empty()) {
      node = topology_.process().allowed_mem_nodes.front();
    }
    const os::PlacementCallProbe probe = os::ProbePlacementCalls(node);
    std::vector<std::string> refused;
    bool eperm = false;
    for (const auto& [name, error] : {std::pair{"mbind", probe.mbind},
                                      std::pair{"get_mempolicy", probe.get_mempolicy},
                                      std::pair{"set_mempolicy", probe.set_mempolicy},
                                      std::pair{"move_pages", probe.move_pages}}) {
      if (error == 0) continue;
      refused.push_back(std::string(ErrnoToStatus(error, name).message()));
      eperm = eperm || error == EPERM;
    }
    if (refused.empty()) {
      Pass("placement_calls");
      return absl::OkStatus();
    }
    // The calling thread's: a seccomp filter belongs to the thread that installed it and the
    // threads it started (container runtimes install it before the program's first thread).
    const std::string status_path = "/proc/thread-self/status";
    auto status_text = ops::ReadOptional(reader_, status_path);
    if (!status_text.ok()) return status_text.status();
    parse::ProcSecurity security;
    if (status_text->has_value()) {
      auto parsed = parse::ParseProcSecurity(**status_text);
      if (!parsed.ok()) return ops::FileError(reader_, status_path, parsed.status());
      security = *parsed;
    }
    constexpr std::uint64_t kCapSysNice = std::uint64_t{1} << 23;
    const bool filtered = security.seccomp.value_or(0) == 2;
    const bool has_sys_nice =
        (security.effective_capabilities.value_or(0) & kCapSysNice) != 0;
    std::string cause, fix;
    if (filtered) {
      cause = absl::StrCat(
          "This process runs under a seccomp filter (Seccomp: 2 in /proc/thread-self/status) that "
          "refuses them. Docker's and containerd's default profiles allow get_mempolicy, mbind "
          "and set_mempolicy only to containers that hold CAP_SYS_NICE (this one ",
          has_sys_nice ? "does, so the profile is another one" : "does not", ").");
      fix = "docker run --cap-add SYS_NICE ... (Kubernetes: securityContext.capabilities.add: "
            "[\"SYS_NICE\"]); with a custom profile, allow mbind, get_mempolicy, "
            "set_mempolicy and move_pages in it (--security-opt seccomp=PROFILE.json, or the "
            "pod's seccompProfile)";
    } else if (eperm) {
      cause = absl::StrCat(
          "No seccomp filter is installed (Seccomp: ", security.seccomp.value_or(0),
          "), so a security module (AppArmor, SELinux) refuses them",
          has_sys_nice ? "." : ", or the missing capability CAP_SYS_NICE does.");
      fix = has_sys_nice ? "check the AppArmor profile (aa-status) or SELinux denials "
                           "(ausearch -m avc) of the server"
                         : "grant CAP_SYS_NICE: docker run --cap-add SYS_NICE; Kubernetes "
                           "securityContext.capabilities.add: [\"SYS_NICE\"]; systemd "
                           "AmbientCapabilities=CAP_SYS_NICE";
    } else {
      cause = "ENOSYS means the kernel was built without NUMA (CONFIG_NUMA) or a filter "
              "answers ENOSYS for them.";
      fix = "run on a kernel with CONFIG_NUMA, outside the filter";
    }
    Add({"placement_calls", Severity::kCritical, "memory policy system calls",
         absl::StrCat("refused: ", absl::StrJoin(refused, ", ")),
         "mbind, get_mempolicy, set_mempolicy and move_pages allowed",
         absl::StrCat("numarena places memory with these calls: strict policies fail at "
                      "allocation, advisory ones fall back to no placement at all (counted in "
                      "the arena's fallbacks). ",
                      cause),
         fix});
    return absl::OkStatus();
  }

  // Every node the server's policy names must be in its cpuset.mems.
  Status CheckPolicyNodesAllowed(const std::string& policy_text, const std::string& pid) {
    auto policy = Policy::Parse(policy_text);
    if (!policy.ok()) return policy.status();
    if (policy->nodes().empty()) {
      report_.skipped.push_back(absl::StrCat("cpuset_mems_narrow: ", policy->ToString(),
                                             " names no node (chosen at run time)"));
      return absl::OkStatus();
    }
    const std::string path = absl::StrCat("/proc/", pid, "/status");
    auto text = ops::ReadOptional(reader_, path);
    if (!text.ok()) return text.status();
    if (!text->has_value()) {
      report_.skipped.push_back(absl::StrCat("cpuset_mems_narrow: ", reader_.DisplayPath(path),
                                             " not found"));
      return absl::OkStatus();
    }
    auto limits = parse::ParseProcStatus(**text);
    if (!limits.ok()) return ops::FileError(reader_, path, limits.status());
    if (!limits->mems_allowed) {
      report_.skipped.push_back("cpuset_mems_narrow: no Mems_allowed_list in " +
                                reader_.DisplayPath(path));
      return absl::OkStatus();
    }
    const std::vector<int>& allowed = *limits->mems_allowed;
    std::vector<int> outside, wanted = policy->nodes();
    std::sort(wanted.begin(), wanted.end());
    for (int node : wanted) {
      if (!std::binary_search(allowed.begin(), allowed.end(), node)) outside.push_back(node);
    }
    if (outside.empty()) {
      Pass("cpuset_mems_narrow");
      return absl::OkStatus();
    }
    std::vector<int> both = allowed;
    both.insert(both.end(), wanted.begin(), wanted.end());
    std::sort(both.begin(), both.end());
    both.erase(std::unique(both.begin(), both.end()), both.end());
    const bool strict = policy->mode() == BindMode::kStrict;
    Add({"cpuset_mems_narrow", strict ? Severity::kCritical : Severity::kWarning,
         absl::StrCat("policy ", policy->ToString()),
         absl::StrCat("names node", outside.size() == 1 ? " " : "s ", FormatIdList(outside),
                      ", outside cpuset.mems ", FormatIdList(allowed), " of pid ", pid),
         absl::StrCat("every node of the policy (", FormatIdList(wanted), ") in cpuset.mems"),
         strict ? "The kernel refuses memory on nodes outside the process's cpuset, so every "
                  "allocation under this strict policy fails (numarena reports the node as "
                  "outside the allowed memory nodes)."
                : "The kernel refuses memory on nodes outside the process's cpuset, so this "
                  "advisory policy falls back and the memory lands elsewhere than it says.",
         absl::StrCat("widen the cpuset: docker run --cpuset-mems=", FormatIdList(both),
                      "; systemd AllowedMemoryNodes=", FormatIdList(both),
                      "; or name only nodes ", FormatIdList(allowed), " in the policy")});
    return absl::OkStatus();
  }

  // Demotion, the kernel's memory tiers, and the KV pool's cold tier against them.
  Status CheckTiering(const DoctorOptions& options) {
    auto kernel = ReadKernelMemorySettings(reader_);
    if (!kernel.ok()) return kernel.status();
    const std::size_t tiers = kernel->memory_tiers.size();
    if (!kernel->demotion_enabled) {
      report_.skipped.push_back("demotion_enabled: /sys/kernel/mm/numa/demotion_enabled not found");
    } else if (!*kernel->demotion_enabled) {
      Pass("demotion_enabled");
    } else {
      Add({"demotion_enabled", tiers >= 2 ? Severity::kWarning : Severity::kInfo,
           "/sys/kernel/mm/numa/demotion_enabled", "true", "false",
           tiers >= 2 ? "Under memory pressure reclaim moves pages from a fast tier to a slower "
                        "one instead of dropping them, without a fault anyone sees: memory "
                        "numarena placed on a fast node (weights, hot KV blocks) can end up on "
                        "the slow tier while page_nodes() and the budgets still count it where "
                        "it was. A KV pool finds such moves of its blocks and can undo them: "
                        "KvPool::AuditPlacement (docs/kv-pool.md)."
                      : "There is only one memory tier now, so nothing is demoted; a CXL or "
                        "other slow node coming online would make reclaim move pages to it.",
           "echo false > /sys/kernel/mm/numa/demotion_enabled"});
    }
    if (tiers >= 2) {
      std::vector<std::string> listed;
      for (const MemoryTier& tier : kernel->memory_tiers) {
        listed.push_back(absl::StrCat("tier ", tier.id, ": node", tier.nodes.size() == 1 ? " " : "s ",
                                      FormatIdList(tier.nodes)));
      }
      Add({"memory_tiers", Severity::kInfo, "/sys/devices/virtual/memory_tiering",
           absl::StrJoin(listed, "; "), "", 
           "The kernel ranks nodes in memory tiers (a lower tier id is faster; HMAT/CDAT "
           "performance decides). Demotion and NUMA balancing's tiering mode move pages "
           "between them; numarena's KV cold tier belongs on a lower tier than its home nodes.",
           ""});
    }
    if (options.kv_home_nodes.empty() || options.kv_cold_nodes.empty()) return absl::OkStatus();
    if (tiers == 0) {
      report_.skipped.push_back("kv_cold_tier: the kernel has no memory tiers");
      return absl::OkStatus();
    }
    int slowest_home = -1;
    for (int node : options.kv_home_nodes) slowest_home = std::max(slowest_home, kernel->tier_of(node));
    std::vector<std::string> wrong;
    for (int node : options.kv_cold_nodes) {
      const int tier = kernel->tier_of(node);
      if (tier <= slowest_home) {
        wrong.push_back(absl::StrCat("node ", node, " in tier ", tier));
      }
    }
    if (wrong.empty()) {
      Pass("kv_cold_tier");
      return absl::OkStatus();
    }
    std::vector<int> lower;
    for (const MemoryTier& tier : kernel->memory_tiers) {
      if (tier.id > slowest_home) lower.insert(lower.end(), tier.nodes.begin(), tier.nodes.end());
    }
    std::sort(lower.begin(), lower.end());
    Add({"kv_cold_tier", Severity::kWarning,
         absl::StrCat("KV cold tier ", FormatIdList(options.kv_cold_nodes)),
         absl::StrCat(absl::StrJoin(wrong, ", "), ", home nodes ",
                      FormatIdList(options.kv_home_nodes), " in tier ", slowest_home,
                      " or faster"),
         "a cold node in a lower kernel tier than every home node",
         "The kernel does not rank the KV pool's cold tier below its home nodes: its demotion "
         "and NUMA balancing's tiering mode treat the two as equals (or the cold node as the "
         "faster), so they move blocks against numarena's hot/cold decisions, and the cold "
         "tier may be no slower or cheaper than the hot one.",
         lower.empty() ? std::string("no node is in a lower tier: KV tiering gains nothing here; "
                                     "run the pool without a cold tier")
                       : absl::StrCat("use a cold node of a lower tier: ", FormatIdList(lower),
                                      " (numarena::KvColdTier::Node)")});
    return absl::OkStatus();
  }

  // IRQ numbers of a device: msi_irqs/ entries, else the legacy irq file.
  StatusOr<std::vector<int>> DeviceIrqs(const PciDevice& device) {
    std::string dir = absl::StrCat("/sys/bus/pci/devices/", device.bus_id);
    std::vector<int> irqs;
    auto entries = reader_.List(dir + "/msi_irqs");
    if (entries.ok()) {
      for (const std::string& entry : *entries) {
        if (auto irq = parse::ParseDecimalEntry(entry); irq.ok()) irqs.push_back(*irq);
      }
    } else if (!absl::IsNotFound(entries.status())) {
      return entries.status();
    }
    if (irqs.empty()) {
      auto legacy = ops::ReadOptional(reader_, dir + "/irq");
      if (!legacy.ok()) return legacy.status();
      if (legacy->has_value()) {
        auto irq = parse::ParseSysctlInteger(**legacy);
        if (!irq.ok()) return ops::FileError(reader_, dir + "/irq", irq.status());
        if (*irq > 0) irqs.push_back(static_cast<int>(*irq));
      }
    }
    std::sort(irqs.begin(), irqs.end());
    return irqs;
  }

  Status CheckNicIrqs() {
    bool any_nic = false;
    bool found = false;
    for (const PciDevice& device : topology_.devices()) {
      if (device.kind == DeviceKind::kGpu || !device.node) continue;
      const std::vector<int>& node_cpus = topology_.cpus_of_node(*device.node);
      if (node_cpus.empty()) continue;
      auto irqs = DeviceIrqs(device);
      if (!irqs.ok()) return irqs.status();
      if (irqs->empty()) continue;
      any_nic = true;
      std::vector<int> remote_irqs;
      std::set<int> remote_cpus;
      for (int irq : *irqs) {
        std::string path = absl::StrCat("/proc/irq/", irq, "/smp_affinity_list");
        auto text = ops::ReadOptional(reader_, path);
        if (!text.ok()) return text.status();
        if (!text->has_value()) continue;
        auto cpus = parse::ParseIrqAffinityList(**text);
        if (!cpus.ok()) return ops::FileError(reader_, path, cpus.status());
        bool remote = false;
        for (int cpu : *cpus) {
          if (!std::binary_search(node_cpus.begin(), node_cpus.end(), cpu)) {
            remote = true;
            remote_cpus.insert(cpu);
          }
        }
        if (remote) remote_irqs.push_back(irq);
      }
      if (remote_irqs.empty()) continue;
      found = true;
      std::vector<int> outside(remote_cpus.begin(), remote_cpus.end());
      std::string cpu_list = FormatIdList(node_cpus);
      Add({"nic_irq_remote", Severity::kWarning, device.bus_id,
           absl::StrCat(remote_irqs.size(), " of ", irqs->size(), " IRQs (",
                        absl::StrJoin(remote_irqs, ","), ") may run on CPUs ",
                        FormatIdList(outside), " outside node ", *device.node),
           absl::StrCat("every IRQ on CPUs of node ", *device.node, " (", cpu_list, ")"),
           "Interrupts and the network stack's softirq work run where the IRQ is delivered; "
           "on another node every received packet crosses the socket interconnect before "
           "the server's threads see it.",
           absl::StrCat("for irq in ", absl::StrJoin(remote_irqs, " "), "; do echo ", cpu_list,
                        " > /proc/irq/$irq/smp_affinity_list; done   # and exclude them "
                        "from irqbalance (IRQBALANCE_BANNED_CPULIST or --banirq)")});
    }
    if (!any_nic) {
      report_.skipped.push_back("nic_irq_remote: no NIC with a known node and IRQs");
    } else if (!found) {
      Pass("nic_irq_remote");
    }
    return absl::OkStatus();
  }

  Status CheckProcess(const std::string& gpu_bus_id, const std::string& pid) {
    auto device = ops::FindGpu(topology_, gpu_bus_id);
    if (!device.ok()) return device.status();
    auto stat = StatProcess(reader_, topology_, pid);
    if (!stat.ok()) return stat.status();
    if (!(*device)->node) {
      report_.skipped.push_back(absl::StrCat("process_*: the node of ", (*device)->bus_id,
                                             " is unknown (see device_node_unknown)"));
      return absl::OkStatus();
    }
    const int gpu_node = *(*device)->node;
    const std::string subject = absl::StrCat("pid ", pid, stat->command.empty() ? "" : " (",
                                             stat->command, stat->command.empty() ? "" : ")");
    const std::string node_cpus = FormatIdList(topology_.cpus_of_node(gpu_node));
    const std::string gpu = absl::StrCat((*device)->bus_id, " on node ", gpu_node);

    // CPUs.
    std::vector<int> on_gpu_node;
    for (int cpu : stat->allowed_cpus) {
      auto node = topology_.node_of_cpu(cpu);
      if (node.ok() && *node == gpu_node) on_gpu_node.push_back(cpu);
    }
    std::vector<int> cpu_nodes = topology_.nodes_of_cpus(stat->allowed_cpus);
    std::string observed_cpus =
        absl::StrCat("may run on CPUs ", FormatIdList(stat->allowed_cpus), " (node",
                     cpu_nodes.size() == 1 ? " " : "s ", absl::StrJoin(cpu_nodes, ","), ")");
    std::string cpu_fix = absl::StrCat("taskset -a -p -c ", node_cpus, " ", pid,
                                       "   # at start: numactl --cpunodebind=", gpu_node,
                                       " --membind=", gpu_node, " <server>");
    if (stat->allowed_cpus.empty()) {
      report_.skipped.push_back("process_cpus: Cpus_allowed_list not readable");
    } else if (on_gpu_node.empty()) {
      Add({"process_cpus_remote", Severity::kCritical, subject, observed_cpus,
           absl::StrCat("CPUs of node ", gpu_node, " (", node_cpus, "), next to GPU ", gpu),
           "Every kernel launch, copy and host-side step of this process crosses the socket "
           "interconnect to reach its GPU; this is worse than not binding at all.",
           cpu_fix});
    } else if (on_gpu_node.size() != stat->allowed_cpus.size()) {
      Add({"process_cpus_unbound", Severity::kWarning, subject, observed_cpus,
           absl::StrCat("only CPUs of node ", gpu_node, " (", node_cpus, "), next to GPU ", gpu),
           "The scheduler may move the process's threads to another node, away from the GPU "
           "and from the memory they allocated.",
           cpu_fix});
    } else {
      Pass("process_cpus");
    }

    // Allowed memory nodes (cpuset).
    if (!stat->allowed_mem_nodes.empty() &&
        !std::binary_search(stat->allowed_mem_nodes.begin(), stat->allowed_mem_nodes.end(),
                            gpu_node)) {
      Add({"process_mems_exclude", Severity::kCritical, subject,
           absl::StrCat("cpuset allows memory on node",
                        stat->allowed_mem_nodes.size() == 1 ? " " : "s ",
                        FormatIdList(stat->allowed_mem_nodes)),
           absl::StrCat("node ", gpu_node, " allowed, next to GPU ", gpu),
           "The process's cpuset forbids memory on its GPU's node, so every host buffer it "
           "stages for the GPU is remote.",
           absl::StrCat("docker/k8s: --cpuset-mems=", gpu_node,
                        "; systemd: AllowedMemoryNodes=", gpu_node)});
    } else if (!stat->allowed_mem_nodes.empty()) {
      Pass("process_mems");
    }

    // Resident private memory.
    if (stat->private_bytes == 0) {
      report_.skipped.push_back("process_memory: the process has no resident private memory");
      return absl::OkStatus();
    }
    std::uint64_t local = stat->private_bytes_on(gpu_node);
    double fraction = static_cast<double>(local) / static_cast<double>(stat->private_bytes);
    if (fraction >= kMinGpuLocalFraction) {
      Pass("process_memory");
      return absl::OkStatus();
    }
    std::vector<std::string> elsewhere;
    std::vector<int> other_nodes;
    for (const auto& [node, usage] : stat->by_node) {
      if (node == gpu_node || usage.private_bytes() == 0) continue;
      other_nodes.push_back(node);
      elsewhere.push_back(absl::StrCat("node ", node, ": ", FormatBytes(usage.private_bytes())));
    }
    Add({"process_memory_remote", Severity::kWarning, subject,
         absl::StrCat(FormatPercent(fraction), " of ", FormatBytes(stat->private_bytes),
                      " private memory on node ", gpu_node, " (", absl::StrJoin(elsewhere, ", "),
                      ")"),
         absl::StrCat(">= ", FormatPercent(kMinGpuLocalFraction), " on node ", gpu_node,
                      ", next to GPU ", gpu),
         "Host memory the GPU reads (pinned staging buffers, KV cache offload, tokenizer "
         "output) on another node travels over the socket interconnect at a fraction of "
         "local bandwidth.",
         absl::StrCat("migratepages ", pid, " ", FormatIdList(other_nodes), " ", gpu_node,
                      "   # at start: numactl --membind=", gpu_node, " <server>")});
    return absl::OkStatus();
  }

 private:
  const SystemReader& reader_;
  const Topology& topology_;
  DoctorReport& report_;
};

}  // namespace

const char* SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "?";
}

std::size_t DoctorReport::problem_count() const {
  return static_cast<std::size_t>(
      std::count_if(findings.begin(), findings.end(),
                    [](const Finding& f) { return f.severity != Severity::kInfo; }));
}

bool DoctorReport::healthy() const { return problem_count() == 0; }

StatusOr<DoctorReport> RunDoctor(const SystemReader& reader, const Topology& topology,
                                 const DoctorOptions& options) {
  if (!ops::IsPidArgument(options.pid)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", options.pid, "' is not a process id (expected a positive number or 'self')"));
  }
  DoctorReport report;
  Audit audit(reader, topology, report);
  for (auto check : {&Audit::CheckNumaBalancing, &Audit::CheckZoneReclaim, &Audit::CheckThpEnabled,
                     &Audit::CheckThpDefrag, &Audit::CheckMinFree, &Audit::CheckWatermarkScale}) {
    if (Status s = (audit.*check)(); !s.ok()) return s;
  }
  if ((options.kv_home_nodes.empty()) != (options.kv_cold_nodes.empty())) {
    return absl::InvalidArgumentError(
        "the KV pool's tiers need both the home nodes and the cold nodes (or neither)");
  }
  if (Status s = audit.CheckPlacementCalls(); !s.ok()) return s;
  if (options.policy) {
    if (Status s = audit.CheckPolicyNodesAllowed(*options.policy, options.pid); !s.ok()) return s;
  }
  if (Status s = audit.CheckTiering(options); !s.ok()) return s;
  audit.CheckHugePagePools();
  audit.CheckDeviceNodes();
  if (Status s = audit.CheckNicIrqs(); !s.ok()) return s;
  if (options.gpu_bus_id) {
    if (Status s = audit.CheckProcess(*options.gpu_bus_id, options.pid); !s.ok()) return s;
  }
  return report;
}

}  // namespace numarena
