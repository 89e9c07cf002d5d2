#!/usr/bin/env bash
# Usage: check_core_archive.sh <libnumarena.a> <lib/ops>
# Fails when the core archive holds an object built from lib/ops, or defines a symbol of the
# operations tooling (numarena::ops, doctor, stat, advise, metrics, bandwidth, decode).
set -euo pipefail
archive="$1"; ops_dir="$2"
members="$(ar t "$archive")"
status=0
for source in "$ops_dir"/*.cpp; do
  object="$(basename "$source" .cpp).cpp.o"
  if grep -qx "$object" <<<"$members"; then
    echo "$(basename "$archive") contains $object, built from lib/ops" >&2; status=1
  fi
done
defined="$(nm -C --defined-only "$archive" 2>/dev/null | awk '$2 ~ /^[TtWwDdBbRr]$/ {$1=""; $2=""; print}')"
if bad="$(grep -E 'numarena::(ops::|decode::|RunDoctor\(|StatProcess\(|Advise\(|MeasureBandwidthMatrix\(|Render(Bandwidth|Decode)|ExpositionWriter::|Append[A-Za-z]*Metrics\()' <<<"$defined")"; then
  echo "$(basename "$archive") defines operations symbols:" >&2; head -20 <<<"$bad" >&2; status=1
fi
if ((status == 0)); then echo "libnumarena.a: $(wc -l <<<"$members") objects, none from lib/ops"; fi
exit $status
