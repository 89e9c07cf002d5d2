#!/usr/bin/env bash
# Installs the numarena build in $1 into a temporary prefix, then builds and runs the
# consumer programs beside this script twice: with find_package(numarena) and with
# pkg-config (numarena, numarena-ops). With a second argument "shared" (the build has
# libnumarena.so), also a C program against numarena::shared and pkg-config numarena-shared,
# python3 ctypes loading the installed library, and the installed Python module (its directory
# under the prefix is the third argument). Exit status 0 only when all build and run.
# With "--prefix P" instead of a build folder, checks what is already installed in P.
set -euo pipefail
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ "$1" == --prefix ]]; then
  prefix="$(realpath "${2:?run.sh: --prefix needs a folder}")"
  shift 2
else
  prefix="$work/prefix"
  cmake --install "$1" --prefix "$prefix" >/dev/null
  shift
fi
shared="${1:-}"
pydir_rel="${2:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The alert rules with their promtool tests, and the Grafana dashboard, side by side.
monitoring="$prefix/share/numarena/prometheus"
python3 -c "import json, sys; assert json.load(open(sys.argv[1]))['panels']" \
  "$monitoring/numarena-dashboard.json"
(cd "$monitoring" && promtool test rules numarena-rules.test.yml >/dev/null)
consumer_shared=OFF
if [[ "$shared" == shared ]]; then consumer_shared=ON; fi
cmake -S "$here" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCONSUMER_SHARED="$consumer_shared" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
"$work/consumer/ops_consumer"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ "$here/main.cpp" -o "$work/consumer-pc" $(pkg-config --cflags --libs numarena)
"$work/consumer-pc"
# shellcheck disable=SC2046
g++ "$here/ops_main.cpp" -o "$work/ops-consumer-pc" $(pkg-config --cflags --libs numarena-ops)
"$work/ops-consumer-pc"
if [[ "$shared" == shared ]]; then
  lib="$prefix/lib/libnumarena.so"
  [[ -e "$lib" ]] || { echo "run.sh: $lib was not installed" >&2; exit 1; }
  # find_package: CMake's build-tree RUNPATH finds the installed library.
  "$work/consumer/c_consumer"
  loaded="$(ldd "$work/consumer/c_consumer")"
  grep -q "$prefix/lib/libnumarena.so" <<<"$loaded" ||
    { echo "run.sh: c_consumer does not load the installed libnumarena.so" >&2; exit 1; }
  # shellcheck disable=SC2046
  gcc -std=c11 "$here/c_main.c" -o "$work/c-consumer-pc" $(pkg-config --cflags --libs numarena-shared)
  LD_LIBRARY_PATH="$prefix/lib" "$work/c-consumer-pc"
  python3 -c "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); \
lib.numarena_version.restype = ctypes.c_char_p; print('python3 ctypes:', lib.numarena_version().decode())" "$lib"
  # The installed Python module finds the installed library by itself: no NUMARENA_LIBRARY,
  # no LD_LIBRARY_PATH. Its directory relative to the prefix: NUMARENA_PYTHON_INSTALL_DIR.
  pydir="$prefix/${pydir_rel:?run.sh: third argument: the Python module directory}"
  [[ -f "$pydir/numarena/__init__.py" && -f "$pydir/numarena/_install.py" ]] ||
    { echo "run.sh: the Python module was not installed in $pydir" >&2; exit 1; }
  env -u NUMARENA_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$pydir" PYTHONDONTWRITEBYTECODE=1 \
    python3 -c "
import os, sys, numarena
loaded = os.path.realpath(numarena.library_path)
if not loaded.startswith(sys.argv[1] + '/'):
    sys.exit('the installed module loaded ' + loaded + ', not the library in ' + sys.argv[1])
with numarena.NodeBuffer(1 << 20, node=0) as buf:
    buf.view()[:] = b'x' * len(buf)
    assert buf.page_nodes().pages_on_node == {0: buf.page_nodes().total_pages}
import importlib.metadata
assert importlib.metadata.version('numarena') == numarena.__version__ == numarena.version(), \
    (importlib.metadata.version('numarena'), numarena.__version__, numarena.version())
print('python3 numarena module:', numarena.version(), 'from', loaded)" "$(realpath "$prefix")"
fi
