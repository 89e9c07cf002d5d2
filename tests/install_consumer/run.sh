#!/usr/bin/env bash
# Installs the numarena build in $1 into a temporary prefix, then builds and runs the
# consumer programs beside this script twice: with find_package(numarena) and with
# pkg-config (numarena, numarena-ops). Exit status 0 only when all build and run.
set -euo pipefail
build="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
"$work/consumer/ops_consumer"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ "$here/main.cpp" -o "$work/consumer-pc" $(pkg-config --cflags --libs numarena)
"$work/consumer-pc"
# shellcheck disable=SC2046
g++ "$here/ops_main.cpp" -o "$work/ops-consumer-pc" $(pkg-config --cflags --libs numarena-ops)
"$work/ops-consumer-pc"
