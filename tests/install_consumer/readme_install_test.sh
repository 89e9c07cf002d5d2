#!/usr/bin/env bash
# The README's not-root install, run as written: the shell block after the line
# MARKER in SOURCE/README.md runs with bash -eu in a copy of the source tree (the block builds
# into ./build, which must not be the checkout's own), with HOME set to a temporary folder so
# that its "$HOME/.local" prefix is temporary too. Then what it installed is checked by
# run.sh --prefix: a find_package and a pkg-config consumer, the C API through libnumarena.so,
# python3 ctypes and the installed Python module; and the README's C++ and C examples are
# compiled against the installed package (its Python example is parsed) (and run: on a machine without their GPU or nodes
# they report an error, which is their documented behaviour, so only a crash fails).
#
#   tests/install_consumer/readme_install_test.sh SOURCE
#
# Only the environment helps it along, never the commands: the block's compiler calls go
# through ccache when it is installed (CMAKE_<LANG>_COMPILER_LAUNCHER, the copy as
# CCACHE_BASEDIR, so every run after the first is a cache hit), Ninja is the generator when it
# is installed (CMAKE_GENERATOR), and libnumarena.so's jemalloc comes from the machine's cache
# (NUMARENA_JEMALLOC_CACHE) rather than the temporary HOME's.
set -euo pipefail
source_dir="$(realpath "${1:?usage: readme_install_test.sh SOURCE}")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
marker='<!-- The test "install: the README'"'"'s not-root block" runs this block as written. -->'

# The first ```sh block after the marker line.
block="$(awk -v marker="$marker" '
  $0 == marker { found = 1; next }
  found && !open && /^```sh$/ { open = 1; next }
  open && /^```$/ { exit }
  open { print }' "$source_dir/README.md")"
if [[ -z "$block" ]]; then
  echo "readme_install_test: no \`\`\`sh block after the line $marker in README.md" >&2
  exit 1
fi
if ! grep -q 'cmake --install' <<<"$block"; then
  echo "readme_install_test: the README's block installs nothing (no cmake --install):" >&2
  echo "$block" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/home"
# The source as a user has it: no build folders, no git metadata, no node modules.
tar -C "$source_dir" --exclude='./build*' --exclude=./.git --exclude=./tools/llama/node_modules \
  --exclude=./tools/llama/.node -cf - . | tar -C "$work/src" -xf -

export NUMARENA_JEMALLOC_CACHE="${NUMARENA_JEMALLOC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/numarena-jemalloc}"
unset XDG_CACHE_HOME
if command -v ccache >/dev/null; then
  CCACHE_DIR="$(ccache -k cache_dir)"
  export CCACHE_DIR CCACHE_BASEDIR="$work/src" CCACHE_NOHASHDIR=1
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
if command -v ninja >/dev/null; then export CMAKE_GENERATOR=Ninja; fi

echo "== the README's block, in a copy of the source, HOME=$work/home:"
echo "$block"
(cd "$work/src" && HOME="$work/home" bash -euo pipefail -c "$block")

prefix="$work/home/.local"
[[ -x "$prefix/bin/numarena" ]] || { echo "readme_install_test: no $prefix/bin/numarena" >&2; exit 1; }
init="$(find "$prefix/lib" -path '*/dist-packages/numarena/__init__.py' | head -n 1)"
[[ -n "$init" ]] || { echo "readme_install_test: no Python module under $prefix/lib" >&2; exit 1; }
pydir="$(dirname "$(dirname "$init")")"
echo "== the installed package, checked by run.sh --prefix:"
"$here/run.sh" --prefix "$prefix" shared "${pydir#"$prefix/"}"

# fenced LANG: the first ```LANG block of the README.
fenced() {
  awk -v lang="$1" '!open && $0 == "```" lang { open = 1; next } open && /^```$/ { exit }
                    open { print }' "$source_dir/README.md"
}
cpp="$(fenced cpp)"
c="$(fenced c)"
python="$(fenced python)"
if [[ -z "$cpp" || -z "$c" || -z "$python" ]]; then
  echo "readme_install_test: the README has no \`\`\`cpp, \`\`\`c or \`\`\`python block" >&2
  exit 1
fi
# The Python example wants a node 1 to run; here it is parsed (tests/python runs the module).
python3 -c 'import ast, sys; ast.parse(sys.stdin.read(), "README.md python block")' <<<"$python"
# The C++ example is the body of a function returning absl::Status (it returns statuses), its
# #include lines before it; the C example the body of main().
{
  grep '^#include' <<<"$cpp"
  printf '#include <cstdio>\n#include <cstring>\nnamespace {\nabsl::Status Example() {\n'
  grep -v '^#include' <<<"$cpp"
  printf '  return absl::OkStatus();\n}\n}  // namespace\n'
  printf 'int main() { std::printf("%%s\\n", Example().ToString().c_str()); }\n'
} >"$work/readme_example.cpp"
{
  printf '#include <stdio.h>\n#include <numarena/numarena.h>\nint main(void) {\n'
  printf '%s\n' "$c"
  printf '  numarena_free(block);\n  return 0;\n}\n'
} >"$work/readme_example.c"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
echo "== the README's C++ example, against the installed numarena:"
# shellcheck disable=SC2046
g++ -std=c++20 -Wall -Werror -Wno-unused-variable "$work/readme_example.cpp" \
  -o "$work/readme_example" $(pkg-config --cflags --libs numarena)
"$work/readme_example"
echo "== the README's C example, against the installed libnumarena.so:"
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Werror "$work/readme_example.c" -o "$work/readme_example_c" \
  $(pkg-config --cflags --libs numarena-shared)
LD_LIBRARY_PATH="$prefix/lib" "$work/readme_example_c" || [[ $? == 1 ]]
