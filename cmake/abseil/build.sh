#!/usr/bin/env bash
# Builds the Abseil that libnumarena.so and libnumarena_preload.so carry inside them, from
# Debian's own source package (the Abseil of Debian 12 that libnumarena.a links: same
# version, Debian's patches, Debian's C++ standard), with two changes that let it go into a
# shared object and meet another Abseil in the same process:
#
#   position-independent code   Debian's libabsl_*.a are not PIC, and five of them
#                               (thread_identity, hashtablez_sampler, cordz_functions, ...)
#                               reach their thread_local variables with local-exec TLS, which
#                               a shared object cannot contain. Compiled as PIC, the same
#                               variables use general-dynamic TLS, allocated per thread on
#                               demand, so a dlopen()ed library can have them.
#   hidden visibility           every symbol hidden (-fvisibility=hidden, inline functions
#                               too): the linker binds numarena's calls to this copy, and the
#                               libraries' version scripts export none of it. A program that
#                               has its own Abseil (Debian's shared libabsl_*.so, or a static
#                               one) keeps it: neither copy sees the other.
#
# Only the components numarena's sources use, and what they depend on, are built (status,
# statusor, strings, str_format, synchronization, hash, raw_hash_set, throw_delegate). The
# output is one PIC static archive of all of them and Abseil's headers as this build
# configured them (Debian's options.h):
#
#   cmake/abseil/build.sh DEST    -> DEST/lib/libnumarena_absl_pic.a
#                                    DEST/include/absl/...
#
# The build happens once per version and flags, in ${NUMARENA_ABSEIL_CACHE:-~/.cache/
# numarena-abseil}; later calls copy from there. The source package comes from
# ${NUMARENA_DEBIAN_MIRROR:-http://deb.debian.org/debian} (or CACHE/downloads) and must match
# the SHA-256 sums pinned below (cmake/debian_source.sh). CXX (default c++) builds it, with
# CMake and Ninja (or make when Ninja is missing).
set -euo pipefail

die() { printf 'numarena abseil build: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: $0 DEST"
DEST="$1"

ABSL_VERSION=20220623.1
DEB_REVISION=1+deb12u2
DSC=abseil_${ABSL_VERSION}-${DEB_REVISION}.dsc
ORIG=abseil_${ABSL_VERSION}.orig.tar.gz
DEBIAN=abseil_${ABSL_VERSION}-${DEB_REVISION}.debian.tar.xz
declare -A SHA256=(
  [$DSC]=ba731eaced569332fa4ce802a7ff2615ae57ac25beaf2d02f634ef908f2e62c2
  [$ORIG]=abfe2897f3a30edaa74bc34365afe3c2a3cd012091a97dc7e008f7016adcd5fe
  [$DEBIAN]=e08490fc7b6f3beca1925953b0c4fb92df2de5e2a01295e4641e2a3d4e528eeb
)
MIRROR="${NUMARENA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
POOL="$MIRROR/pool/main/a/abseil"
PACKAGE=Abseil
REMEDY="configure with -DNUMARENA_BUILD_SHARED=OFF (no libnumarena.so)"
# shellcheck source=../debian_source.sh
. "$(dirname "$0")/../debian_source.sh"

# The CMake targets numarena links (lib/CMakeLists.txt's absl:: list); their dependencies
# come with them.
TARGETS=(status statusor strings str_format_internal synchronization
         hash raw_hash_set throw_delegate)
# Debian's configuration (debian/rules: C++17, static) and Debian 12's dpkg-buildflags
# without -g (a smaller, quicker build) and -ffile-prefix-map (it names
# the build folder), then ours.
CMAKE_OPTIONS=(-DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=OFF
               -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_TESTING=OFF
               -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_CXX_VISIBILITY_PRESET=hidden
               -DCMAKE_VISIBILITY_INLINES_HIDDEN=ON)
# -fno-extern-tls-init: Abseil's thread_local variables are all constant-initialised
# (ABSL_CONST_INIT), and without it GCC reaches cordz_next_sample through a weak undefined
# init function (_ZTH...) that the dynamic linker would look up in other libraries.
BUILD_CXXFLAGS="-O2 -fstack-protector-strong -Wformat -Werror=format-security -Wdate-time -D_FORTIFY_SOURCE=2 -fno-extern-tls-init"
# -DNDEBUG: a release build's Abseil (Debian builds it without, so its assertions and the
# Mutex deadlock detector are on there). The detector kept a graph of every absl::Mutex and
# ran on each lock of the arena registry: 14 pages of every process under `numarena run`.
BUILD_CXXFLAGS+=" -DNDEBUG"
# -ffunction-sections: each function in its own section, so that the preload library's link can
# place the ones a process runs at start-up together (cmake/preload_startup_order.ld).
BUILD_CXXFLAGS+=" -ffunction-sections"
CXX="${CXX:-c++}"
command -v "$CXX" >/dev/null || die "no C++ compiler '$CXX' (install build-essential)"
command -v cmake >/dev/null || die "no cmake"
if command -v ninja >/dev/null; then GENERATOR=Ninja; else GENERATOR="Unix Makefiles"; fi

# The cache key: everything that changes the archive.
KEY_TEXT="abseil $ABSL_VERSION-$DEB_REVISION ${SHA256[$ORIG]} ${SHA256[$DEBIAN]}
targets ${TARGETS[*]}
cmake ${CMAKE_OPTIONS[*]}
CXXFLAGS $BUILD_CXXFLAGS
CXX $("$CXX" --version | head -n 1) $("$CXX" -dumpmachine)"
KEY="$(printf '%s' "$KEY_TEXT" | sha256sum | cut -c1-16)"

CACHE="${NUMARENA_ABSEIL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/numarena-abseil}"
BUILT="$CACHE/abseil-$ABSL_VERSION-$DEB_REVISION-$KEY"

copy_out() {
  mkdir -p "$DEST/lib"
  cp "$BUILT/lib/libnumarena_absl_pic.a" "$DEST/lib/libnumarena_absl_pic.a.tmp"
  rm -rf "$DEST/include.tmp"
  cp -R "$BUILT/include" "$DEST/include.tmp"
  rm -rf "$DEST/include"
  mv "$DEST/include.tmp" "$DEST/include"
  mv -f "$DEST/lib/libnumarena_absl_pic.a.tmp" "$DEST/lib/libnumarena_absl_pic.a"
}

CACHE_VARIABLE=NUMARENA_ABSEIL_CACHE
debian_source_prepare "abseil-$ABSL_VERSION"

printf 'numarena abseil build: building Abseil %s-%s (once; cached in %s)\n' \
  "$ABSL_VERSION" "$DEB_REVISION" "$BUILT" >&2
started=$SECONDS
cmake -S "$SRC" -B "$WORK/build" -G "$GENERATOR" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="$BUILD_CXXFLAGS" "${CMAKE_OPTIONS[@]}" >"$WORK/configure.log" 2>&1 ||
  { tail -n 30 "$WORK/configure.log" >&2; die "cmake failed (log above)"; }
cmake --build "$WORK/build" --parallel "${JOBS:-$(nproc)}" --target "${TARGETS[@]}" \
  >"$WORK/build.log" 2>&1 ||
  { tail -n 30 "$WORK/build.log" >&2; die "build failed (log above)"; }

# One archive of every component built: the linker pulls what it needs from it in any order.
STAGE="$WORK/out"
mkdir -p "$STAGE/lib"
mapfile -t archives < <(find "$WORK/build/absl" -name 'libabsl_*.a' | sort)
((${#archives[@]} > 0)) || die "the build produced no libabsl_*.a"
{
  printf 'create %s\n' "$STAGE/lib/libnumarena_absl_pic.a"
  printf 'addlib %s\n' "${archives[@]}"
  printf 'save\nend\n'
} | ar -M || die "ar could not join the archives"

# What the archive must be, checked once here rather than trusted: no initial-exec or
# local-exec TLS relocation, no text relocation (not PIC), and no defined global symbol
# of Abseil's that a shared object would export by default.
relocations="$(readelf -rW "$STAGE/lib/libnumarena_absl_pic.a")"
if grep -Eq 'R_X86_64_(GOTTPOFF|TPOFF32|TPOFF64|32S?) ' <<<"$relocations"; then
  die "the archive has initial-exec/local-exec TLS or absolute relocations (not PIC):
$(grep -E 'R_X86_64_(GOTTPOFF|TPOFF32|TPOFF64|32S?) ' <<<"$relocations" | head -n 5)"
fi
# (libstdc++'s headers give std:: template instances default visibility; the version scripts
# hide those.)
visible="$(readelf -sW "$STAGE/lib/libnumarena_absl_pic.a" |
           awk '$5 ~ /GLOBAL|WEAK/ && $6 == "DEFAULT" && $7 != "UND" && $8 ~ /absl/ {print $8}' |
           head -n 5)"
[[ -z "$visible" ]] || die "the archive defines Abseil symbols of default visibility: $visible"

thread_init="$(nm "$STAGE/lib/libnumarena_absl_pic.a" 2>/dev/null | grep -E ' [TtWwU] _ZTH' | head -n 5 || true)"
[[ -z "$thread_init" ]] || die "the archive has thread_local init functions: $thread_init"

# Abseil's headers as configured here (Debian's options.h: its own string_view, optional,
# any and variant, the lts_20220623 inline namespace), for the sources compiled against it.
mkdir -p "$STAGE/include"
(cd "$SRC" && find absl \( -name '*.h' -o -name '*.inc' \) -print0 | tar -cf - --null -T -) |
  tar -xf - -C "$STAGE/include" || die "could not copy the headers"
printf '%s\nbuilt in %d s\n' "$KEY_TEXT" "$((SECONDS - started))" >"$STAGE/build-info.txt"
printf 'numarena abseil build: built in %d s\n' "$((SECONDS - started))" >&2
touch "$STAGE/done"
rm -rf "$BUILT"
mv "$STAGE" "$BUILT"
copy_out
