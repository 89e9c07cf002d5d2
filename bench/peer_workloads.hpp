// The allocator workloads numarena is compared on, shared by bench/peers_bench.cpp (numarena,
// jemalloc, mimalloc, memkind, libnuma in one process) and bench/peers_glibc_bench.cpp (glibc
// malloc, which cannot share a process with jemalloc). Header-only and free of numarena, so
// the glibc program can use it.
//
// A *peer* is a type with
//   static void* Allocate(std::size_t bytes);   // nullptr on failure
//   static void Free(void* p, std::size_t bytes);
// and each workload is a function template over it, so every peer runs the same inlined
// loop. Benchmarks are named "<workload>/<peer>" (Google Benchmark appends "/threads:N" and
// "/real_time"); tools/plot_results.py groups by workload and thread count and divides by
// the best peer. Every workload counts allocations as items, so items_per_second compares
// peers directly.
//
//   alloc_free_<size>     allocate, touch one byte, free; repeated (one size per workload)
//   producer_consumer     threads:2 — thread 0 allocates batches of 64 objects (48/256/1024 B),
//                         thread 1 frees them (cross-thread free, the server's request
//                         handoff), each pinned to a CPU of its own when the process may use
//                         two (see CpuPin); threads:1 — the same batches allocated and freed
//                         FIFO on one thread, the baseline
//   inference_mixed       one request: 192 metadata objects of 64 B-4 KiB (log-uniform) and
//                         2 tensors of 2-16 MiB, first byte of each touched, freed in a
//                         shuffled order; each thread serves its own requests
//   kv_sequence           one sequence's KV blocks: 128 blocks of 64 KiB (a 256-token
//                         sequence of an 8-layer, 8-head, d=128 fp16 model), then freed
//
// Issue 16's server workloads (RegisterServerWorkloads; their peers also implement
//   static void* Realloc(void* p, std::size_t old_bytes, std::size_t new_bytes);
// ), each on one thread unless named:
//   batch_small_random    8192 sizes uniform in 16-512 B allocated, then freed in a random
//                         order (sizes and order fixed by a seed, the same for every peer)
//   batch_large_random    512 sizes uniform in 4-256 KiB, the same way
//   batch_aligned64_random  2048 sizes log-uniform in 64 B-256 KiB, each 64-byte aligned
//                         (posix_memalign(64): how PyTorch and most tensor runtimes ask),
//                         the same way; peers that implement
//                           static void* AllocateAligned(std::size_t alignment,
//                                                        std::size_t bytes);
//                           static void FreeAligned(void* p, std::size_t bytes,
//                                                   std::size_t alignment);
//   larson_like           threads:2 and threads:8 (more threads than this machine's CPUs):
//                         each thread keeps 1024 live objects of 16-512 B and replaces a
//                         random one per step; 1 step in 32 hands the victim to the next
//                         thread, which frees it (remote free) instead of freeing it locally
//   producer_consumer     (above) threads:2 only
//   realloc_growth        a vector-like buffer grown by doubling from 1 KiB to 64 MiB with
//                         the peer's realloc, one byte written per 4 KiB page of each new
//                         half; one untimed growth, then a fixed 4 timed ones
//   tensor_loop           tensors of 64 MiB, 256 MiB and 1 GiB allocated, filled with memset
//                         and freed; one untimed pass, then a fixed 2 timed ones (about 4 GiB
//                         written per peer: a peer that returns the pages faults them again,
//                         several seconds per pass on the loaded 2-vCPU machine)
// The batch and larson_like runs also report memory (see PeakRss below): rss_growth (bytes),
// live_bytes (what the workload holds at its peak) and rss_over_live.
#pragma once

#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace numarena_bench {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;

// Sizes of the alloc_free workloads.
inline constexpr std::array<std::size_t, 5> kAllocFreeSizes = {64, 4096, 65536, 2 * kMiB, 8 * kMiB};

inline std::string SizeName(std::size_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes / 1024) + "KiB";
  return std::to_string(bytes) + "B";
}

inline void Touch(void* p) { static_cast<volatile unsigned char*>(p)[0] = 1; }

// Memory runs (the environment variable NUMARENA_BENCH_RSS_MODE=1; bench/rss_runs.sh sets
// it), for rss_growth / live_bytes to measure each allocator's own overhead:
//  - the batches write one byte in every 4 KiB page of each object instead of the first
//    byte only: for 4-256 KiB objects most live bytes were otherwise never resident, and
//    every live byte is then resident (what a server that fills its buffers sees);
//  - larson_like's rings hold at most kLarsonSlots objects in flight instead of 65536: a
//    receiver off the CPU let its ring fill with up to 17 MiB of objects, so the RSS
//    measured the scheduler more than the allocator.
// Read once. The time columns come from ordinary runs.
inline bool TouchEveryPage() {
  static const bool on = [] {
    const char* v = std::getenv("NUMARENA_BENCH_RSS_MODE");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

inline void TouchObject(void* p, std::size_t bytes) {
  if (!TouchEveryPage()) {
    Touch(p);
    return;
  }
  auto* c = static_cast<volatile unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; i += 4096) c[i] = 1;
  c[bytes - 1] = 1;
}

template <typename Peer>
void AllocFree(benchmark::State& state, std::size_t bytes) {
  // One untimed pair first: the first allocation of a size can set up an arena's extents
  // (seen: 153 ms for numarena's first 64 KiB pair, the first benchmark of its process), and
  // a first iteration longer than min_time would be the only one Google Benchmark reports.
  if (void* p = Peer::Allocate(bytes)) {
    Touch(p);
    Peer::Free(p, bytes);
  }
  for (auto _ : state) {
    void* p = Peer::Allocate(bytes);
    if (p == nullptr) {
      state.SkipWithError("allocation failed");
      break;
    }
    Touch(p);
    Peer::Free(p, bytes);
  }
  state.SetItemsProcessed(state.iterations());
}

// ---- producer / consumer ---------------------------------------------------------------

inline constexpr std::size_t kBatch = 64;
inline constexpr std::array<std::size_t, 3> kHandoffSizes = {48, 256, 1024};

struct Batch {
  std::array<void*, kBatch> objects{};
};

// A single-producer single-consumer ring of batches, one per peer type.
struct HandoffRing {
  static constexpr std::size_t kSlots = 16;
  std::array<Batch, kSlots> slots;
  alignas(64) std::atomic<std::uint64_t> head{0};  // next slot the producer fills
  alignas(64) std::atomic<std::uint64_t> tail{0};  // next slot the consumer empties
  std::atomic<bool> failed{false};
};

template <typename Peer>
HandoffRing& RingOf() {
  static HandoffRing ring;
  return ring;
}

template <typename Peer>
bool FillBatch(Batch& batch) {
  for (std::size_t i = 0; i < kBatch; ++i) {
    std::size_t bytes = kHandoffSizes[i % kHandoffSizes.size()];
    batch.objects[i] = Peer::Allocate(bytes);
    if (batch.objects[i] == nullptr) return false;
    Touch(batch.objects[i]);
  }
  return true;
}

template <typename Peer>
void FreeBatch(Batch& batch) {
  for (std::size_t i = 0; i < kBatch; ++i) {
    Peer::Free(batch.objects[i], kHandoffSizes[i % kHandoffSizes.size()]);
  }
}

// Pins the calling thread to the `index`-th CPU it may run on, and restores its affinity when
// it goes out of scope (Google Benchmark runs thread 0 on the main thread). Nothing happens
// when the thread may use fewer than index + 1 CPUs.
//
// Why producer/consumer pins: a server hands requests between threads on different cores,
// and that is the case measured. Unpinned, the scheduler may run both threads on one CPU,
// taking turns, which is another workload (on the 2-vCPU test machine, both under
// `taskset -c 0`: numarena 18 ns per object, mimalloc 15 ns; on two CPUs 38 and 99 ns).
class CpuPin {
 public:
  explicit CpuPin(int index) {
    if (pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) != 0) return;
    int seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &saved_)) continue;
      if (seen++ != index) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pinned_ = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
      return;
    }
  }
  ~CpuPin() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
  }
  CpuPin(const CpuPin&) = delete;
  CpuPin& operator=(const CpuPin&) = delete;

 private:
  cpu_set_t saved_{};
  bool pinned_ = false;
};

template <typename Peer>
void ProducerConsumer(benchmark::State& state) {
  if (state.threads() == 1) {
    Batch batch;
    for (auto _ : state) {
      if (!FillBatch<Peer>(batch)) {
        state.SkipWithError("allocation failed");
        break;
      }
      FreeBatch<Peer>(batch);
    }
    state.SetItemsProcessed(state.iterations() * kBatch);
    return;
  }
  HandoffRing& ring = RingOf<Peer>();
  if (state.thread_index() == 0) {
    ring.head = 0;
    ring.tail = 0;
    ring.failed = false;
  }
  // Google Benchmark starts every thread's loop together (a barrier), after the reset above.
  const bool producer = state.thread_index() == 0;
  const bool worker = state.thread_index() < 2;  // more than two threads: the rest idle
  std::optional<CpuPin> pin;
  if (worker) pin.emplace(state.thread_index());
  for (auto _ : state) {
    if (!worker) continue;
    if (producer) {
      while (ring.head.load(std::memory_order_relaxed) -
                 ring.tail.load(std::memory_order_acquire) >=
             HandoffRing::kSlots) {
        std::this_thread::yield();
      }
      std::uint64_t h = ring.head.load(std::memory_order_relaxed);
      if (!FillBatch<Peer>(ring.slots[h % HandoffRing::kSlots])) {
        ring.failed = true;
        state.SkipWithError("allocation failed");
        break;
      }
      ring.head.store(h + 1, std::memory_order_release);
    } else {
      std::uint64_t t = ring.tail.load(std::memory_order_relaxed);
      while (ring.head.load(std::memory_order_acquire) == t) {
        if (ring.failed.load()) break;
        std::this_thread::yield();
      }
      if (ring.failed.load()) {
        state.SkipWithError("producer's allocation failed");
        break;
      }
      FreeBatch<Peer>(ring.slots[t % HandoffRing::kSlots]);
      ring.tail.store(t + 1, std::memory_order_release);
    }
  }
  if (worker) state.SetItemsProcessed(state.iterations() * kBatch);
}

// ---- inference-server mix ----------------------------------------------------------------

struct RequestShape {
  std::vector<std::size_t> sizes;       // allocation order: metadata, tensors mixed in
  std::vector<std::size_t> free_order;  // permutation of indices into `sizes`
};

// The same request every time (fixed seed), so every peer does identical work.
inline const RequestShape& InferenceRequest() {
  static const RequestShape shape = [] {
    RequestShape s;
    std::uint64_t state = 0x243F6A8885A308D3ULL;
    auto next = [&state] {  // xorshift64*
      state ^= state >> 12;
      state ^= state << 25;
      state ^= state >> 27;
      return state * 0x2545F4914F6CDD1DULL;
    };
    constexpr int kMetadata = 192;
    constexpr std::array<std::size_t, 4> kTensorSizes = {2 * kMiB, 4 * kMiB, 8 * kMiB, 16 * kMiB};
    for (int i = 0; i < kMetadata; ++i) {
      // log-uniform in [64, 4096]: 2^(6 + 6u)
      double u = static_cast<double>(next() >> 11) / 9007199254740992.0;
      s.sizes.push_back(static_cast<std::size_t>(std::pow(2.0, 6.0 + 6.0 * u)));
      if (i == kMetadata / 3 || i == 2 * kMetadata / 3) {
        s.sizes.push_back(kTensorSizes[next() % kTensorSizes.size()]);
      }
    }
    s.free_order.resize(s.sizes.size());
    for (std::size_t i = 0; i < s.free_order.size(); ++i) s.free_order[i] = i;
    for (std::size_t i = s.free_order.size() - 1; i > 0; --i) {
      std::swap(s.free_order[i], s.free_order[next() % (i + 1)]);
    }
    return s;
  }();
  return shape;
}

template <typename Peer>
void InferenceMixed(benchmark::State& state) {
  const RequestShape& request = InferenceRequest();
  std::vector<void*> live(request.sizes.size());
  for (auto _ : state) {
    for (std::size_t i = 0; i < request.sizes.size(); ++i) {
      live[i] = Peer::Allocate(request.sizes[i]);
      if (live[i] == nullptr) {
        for (std::size_t j = 0; j < i; ++j) Peer::Free(live[j], request.sizes[j]);
        state.SkipWithError("allocation failed");
        return;
      }
      Touch(live[i]);
    }
    for (std::size_t i : request.free_order) Peer::Free(live[i], request.sizes[i]);
  }
  state.SetItemsProcessed(state.iterations() * request.sizes.size());
}

// ---- KV blocks ----------------------------------------------------------------------------

inline constexpr std::size_t kKvBlockBytes =
    64 * 1024;  // 1 layer x 8 heads x 16 tok x 128 x 2 B x (K+V)
inline constexpr std::size_t kKvBlocksPerSequence = 128;  // 8 layers x 16 spans of 16 tokens

template <typename Peer>
void KvSequence(benchmark::State& state) {
  std::vector<void*> blocks(kKvBlocksPerSequence);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kKvBlocksPerSequence; ++i) {
      blocks[i] = Peer::Allocate(kKvBlockBytes);
      if (blocks[i] == nullptr) {
        for (std::size_t j = 0; j < i; ++j) Peer::Free(blocks[j], kKvBlockBytes);
        state.SkipWithError("allocation failed");
        return;
      }
      Touch(blocks[i]);
    }
    for (void* block : blocks) Peer::Free(block, kKvBlockBytes);
  }
  state.SetItemsProcessed(state.iterations() * kKvBlocksPerSequence);
}

// ---- peak RSS ------------------------------------------------------------------------------
//
// Linux keeps the process's resident-set high-water mark in VmHWM (/proc/self/status); writing
// "5" to /proc/self/clear_refs resets it to the current RSS (proc(5)). The first run of a
// benchmark in a process resets it and records VmRSS as that benchmark's baseline; every run
// then reports rss_growth = VmHWM - baseline. Google Benchmark runs a benchmark several times
// (to choose the iteration count) and reports the last run, so the baseline is kept across
// those runs: memory an allocator retained from its earlier runs counts as growth, as it
// should. The figure is the allocator's footprint only when the process runs one benchmark
// (`--benchmark_filter='^name$'`, as bench/rss_runs.sh does): in a run of every benchmark,
// pages retained by earlier benchmarks of the same allocator are reused and not counted.

// A "Vm...:" field of /proc/self/status in bytes; -1 when it cannot be read.
inline long long ProcStatusBytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kib = -1;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::strtoll(line + n + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

class PeakRss {
 public:
  // Call on thread 0 before the benchmark loop. `key` names the benchmark (and thread count).
  explicit PeakRss(const std::string& key) {
    auto [it, first] = Baselines().try_emplace(key, -1);
    if (first) {
      std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
      bool reset = f != nullptr && std::fputs("5", f) >= 0;
      if (f != nullptr && std::fclose(f) != 0) reset = false;
      if (reset) it->second = ProcStatusBytes("VmRSS");
    }
    baseline_ = it->second;
  }
  // Call on thread 0 after the loop (after Google Benchmark's stop barrier, so every
  // thread's allocations of the run are behind it). Counters are summed over threads by
  // Google Benchmark, which is why only thread 0 sets them.
  void Report(benchmark::State& state, double live_bytes) const {
    long long hwm = ProcStatusBytes("VmHWM");
    if (baseline_ < 0 || hwm < 0) return;  // no /proc or no clear_refs: no memory columns
    double growth = static_cast<double>(hwm - baseline_);
    state.counters["rss_growth"] = growth;
    state.counters["live_bytes"] = live_bytes;
    state.counters["rss_over_live"] = growth / live_bytes;
    state.counters["rss_mode"] = TouchEveryPage() ? 1 : 0;
  }

 private:
  static std::map<std::string, long long>& Baselines() {
    static std::map<std::string, long long> baselines;
    return baselines;
  }
  long long baseline_ = -1;
};

// ---- random batches ----------------------------------------------------------------------

inline std::uint64_t NextRandom(std::uint64_t& state) {  // xorshift64*
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1DULL;
}

struct SizeBatch {
  std::vector<std::size_t> sizes;
  std::vector<std::uint32_t> free_order;  // permutation of indices into `sizes`
  double live_bytes = 0;                  // sum of sizes: everything is live at once
};

inline SizeBatch MakeSizeBatch(std::size_t count, std::size_t min_bytes, std::size_t max_bytes,
                               std::uint64_t seed) {
  SizeBatch b;
  std::uint64_t state = seed;
  for (std::size_t i = 0; i < count; ++i) {
    b.sizes.push_back(min_bytes + NextRandom(state) % (max_bytes - min_bytes + 1));
    b.live_bytes += static_cast<double>(b.sizes.back());
  }
  b.free_order.resize(count);
  for (std::size_t i = 0; i < count; ++i) b.free_order[i] = static_cast<std::uint32_t>(i);
  for (std::size_t i = count - 1; i > 0; --i) {
    std::swap(b.free_order[i], b.free_order[NextRandom(state) % (i + 1)]);
  }
  return b;
}

inline const SizeBatch& SmallBatch() {
  static const SizeBatch b = MakeSizeBatch(8192, 16, 512, 0x9E3779B97F4A7C15ULL);
  return b;
}
inline const SizeBatch& LargeBatch() {
  static const SizeBatch b = MakeSizeBatch(512, 4 * 1024, 256 * 1024, 0xD1B54A32D192ED03ULL);
  return b;
}

// Sizes log-uniform in [min_bytes, max_bytes]: as many small objects as large ones.
inline SizeBatch MakeLogSizeBatch(std::size_t count, std::size_t min_bytes, std::size_t max_bytes,
                                  std::uint64_t seed) {
  SizeBatch b = MakeSizeBatch(count, min_bytes, max_bytes, seed);
  std::uint64_t state = seed ^ 0x5851F42D4C957F2DULL;
  const double span = std::log(static_cast<double>(max_bytes) / static_cast<double>(min_bytes));
  b.live_bytes = 0;
  for (std::size_t& bytes : b.sizes) {
    const double u = static_cast<double>(NextRandom(state) >> 11) / 9007199254740992.0;  // [0,1)
    bytes = static_cast<std::size_t>(static_cast<double>(min_bytes) * std::exp(u * span));
    if (bytes < min_bytes) bytes = min_bytes;
    if (bytes > max_bytes) bytes = max_bytes;
    b.live_bytes += static_cast<double>(bytes);
  }
  return b;
}

inline constexpr std::size_t kTensorAlignment = 64;
inline const SizeBatch& AlignedBatch() {
  static const SizeBatch b = MakeLogSizeBatch(2048, 64, 256 * 1024, 0x2545F4914F6CDD1DULL);
  return b;
}

// Peer's aligned allocation as a peer of its own, for the batch workloads.
template <typename Peer>
struct Aligned64 {
  static void* Allocate(std::size_t bytes) {
    return Peer::AllocateAligned(kTensorAlignment, bytes);
  }
  static void Free(void* p, std::size_t bytes) { Peer::FreeAligned(p, bytes, kTensorAlignment); }
};

template <typename Peer>
bool BatchOnce(benchmark::State& state, const SizeBatch& batch, std::vector<void*>& live) {
  for (std::size_t i = 0; i < batch.sizes.size(); ++i) {
    live[i] = Peer::Allocate(batch.sizes[i]);
    if (live[i] == nullptr) {
      for (std::size_t j = 0; j < i; ++j) Peer::Free(live[j], batch.sizes[j]);
      state.SkipWithError("allocation failed");
      return false;
    }
    TouchObject(live[i], batch.sizes[i]);
  }
  for (std::uint32_t i : batch.free_order) Peer::Free(live[i], batch.sizes[i]);
  return true;
}

// One untimed batch first (after the RSS baseline, so it counts): a cold first batch on a
// loaded machine could take more than min_time alone and become the only, reported, run.
template <typename Peer>
void RandomBatch(benchmark::State& state, const SizeBatch& batch, const std::string& key) {
  PeakRss rss(key);
  std::vector<void*> live(batch.sizes.size());
  if (!BatchOnce<Peer>(state, batch, live)) return;
  for (auto _ : state) {
    if (!BatchOnce<Peer>(state, batch, live)) return;
  }
  state.SetItemsProcessed(state.iterations() * batch.sizes.size());
  rss.Report(state, batch.live_bytes);
}

// ---- larson-like ---------------------------------------------------------------------------

inline constexpr int kLarsonMaxThreads = 8;
inline constexpr std::size_t kLarsonSlots = 1024;     // live objects per thread
inline constexpr std::size_t kLarsonSteps = 64;       // replacements per benchmark iteration
inline constexpr std::uint64_t kLarsonRemoteOneIn = 32;
inline constexpr std::size_t kLarsonMin = 16, kLarsonMax = 512;

struct Sized {
  void* p = nullptr;
  std::size_t bytes = 0;
};

// A single-producer single-consumer ring of objects: thread t sends to thread (t+1) % n.
// Large (1 MiB) because on a loaded 2-vCPU machine the receiver can be off the CPU for tens of
// milliseconds, while the sender pushes about a million objects a second: a ring of 1024
// slots was full most of the time and only 0.3 % of frees were remote instead of 3 %.
struct ObjectRing {
  static constexpr std::size_t kSlots = 65536;
  std::array<Sized, kSlots> slots;
  alignas(64) std::atomic<std::uint64_t> head{0};
  alignas(64) std::atomic<std::uint64_t> tail{0};

  bool Push(Sized o, std::uint64_t limit = kSlots) {
    std::uint64_t h = head.load(std::memory_order_relaxed);
    if (h - tail.load(std::memory_order_acquire) >= limit) return false;
    slots[h % kSlots] = o;
    head.store(h + 1, std::memory_order_release);
    return true;
  }
  template <typename F>
  std::size_t Drain(F&& free_one) {
    std::uint64_t t = tail.load(std::memory_order_relaxed);
    const std::uint64_t h = head.load(std::memory_order_acquire);
    for (std::uint64_t i = t; i < h; ++i) free_one(slots[i % kSlots]);
    tail.store(h, std::memory_order_release);
    return h - t;
  }
};

// The rings' pages are written once here, before thread 0 takes its RSS baseline, so that
// they do not count as the allocator's memory.
template <typename Peer>
std::array<ObjectRing, kLarsonMaxThreads>& LarsonRingsOf() {
  static std::array<ObjectRing, kLarsonMaxThreads> rings;
  static const bool touched = [] {
    for (auto& ring : rings) {
      for (auto& slot : ring.slots) static_cast<volatile std::size_t&>(slot.bytes) = 0;
    }
    return true;
  }();
  (void)touched;
  return rings;
}

template <typename Peer>
void LarsonLike(benchmark::State& state, const std::string& key) {
  const int n = state.threads();
  const int self = state.thread_index();
  auto& rings = LarsonRingsOf<Peer>();
  ObjectRing& inbox = rings[self];
  ObjectRing& outbox = rings[(self + 1) % n];
  std::optional<PeakRss> rss;
  if (self == 0) rss.emplace(key);
  std::uint64_t random = 0x94D049BB133111EBULL + static_cast<std::uint64_t>(self) * 0x9E37;
  auto size_of_next = [&random] {
    return kLarsonMin + NextRandom(random) % (kLarsonMax - kLarsonMin + 1);
  };
  std::vector<Sized> slots(kLarsonSlots);
  bool failed = false;
  bool filled = false;
  auto free_one = [](const Sized& o) { Peer::Free(o.p, o.bytes); };
  std::uint64_t remote = 0, local = 0;
  // Memory runs bound the objects in flight (see TouchEveryPage).
  const std::uint64_t ring_limit = TouchEveryPage() ? kLarsonSlots : ObjectRing::kSlots;
  for (auto _ : state) {
    if (!filled) {
      // The live set is allocated untimed inside the loop, after Google Benchmark's start
      // barrier, so that thread 0's RSS baseline (taken before the loop) precedes it.
      state.PauseTiming();
      for (auto& s : slots) {
        s.bytes = size_of_next();
        s.p = Peer::Allocate(s.bytes);
        if (s.p == nullptr) failed = true;
        else Touch(s.p);
      }
      filled = true;
      state.ResumeTiming();
    }
    if (failed) continue;  // SkipWithError below; every thread must still pass the barriers
    inbox.Drain(free_one);
    for (std::size_t step = 0; step < kLarsonSteps; ++step) {
      std::uint64_t r = NextRandom(random);
      Sized& victim = slots[r % kLarsonSlots];
      if (n > 1 && (r >> 32) % kLarsonRemoteOneIn == 0 && outbox.Push(victim, ring_limit)) {
        ++remote;
      } else {
        Peer::Free(victim.p, victim.bytes);
        ++local;
      }
      victim.bytes = size_of_next();
      victim.p = Peer::Allocate(victim.bytes);
      if (victim.p == nullptr) {
        failed = true;
        break;
      }
      Touch(victim.p);
    }
  }
  // Every thread has left the loop (Google Benchmark's stop barrier): nothing is sent now.
  for (auto& s : slots) {
    if (s.p != nullptr) Peer::Free(s.p, s.bytes);
    s.p = nullptr;
  }
  inbox.Drain(free_one);
  if (failed) {
    state.SkipWithError("allocation failed");
    return;
  }
  state.SetItemsProcessed(state.iterations() * kLarsonSteps);
  // Remote frees actually done (a full ring falls back to a local free): the fraction should
  // be 1/32 = 0.031. Counts summed over threads, the fraction averaged.
  state.counters["remote_frees"] = benchmark::Counter(static_cast<double>(remote));
  state.counters["local_frees"] = benchmark::Counter(static_cast<double>(local));
  state.counters["remote_fraction"] = benchmark::Counter(
      static_cast<double>(remote) / static_cast<double>(remote + local > 0 ? remote + local : 1),
      benchmark::Counter::kAvgThreads);
  if (rss) {
    rss->Report(state, static_cast<double>(n) * kLarsonSlots * (kLarsonMin + kLarsonMax) / 2);
  }
}

// ---- realloc growth --------------------------------------------------------------------------

inline constexpr std::size_t kGrowFrom = 1024, kGrowTo = 64 * kMiB;

// One growth from kGrowFrom to kGrowTo; false (with the error set) on failure.
template <typename Peer>
bool GrowOnce(benchmark::State& state, std::size_t& steps) {
  std::size_t bytes = kGrowFrom;
  auto* p = static_cast<unsigned char*>(Peer::Allocate(bytes));
  if (p == nullptr) {
    state.SkipWithError("allocation failed");
    return false;
  }
  std::memset(p, 1, bytes);
  while (bytes < kGrowTo) {
    auto* q = static_cast<unsigned char*>(Peer::Realloc(p, bytes, 2 * bytes));
    if (q == nullptr) {
      Peer::Free(p, bytes);
      state.SkipWithError("realloc failed");
      return false;
    }
    p = q;
    for (std::size_t off = bytes; off < 2 * bytes; off += 4096) p[off] = 1;
    bytes *= 2;
    ++steps;
  }
  benchmark::DoNotOptimize(p[bytes / 2]);
  Peer::Free(p, bytes);
  return true;
}

// The first growth of each run is untimed: the steady state of a server that grows such
// buffers again and again is measured, and the peers that share an arena
// (numarena_arena, numarena_arena_sized) or run after one another in the process start
// from the same state, whatever the order of the benchmarks.
template <typename Peer>
void ReallocGrowth(benchmark::State& state) {
  std::size_t steps = 0, warmup_steps = 0;
  if (!GrowOnce<Peer>(state, warmup_steps)) return;
  for (auto _ : state) {
    if (!GrowOnce<Peer>(state, steps)) return;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(steps));  // reallocs
}

// ---- big tensors ----------------------------------------------------------------------------

inline constexpr std::array<std::size_t, 3> kTensorLoopSizes = {64 * kMiB, 256 * kMiB, 1024 * kMiB};

template <typename Peer>
bool TensorsOnce(benchmark::State& state) {
  for (std::size_t bytes : kTensorLoopSizes) {
    void* p = Peer::Allocate(bytes);
    if (p == nullptr) {
      state.SkipWithError("allocation failed");
      return false;
    }
    std::memset(p, 0x5A, bytes);
    benchmark::ClobberMemory();
    Peer::Free(p, bytes);
  }
  return true;
}

// One untimed pass first, for the reason given at ReallocGrowth.
template <typename Peer>
void TensorLoop(benchmark::State& state) {
  if (!TensorsOnce<Peer>(state)) return;
  for (auto _ : state) {
    if (!TensorsOnce<Peer>(state)) return;
  }
  state.SetItemsProcessed(state.iterations() * kTensorLoopSizes.size());
  std::size_t total = 0;
  for (std::size_t bytes : kTensorLoopSizes) total += bytes;
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(total));
}

// ---- registration -------------------------------------------------------------------------

// Short runs: absolute times drift on shared machines; ratios within one run are the result.
inline void Configure(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->MinTime(0.1)->Threads(1)->Threads(2);
}

// Registers every workload for `Peer` under `name`. `min_bytes` limits alloc_free to sizes a
// peer is meant for (a whole-mapping allocator is not a small-object allocator); `mixed`
// and `kv` say whether the peer takes part in those workloads.
template <typename Peer>
void RegisterPeer(const std::string& name, std::size_t min_bytes = 0, bool mixed = true,
                  bool kv = true) {
  for (std::size_t bytes : kAllocFreeSizes) {
    if (bytes < min_bytes) continue;
    Configure(
        benchmark::RegisterBenchmark(("alloc_free_" + SizeName(bytes) + "/" + name).c_str(),
                                     [bytes](benchmark::State& s) { AllocFree<Peer>(s, bytes); }));
  }
  if (min_bytes > 0) return;
  Configure(benchmark::RegisterBenchmark(("producer_consumer/" + name).c_str(),
                                         [](benchmark::State& s) { ProducerConsumer<Peer>(s); }));
  if (mixed) {
    Configure(benchmark::RegisterBenchmark(("inference_mixed/" + name).c_str(),
                                           [](benchmark::State& s) { InferenceMixed<Peer>(s); }));
  }
  if (kv) {
    Configure(benchmark::RegisterBenchmark(("kv_sequence/" + name).c_str(),
                                           [](benchmark::State& s) { KvSequence<Peer>(s); }));
  }
}

// Registers issue 16's server workloads (list at the top) for `Peer` under `name`.
template <typename Peer>
void RegisterServerWorkloads(const std::string& name) {
  // Three repetitions of the short workloads: on a loaded machine one run can be descheduled
  // for most of its time; tools/plot_results.py targets takes the fastest repetition.
  auto add = [](const std::string& full, auto fn) {
    return benchmark::RegisterBenchmark(full.c_str(), fn)
        ->UseRealTime()
        ->MinTime(0.1)
        ->Repetitions(3);
  };
  add("batch_small_random/" + name, [name](benchmark::State& s) {
    RandomBatch<Peer>(s, SmallBatch(), "batch_small_random/" + name);
  })->Threads(1);
  add("batch_large_random/" + name, [name](benchmark::State& s) {
    RandomBatch<Peer>(s, LargeBatch(), "batch_large_random/" + name);
  })->Threads(1);
  if constexpr (requires(void* p) {
                  Peer::AllocateAligned(kTensorAlignment, 1);
                  Peer::FreeAligned(p, 1, kTensorAlignment);
                }) {
    add("batch_aligned64_random/" + name, [name](benchmark::State& s) {
      RandomBatch<Aligned64<Peer>>(s, AlignedBatch(), "batch_aligned64_random/" + name);
    })->Threads(1);
  }
  add("larson_like/" + name, [name](benchmark::State& s) {
    LarsonLike<Peer>(s, "larson_like/" + name + "/" + std::to_string(s.threads()));
  })->Threads(2)->Threads(kLarsonMaxThreads);
  // Fixed iterations: a growth takes from about 10 ms (pages kept) to over a second (pages
  // returned and faulted again) here, and one timed growth after the warm-up was seen to be
  // 25x slower than the later ones for numarena (2026-12-01).
  benchmark::RegisterBenchmark(("realloc_growth/" + name).c_str(),
                               [](benchmark::State& s) { ReallocGrowth<Peer>(s); })
      ->UseRealTime()
      ->Threads(1)
      ->Iterations(4);
  // Fixed iterations: each one writes 1.3 GiB.
  benchmark::RegisterBenchmark(("tensor_loop/" + name).c_str(),
                               [](benchmark::State& s) { TensorLoop<Peer>(s); })
      ->UseRealTime()
      ->Threads(1)
      ->Iterations(2);
}

}  // namespace numarena_bench
