#!/bin/sh
# One round of redis for bench/override_bench.py: redis-server runs under the allocator in
# this script's environment (LD_PRELOAD and numarena's variables as override_bench set them);
# redis-benchmark and redis-cli run under glibc, so the round's time is the server's work
# serving them and its peak RSS (override_spawn reports the largest of this script's
# descendants) is the server's.
#
#   redis_round.sh REQUESTS VALUE_BYTES
#
# The server listens on a Unix socket in a temporary directory only (no TCP port, no
# persistence), so rounds never meet another redis on the machine.
set -eu
requests="$1"
value_bytes="$2"
dir="$(mktemp -d "${TMPDIR:-/tmp}/override_redis.XXXXXX")"
socket="$dir/redis.sock"
glibc() { env -u LD_PRELOAD -u NUMARENA_POLICY -u NUMARENA_BUDGET -u NUMARENA_METRICS_PORT "$@"; }
cleanup() {
  glibc redis-cli -s "$socket" shutdown nosave >/dev/null 2>&1 || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
redis-server --port 0 --unixsocket "$socket" --save '' --appendonly no --dir "$dir" \
  --daemonize no --logfile "$dir/log" &
tries=0
until glibc redis-cli -s "$socket" ping >/dev/null 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -gt 500 ]; then
    echo "redis_round: redis-server did not answer on $socket within 5 s:" >&2
    cat "$dir/log" >&2 || true
    exit 1
  fi
  sleep 0.01
done
# SET/GET/LPUSH/LPOP/SADD/HSET/ZADD/MSET over 100,000 keys, 16 requests per round trip: the
# server allocates and frees a value, a key and list/set/hash nodes per request.
glibc redis-benchmark -s "$socket" -q -n "$requests" -r 100000 -d "$value_bytes" -P 16 -c 8 \
  -t set,get,lpush,lpop,sadd,hset,zadd,mset >/dev/null
# A check that the data is really there (and a last allocation-heavy command).
keys="$(glibc redis-cli -s "$socket" dbsize)"
[ "$keys" -gt 0 ] || { echo "redis_round: the server holds no keys after the benchmark" >&2; exit 1; }
