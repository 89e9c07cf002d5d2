// One NUMA node's share of the server: a worker pool pinned to the node's CPUs, a KV pool
// whose blocks live on the node, and a request queue guarded by the node's budget.
//
// Why per node: decode is memory-bound, and attention reads every K/V row of a sequence at
// every step. When the threads that run attention and the K/V they read are on the same
// node, every read is local. So each node gets its own workers (pinned to its CPUs), its own
// KvPool (home node = this node) and its own queue; requests are routed to a node by system
// prompt so the node's prefix cache sees every request that can share it.
//
// Admission. Each worker runs a batch of sequences (continuous batching: one decode step per
// sequence in turn, new requests join between steps). Before a request joins, the worker asks
// the budget whether its K/V fits: `Admit(node, bytes)` answers
//   kOk    -> charge the bytes to the budget and start the request,
//   kLater -> leave it at the head of the queue and retry when a running request finishes,
//   kNever -> reject it: it could never fit on this node.
// The bytes are the request's worst case (prompt + generation, minus the spans of its prompt
// already in the prefix cache), charged while it runs and released when it ends. The budget
// is thus the node's KV *reservation* budget; the pool's hot tier is sized to hold everything
// the budget can admit, and cached prefixes fill the rest until new blocks need the room.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "numarena/budget.hpp"
#include "numarena/kv_pool.hpp"
#include "numarena/ops/metrics.hpp"
#include "synthetic_load.hpp"

namespace inference_server {

struct NodeServerOptions {
  int node = 0;
  std::vector<int> cpus;  // the workers are pinned here (empty: not pinned)
  int threads = 2;
  int batch = 16;                   // sequences a worker decodes together
  std::size_t queue_limit = 256;    // requests waiting beyond this are rejected
  std::size_t kv_bytes = 0;         // the node's KV budget (quota) in bytes
  bool cold_tier = false;           // demote cold K/V to the farthest node
  std::vector<int> system_prompts;  // prompts routed here: their K/V is computed up front
  numarena::Budget* budget = nullptr;
};

// Counters of one node since start.
struct NodeCounters {
  std::uint64_t submitted = 0, completed = 0, unfinished = 0;  // unfinished: running at stop
  std::uint64_t rejected_never = 0, rejected_queue_full = 0, failed = 0;
  std::uint64_t later_answers = 0;      // Admit answered kLater (each retry counts)
  std::uint64_t deferred_requests = 0;  // requests that got at least one kLater
  std::uint64_t prefill_tokens = 0, reused_tokens = 0, generated_tokens = 0;
  std::uint64_t rows_checked = 0, row_mismatches = 0;  // K/V rows read back by attention
  std::size_t queued = 0, active = 0;
};

// Latency distributions of one node since start, in seconds:
//   ttft            request arrival -> its first generated token (queueing, admission, prefill
//                   and one decode step);
//   tbt             between two generated tokens of the same request (one decode step of the
//                   whole batch, so it grows with the batch);
//   admission_wait  request arrival -> the budget admitted and charged it (0 when it fit at
//                   once and no request was ahead of it).
struct NodeLatencies {
  numarena::HistogramSnapshot ttft, tbt, admission_wait;
};

class NodeServer {
 public:
  // Builds the node's KV pool and warms the system prompts' K/V. Does not start threads.
  [[nodiscard]] static numarena::StatusOr<std::unique_ptr<NodeServer>> Create(
      NodeServerOptions options);
  ~NodeServer();
  NodeServer(const NodeServer&) = delete;
  NodeServer& operator=(const NodeServer&) = delete;

  void Start();
  // Stops the workers; requests still running are dropped (counted unfinished), queued ones
  // stay queued.
  void Stop();
  // Queues a request; rejects it (counted) when the queue is full.
  void Submit(Request request);

  int node() const { return options_.node; }
  const numarena::KvPool& pool() const { return *pool_; }
  // Where the kernel put the KV blocks' pages (memory tiering may demote them); pages it
  // moved off the node are moved back, a bounded number per call (KvPool::AuditPlacement).
  numarena::StatusOr<numarena::KvAuditReport> AuditKvPlacement() {
    return pool_->AuditPlacement();
  }
  NodeCounters counters() const;
  NodeLatencies latencies() const;

 private:
  struct Active;  // a running request
  explicit NodeServer(NodeServerOptions options);

  void Work();
  void AdmitFromQueue(std::vector<Active>& batch);
  std::size_t ReservationBytes(const Request& request);
  bool Prefill(Active& active);
  bool DecodeStep(Active& active);
  void Finish(Active& active, std::atomic<std::uint64_t>& outcome);
  // Writes the K/V rows of tokens [from, tokens.size()) of a sequence.
  bool WriteRows(numarena::KvSequenceId sequence, const std::vector<std::int32_t>& tokens,
                 std::size_t from);

  NodeServerOptions options_;
  std::unique_ptr<numarena::KvPool> pool_;
  std::vector<numarena::KvSequenceId> warm_;  // system prompts, held for the whole run
  std::size_t span_bytes_ = 0;

  mutable std::mutex mu_;
  std::condition_variable changed_;  // a request queued, a reservation released, or stop
  std::deque<Request> queue_;        // guarded by mu_
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;

  std::atomic<std::uint64_t> submitted_{0}, completed_{0}, unfinished_{0};
  std::atomic<std::uint64_t> rejected_never_{0}, rejected_queue_full_{0}, failed_{0};
  std::atomic<std::uint64_t> later_answers_{0}, deferred_requests_{0};
  std::atomic<std::uint64_t> prefill_tokens_{0}, reused_tokens_{0}, generated_tokens_{0};
  std::atomic<std::uint64_t> rows_checked_{0}, row_mismatches_{0};
  std::atomic<std::size_t> active_{0};
  // Set by Create (never empty after it); observed by the workers, read by scrapes.
  std::optional<numarena::Histogram> ttft_, tbt_, admission_wait_;
};

// The server's own families (requests, admission, tokens, queue) for the /metrics scrape:
// inference_server_requests_total{node,outcome}, inference_server_admission_later_total{node},
// inference_server_tokens_total{node,kind}, inference_server_queue_depth{node},
// inference_server_active_sequences{node}, and the histograms (NodeLatencies)
// inference_server_time_to_first_token_seconds{node},
// inference_server_time_between_tokens_seconds{node},
// inference_server_admission_wait_seconds{node}.
void AppendServerMetrics(numarena::ExpositionWriter& out,
                         const std::vector<const NodeServer*>& servers);

}  // namespace inference_server
