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
//                         handoff); threads:1 — the same batches allocated and freed FIFO on
//                         one thread, the baseline
//   inference_mixed       one request: 192 metadata objects of 64 B-4 KiB (log-uniform) and
//                         2 tensors of 2-16 MiB, first byte of each touched, freed in a
//                         shuffled order; each thread serves its own requests
//   kv_sequence           one sequence's KV blocks: 128 blocks of 64 KiB (a 256-token
//                         sequence of an 8-layer, 8-head, d=128 fp16 model), then freed
#pragma once

#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
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

template <typename Peer>
void AllocFree(benchmark::State& state, std::size_t bytes) {
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

}  // namespace numarena_bench
