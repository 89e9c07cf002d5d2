#!/usr/bin/env bash
# `numarena run`'s checks before it starts anything, and the environment it hands the program:
#   run_errors_test.sh NUMARENA_BINARY
# Each error must exit with the documented status and say what is wrong on one stderr line;
# the program must get LD_PRELOAD (prepended), NUMARENA_POLICY (canonical) and NUMARENA_BUDGET.
# A stand-in file plays the preload library (NUMARENA_PRELOAD_LIBRARY), so this runs in
# sanitizer builds too (the dynamic linker says it cannot preload it and carries on).
set -u
numarena="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
: >"$work/libfake.so"
failures=0

# expect STATUS STDERR_SUBSTRING -- ARGS...
expect() {
  local want_status="$1" want_text="$2"
  shift 3
  local err status
  err="$(NUMARENA_PRELOAD_LIBRARY="$work/libfake.so" "$numarena" run "$@" 2>&1 >/dev/null)"
  status=$?
  if [[ $status -ne $want_status || "$err" != *"$want_text"* ]]; then
    printf 'FAILED: numarena run %s\n  status %s (want %s), stderr: %s\n  (want it to contain: %s)\n' \
      "$*" "$status" "$want_status" "$err" "$want_text"
    failures=$((failures + 1))
  fi
}

expect 2 "no placement policy" -- -- true
expect 2 "no program to run" -- --membind 0
expect 2 "no program to run" -- --membind 0 --
expect 2 "--membind needs a value" -- --membind
expect 2 "give one placement policy" -- --membind 0 --local -- true
expect 2 "unknown option '--bogus'" -- --bogus -- true
expect 2 "node 999 is not an online NUMA node" -- --membind 999 -- true
expect 2 "policy 'bind(x)'" -- --membind x -- true
expect 2 "policy 'weighted(0)'" -- --weighted 0 -- true
expect 2 "--budget 'quota:0': the quota must be a positive size" -- --budget quota:0 --local -- true
expect 2 "--budget 'lots': use 'system' or 'quota:SIZE'" -- --budget lots --local -- true
expect 2 "--metrics-port '0': a TCP port number from 1 to 65535" -- --metrics-port 0 --local -- true
expect 2 "--metrics-port '80x': a TCP port number" -- --metrics-port 80x --local -- true
expect 2 "--metrics-port '9001-9000': a TCP port number from 1 to 65535, or a range P-Q (P <= Q)" \
  -- --metrics-port 9001-9000 --local -- true
expect 2 "--metrics-listen 10.0.0.300: '10.0.0.300': a numeric IPv4 or IPv6 address" \
  -- --metrics-port 9000 --metrics-listen 10.0.0.300 --local -- true
expect 127 "cannot run 'numarena-no-such-program': No such file or directory (not found in PATH)" \
  -- --local -- numarena-no-such-program
expect 127 "cannot run '$work/missing': No such file or directory" -- --local -- "$work/missing"

err="$(NUMARENA_PRELOAD_LIBRARY="$work/nothing.so" "$numarena" run --local -- true 2>&1)"
status=$?
if [[ $status -ne 2 || "$err" != *"no libnumarena_preload.so (looked for $work/nothing.so)"* ]]; then
  printf 'FAILED: a missing preload library: status %s, stderr: %s\n' "$status" "$err"
  failures=$((failures + 1))
fi

# The environment the program gets.
# shellcheck disable=SC2016
show='printf "%s|%s|%s" "$LD_PRELOAD" "$NUMARENA_POLICY" "${NUMARENA_BUDGET-unset}"'
got="$(NUMARENA_PRELOAD_LIBRARY="$work/libfake.so" LD_PRELOAD= NUMARENA_BUDGET=stale \
       "$numarena" run --weighted 0=3 -- sh -c "$show" 2>/dev/null)"
want="$work/libfake.so|weighted(0:3)|unset"
[[ "$got" == "$want" ]] || { printf 'FAILED: environment %s, want %s\n' "$got" "$want"; failures=$((failures + 1)); }
got="$(NUMARENA_PRELOAD_LIBRARY="$work/libfake.so" LD_PRELOAD=/other/libx.so \
       "$numarena" run --budget quota:1G --policy membind\(0\) -- sh -c "$show" 2>/dev/null)"
want="$work/libfake.so:/other/libx.so|bind(0)|quota:1G"
[[ "$got" == "$want" ]] || { printf 'FAILED: environment %s, want %s\n' "$got" "$want"; failures=$((failures + 1)); }
# The metrics settings: 127.0.0.1 unless --metrics-listen, the devices comma-separated.
# shellcheck disable=SC2016
show='printf "%s|%s|%s" "$NUMARENA_METRICS_PORT" "$NUMARENA_METRICS_LISTEN" "${NUMARENA_METRICS_DEVICES-unset}"'
got="$(NUMARENA_PRELOAD_LIBRARY="$work/libfake.so" "$numarena" run --local --metrics-port 9500-9531 \
       -- sh -c "$show" 2>/dev/null)"
want="9500-9531|127.0.0.1|unset"
[[ "$got" == "$want" ]] || { printf 'FAILED: environment %s, want %s\n' "$got" "$want"; failures=$((failures + 1)); }
got="$(NUMARENA_PRELOAD_LIBRARY="$work/libfake.so" "$numarena" run --local --metrics-port 9500 \
       --metrics-listen :: --metrics-device 0000:41:00.0 --metrics-device 0000:c1:00.0 \
       -- sh -c "$show" 2>/dev/null)"
want="9500|::|0000:41:00.0,0000:c1:00.0"
[[ "$got" == "$want" ]] || { printf 'FAILED: environment %s, want %s\n' "$got" "$want"; failures=$((failures + 1)); }
# The program's own exit status comes back.
NUMARENA_PRELOAD_LIBRARY="$work/libfake.so" "$numarena" run --local -- sh -c 'exit 7' 2>/dev/null
status=$?
[[ $status -eq 7 ]] || { printf 'FAILED: exit status %s, want 7\n' "$status"; failures=$((failures + 1)); }

if ((failures)); then
  printf '%d failures\n' "$failures"
  exit 1
fi
echo "numarena run: every error path and the environment as documented"
