// example_inference_server: a small NUMA-aware inference server on synthetic traffic.
//
// What it shows, in the order main() sets it up:
//   1. The machine (Topology::system()): every node with CPUs this process may use serves.
//   2. A budget (kQuota) giving each serving node --kv-mib MiB of KV reservations.
//   3. Per node a NodeServer: workers pinned to the node's CPUs, a KvPool on the node,
//      a queue guarded by budget admission (node_server.hpp).
//   4. The /metrics endpoint on 127.0.0.1 (metrics_endpoint.hpp): numarena's own series
//      (kernel NUMA counters, topology, process memory, budget, KV pools) and the server's.
//   5. Synthetic chat traffic (synthetic_load.hpp), routed to a node by system prompt so
//      requests that can share a prefix meet in the same KV pool.
// It runs for --seconds (or until SIGINT/SIGTERM) and prints a summary.
//
//   $ example_inference_server --seconds 5 --rate 100
//   metrics: http://127.0.0.1:40123/metrics
//   ...
//   summary after 5.0 s: ...
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "metrics_endpoint.hpp"
#include "node_server.hpp"
#include "numarena/budget.hpp"
#include "numarena/ops/metrics.hpp"
#include "numarena/topology.hpp"
#include "synthetic_load.hpp"

namespace {

using namespace inference_server;

struct Options {
  double seconds = 5;
  int port = 0;
  double rate = 100;           // requests per second
  std::uint64_t requests = 0;  // 0: as many as the rate gives in --seconds
  int threads_per_node = 2;
  int batch = 16;
  std::size_t kv_mib = 8;
  std::size_t queue_limit = 256;
  std::uint64_t seed = 1;
};

constexpr const char* kUsage =
    "usage: example_inference_server [--seconds N] [--port P] [--rate R] [--requests N]\n"
    "         [--threads-per-node T] [--batch B] [--kv-mib M] [--queue Q] [--seed S]\n"
    "  --seconds N           run time (default 5)\n"
    "  --port P              /metrics port on 127.0.0.1 (default 0: any free port)\n"
    "  --rate R              requests per second (default 100)\n"
    "  --requests N          stop generating after N requests (default 0: no limit)\n"
    "  --threads-per-node T  workers per node, pinned to its CPUs (default 2)\n"
    "  --batch B             sequences one worker decodes together (default 16)\n"
    "  --kv-mib M            KV budget of each node in MiB (default 8)\n"
    "  --queue Q             waiting requests per node before rejecting (default 256)\n"
    "  --seed S              seed of the synthetic traffic (default 1)\n";

// Parses the options; prints what is wrong and returns false on bad input.
bool Parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    static const char* const kFlags[] = {
        "--seconds", "--port",   "--rate",  "--requests", "--threads-per-node",
        "--batch",   "--kv-mib", "--queue", "--seed"};
    if (std::find(std::begin(kFlags), std::end(kFlags), flag) == std::end(kFlags)) {
      std::fprintf(stderr, "unknown option %s\n%s", flag.c_str(), kUsage);
      return false;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n%s", flag.c_str(), kUsage);
      return false;
    }
    const char* text = argv[++i];
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || value < 0) {
      std::fprintf(stderr, "%s: '%s' is not a non-negative number\n", flag.c_str(), text);
      return false;
    }
    // Stores `value` in `out` when it lies in [low, high] (and is whole when `out` is).
    auto store = [&](auto& out, double low, double high) {
      using T = std::remove_reference_t<decltype(out)>;
      constexpr bool kWhole = !std::is_floating_point_v<T>;
      if (value < low || value > high || (kWhole && value != std::floor(value))) {
        std::fprintf(stderr, "%s: '%s' must be %s in [%g, %g]\n%s", flag.c_str(), text,
                     kWhole ? "a whole number" : "a number", low, high, kUsage);
        return false;
      }
      out = static_cast<T>(value);
      return true;
    };
    const bool ok = flag == "--seconds"            ? store(o.seconds, 0.001, 86400)
                    : flag == "--rate"             ? store(o.rate, 0.001, 1e6)
                    : flag == "--port"             ? store(o.port, 0, 65535)
                    : flag == "--requests"         ? store(o.requests, 0, 1e12)
                    : flag == "--threads-per-node" ? store(o.threads_per_node, 1, 256)
                    : flag == "--batch"            ? store(o.batch, 1, 4096)
                    : flag == "--kv-mib"           ? store(o.kv_mib, 1, 1 << 20)
                    : flag == "--queue"            ? store(o.queue_limit, 1, 1 << 20)
                                                   : store(o.seed, 0, 1e15);  // --seed
    if (!ok) return false;
  }
  return true;
}

volatile std::sig_atomic_t g_signalled = 0;
extern "C" void OnSignal(int) { g_signalled = 1; }

double MiB(double bytes) { return bytes / double(1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!Parse(argc, argv, options)) return 2;

  auto topology = numarena::Topology::system();
  if (!topology.ok()) {
    std::fprintf(stderr, "topology: %s\n", topology.status().ToString().c_str());
    return 1;
  }
  const numarena::Topology& topo = **topology;
  // Serving nodes: nodes with CPUs this process may run on and memory it may use.
  std::vector<int> nodes;
  std::vector<std::vector<int>> node_cpus;
  for (const numarena::NodeInfo& node : topo.nodes()) {
    std::vector<int> cpus;
    for (int cpu : node.cpus) {
      const auto& allowed = topo.process().allowed_cpus;
      if (std::find(allowed.begin(), allowed.end(), cpu) != allowed.end()) cpus.push_back(cpu);
    }
    if (cpus.empty() || !topo.memory_allowed(node.id)) continue;
    nodes.push_back(node.id);
    node_cpus.push_back(std::move(cpus));
  }
  if (nodes.empty()) {
    std::fprintf(stderr, "no node has both CPUs and memory this process may use\n");
    return 1;
  }
  // A cold tier needs a node to demote to that is not the pool's home.
  int memory_nodes = 0;
  for (const numarena::NodeInfo& node : topo.nodes()) memory_nodes += topo.memory_allowed(node.id);

  numarena::BudgetOptions budget_options;
  budget_options.mode = numarena::BudgetMode::kQuota;
  budget_options.default_quota_bytes = options.kv_mib << 20;
  auto budget = numarena::Budget::Create(budget_options, nodes);
  if (!budget.ok()) {
    std::fprintf(stderr, "budget: %s\n", budget.status().ToString().c_str());
    return 1;
  }

  std::vector<std::unique_ptr<NodeServer>> servers;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    NodeServerOptions o;
    o.node = nodes[i];
    o.cpus = node_cpus[i];
    o.threads = options.threads_per_node;
    o.batch = options.batch;
    o.queue_limit = options.queue_limit;
    o.kv_bytes = options.kv_mib << 20;
    o.cold_tier = memory_nodes > 1;
    o.budget = budget->get();
    for (int p = 0; p < kSystemPrompts; ++p) {
      if (std::size_t(p) % nodes.size() == i) o.system_prompts.push_back(p);
    }
    auto server = NodeServer::Create(std::move(o));
    if (!server.ok()) {
      std::fprintf(stderr, "node %d: %s\n", nodes[i], server.status().ToString().c_str());
      return 1;
    }
    servers.push_back(*std::move(server));
  }

  // One scrape: numarena's families (RenderMetrics) followed by the server's own.
  std::vector<const NodeServer*> view;
  for (const auto& s : servers) view.push_back(s.get());
  auto render = [&]() -> numarena::StatusOr<std::string> {
    const numarena::BudgetSnapshot snapshot = (*budget)->Snapshot();
    std::vector<numarena::KvPoolStats> kv;
    for (const NodeServer* s : view) kv.push_back(s->pool().Stats());
    numarena::MetricsSources sources;
    sources.topology = &topo;
    sources.budget = &snapshot;
    for (std::size_t i = 0; i < view.size(); ++i) {
      sources.kv_pools.emplace_back("node" + std::to_string(view[i]->node()), &kv[i]);
    }
    auto text = numarena::RenderMetrics(sources);
    if (!text.ok()) return text.status();
    numarena::ExpositionWriter own;
    AppendServerMetrics(own, view);
    auto more = own.Finish();
    if (!more.ok()) return more.status();
    return *text + *more;
  };
  // Before the port is printed: whoever reads it may send SIGTERM right away.
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  auto endpoint = MetricsEndpoint::Start(options.port, render);
  if (!endpoint.ok()) {
    std::fprintf(stderr, "%s\n", endpoint.status().ToString().c_str());
    return 1;
  }
  std::printf("serving on %zu node(s), %d worker(s) each, KV budget %zu MiB per node\n",
              nodes.size(), options.threads_per_node, options.kv_mib);
  std::printf("metrics: http://127.0.0.1:%d/metrics\n", (*endpoint)->port());
  std::fflush(stdout);  // a supervisor (or test) reading our stdout needs the port now

  for (auto& s : servers) s->Start();
  LoadGenerator load(
      {.requests_per_second = options.rate, .max_requests = options.requests, .seed = options.seed},
      [&](Request r) { servers[r.system_prompt % servers.size()]->Submit(std::move(r)); });
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(options.seconds));
  load.Start();
  // Once a second, each KV pool checks where the kernel put its blocks' pages (a bounded
  // number of blocks per call) and moves back what the kernel's tiering demoted. A kernel
  // that refuses move_pages (a container without CAP_SYS_NICE) is said once.
  auto next_audit = started;
  bool audit_refused = false;
  while (!g_signalled && std::chrono::steady_clock::now() < deadline) {
    if (!audit_refused && std::chrono::steady_clock::now() >= next_audit) {
      next_audit += std::chrono::seconds(1);
      for (auto& s : servers) {
        auto audit = s->AuditKvPlacement();
        if (!audit.ok()) {
          std::fprintf(stderr, "KV placement audit stopped: %s\n",
                       audit.status().ToString().c_str());
          audit_refused = true;
          break;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  load.Stop();
  (*endpoint)->Stop();
  for (auto& s : servers) s->Stop();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // ---- summary
  NodeCounters total;
  for (auto& s : servers) {
    const NodeCounters c = s->counters();
    total.submitted += c.submitted, total.completed += c.completed;
    total.unfinished += c.unfinished, total.queued += c.queued;
    total.rejected_never += c.rejected_never, total.rejected_queue_full += c.rejected_queue_full;
    total.failed += c.failed, total.later_answers += c.later_answers;
    total.deferred_requests += c.deferred_requests;
    total.prefill_tokens += c.prefill_tokens, total.reused_tokens += c.reused_tokens;
    total.generated_tokens += c.generated_tokens;
    total.rows_checked += c.rows_checked, total.row_mismatches += c.row_mismatches;
  }
  std::printf("summary after %.1f s%s:\n", elapsed, g_signalled ? " (stopped by signal)" : "");
  std::printf(
      "  requests: %llu submitted, %llu completed, %zu queued at exit, %llu running at exit, "
      "%llu rejected (%llu never fit, %llu queue full), %llu failed\n",
      (unsigned long long)total.submitted, (unsigned long long)total.completed, total.queued,
      (unsigned long long)total.unfinished,
      (unsigned long long)(total.rejected_never + total.rejected_queue_full),
      (unsigned long long)total.rejected_never, (unsigned long long)total.rejected_queue_full,
      (unsigned long long)total.failed);
  std::printf("  admission: %llu Later answers, %llu requests waited in the queue for memory\n",
              (unsigned long long)total.later_answers, (unsigned long long)total.deferred_requests);
  std::printf(
      "  tokens: %llu generated (%.0f tokens/s), %llu prefilled, %llu reused from the "
      "prefix cache\n",
      (unsigned long long)total.generated_tokens, double(total.generated_tokens) / elapsed,
      (unsigned long long)total.prefill_tokens, (unsigned long long)total.reused_tokens);
  std::printf("  kv integrity: %llu K/V rows read back by attention, %llu mismatches\n",
              (unsigned long long)total.rows_checked, (unsigned long long)total.row_mismatches);
  const numarena::BudgetSnapshot snapshot = (*budget)->Snapshot();
  for (auto& s : servers) {
    const numarena::KvPoolStats kv = s->pool().Stats();
    std::printf(
        "  node %d: prefix cache %llu of %llu span lookups hit, %llu cached spans "
        "evicted; kv %zu hot / %zu cold blocks, %.1f MiB hot / %.1f MiB cold slabs, "
        "%llu demotions, %llu promotions; %llu audits, %llu pages moved by the kernel, %llu "
        "moved back\n",
        s->node(), (unsigned long long)kv.prefix_hits, (unsigned long long)kv.prefix_lookups,
        (unsigned long long)kv.cached_evictions, kv.hot_blocks, kv.cold_blocks,
        [&] {
          double b = 0;
          for (auto& n : kv.nodes) b += n.hot_slab_bytes;
          return MiB(b);
        }(),
        [&] {
          double b = 0;
          for (auto& n : kv.nodes) b += n.cold_slab_bytes;
          return MiB(b);
        }(),
        (unsigned long long)kv.demotions, (unsigned long long)kv.promotions,
        (unsigned long long)kv.audits,
        (unsigned long long)(kv.kernel_demoted_pages + kv.kernel_promoted_pages),
        (unsigned long long)kv.pages_moved_back);
    if (const numarena::NodeBudgetSnapshot* b = snapshot.node(s->node())) {
      std::printf(
          "  node %d budget: %s, %.1f of %.1f MiB reserved, peak %.1f MiB, %llu "
          "refusals\n",
          s->node(), numarena::NodeStateName(b->state), MiB(double(b->usage)),
          MiB(double(b->capacity)), MiB(double(b->peak)), (unsigned long long)b->refusals);
    }
  }
  std::printf("  metrics scrapes served: %llu\n", (unsigned long long)(*endpoint)->scrapes());
  servers.clear();  // pools go before the budget they were admitted against
  return total.row_mismatches == 0 ? 0 : 1;
}
