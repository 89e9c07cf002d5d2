#!/usr/bin/env bash
# What a numarena shared object needs from the system and what it shows it:
#   - DT_NEEDED: glibc's libraries and libstdc++ (with libgcc_s) only: jemalloc and Abseil
#     are linked in, and the memory policy calls are its own system calls, not libnuma's
#     (whose constructor would run in every process that loads it);
#   - no Abseil symbol in its dynamic symbol table, defined or undefined;
#   - with --preload: it exports numarena_* and the allocation functions it replaces
#     (malloc & co., operator new/delete), nothing else, and needs neither libstdc++ (linked
#     in) nor libm (cmake/NumarenaPreload.cmake: every process under `numarena run` loads
#     what it needs).
#
#   check_self_contained.sh PATH/lib.so [--preload]
set -euo pipefail
lib="$1"
preload="${2:-}"
fail=0
complain() { printf 'check_self_contained: %s: %s\n' "$lib" "$*" >&2; fail=1; }

allowed_needed='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
needed="$(readelf -dW "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
[[ -n "$needed" ]] || complain "readelf shows no DT_NEEDED at all"
stray="$(grep -Ev "$allowed_needed" <<<"$needed" || true)"
[[ -z "$stray" ]] || complain "needs libraries beyond glibc and libstdc++:
$stray"

dynamic_symbols="$(nm -D "$lib" | awk '{print $NF}')"
absl="$(grep -E '4absl|absl_' <<<"$dynamic_symbols" | head -n 5 || true)"
[[ -z "$absl" ]] || complain "Abseil symbols in the dynamic symbol table:
$absl"

if [[ "$preload" == --preload ]]; then
  # nm -D --defined-only: "ADDRESS TYPE NAME[@@VERSION]"; demangled, so operator new/delete
  # read as such.
  replaced='^(malloc|free|calloc|realloc|memalign|aligned_alloc|posix_memalign|valloc|pvalloc|malloc_usable_size|malloc_trim|mlock|mlock2|mlockall|operator (new|delete)(\[\])?\(.*\))$'
  extra="$(nm -D -C --defined-only "$lib" | awk '$2 != "A" {$1 = ""; $2 = ""; sub(/^  /, ""); print}' |
           sed 's/@.*//' | grep -Ev '^numarena_' | grep -Ev "$replaced" || true)"
  [[ -z "$extra" ]] || complain "exports more than numarena_*, the allocation functions and mlock*:
$(head -n 20 <<<"$extra")"
  heavy="$(grep -E '^(libstdc\+\+|libm)\.so' <<<"$needed" || true)"
  [[ -z "$heavy" ]] || complain "the preload library needs $(tr '\n' ' ' <<<"$heavy")(each costs
every process under numarena run its load)"
  for name in malloc free calloc realloc posix_memalign; do
    nm -D --defined-only "$lib" | awk '{print $3}' | grep -qx "$name" ||
      complain "does not export $name"
  done
fi

if ((fail)); then exit 1; fi
printf 'check_self_contained: %s needs only %s\n' "$lib" "$(tr '\n' ' ' <<<"$needed")"
