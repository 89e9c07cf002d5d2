// The decode-table experiment (see decode_experiment.hpp).
//
// Structure: one KvPool per configuration, with a KvStorage that binds (or does not bind)
// slabs to the pool's node; a fixed set of worker threads, each owning some head groups for
// the whole run (a head group's K/V and its attention always run on the same worker, as a
// head-parallel inference server does); the main thread drives the phases (prefill of one
// sequence, one decode step of the batch) and times them. Workers read K/V through
// KvPool::Blocks + Pin (no sequence lock held while computing), so workers attending to
// different head groups of one sequence do not serialise.
#include "numarena/ops/decode.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.hpp"
#include "numarena/arena.hpp"
#include "numarena/format.hpp"
#include "numarena/kv_pool.hpp"
#include "numarena/ops/json.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"
#include "ops/ops_common.hpp"
#include "os/os.hpp"

namespace numarena::decode {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTokensPerBlock = 16;

struct Configuration {
  const char* name;
  const char* description;
  bool bind;           // KV slabs bound to their node
  bool pin;            // workers pinned to their node's CPUs
  bool wrong_node;     // KV of a head group on another node than its worker
  bool huge_pages;     // KV slabs 2 MiB aligned with MADV_HUGEPAGE
  bool arena_scratch;  // worker scratch vectors from Arena::ForNode(worker node)
};

const std::vector<Configuration>& Configurations() {
  static const std::vector<Configuration> configurations = {
      {"no_binding", "no memory policy (first touch), threads unpinned", false, false, false, false,
       false},
      {"wrong_node", "KV bound to another node than the CPUs that read it", true, true, true, false,
       false},
      {"membind", "KV bound to its head group's node, threads unpinned", true, false, false, false,
       false},
      {"membind_cpubind", "KV bound to its head group's node, worker pinned there", true, true,
       false, false, false},
      {"full", "membind + cpubind + huge-page KV slabs + node-local worker scratch", true, true,
       false, true, true},
  };
  return configurations;
}

// KV slabs: anonymous mappings, bound to the node before first touch when `bind`.
class ExperimentStorage final : public KvStorage {
 public:
  ExperimentStorage(bool bind, bool huge_pages) : bind_(bind), huge_pages_(huge_pages) {}

  StatusOr<void*> AllocateSlab(int node, std::size_t bytes) override {
    auto slab = os::MapAnonymous(bytes, huge_pages_ ? os::kTransparentHugePage : 0);
    if (!slab.ok()) return slab.status();
    if (bind_) {
      const int nodes[] = {node};
      if (Status s = os::BindRange(*slab, bytes, os::PolicyMode::kBind, nodes); !s.ok()) {
        os::Unmap(*slab, bytes);
        return s;
      }
    }
    if (huge_pages_) (void)os::AdviseHugePages(*slab, bytes);
    return *slab;
  }
  void FreeSlab(int, void* slab, std::size_t bytes) override { os::Unmap(slab, bytes); }

 private:
  bool bind_;
  bool huge_pages_;
};

// Persistent workers: Run(task) executes task(worker) on every worker and waits.
class Workers {
 public:
  explicit Workers(std::vector<int> pin_cpus)  // one entry per worker; -1: not pinned
      : pin_cpus_(std::move(pin_cpus)),
        start_(static_cast<std::ptrdiff_t>(pin_cpus_.size()) + 1),
        done_(static_cast<std::ptrdiff_t>(pin_cpus_.size()) + 1),
        statuses_(pin_cpus_.size()) {
    const int count = static_cast<int>(pin_cpus_.size());
    for (std::size_t w = 0; w < pin_cpus_.size(); ++w) {
      auto started = ops::StartThread("decode worker", static_cast<int>(w), count, [this, w] {
        if (pin_cpus_[w] >= 0) {
          const int cpu[] = {pin_cpus_[w]};
          statuses_[w] = os::SetThreadAffinity(cpu);
        }
        while (true) {
          start_.arrive_and_wait();
          if (stop_) break;
          task_(static_cast<int>(w));
          done_.arrive_and_wait();
        }
      });
      if (!started.ok()) {
        start_status_ = started.status();
        break;
      }
      threads_.push_back(*std::move(started));
    }
  }
  ~Workers() {
    stop_ = true;
    // This thread's arrival, and one for each worker that never started (only when the
    // system refused a thread): the ones running wake, see stop_ and end.
    (void)start_.arrive(static_cast<std::ptrdiff_t>(pin_cpus_.size() - threads_.size()) + 1);
    for (std::thread& t : threads_) t.join();
  }
  // OK when every worker started; else ResourceExhausted naming the one the system refused.
  // Run() only after an OK.
  const Status& started() const { return start_status_; }
  void Run(const std::function<void(int)>& task) {
    task_ = task;
    start_.arrive_and_wait();
    done_.arrive_and_wait();
  }
  // The first pinning error, after one Run.
  Status status() const {
    for (const Status& s : statuses_) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<int> pin_cpus_;
  std::barrier<> start_;
  std::barrier<> done_;
  std::vector<Status> statuses_;
  Status start_status_;
  std::function<void(int)> task_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Deterministic pseudo-random vector in [-1, 1): the synthetic projections.
void Synth(float* out, int dim, std::uint64_t seed) {
  for (int i = 0; i < dim; ++i) {
    std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    out[i] = static_cast<float>(static_cast<double>(z >> 40) / 8388608.0 - 1.0);
  }
}

std::uint64_t Seed(std::int64_t token, int layer, int head, int which) {
  return (static_cast<std::uint64_t>(token) * 1000003ULL + static_cast<std::uint64_t>(layer)) *
             1000033ULL +
         static_cast<std::uint64_t>(head) * 7919ULL + static_cast<std::uint64_t>(which);
}

// K and V of `token` at (layer, head) from the layer's input h: k = synth + 0.1 h, v = synth.
void ProjectKv(float* k, float* v, const float* h, int dim, std::int64_t token, int layer,
               int head) {
  Synth(k, dim, Seed(token, layer, head, 1));
  for (int i = 0; i < dim; ++i) k[i] += 0.1f * h[i];
  Synth(v, dim, Seed(token, layer, head, 2));
}

// q = h + synth.
void ProjectQ(float* q, const float* h, int dim, std::int64_t token, int layer, int head) {
  Synth(q, dim, Seed(token, layer, head, 3));
  for (int i = 0; i < dim; ++i) q[i] += h[i];
}

// Online-softmax state of one query.
struct SoftmaxState {
  float max = -INFINITY;
  float sum = 0;
};

inline void Accumulate(SoftmaxState& st, float* acc, const float* q, const float* k, const float* v,
                       int dim, float scale) {
  float score = 0;
  for (int i = 0; i < dim; ++i) score += q[i] * k[i];
  score *= scale;
  if (score > st.max) {
    const float correction = std::exp(st.max - score);
    st.sum *= correction;
    for (int i = 0; i < dim; ++i) acc[i] *= correction;
    st.max = score;
  }
  const float p = std::exp(score - st.max);
  st.sum += p;
  for (int i = 0; i < dim; ++i) acc[i] += p * v[i];
}

// Scratch vectors of one worker: std::vector, or numarena node-arena memory for `full`.
class Scratch {
 public:
  Scratch(std::size_t floats, Arena* arena) : arena_(arena), floats_(floats) {
    if (arena_ != nullptr) {
      data_ = static_cast<float*>(arena_->allocate(floats * sizeof(float), 64));
    }
    if (data_ == nullptr) {
      arena_ = nullptr;
      owned_.assign(floats, 0.0f);
      data_ = owned_.data();
    }
    std::fill(data_, data_ + floats, 0.0f);
  }
  ~Scratch() {
    if (arena_ != nullptr) numarena::deallocate(data_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() { return data_; }
  std::size_t size() const { return floats_; }

 private:
  Arena* arena_;
  std::size_t floats_;
  std::vector<float> owned_;
  float* data_ = nullptr;
};

struct Plan {
  std::vector<int> cpu_nodes;
  std::vector<int> worker_node;   // per worker
  std::vector<int> worker_cpu;    // per worker
  std::vector<int> group_worker;  // per head group
  std::size_t kv_bytes_per_token = 0;
};

// The memory a run needs at once (one configuration's KV pool, the workers' scratch, the
// prompts and outputs), computed without overflow, against the free memory of the CPU nodes
// the KV pool spreads over. Returns the KV bytes per token; ResourceExhausted, with the
// sizes, when the run cannot fit (or its size does not fit in 64 bits). A lower bound: the
// pool rounds up to whole blocks and slabs, so a run close to the limit can still fail later
// with the pool's own ResourceExhausted.
StatusOr<std::size_t> CheckMemory(const Topology& topology, const std::vector<int>& cpu_nodes,
                                  int threads, const DecodeOptions& o) {
  bool overflow = false;
  auto mul = [&overflow](std::uint64_t a, std::uint64_t b) {
    std::uint64_t r = 0;
    overflow |= __builtin_mul_overflow(a, b, &r);
    return r;
  };
  auto add = [&overflow](std::uint64_t a, std::uint64_t b) {
    std::uint64_t r = 0;
    overflow |= __builtin_add_overflow(a, b, &r);
    return r;
  };
  const std::uint64_t sequences = static_cast<std::uint64_t>(o.sequences);
  const std::uint64_t dim = static_cast<std::uint64_t>(o.head_dim);
  const std::uint64_t prompt = static_cast<std::uint64_t>(o.prompt_tokens);
  const std::uint64_t per_token = mul(mul(mul(o.layers, o.kv_heads), dim), sizeof(float) * 2);
  const std::uint64_t tokens = add(prompt, static_cast<std::uint64_t>(o.decode_steps));
  const std::uint64_t blocks = tokens / kTokensPerBlock + (tokens % kTokensPerBlock != 0);
  const std::uint64_t kv = mul(mul(sequences, mul(blocks, kTokensPerBlock)), per_token);
  // Per worker: h, acc and queries of every prompt position, and q, k, v of one.
  const std::uint64_t scratch = mul(static_cast<std::uint64_t>(threads),
                                    mul(mul(add(mul(prompt, 3), 3), dim), sizeof(float)));
  const std::uint64_t prompts = mul(mul(sequences, prompt), sizeof(std::int32_t));
  const std::uint64_t outputs = mul(mul(mul(sequences, o.kv_heads), dim), sizeof(float));
  const std::uint64_t total = add(add(kv, scratch), add(prompts, outputs));
  std::uint64_t free_bytes = 0;
  for (int node : cpu_nodes) {
    if (const NodeInfo* info = topology.node(node)) free_bytes += info->mem_free_bytes;
  }
  const std::string advice =
      "; lower sequences, prompt_tokens, decode_steps, layers, kv_heads or head_dim (or "
      "threads)";
  if (overflow) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the run would need more than 16 EiB (", o.sequences, " sequences of ",
                     o.prompt_tokens, " + ", o.decode_steps, " tokens, ", o.layers, " layers x ",
                     o.kv_heads, " KV heads x ", o.head_dim, ")", advice));
  }
  if (free_bytes > 0 && total > free_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the run needs ", FormatBytes(total), " at once (KV cache ", FormatBytes(kv),
                     ", worker scratch ", FormatBytes(scratch), ", prompts and outputs ",
                     FormatBytes(prompts + outputs), "), more than the ", FormatBytes(free_bytes),
                     " free on CPU node(s) ", absl::StrJoin(cpu_nodes, ","), advice));
  }
  return static_cast<std::size_t>(per_token);
}

StatusOr<Plan> MakePlan(const Topology& topology, const DecodeOptions& options) {
  Plan plan;
  std::vector<std::vector<int>> cpus_of;
  const auto& allowed = topology.process().allowed_cpus;
  for (const NodeInfo& node : topology.nodes()) {
    std::vector<int> cpus;
    for (int cpu : node.cpus) {
      if (allowed.empty() || std::find(allowed.begin(), allowed.end(), cpu) != allowed.end()) {
        cpus.push_back(cpu);
      }
    }
    if (cpus.empty() || !topology.memory_allowed(node.id) || node.mem_total_bytes == 0) continue;
    plan.cpu_nodes.push_back(node.id);
    cpus_of.push_back(std::move(cpus));
  }
  if (plan.cpu_nodes.empty()) {
    return absl::FailedPreconditionError("no node has both CPUs and memory this process may use");
  }
  const int nodes = static_cast<int>(plan.cpu_nodes.size());
  int threads = options.threads;
  if (threads == 0) {
    for (const auto& cpus : cpus_of) threads += static_cast<int>(cpus.size());
  }
  if (threads < nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads is ", threads,
                     "; the experiment needs at least one worker per CPU node (", nodes, ")"));
  }
  // Before anything is sized by the options (the per-group table below included).
  auto kv_bytes_per_token = CheckMemory(topology, plan.cpu_nodes, threads, options);
  if (!kv_bytes_per_token.ok()) return kv_bytes_per_token.status();
  plan.kv_bytes_per_token = *kv_bytes_per_token;
  // Workers round-robin over the CPU nodes; the k-th worker of a node on its k-th CPU.
  std::vector<std::vector<int>> workers_of(nodes);
  for (int w = 0; w < threads; ++w) {
    const int n = w % nodes;
    const auto& cpus = cpus_of[n];
    plan.worker_node.push_back(plan.cpu_nodes[n]);
    plan.worker_cpu.push_back(cpus[workers_of[n].size() % cpus.size()]);
    workers_of[n].push_back(w);
  }
  // Head group g is on CPU node g % nodes (the pool's home_nodes round robin), served by
  // that node's workers in turn.
  for (int g = 0; g < options.kv_heads; ++g) {
    const auto& candidates = workers_of[g % nodes];
    plan.group_worker.push_back(candidates[(g / nodes) % candidates.size()]);
  }
  return plan;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // Nearest rank.
  std::size_t rank = static_cast<std::size_t>(std::ceil(p / 100.0 * values.size()));
  rank = std::clamp<std::size_t>(rank, 1, values.size());
  return values[rank - 1];
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

StatusOr<ConfigurationResult> RunConfiguration(const Configuration& config, const Plan& plan,
                                               const DecodeOptions& o, std::size_t index,
                                               std::size_t total) {
  auto report = [&](const char* phase, int step) {
    if (o.progress) o.progress({config.name, phase, step, o.decode_steps, index, total});
  };
  ConfigurationResult result;
  result.name = config.name;
  result.description = config.description;
  result.pinned = config.pin;
  const int dim = o.head_dim;
  const int groups = o.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));

  KvPoolOptions pool_options;
  pool_options.geometry = {.layers = o.layers,
                           .kv_heads = o.kv_heads,
                           .head_dim = o.head_dim,
                           .dtype = KvDType::kFp32,
                           .tokens_per_block = kTokensPerBlock,
                           .layers_per_block = 1,
                           .heads_per_group = 1};
  pool_options.home_nodes = plan.cpu_nodes;
  if (config.wrong_node) {
    std::rotate(pool_options.home_nodes.begin(), pool_options.home_nodes.begin() + 1,
                pool_options.home_nodes.end());
  }
  pool_options.storage = std::make_shared<ExperimentStorage>(config.bind, config.huge_pages);
  pool_options.slab_bytes = os::kTransparentHugePage;
  auto pool_or = KvPool::Create(std::move(pool_options));
  if (!pool_or.ok()) {
    return Status(pool_or.status().code(),
                  absl::StrCat("KV pool for ", config.name, ": ", pool_or.status().message()));
  }
  KvPool& pool = **pool_or;
  for (int g = 0; g < groups; ++g) {
    result.kv_nodes.push_back(config.bind ? pool.group_node(g) : -1);
  }

  std::vector<int> pins(plan.worker_cpu.size(), -1);
  if (config.pin) pins = plan.worker_cpu;
  Workers workers(pins);
  if (!workers.started().ok()) return workers.started();
  workers.Run([](int) {});
  if (Status s = workers.status(); !s.ok()) return s;

  // Per worker: its groups, its scratch.
  const int worker_count = static_cast<int>(plan.worker_node.size());
  std::vector<std::vector<int>> groups_of(worker_count);
  for (int g = 0; g < groups; ++g) groups_of[plan.group_worker[g]].push_back(g);
  std::vector<int> ran_on(groups, -1);
  std::vector<Status> worker_status(worker_count);
  const std::size_t prompt = static_cast<std::size_t>(o.prompt_tokens);
  // Prefill: h, acc and queries of every prompt position; decode: h, acc, q, k, v.
  const std::size_t scratch_floats = prompt * dim * 3 + 3 * static_cast<std::size_t>(dim);
  std::vector<std::unique_ptr<Scratch>> scratch(worker_count);
  workers.Run([&](int w) {
    Arena* arena = nullptr;
    if (config.arena_scratch) {
      auto a = Arena::ForNode(plan.worker_node[w]);
      if (a.ok()) arena = *a;
    }
    scratch[w] = std::make_unique<Scratch>(scratch_floats, arena);
  });

  // Reads every block of (sequence, layer, group) through Blocks + Pin and calls
  // visit(first_token, tokens, pin).
  auto for_blocks =
      [&](KvSequenceId seq, int layer, int group, std::size_t length,
          const std::function<void(std::size_t, int, const KvBlockPin&)>& visit) -> Status {
    std::vector<KvBlockId> blocks;
    if (Status st = pool.Blocks(seq, layer, group, &blocks); !st.ok()) return st;
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const std::size_t first = b * kTokensPerBlock;
      if (first >= length) break;
      auto pin = pool.Pin(blocks[b]);
      if (!pin.ok()) return pin.status();
      visit(first, static_cast<int>(std::min<std::size_t>(kTokensPerBlock, length - first)), *pin);
    }
    return absl::OkStatus();
  };

  std::vector<KvSequenceId> sequences;
  std::vector<std::vector<std::int32_t>> prompts(o.sequences);
  std::vector<std::int32_t> next_token(o.sequences);
  std::vector<double> ttft_ms;
  // Final hidden state per (sequence, group) after the last decode step.
  std::vector<float> final_h(static_cast<std::size_t>(o.sequences) * groups * dim, 0.0f);

  report("prefill", 0);
  const auto batch_begin = Clock::now();
  for (int s = 0; s < o.sequences; ++s) {
    prompts[s].resize(prompt);
    for (std::size_t t = 0; t < prompt; ++t) {
      // In 64 bits, then kept within int32 (a large batch would overflow int).
      prompts[s][t] = static_cast<std::int32_t>(
          (1000 + std::int64_t{s} * 100003 + static_cast<std::int64_t>(t)) % INT32_MAX);
    }
    auto seq = pool.CreateSequence(prompts[s]);
    if (!seq.ok()) return seq.status();
    sequences.push_back(*seq);
    const KvSequenceId id = *seq;
    workers.Run([&](int w) {
      // Scratch layout: h[prompt][dim] (each position's layer input), acc[prompt][dim],
      // queries[prompt][dim].
      float* h = scratch[w]->data();
      float* acc = h + prompt * dim;
      float* queries = acc + prompt * dim;
      std::vector<SoftmaxState> st(prompt);
      for (int g : groups_of[w]) {
        for (std::size_t t = 0; t < prompt; ++t) {
          Synth(h + t * dim, dim, Seed(prompts[s][t], -1, g, 0));
        }
        for (int layer = 0; layer < o.layers && worker_status[w].ok(); ++layer) {
          // K/V of every prompt token from the layer's input.
          worker_status[w] = for_blocks(id, layer, g, prompt,
                                        [&](std::size_t first, int n, const KvBlockPin& pin) {
                                          for (int j = 0; j < n; ++j) {
                                            const std::size_t t = first + j;
                                            ProjectKv(reinterpret_cast<float*>(pin.key(0, 0, j)),
                                                      reinterpret_cast<float*>(pin.value(0, 0, j)),
                                                      h + t * dim, dim, prompts[s][t], layer, g);
                                          }
                                        });
          if (!worker_status[w].ok()) break;
          // Causal attention of every prompt position; keys arrive in ascending order, so
          // each query's online softmax sees exactly the keys at or before it.
          std::fill(acc, acc + prompt * dim, 0.0f);
          std::fill(st.begin(), st.end(), SoftmaxState{});
          for (std::size_t t = 0; t < prompt; ++t) {
            ProjectQ(queries + t * dim, h + t * dim, dim, prompts[s][t], layer, g);
          }
          worker_status[w] = for_blocks(
              id, layer, g, prompt, [&](std::size_t first, int n, const KvBlockPin& pin) {
                for (int j = 0; j < n; ++j) {
                  const auto* key = reinterpret_cast<const float*>(pin.key(0, 0, j));
                  const auto* value = reinterpret_cast<const float*>(pin.value(0, 0, j));
                  for (std::size_t t = first + j; t < prompt; ++t) {
                    Accumulate(st[t], acc + t * dim, queries + t * dim, key, value, dim, scale);
                  }
                }
              });
          if (!worker_status[w].ok()) break;
          for (std::size_t t = 0; t < prompt; ++t) {
            for (int i = 0; i < dim; ++i) h[t * dim + i] += acc[t * dim + i] / st[t].sum;
          }
        }
      }
    });
    for (const Status& st : worker_status) {
      if (!st.ok()) return st;
    }
    // Every layer and group of the prompt is written (the workers are done): offer its full
    // spans for prefix reuse, as a server does after prefill.
    if (Status st = pool.MarkComputed(id, prompt); !st.ok()) return st;
    ttft_ms.push_back(Ms(Clock::now() - batch_begin));
    next_token[s] = static_cast<std::int32_t>(prompts[s].back() + 1);
  }
  const auto prefill_end = Clock::now();

  std::vector<double> tbt_ms;
  Clock::duration decode_total{0};
  for (int step = 0; step < o.decode_steps; ++step) {
    report("decode", step);
    const auto step_begin = Clock::now();
    for (int s = 0; s < o.sequences; ++s) {
      const std::int32_t token[] = {next_token[s]};
      if (Status st = pool.Append(sequences[s], token); !st.ok()) return st;
    }
    const std::size_t length = prompt + static_cast<std::size_t>(step) + 1;
    workers.Run([&](int w) {
      float* q = scratch[w]->data() + prompt * dim * 3;
      float* h = scratch[w]->data();  // one vector
      float* acc = scratch[w]->data() + prompt * dim;
      for (int g : groups_of[w]) {
        ran_on[g] = Topology::current_node();
        // Start at a different sequence per worker: fewer workers meet on one sequence.
        for (int i = 0; i < o.sequences && worker_status[w].ok(); ++i) {
          const int s = (i + w) % o.sequences;
          const std::size_t pos = length - 1;
          Synth(h, dim, Seed(next_token[s], -1, g, 0));
          for (int layer = 0; layer < o.layers; ++layer) {
            auto pin = pool.PinToken(sequences[s], layer, g, pos);
            if (!pin.ok()) {
              worker_status[w] = pin.status();
              break;
            }
            ProjectKv(reinterpret_cast<float*>(pin->key(0, 0, pin->token_in_block())),
                      reinterpret_cast<float*>(pin->value(0, 0, pin->token_in_block())), h, dim,
                      next_token[s], layer, g);
            pin->Reset();
            ProjectQ(q, h, dim, next_token[s], layer, g);
            SoftmaxState st;
            std::fill(acc, acc + dim, 0.0f);
            worker_status[w] = for_blocks(
                sequences[s], layer, g, length, [&](std::size_t, int n, const KvBlockPin& block) {
                  for (int j = 0; j < n; ++j) {
                    Accumulate(st, acc, q, reinterpret_cast<const float*>(block.key(0, 0, j)),
                               reinterpret_cast<const float*>(block.value(0, 0, j)), dim, scale);
                  }
                });
            if (!worker_status[w].ok()) break;
            for (int d = 0; d < dim; ++d) h[d] += acc[d] / st.sum;
          }
          std::memcpy(&final_h[(static_cast<std::size_t>(s) * groups + g) * dim], h,
                      dim * sizeof(float));
        }
      }
    });
    for (const Status& st : worker_status) {
      if (!st.ok()) return st;
    }
    // The new token's K/V are written in every layer and group: mark them computed, so a
    // span this token filled becomes shareable by prefix.
    for (int s = 0; s < o.sequences; ++s) {
      if (Status st = pool.MarkComputed(sequences[s], length); !st.ok()) return st;
    }
    // The next token of each sequence from its outputs (a stand-in for sampling).
    for (int s = 0; s < o.sequences; ++s) {
      double sum = 0;
      for (int i = 0; i < groups * dim; ++i) {
        sum += final_h[static_cast<std::size_t>(s) * groups * dim + i];
      }
      next_token[s] = static_cast<std::int32_t>(
          (static_cast<std::uint64_t>(std::llround(std::fabs(sum) * 1000)) % 30000) + 1);
    }
    const auto step_time = Clock::now() - step_begin;
    decode_total += step_time;
    tbt_ms.push_back(Ms(step_time));
  }

  result.p50_ttft_ms = Percentile(ttft_ms, 50);
  result.p99_tbt_ms = Percentile(tbt_ms, 99);
  const double decode_seconds = std::chrono::duration<double>(decode_total).count();
  result.decode_tokens_per_second =
      decode_seconds > 0 ? o.sequences * static_cast<double>(o.decode_steps) / decode_seconds : 0;
  const double prefill_seconds = std::chrono::duration<double>(prefill_end - batch_begin).count();
  result.prefill_tokens_per_second =
      prefill_seconds > 0 ? o.sequences * static_cast<double>(prompt) / prefill_seconds : 0;
  for (float x : final_h) result.checksum += x;
  result.worker_nodes = ran_on;

  // Where the KV pages are, against the node whose CPU read them.
  std::size_t local = 0;
  std::vector<KvBlockId> blocks;
  for (int s = 0; s < o.sequences; ++s) {
    for (int g = 0; g < groups; ++g) {
      for (int layer = 0; layer < o.layers; ++layer) {
        if (Status st = pool.Blocks(sequences[s], layer, g, &blocks); !st.ok()) return st;
        for (KvBlockId block : blocks) {
          auto pin = pool.Pin(block);
          if (!pin.ok()) return pin.status();
          auto counts = page_nodes(pin->data(), pool.block_bytes());
          if (!counts.ok()) return counts.status();
          result.kv_pages += counts->resident();
          local += ran_on[g] >= 0 ? counts->on(ran_on[g]) : 0;
        }
      }
    }
  }
  result.kv_local_fraction =
      result.kv_pages > 0 ? static_cast<double>(local) / static_cast<double>(result.kv_pages) : 0;
  for (KvSequenceId id : sequences) (void)pool.FreeSequence(id);
  workers.Run([&](int w) { scratch[w].reset(); });
  return result;
}

}  // namespace

const std::vector<std::string>& ConfigurationNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Configuration& c : Configurations()) out.push_back(c.name);
    return out;
  }();
  return names;
}

StatusOr<DecodeTable> RunDecodeExperiment(const Topology& topology, const DecodeOptions& options) {
  const std::pair<const char*, int> sizes[] = {
      {"sequences", options.sequences},       {"prompt_tokens", options.prompt_tokens},
      {"decode_steps", options.decode_steps}, {"layers", options.layers},
      {"kv_heads", options.kv_heads},         {"head_dim", options.head_dim}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is ", value, "; it must be a positive number"));
    }
  }
  if (options.threads < 0 || options.threads > kMaxDecodeThreads) {
    return absl::InvalidArgumentError(absl::StrCat("threads is ", options.threads, "; use 1 to ",
                                                   kMaxDecodeThreads,
                                                   ", or 0 for one per allowed CPU"));
  }
  // The KV bytes of one token: layers x kv_heads x head_dim x (K and V) x fp32.
  std::optional<std::size_t> kv_bytes_per_token = MulChecked(
      static_cast<std::size_t>(options.layers), static_cast<std::size_t>(options.kv_heads));
  if (kv_bytes_per_token) {
    kv_bytes_per_token =
        MulChecked(*kv_bytes_per_token, static_cast<std::size_t>(options.head_dim));
  }
  if (kv_bytes_per_token) kv_bytes_per_token = MulChecked(*kv_bytes_per_token, 2 * sizeof(float));
  if (!kv_bytes_per_token) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers ", options.layers, " x kv_heads ", options.kv_heads, " x head_dim ",
                     options.head_dim,
                     " x 8 bytes of KV per token does not fit in 64 bits; use a real "
                     "model's shape"));
  }
  std::vector<const Configuration*> chosen;
  if (options.configurations.empty()) {
    for (const Configuration& c : Configurations()) chosen.push_back(&c);
  } else {
    for (const std::string& name : options.configurations) {
      auto it = std::find_if(Configurations().begin(), Configurations().end(),
                             [&](const Configuration& c) { return name == c.name; });
      if (it == Configurations().end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown configuration '", name,
                         "'; known: ", absl::StrJoin(ConfigurationNames(), ", ")));
      }
      chosen.push_back(&*it);
    }
  }
  auto plan = MakePlan(topology, options);
  if (!plan.ok()) return plan.status();

  DecodeTable table;
  table.options = options;
  table.threads = static_cast<int>(plan->worker_node.size());
  table.cpu_nodes = plan->cpu_nodes;
  table.kv_bytes_per_token = plan->kv_bytes_per_token;
  table.timestamp_utc = ops::UtcNow();
  if (plan->cpu_nodes.size() == 1) {
    table.notes.push_back(absl::StrCat(
        "one NUMA node (", plan->cpu_nodes[0],
        "): the configurations coincide (every page and thread is on that node, and the "
        "'wrong' node is the right one), so differences between rows are run-to-run noise"));
  }
  for (const Configuration* config : chosen) {
    auto result = RunConfiguration(*config, *plan, options, table.configurations.size(),
                                   chosen.size());
    if (!result.ok()) {
      return Status(result.status().code(),
                    absl::StrCat(config->name, ": ", result.status().message()));
    }
    table.configurations.push_back(std::move(*result));
  }
  if (options.progress) {
    options.progress({"", "", 0, options.decode_steps, chosen.size(), chosen.size()});
  }
  return table;
}

std::string RenderDecodeTable(const DecodeTable& t) {
  std::string out;
  const DecodeOptions& o = t.options;
  absl::StrAppendFormat(&out,
                        "numarena decode  %s  %d sequences x (%d prompt + %d decode) tokens, %d "
                        "layers, %d KV heads x %d, fp32 KV %s/token, %d worker thread(s) "
                        "on CPU node(s) %s\n",
                        t.timestamp_utc, o.sequences, o.prompt_tokens, o.decode_steps, o.layers,
                        o.kv_heads, o.head_dim, FormatBytes(t.kv_bytes_per_token), t.threads,
                        absl::StrJoin(t.cpu_nodes, ","));
  for (const std::string& note : t.notes) absl::StrAppend(&out, "note: ", note, "\n");
  absl::StrAppendFormat(&out, "\n%-17s %14s %13s %10s %14s  %s\n", "configuration", "P50 TTFT (ms)",
                        "P99 TBT (ms)", "tokens/s", "KV node-local", "what it does");
  for (const ConfigurationResult& r : t.configurations) {
    absl::StrAppendFormat(&out, "%-17s %14.1f %13.2f %10.1f %14s  %s\n", r.name, r.p50_ttft_ms,
                          r.p99_tbt_ms, r.decode_tokens_per_second,
                          FormatPercent(r.kv_local_fraction), r.description);
  }
  return out;
}

std::string RenderDecodeJson(const DecodeTable& t) {
  const DecodeOptions& o = t.options;
  std::string out;
  JsonWriter json(out);
  json.BeginObject();
  json.Key("schema").String("numarena.decode/1");
  json.Key("timestamp_utc").String(t.timestamp_utc);
  json.Key("options").BeginObject();
  json.Key("sequences").Int(o.sequences);
  json.Key("prompt_tokens").Int(o.prompt_tokens);
  json.Key("decode_steps").Int(o.decode_steps);
  json.Key("layers").Int(o.layers);
  json.Key("kv_heads").Int(o.kv_heads);
  json.Key("head_dim").Int(o.head_dim);
  json.Key("threads").Int(t.threads);
  json.EndObject();
  json.Key("cpu_nodes").IntArray(t.cpu_nodes);
  json.Key("kv_bytes_per_token").Uint(t.kv_bytes_per_token);
  json.Key("notes").BeginArray();
  for (const std::string& n : t.notes) json.String(n);
  json.EndArray();
  json.Key("configurations").BeginArray();
  for (const ConfigurationResult& r : t.configurations) {
    json.BeginObject();
    json.Key("name").String(r.name);
    json.Key("description").String(r.description);
    json.Key("pinned").Bool(r.pinned);
    json.Key("p50_ttft_ms").Double(r.p50_ttft_ms);
    json.Key("p99_tbt_ms").Double(r.p99_tbt_ms);
    json.Key("decode_tokens_per_second").Double(r.decode_tokens_per_second);
    json.Key("prefill_tokens_per_second").Double(r.prefill_tokens_per_second);
    json.Key("kv_local_fraction").Double(r.kv_local_fraction);
    json.Key("kv_pages").Uint(r.kv_pages);
    json.Key("kv_nodes").IntArray(r.kv_nodes);
    json.Key("worker_nodes").IntArray(r.worker_nodes);
    json.Key("checksum").Double(r.checksum);
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  out += '\n';
  return out;
}

StatusOr<DecodeTable> RunDecodeExperiment(const DecodeOptions& options) {
  auto topology = Topology::system();
  if (!topology.ok()) return topology.status();
  return RunDecodeExperiment(**topology, options);
}

}  // namespace numarena::decode
