// The decode-table experiment: the five placements LLM decoding is usually compared under (no
// binding / wrong node / membind / membind + CPU bind / full tuning), rebuilt on CPU with numarena's KV pool and real attention.
//
// A batch of synthetic sequences is prefilled (K/V of every prompt token written into the
// KV pool, causal attention over the prompt for every layer and head) and then decoded step
// by step (each step appends one token per sequence, writes its K/V and attends over the
// whole cache). Attention is the real computation: q.K^T / sqrt(d), an online softmax, .V,
// per KV head (one head per head group; groups spread over the CPU nodes). Only the
// projections are synthetic (deterministic pseudo-random K/V, queries from the previous
// layer's output), because their cost does not depend on placement.
//
// Each configuration changes placement only, with numarena policies and thread pinning (not
// an external numactl), so the math, and its checksum, is identical in all five:
//   no_binding       KV slabs with no memory policy (first touch), worker threads unpinned
//   wrong_node       KV bound to the node next to (not) the one whose CPUs run its head
//   membind          KV bound to each head group's node, threads unpinned
//   membind_cpubind  KV bound to each head group's node, its worker pinned to that node
//   full             membind_cpubind + huge-page KV slabs + worker scratch from node arenas
// Reported per configuration: P50 time-to-first-token (from batch start to the end of a
// sequence's prefill; sequences are prefilled in order, as a server's queue would), P99
// time-between-tokens (decode step times), decode tokens/s, and the fraction of KV pages on
// the node of the CPU that ran the attention over them (move_pages, after the run).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena::decode {

// The most worker threads DecodeOptions::threads may ask for: above any ordinary machine's
// CPU count, and few enough to start on an ordinary system.
inline constexpr int kMaxDecodeThreads = 1024;

// Where the experiment is, for a progress display: configuration `configuration` (the
// `done`-th of `total`, counting from 0) is in `phase` "prefill" or "decode" at decode step
// `step` of `steps`. The last call has an empty configuration and done == total.
struct DecodeProgress {
  std::string configuration;
  std::string phase;
  int step = 0;
  int steps = 0;
  std::size_t done = 0;
  std::size_t total = 0;
};

struct DecodeOptions {
  int sequences = 4;        // batch size
  int prompt_tokens = 128;  // prefill length of every sequence
  int decode_steps = 32;    // tokens generated per sequence
  int layers = 4;
  int kv_heads = 8;
  int head_dim = 128;
  int threads = 0;  // workers, at most kMaxDecodeThreads; 0: one per allowed CPU (of the
                    // CPU nodes used)
  // Configurations to run, by name; empty: all five in the order above.
  std::vector<std::string> configurations;
  // Called on the calling thread before each configuration's prefill, before each decode
  // step (outside the timed step) and once at the end. Empty: no calls. It should return
  // quickly.
  std::function<void(const DecodeProgress&)> progress;
};

struct ConfigurationResult {
  std::string name;
  std::string description;
  double p50_ttft_ms = 0;
  double p99_tbt_ms = 0;
  double decode_tokens_per_second = 0;
  double prefill_tokens_per_second = 0;
  double kv_local_fraction = 0;   // KV pages on the node of the CPU that read them
  std::size_t kv_pages = 0;       // resident KV pages inspected
  std::vector<int> kv_nodes;      // node of each head group's KV (-1: no policy)
  std::vector<int> worker_nodes;  // node each head group's worker ran on last (-1: unknown)
  bool pinned = false;
  double checksum = 0;  // sum of the final attention outputs; equal in every configuration
};

struct DecodeTable {
  DecodeOptions options;
  int threads = 0;
  std::vector<int> cpu_nodes;
  std::size_t kv_bytes_per_token = 0;
  std::string timestamp_utc;
  std::vector<ConfigurationResult> configurations;
  std::vector<std::string> notes;  // e.g. one node: the configurations coincide
};

// The configuration names, in table order.
const std::vector<std::string>& ConfigurationNames();

// Runs the experiment on the live machine. InvalidArgument for non-positive sizes, threads
// outside 0..kMaxDecodeThreads, an unknown configuration name, or kv_heads/layers the KV pool
// rejects (message says which). ResourceExhausted, before anything is allocated, when the
// sizes need more memory at once (KV cache, worker scratch) than the CPU nodes have free,
// with the sizes in the message; also when the system refuses to start a worker thread.
[[nodiscard]] StatusOr<DecodeTable> RunDecodeExperiment(const DecodeOptions& options);
// The same on the nodes of `topology` (e.g. discovered from a host's sys tree mounted in a
// container); its nodes must be this machine's.
[[nodiscard]] StatusOr<DecodeTable> RunDecodeExperiment(const Topology& topology,
                                                        const DecodeOptions& options);

// The decode table as text (one row per configuration), and the "numarena.decode/1" JSON object.
std::string RenderDecodeTable(const DecodeTable& table);
std::string RenderDecodeJson(const DecodeTable& table);

}  // namespace numarena::decode
