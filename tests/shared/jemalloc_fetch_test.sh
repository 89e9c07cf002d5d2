#!/usr/bin/env bash
# cmake/jemalloc/build.sh without its sources at hand: an unreachable mirror and a download
# whose SHA-256 is not the pinned one must both stop the build with a message that says what
# to do, never build something else or carry on silently. Uses an empty temporary cache.
#
#   jemalloc_fetch_test.sh PATH/cmake/jemalloc/build.sh
set -uo pipefail
script="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0

# expect NAME TEXT MIRROR: build.sh fails and its message contains TEXT.
expect() {
  local name="$1" text="$2" mirror="$3" out status
  out="$(NUMARENA_JEMALLOC_CACHE="$work/cache-$name" NUMARENA_DEBIAN_MIRROR="$mirror" \
         "$script" "$work/dest-$name" 2>&1)"
  status=$?
  if ((status == 0)); then
    printf 'jemalloc_fetch_test: %s: build.sh succeeded\n%s\n' "$name" "$out" >&2; fail=1
  elif ! grep -qF -- "$text" <<<"$out"; then
    printf 'jemalloc_fetch_test: %s: message lacks "%s":\n%s\n' "$name" "$text" "$out" >&2; fail=1
  fi
  if [[ -e "$work/dest-$name/lib/libnumarena_jemalloc_pic.a" ]]; then
    printf 'jemalloc_fetch_test: %s: an archive was produced anyway\n' "$name" >&2; fail=1
  fi
}

# Port 9 (discard) on the loopback: nothing listens there.
expect unreachable "set NUMARENA_DEBIAN_MIRROR to a reachable Debian mirror" "http://127.0.0.1:9/debian"

mkdir -p "$work/mirror/pool/main/j/jemalloc"
printf 'Format: 3.0 (quilt)\nSource: jemalloc\n' >"$work/mirror/pool/main/j/jemalloc/jemalloc_5.3.0-1.dsc"
expect tampered "refusing to build it" "file://$work/mirror"

if ((fail)); then exit 1; fi
echo "jemalloc_fetch_test: unreachable mirror and wrong checksum both refused with a clear message"
