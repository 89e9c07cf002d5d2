#!/usr/bin/env bash
# What libnumarena.so shows the dynamic linker:
#   - it exports exactly the functions numarena/numarena.h declares (no jemalloc, Abseil,
#     libstdc++ or numarena C++ symbol, and none of the header's functions missing);
#   - it needs no jemalloc API from outside (its own, nje_-prefixed, is linked in and hidden)
#     and no libjemalloc;
#   - it has no STATIC_TLS flag (it would not load after start-up) and its soname is set.
#
#   check_exports.sh PATH/libnumarena.so PATH/numarena.h
set -euo pipefail
lib="$1"
header="$2"
fail=0
complain() { printf 'check_exports: %s\n' "$*" >&2; fail=1; }

# nm -D --defined-only prints "ADDRESS TYPE NAME[@@VERSION]"; the version node itself is an
# absolute symbol (type A).
exported="$(nm -D --defined-only "$lib" | awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' | sort -u)"
# One declaration per line starts with its return type; the first `name(` on it is the
# function (parameter types have no parentheses).
declared="$(grep -E '^[a-z].*\bnumarena_[a-z0-9_]+\(' "$header" |
            sed -E 's/^[^(]*\b(numarena_[a-z0-9_]+)\(.*/\1/' | sort -u)"
[[ -n "$declared" ]] || complain "found no function declarations in $header"

extra="$(comm -23 <(printf '%s\n' "$exported") <(printf '%s\n' "$declared"))"
missing="$(comm -13 <(printf '%s\n' "$exported") <(printf '%s\n' "$declared"))"
[[ -z "$extra" ]] || complain "exports symbols numarena.h does not declare:
$(printf '%s\n' "$extra" | head -n 20)"
[[ -z "$missing" ]] || complain "does not export functions numarena.h declares:
$missing"

# Undefined symbols: none of jemalloc's API (plain or prefixed) may come from outside.
jemalloc_api='^(n?je_.*|nje_.*|mallocx|rallocx|xallocx|sallocx|dallocx|sdallocx|nallocx|mallctl|mallctlnametomib|mallctlbymib|malloc_stats_print|malloc_conf|malloc_message)$'
undefined_je="$(nm -D --undefined-only "$lib" | awk '{sub(/@.*/, "", $2); print $2}' |
                grep -E "$jemalloc_api" || true)"
[[ -z "$undefined_je" ]] || complain "takes jemalloc symbols from outside: $undefined_je"

dynamic="$(readelf -dW "$lib")"
if grep -q 'NEEDED.*jemalloc' <<<"$dynamic"; then
  complain "needs a jemalloc library: $(grep NEEDED <<<"$dynamic" | grep jemalloc)"
fi
if grep -Eq 'FLAGS.*STATIC_TLS' <<<"$dynamic"; then
  complain "has the STATIC_TLS flag: it uses initial-exec TLS and cannot be dlopen()ed reliably"
fi
grep -q 'SONAME.*libnumarena\.so\.' <<<"$dynamic" || complain "has no libnumarena.so.N soname"

# The jemalloc inside is the prefixed one (a local symbol in the full symbol table).
symbols="$(nm "$lib")"  # (not piped into grep -q: with pipefail nm's SIGPIPE would fail it)
grep -q ' t nje_mallocx$' <<<"$symbols" || complain "has no (local) nje_mallocx: which jemalloc is linked in?"

if ((fail)); then exit 1; fi
printf 'check_exports: %s exports exactly the %d functions of numarena.h\n' "$lib" \
  "$(printf '%s\n' "$declared" | wc -l)"
