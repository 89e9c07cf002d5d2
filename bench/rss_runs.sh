#!/usr/bin/env bash
# Peak RSS of the server workloads' batch and larson-like rows, one process per benchmark.
#
#   bench/rss_runs.sh BUILD_DIR OUT_DIR
#
# Runs every batch_*_random and larson_like benchmark of peers_bench, peers_glibc_bench and
# peers_tcmalloc_bench alone in its own process (--benchmark_filter='^name$') and writes its
# JSON to OUT_DIR/<program>.<n>.json. Alone, because the rss_growth counter
# (bench/peer_workloads.hpp, PeakRss) is VmHWM minus the RSS before the benchmark's first
# run: in a process that ran other benchmarks of the same allocator first, pages they left
# cached would be reused and not counted. NUMARENA_BENCH_RSS_MODE=1 (bench/peer_workloads.hpp,
# TouchEveryPage): the batches write every 4 KiB page of each object, so that their live bytes
# are resident, and larson_like keeps at most 1024 objects in flight per ring, so that
# rss_growth / live_bytes is each allocator's overhead; the time columns come from the
# ordinary runs. Each benchmark runs in RSS_PROCESSES processes (default 3), one after
# another: the same benchmark's peak moves by up to a third from one process to the next
# (glibc's larson-like with 2 threads: 1.18-1.56 MiB), and tools/plot_results.py takes the
# median over processes of each process's peak, for every peer alike. Then:
#   tools/plot_results.py targets TIME_JSON... --rss OUT_DIR/*.json
set -euo pipefail
build="${1:?usage: bench/rss_runs.sh BUILD_DIR OUT_DIR}"
out="${2:?usage: bench/rss_runs.sh BUILD_DIR OUT_DIR}"
processes="${RSS_PROCESSES:-3}"
mkdir -p "$out"
peers='numarena_arena|numarena_arena_sized|jemalloc_malloc|jemalloc_arena|mimalloc|memkind_node|glibc_malloc|tcmalloc'
for program in peers_bench peers_glibc_bench peers_tcmalloc_bench; do
  n=0
  while read -r name; do
    n=$((n + 1))
    for k in $(seq 1 "$processes"); do
      # Benchmark names hold '.' (min_time:0.100): escape it for the filter's regex.
      NUMARENA_BENCH_RSS_MODE=1 "$build/bench/$program" --benchmark_filter="^${name//./\\.}\$" \
        --benchmark_out="$out/$program.$n.$k.json" --benchmark_out_format=json >/dev/null
    done
  done < <("$build/bench/$program" --benchmark_list_tests \
             --benchmark_filter="^(batch_small_random|batch_large_random|batch_aligned64_random|larson_like)/($peers)/" 2>/dev/null)
done
