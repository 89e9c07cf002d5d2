#!/usr/bin/env bash
# The Debian package set (cmake/NumarenaPackaging.cmake) of the build in $1: made with
# `cpack -G DEB`, unpacked into a throwaway root with dpkg -x, and run from there.
#   - the four packages exist, each with the package it must depend on (the library for
#     -dev and python3-, the system libraries dpkg-shlibdeps found for the binaries, and no
#     libabsl for the library, no libnuma for the library and the tool);
#   - each file is in the package it belongs to (headers and CMake files in -dev, the
#     tool and preload library in numarena, the module in python3-numarena);
#   - from the root: `numarena --version`, `numarena run` (which finds the preload library
#     in the root beside it) and the Python module with importlib.metadata, loading the
#     root's libnumarena.so.
#   - everything installs under /usr, whatever prefix the build was configured with ($2,
#     /usr/local by default), the Python module in /usr/lib/python3/dist-packages, where
#     Debian's python3 looks.
# Exit 0 only when all hold.
set -euo pipefail
build="$1"
prefix="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "deb_test.sh: $*" >&2; exit 1; }

(cd "$build" && cpack -G DEB -B "$work/pkg" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack failed"; }
version="$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")"
deb() { ls "$work/pkg/$1"_"$version"_*.deb 2>/dev/null || fail "no package $1"; }
depends() { dpkg-deb -f "$(deb "$1")" Depends; }
grep -q "libnumarena0 (= $version)" <<<"$(depends libnumarena-dev)" || fail "libnumarena-dev: $(depends libnumarena-dev)"
grep -q "libnumarena0 (= $version)" <<<"$(depends python3-numarena)" || fail "python3-numarena: $(depends python3-numarena)"
for p in libnumarena0 numarena; do
  grep -q "libc6" <<<"$(depends $p)" || fail "$p does not depend on libc6: $(depends $p)"
  # The memory policy calls are numarena's own system calls (lib/os/os_linux.cpp): libnuma's
  # constructor would run in every process under `numarena run`.
  ! grep -q "libnuma1" <<<"$(depends $p)" || fail "$p depends on libnuma1: $(depends $p)"
done
# Abseil is inside libnumarena.so (cmake/abseil/build.sh); the numarena tool itself links
# libnumarena.a with Debian's shared Abseil.
! grep -q "libabsl" <<<"$(depends libnumarena0)" ||
  fail "libnumarena0 depends on Debian's Abseil: $(depends libnumarena0)"

contents() { dpkg-deb -c "$(deb "$1")" | sed 's/ -> .*//' | awk '{print $NF}'; }
for p in libnumarena0 libnumarena-dev numarena python3-numarena; do
  outside="$(contents "$p" | grep -v '/$' | grep -E -e '^\./usr/local/' -e '^\./([^u]|u[^s]|us[^r]|usr[^/])' || true)"
  [[ -z "$outside" ]] || fail "$p installs outside /usr (configured prefix $prefix):
$(head -n 5 <<<"$outside")"
done
has() { contents "$1" | grep -qE "$2" || fail "$1 lacks $2"; }
lacks() { ! contents "$1" | grep -qE "$2" || fail "$1 holds $2"; }
has libnumarena0 "/libnumarena\.so\.[0-9]+$"
lacks libnumarena0 "include/|\.a$"
has libnumarena-dev "include/numarena/arena\.hpp$"
has libnumarena-dev "cmake/numarena/numarenaConfig\.cmake$"
has libnumarena-dev "pkgconfig/numarena\.pc$"
has libnumarena-dev "/libnumarena\.a$"
has numarena "/bin/numarena$"
has numarena "/libnumarena_preload\.so$"
has numarena "prometheus/numarena-dashboard\.json$"
has python3-numarena "^\./usr/lib/python3/dist-packages/numarena/__init__\.pyi$"
has python3-numarena "numarena-$version\.dist-info/METADATA$"

root="$work/root"
for p in "$work"/pkg/*.deb; do dpkg -x "$p" "$root"; done
bin="$root/usr/bin/numarena"
[[ "$("$bin" --version)" == "numarena $version" ]] || fail "$bin --version: $("$bin" --version)"
"$bin" run --local -- /bin/sh -c 'case "$LD_PRELOAD" in '"$root"'*) exit 0;; esac; exit 1' ||
  fail "numarena run from the root did not preload the root's library"
pydir="$(dirname "$(dirname "$(cd "$root" && find . -path '*/numarena/__init__.py' | head -1)")")"
env -u NUMARENA_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$root/$pydir" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -c "
import importlib.metadata, os, sys, numarena
assert importlib.metadata.version('numarena') == numarena.__version__ == sys.argv[1]
assert os.path.realpath(numarena.library_path).startswith(sys.argv[2] + '/'), numarena.library_path
with numarena.NodeBuffer(1 << 16, node=0) as buf:
    buf.view()[:] = b'x' * len(buf)
print('deb set:', ', '.join(sorted(f for f in os.listdir(sys.argv[3]) if f.endswith('.deb'))))" "$version" "$(realpath "$root")" "$work/pkg"
