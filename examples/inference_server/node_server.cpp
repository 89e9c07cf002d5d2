// One node's workers: admission against the budget, prefill and decode on the node's KV pool.
#include "node_server.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

namespace inference_server {
namespace {

using numarena::KvBlockPin;

// The toy model: 4 layers, 4 KV heads of 64 fp16 elements, 16 tokens per block, all heads in
// one group (one home node per pool). A token's K/V is 4 x 4 x 2 x 128 B = 4 KiB.
numarena::KvGeometry Geometry() {
  return {.layers = 4,
          .kv_heads = 4,
          .head_dim = 64,
          .dtype = numarena::KvDType::kFp16,
          .tokens_per_block = 16,
          .layers_per_block = 1,
          .heads_per_group = 4};
}

// Every element of a K (or V) row holds this value, so attention can check each row it reads
// against the token that should be there: a wrong block, a stale shared prefix or a migration
// that lost data shows up as a mismatch.
std::uint16_t RowValue(std::int32_t token, std::size_t position, int layer, int head, bool value) {
  const std::uint64_t h = std::uint64_t(std::uint32_t(token)) * 2654435761u + position * 40503u +
                          std::uint64_t(layer) * 97u + std::uint64_t(head) * 31u +
                          (value ? 1u : 0u);
  return static_cast<std::uint16_t>(h ^ (h >> 16));
}

void FillRow(std::byte* row, int elements, std::uint16_t v) {
  auto* out = reinterpret_cast<std::uint16_t*>(row);
  std::fill(out, out + elements, v);
}

// The part of attention that touches memory: read a whole row (a dot product with a query of
// ones). Returns true when the row holds what RowValue says it should.
bool RowHolds(const std::byte* row, int elements, std::uint16_t v) {
  const auto* in = reinterpret_cast<const std::uint16_t*>(row);
  std::uint64_t dot = 0;
  for (int i = 0; i < elements; ++i) dot += in[i];
  return dot == std::uint64_t(v) * std::uint64_t(elements);
}

// Pins the calling thread to `cpus`. An application may call the OS directly; inside the
// library only lib/os does.
void PinToCpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: a hint
}

}  // namespace

struct NodeServer::Active {
  Request request;
  numarena::KvSequenceId sequence = 0;
  std::vector<std::int32_t> tokens;  // prompt, then generated tokens
  bool has_sequence = false;
  std::size_t reserved = 0;  // bytes charged to the budget
  int generated = 0;
  std::chrono::steady_clock::time_point last_token;  // when the latest token was generated
};

namespace {
double SecondsSince(std::chrono::steady_clock::time_point then,
                    std::chrono::steady_clock::time_point now) {
  return std::chrono::duration<double>(now - then).count();
}
}  // namespace

NodeServer::NodeServer(NodeServerOptions options) : options_(std::move(options)) {}

numarena::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Create(NodeServerOptions options) {
  const numarena::KvGeometry geometry = Geometry();
  const std::size_t token_bytes = std::size_t(geometry.layers) * geometry.kv_heads *
                                  geometry.head_dim * numarena::KvDTypeBytes(geometry.dtype) * 2;
  const std::size_t block_bytes = token_bytes / geometry.layers * geometry.tokens_per_block;

  numarena::KvPoolOptions kv;
  kv.geometry = geometry;
  kv.home_nodes = {options.node};
  kv.cold_tier =
      options.cold_tier ? numarena::KvColdTier::Farthest() : numarena::KvColdTier::None();
  // Room for everything the budget can admit plus the warm system prompts. Not passing the
  // budget to the pool is deliberate: the budget counts reservations, not slabs (header).
  const std::size_t warm_bytes =
      options.system_prompts.size() * std::size_t(kSystemPromptTokens) * token_bytes;
  kv.hot_blocks_per_node = (options.kv_bytes + warm_bytes) / block_bytes + 1;
  // Pages the kernel's tiering moves off the node are moved back (the main loop audits).
  kv.kernel_moves = numarena::KvKernelMoves::kCorrect;
  auto pool = numarena::KvPool::Create(std::move(kv));
  if (!pool.ok()) return pool.status();

  auto server = std::unique_ptr<NodeServer>(new NodeServer(std::move(options)));
  server->pool_ = *std::move(pool);
  // Bounds from 0.5 ms (50 us between tokens) doubling 16 times: up to 16 s (1.6 s).
  for (auto [histogram, start] : {std::pair{&server->ttft_, 0.0005},
                                  {&server->tbt_, 0.00005},
                                  {&server->admission_wait_, 0.0005}}) {
    auto bounds = numarena::ExponentialBuckets(start, 2, 16);
    if (!bounds.ok()) return bounds.status();
    auto created = numarena::Histogram::Create(*std::move(bounds));
    if (!created.ok()) return created.status();
    histogram->emplace(*std::move(created));
  }
  server->span_bytes_ = server->pool_->block_bytes() * std::size_t(server->pool_->head_groups()) *
                        std::size_t(server->pool_->layer_ranges());
  // The system prompts' K/V is computed once, before any worker runs, and held: every request
  // starting with one of them shares its spans.
  for (int p : server->options_.system_prompts) {
    const std::vector<std::int32_t> prompt = SystemPrompt(p);
    auto sequence = server->pool_->CreateSequence(prompt);
    if (!sequence.ok()) return sequence.status();
    server->warm_.push_back(*sequence);
    if (!server->WriteRows(*sequence, prompt, 0) ||
        !server->pool_->MarkComputed(*sequence, prompt.size()).ok()) {
      return absl::InternalError("could not write the system prompt's K/V");
    }
  }
  return server;
}

NodeServer::~NodeServer() {
  Stop();
  for (numarena::KvSequenceId sequence : warm_) (void)pool_->FreeSequence(sequence);
}

void NodeServer::Start() {
  for (int i = 0; i < options_.threads; ++i) workers_.emplace_back([this] { Work(); });
}

void NodeServer::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true, std::memory_order_relaxed);
  }
  changed_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

void NodeServer::Submit(Request request) {
  submitted_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= options_.queue_limit) {
      rejected_queue_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(request));
  }
  changed_.notify_one();
}

std::size_t NodeServer::ReservationBytes(const Request& request) {
  const std::size_t tpb = std::size_t(pool_->geometry().tokens_per_block);
  const std::size_t spans = (request.prompt.size() + request.generate_tokens + tpb - 1) / tpb;
  const std::size_t shared = pool_->CachedPrefixTokens(request.prompt) / tpb;
  return (spans - std::min(spans, shared)) * span_bytes_;
}

void NodeServer::Work() {
  PinToCpus(options_.cpus);
  std::vector<Active> batch;
  while (!stop_.load(std::memory_order_relaxed)) {
    AdmitFromQueue(batch);
    if (batch.empty()) {
      std::unique_lock lock(mu_);
      changed_.wait_for(lock, std::chrono::milliseconds(20));
      continue;
    }
    // One decode step for every sequence of the batch; finished ones leave it.
    for (std::size_t i = 0; i < batch.size();) {
      Active& active = batch[i];
      if (!DecodeStep(active)) {
        Finish(active, failed_);
      } else if (active.generated >= active.request.generate_tokens) {
        Finish(active, completed_);
      } else {
        ++i;
        continue;
      }
      batch[i] = std::move(batch.back());
      batch.pop_back();
    }
  }
  for (Active& active : batch) Finish(active, unfinished_);
}

void NodeServer::AdmitFromQueue(std::vector<Active>& batch) {
  while (batch.size() < std::size_t(options_.batch)) {
    Active active;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty() || stop_.load(std::memory_order_relaxed)) return;
      Request& next = queue_.front();
      const std::size_t bytes = ReservationBytes(next);
      const numarena::Admission answer =
          options_.budget->Admit(options_.node, bytes, numarena::Priority::kNormal);
      if (answer == numarena::Admission::kNever) {
        rejected_never_.fetch_add(1, std::memory_order_relaxed);
        queue_.pop_front();
        continue;
      }
      // kLater, or kOk but the charge was refused after all (memory the budget counts
      // changed in between): wait until a running request releases its reservation.
      if (answer == numarena::Admission::kLater ||
          !options_.budget->Charge(options_.node, bytes, numarena::Priority::kNormal).ok()) {
        later_answers_.fetch_add(1, std::memory_order_relaxed);
        if (!next.admission_deferred) {
          next.admission_deferred = true;
          deferred_requests_.fetch_add(1, std::memory_order_relaxed);
        }
        return;
      }
      admission_wait_->Observe(SecondsSince(next.arrived, std::chrono::steady_clock::now()));
      active.request = std::move(next);
      active.reserved = bytes;
      queue_.pop_front();
    }
    active_.fetch_add(1, std::memory_order_relaxed);
    if (!Prefill(active)) {
      Finish(active, failed_);
      continue;
    }
    batch.push_back(std::move(active));
  }
}

bool NodeServer::Prefill(Active& active) {
  std::size_t reused = 0;
  auto sequence = pool_->CreateSequence(active.request.prompt, &reused);
  if (!sequence.ok()) return false;
  active.sequence = *sequence;
  active.has_sequence = true;
  active.tokens = active.request.prompt;
  reused_tokens_.fetch_add(reused, std::memory_order_relaxed);
  prefill_tokens_.fetch_add(active.tokens.size() - reused, std::memory_order_relaxed);
  // Once written, the prompt's full spans may be shared with later requests.
  return WriteRows(active.sequence, active.tokens, reused) &&
         pool_->MarkComputed(active.sequence, active.tokens.size()).ok();
}

bool NodeServer::WriteRows(numarena::KvSequenceId sequence, const std::vector<std::int32_t>& tokens,
                           std::size_t from) {
  const numarena::KvGeometry& g = pool_->geometry();
  for (int layer = 0; layer < g.layers; ++layer) {
    for (int group = 0; group < pool_->head_groups(); ++group) {
      auto status = pool_->ForEachBlock(sequence, layer, group, [&](const KvBlockPin& pin) {
        for (int t = 0; t < pin.tokens(); ++t) {
          const std::size_t position = pin.first_token() + std::size_t(t);
          if (position < from) continue;
          for (int h = 0; h < g.heads_per_group; ++h) {
            const int head = pin.first_head() + h, in_block = layer - pin.first_layer();
            FillRow(pin.key(in_block, h, t), g.head_dim,
                    RowValue(tokens[position], position, layer, head, false));
            FillRow(pin.value(in_block, h, t), g.head_dim,
                    RowValue(tokens[position], position, layer, head, true));
          }
        }
      });
      if (!status.ok()) return false;
    }
  }
  return true;
}

bool NodeServer::DecodeStep(Active& active) {
  const numarena::KvGeometry& g = pool_->geometry();
  const std::size_t position = active.tokens.size();
  const std::int32_t token = GeneratedToken(active.request.id, position);
  if (!pool_->Append(active.sequence, {&token, 1}).ok()) return false;
  active.tokens.push_back(token);

  std::uint64_t checked = 0, mismatches = 0;
  for (int layer = 0; layer < g.layers; ++layer) {
    for (int group = 0; group < pool_->head_groups(); ++group) {
      // The new token's K/V ...
      auto pin = pool_->PinToken(active.sequence, layer, group, position);
      if (!pin.ok()) return false;
      const int in_block = layer - pin->first_layer(), t = pin->token_in_block();
      for (int h = 0; h < g.heads_per_group; ++h) {
        const int head = pin->first_head() + h;
        FillRow(pin->key(in_block, h, t), g.head_dim,
                RowValue(token, position, layer, head, false));
        FillRow(pin->value(in_block, h, t), g.head_dim,
                RowValue(token, position, layer, head, true));
      }
      pin->Reset();
      // ... then attention over every token so far, shared prefix included.
      auto status = pool_->ForEachBlock(active.sequence, layer, group, [&](const KvBlockPin& b) {
        for (int tt = 0; tt < b.tokens(); ++tt) {
          const std::size_t p = b.first_token() + std::size_t(tt);
          for (int h = 0; h < g.heads_per_group; ++h) {
            const int head = b.first_head() + h, lib = layer - b.first_layer();
            const std::int32_t id = active.tokens[p];
            mismatches +=
                !RowHolds(b.key(lib, h, tt), g.head_dim, RowValue(id, p, layer, head, false));
            mismatches +=
                !RowHolds(b.value(lib, h, tt), g.head_dim, RowValue(id, p, layer, head, true));
            checked += 2;
          }
        }
      });
      if (!status.ok()) return false;
    }
  }
  rows_checked_.fetch_add(checked, std::memory_order_relaxed);
  row_mismatches_.fetch_add(mismatches, std::memory_order_relaxed);
  generated_tokens_.fetch_add(1, std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  if (++active.generated == 1) {
    ttft_->Observe(SecondsSince(active.request.arrived, now));
  } else {
    tbt_->Observe(SecondsSince(active.last_token, now));
  }
  active.last_token = now;
  // The new token's K/V is written in every layer: a span it completes may be shared.
  return pool_->MarkComputed(active.sequence, active.tokens.size()).ok();
}

void NodeServer::Finish(Active& active, std::atomic<std::uint64_t>& outcome) {
  if (active.has_sequence) (void)pool_->FreeSequence(active.sequence);
  options_.budget->Release(options_.node, active.reserved, numarena::Priority::kNormal);
  outcome.fetch_add(1, std::memory_order_relaxed);
  active_.fetch_sub(1, std::memory_order_relaxed);
  changed_.notify_all();  // a worker waiting on kLater may fit now
}

NodeCounters NodeServer::counters() const {
  NodeCounters c;
  c.submitted = submitted_.load();
  c.completed = completed_.load();
  c.unfinished = unfinished_.load();
  c.rejected_never = rejected_never_.load();
  c.rejected_queue_full = rejected_queue_full_.load();
  c.failed = failed_.load();
  c.later_answers = later_answers_.load();
  c.deferred_requests = deferred_requests_.load();
  c.prefill_tokens = prefill_tokens_.load();
  c.reused_tokens = reused_tokens_.load();
  c.generated_tokens = generated_tokens_.load();
  c.rows_checked = rows_checked_.load();
  c.row_mismatches = row_mismatches_.load();
  c.active = active_.load();
  {
    std::lock_guard lock(mu_);
    c.queued = queue_.size();
  }
  return c;
}

NodeLatencies NodeServer::latencies() const {
  return {ttft_->Snapshot(), tbt_->Snapshot(), admission_wait_->Snapshot()};
}

void AppendServerMetrics(numarena::ExpositionWriter& out,
                         const std::vector<const NodeServer*>& servers) {
  using numarena::MetricType;
  std::vector<std::pair<const NodeServer*, NodeCounters>> all;
  for (const NodeServer* s : servers) all.emplace_back(s, s->counters());
  out.Family("inference_server_requests_total", MetricType::kCounter,
             "Requests by outcome: submitted, completed, rejected, failed.");
  for (const auto& [s, c] : all) {
    const std::string node = std::to_string(s->node());
    for (const auto& [outcome, value] : {std::pair{"submitted", c.submitted},
                                         {"completed", c.completed},
                                         {"rejected_never", c.rejected_never},
                                         {"rejected_queue_full", c.rejected_queue_full},
                                         {"failed", c.failed}}) {
      out.Sample({{"node", node}, {"outcome", outcome}}, double(value));
    }
  }
  out.Family("inference_server_admission_later_total", MetricType::kCounter,
             "Budget admission answers of Later (the request stayed queued).");
  for (const auto& [s, c] : all) {
    out.Sample({{"node", std::to_string(s->node())}}, double(c.later_answers));
  }
  out.Family("inference_server_tokens_total", MetricType::kCounter,
             "Tokens by kind: prefilled, reused from the prefix cache, generated.");
  for (const auto& [s, c] : all) {
    const std::string node = std::to_string(s->node());
    out.Sample({{"node", node}, {"kind", "prefill"}}, double(c.prefill_tokens));
    out.Sample({{"node", node}, {"kind", "reused"}}, double(c.reused_tokens));
    out.Sample({{"node", node}, {"kind", "generated"}}, double(c.generated_tokens));
  }
  out.Family("inference_server_queue_depth", MetricType::kGauge, "Requests waiting for admission.");
  for (const auto& [s, c] : all) out.Sample({{"node", std::to_string(s->node())}}, c.queued);
  out.Family("inference_server_active_sequences", MetricType::kGauge, "Requests being decoded.");
  for (const auto& [s, c] : all) out.Sample({{"node", std::to_string(s->node())}}, c.active);
  struct Latency {
    const char* name;
    numarena::HistogramSnapshot NodeLatencies::*field;
    const char* help;
  };
  static constexpr Latency kLatencies[] = {
      {"inference_server_time_to_first_token_seconds", &NodeLatencies::ttft,
       "From a request's arrival to its first generated token."},
      {"inference_server_time_between_tokens_seconds", &NodeLatencies::tbt,
       "Between two generated tokens of the same request."},
      {"inference_server_admission_wait_seconds", &NodeLatencies::admission_wait,
       "From a request's arrival until the budget admitted it."},
  };
  std::vector<NodeLatencies> latencies;
  for (const NodeServer* s : servers) latencies.push_back(s->latencies());
  for (const Latency& l : kLatencies) {
    out.Family(l.name, MetricType::kHistogram, l.help);
    for (std::size_t i = 0; i < servers.size(); ++i) {
      out.HistogramSample({{"node", std::to_string(servers[i]->node())}}, latencies[i].*(l.field));
    }
  }
}

}  // namespace inference_server
