#!/usr/bin/env bash
# The server workloads against every peer in one command: time runs, RSS runs, the 1.2x / 1.25x
# check and its chart (docs/benchmarks.md says what the rows are and how they are judged).
#
#   bench/server_workloads.sh BUILD_DIR OUT_DIR [ROUNDS]
#
# BUILD_DIR holds peers_bench, peers_glibc_bench and peers_tcmalloc_bench (tools/dev.sh's
# build: cmake --build BUILD_DIR --target peers_bench peers_glibc_bench peers_tcmalloc_bench).
# Runs the rows for every peer ROUNDS times (default 5), the three programs in turn
# within each round so that load on a shared machine falls on all peers alike; every
# benchmark repeats 3 times per round and the check takes the median of all runs
# (tools/plot_results.py). "Never slower than a NUMA peer" is a test over processes, one
# value per process and peer, and needs 5 a side: fewer rounds fail on any excess. Then
# bench/rss_runs.sh (three processes per batch/larson benchmark, every page of the batches
# written) and the check itself, written to OUT_DIR/targets.md, with the chart
# OUT_DIR/server_workloads.png and the peer charts OUT_DIR/peers_threads*.png (titled with the
# date, this machine and this checkout's commit). OUT_DIR should be empty: a run is its files.
# OUT_DIR/load.txt keeps the load average before and after each program, and the machine.
#
# Repetitions run in random order across the peers (--benchmark_enable_random_interleaving):
# the host moves the guest's two vCPUs between its cores every few seconds, and the
# cross-thread rows run 3-4x faster while the two share a core's caches (producer/consumer:
# numarena 9-10 ns or 35-43 ns per object, mimalloc 20 or 81-108 ns, in the same process);
# in a fixed order, whichever peer's turn fell in a fast spell won the row.
#
# The single-threaded rows run pinned to one CPU (NUMARENA_BENCH_CPU, default 0), the multi-threaded
# ones on all CPUs. glibc and tcmalloc are measured in programs of their own (a process has
# one malloc), and the two vCPUs of the guest this was written on were seen to differ by up
# to 1.8x for minutes at a time (neighbours on the host): unpinned, whichever vCPU a program
# landed on decided a row's ratio.
set -euo pipefail
build="${1:?usage: bench/server_workloads.sh BUILD_DIR OUT_DIR [ROUNDS]}"
out="${2:?usage: bench/server_workloads.sh BUILD_DIR OUT_DIR [ROUNDS]}"
rounds="${3:-5}"
cpu="${NUMARENA_BENCH_CPU:-0}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$out"
peers='(numarena_arena|numarena_arena_sized|jemalloc_malloc|jemalloc_arena|mimalloc|memkind_node|glibc_malloc|tcmalloc)'
short="^(alloc_free_(64KiB|2MiB)|producer_consumer|batch_small_random|batch_large_random|batch_aligned64_random|larson_like|realloc_growth)/$peers/"
# The tensor loop of the node-bound peers runs in two processes every round: it is memory
# bandwidth for all of them, and which physical pages a peer's tensors got in a process moves
# its time by up to 20 % for that whole process (bench/RESULTS.md, round 10), so its test
# needs many processes. The others return their pages on free and take about 30 s a run
# here: they run once, after the rounds.
numa_tensors='^tensor_loop/(numarena_arena|numarena_arena_sized|jemalloc_arena|memkind_node)/'
other_tensors='^tensor_loop/(jemalloc_malloc|mimalloc|glibc_malloc|tcmalloc)/'
{
  echo "started $(date -u +%FT%TZ) on $(uname -n): $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), Linux $(uname -r); single-threaded rows on CPU $cpu"
} > "$out/load.txt"
for round in $(seq 1 "$rounds"); do
  for p in peers_bench peers_glibc_bench peers_tcmalloc_bench; do
    echo "round $round $p start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
    # 3 repetitions of every row (the server rows register their 3 themselves).
    taskset -c "$cpu" "$build/bench/$p" --benchmark_filter="$short.*threads:1\$" \
      --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
      --benchmark_out="$out/$p.$round.json" --benchmark_out_format=json >/dev/null
    "$build/bench/$p" --benchmark_filter="$short.*threads:[2-9]\$" --benchmark_repetitions=3 \
      --benchmark_enable_random_interleaving=true \
      --benchmark_out="$out/$p.threads.$round.json" --benchmark_out_format=json >/dev/null
  done
  for half in a b; do
    taskset -c "$cpu" "$build/bench/peers_bench" --benchmark_filter="$numa_tensors" \
      --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
      --benchmark_out="$out/peers_bench.tensors.$round$half.json" \
      --benchmark_out_format=json >/dev/null
  done
done
for p in peers_bench peers_glibc_bench peers_tcmalloc_bench; do
  echo "tensors $p start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
  taskset -c "$cpu" "$build/bench/$p" --benchmark_filter="$other_tensors" \
    --benchmark_repetitions=3 --benchmark_out="$out/$p.tensors.json" \
    --benchmark_out_format=json >/dev/null
done
echo "rss runs start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
"$root/bench/rss_runs.sh" "$build" "$out/rss" 2>/dev/null
echo "finished $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
/usr/bin/python3 "$root/tools/plot_results.py" targets "$out"/peers_*bench.*.json \
  --rss "$out"/rss/*.json --chart "$out/server_workloads.png" | tee "$out/targets.md"
# Every peer of every row as the ratio to the row's best: peers_threads{1,2,8}.png.
/usr/bin/python3 "$root/tools/plot_results.py" peers "$out"/peers_*bench.*.json --out "$out" >/dev/null
