#!/usr/bin/env bash
# Builds the jemalloc that libnumarena.so carries inside it, from Debian's own source package
# (the jemalloc of Debian 12 that libnumarena.a links, same version, Debian's patches and
# configure options but its heap profiler, see DEBIAN_OPTIONS below), with three changes that
# let a process dlopen() the shared library:
#
#   --disable-initial-exec-tls   Debian's libjemalloc.so.2 keeps its thread state in
#                                initial-exec TLS (STATIC_TLS, ~2.6 KiB), which glibc can give
#                                a dlopen()ed library only from a few hundred spare bytes:
#                                "cannot allocate memory in static TLS block". General-dynamic
#                                TLS is allocated per thread on demand instead.
#   --with-jemalloc-prefix=nje_  the API is nje_mallocx, nje_mallctl, nje_malloc_conf, ...
#   --with-private-namespace=nje_  and the internals nje_je_*; no malloc/free/__libc_* at all,
#                                so it never becomes the process's malloc (Python keeps glibc's)
#                                and never meets a jemalloc the process already has.
#   --without-export             every symbol hidden; libnumarena.so exports only numarena_*.
#
# The output is a PIC static archive and the generated header, which maps mallocx & co. to
# the nje_ names when JEMALLOC_MANGLE is defined (lib/CMakeLists.txt compiles the shared
# library's objects that way):
#
#   cmake/jemalloc/build.sh DEST    -> DEST/lib/libnumarena_jemalloc_pic.a
#                                      DEST/include/jemalloc/jemalloc.h
#
# The build happens once per version and flags, in ${NUMARENA_JEMALLOC_CACHE:-~/.cache/
# numarena-jemalloc}; later calls copy from there. The three source files are downloaded from
# ${NUMARENA_DEBIAN_MIRROR:-http://deb.debian.org/debian} (or taken from CACHE/downloads if
# already there) and must match the SHA-256 sums pinned below (cmake/debian_source.sh).
# CC (default cc) builds it.
set -euo pipefail

die() { printf 'numarena jemalloc build: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: $0 DEST"
DEST="$1"

JE_VERSION=5.3.0
DEB_REVISION=1
DSC=jemalloc_${JE_VERSION}-${DEB_REVISION}.dsc
ORIG=jemalloc_${JE_VERSION}.orig.tar.bz2
DEBIAN=jemalloc_${JE_VERSION}-${DEB_REVISION}.debian.tar.xz
declare -A SHA256=(
  [$DSC]=439f07beae27fc3643932de2ef6d095c15f852cdf1a39c2949b8f6fbc51d6f0d
  [$ORIG]=2db82d1e7119df3e71b7640219b6dfe84789bc0537983c3b7ac4f7189aecfeaa
  [$DEBIAN]=4e87f3aa3709ce9ae9de501a56202de3b81f565aba441c579c57c29bda00006e
)
MIRROR="${NUMARENA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
POOL="$MIRROR/pool/main/j/jemalloc"
PACKAGE=jemalloc
REMEDY="configure with -DNUMARENA_BUILD_SHARED=OFF (no libnumarena.so)"
# shellcheck source=../debian_source.sh
. "$(dirname "$0")/../debian_source.sh"

# Debian's configure options for amd64/i386 (debian/rules: a fixed 4 KiB page, 2 MiB huge
# pages), then ours. Other architectures get Debian's 64 KiB page. Debian also enables the
# heap profiler on amd64 (--enable-prof); no numarena path uses it, and its code is what needs
# libm (exp, log, round): with it, every process under `numarena run` loaded libm for
# nothing (0.3 MiB of RSS, cmake/NumarenaPreload.cmake).
case "$(uname -m)" in
  x86_64 | i?86) DEBIAN_OPTIONS=(--with-lg-page=12) ;;
  *) DEBIAN_OPTIONS=(--with-lg-page=16) ;;
esac
DEBIAN_OPTIONS+=(--with-version=VERSION --with-lg-hugepage=21)
NUMARENA_OPTIONS=(--disable-initial-exec-tls --with-jemalloc-prefix=nje_
                  --with-private-namespace=nje_ --without-export
                  --disable-cxx --disable-shared --disable-doc)
# Debian 12's dpkg-buildflags, without -ffile-prefix-map (it names the build folder).
BUILD_CFLAGS="-g -O2 -fstack-protector-strong -Wformat -Werror=format-security"
# Each function in its own section, so that the preload library's link can place the ones a
# process runs at start-up together (cmake/preload_startup_order.ld).
BUILD_CFLAGS+=" -ffunction-sections"
BUILD_CPPFLAGS="-Wdate-time -D_FORTIFY_SOURCE=2"
CC="${CC:-cc}"
command -v "$CC" >/dev/null || die "no C compiler '$CC' (install build-essential)"

# The cache key: everything that changes the archive.
KEY_TEXT="jemalloc $JE_VERSION-$DEB_REVISION ${SHA256[$ORIG]} ${SHA256[$DEBIAN]}
configure ${DEBIAN_OPTIONS[*]} ${NUMARENA_OPTIONS[*]}
CFLAGS $BUILD_CFLAGS CPPFLAGS $BUILD_CPPFLAGS
CC $("$CC" --version | head -n 1) $("$CC" -dumpmachine)"
KEY="$(printf '%s' "$KEY_TEXT" | sha256sum | cut -c1-16)"

CACHE="${NUMARENA_JEMALLOC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/numarena-jemalloc}"
BUILT="$CACHE/jemalloc-$JE_VERSION-$DEB_REVISION-$KEY"

copy_out() {
  mkdir -p "$DEST/lib" "$DEST/include/jemalloc"
  cp "$BUILT/lib/libnumarena_jemalloc_pic.a" "$DEST/lib/libnumarena_jemalloc_pic.a.tmp"
  cp "$BUILT/include/jemalloc/jemalloc.h" "$DEST/include/jemalloc/jemalloc.h.tmp"
  mv -f "$DEST/lib/libnumarena_jemalloc_pic.a.tmp" "$DEST/lib/libnumarena_jemalloc_pic.a"
  mv -f "$DEST/include/jemalloc/jemalloc.h.tmp" "$DEST/include/jemalloc/jemalloc.h"
}

CACHE_VARIABLE=NUMARENA_JEMALLOC_CACHE
# Debian's patches touch configure.ac only for GNU Hurd, so the tarball's generated configure
# (no autoconf needed) builds the same code on Linux.
debian_source_prepare "jemalloc-$JE_VERSION"

printf 'numarena jemalloc build: configuring and building jemalloc %s-%s (once; cached in %s)\n' \
  "$JE_VERSION" "$DEB_REVISION" "$BUILT" >&2
(
  cd "$SRC"
  CC="$CC" CFLAGS="$BUILD_CFLAGS" CPPFLAGS="$BUILD_CPPFLAGS" \
    ./configure "${DEBIAN_OPTIONS[@]}" "${NUMARENA_OPTIONS[@]}" >"$WORK/configure.log" 2>&1 ||
    { tail -n 30 "$WORK/configure.log" >&2; die "configure failed (log above)"; }
  # Only the PIC archive: no shared library, no non-PIC archive, no documentation.
  make -j "${JOBS:-$(nproc)}" lib/libjemalloc_pic.a >"$WORK/make.log" 2>&1 ||
    { tail -n 30 "$WORK/make.log" >&2; die "make failed (log above)"; }
)

# What the archive must be, checked once here rather than trusted: no initial-exec TLS
# relocation (GOTTPOFF/TPOFF), and no defined global symbol without the nje_ prefix.
if readelf -rW "$SRC/lib/libjemalloc_pic.a" | grep -Eq 'R_X86_64_(GOTTPOFF|TPOFF32|TPOFF64)'; then
  die "the archive still uses initial-exec TLS"
fi
stray="$(nm -g --defined-only "$SRC/lib/libjemalloc_pic.a" 2>/dev/null |
         awk 'NF == 3 && $3 !~ /^nje_/ {print $3}' | head -n 5)"
[[ -z "$stray" ]] || die "the archive defines symbols outside the nje_ prefix: $stray"

STAGE="$WORK/out"
mkdir -p "$STAGE/lib" "$STAGE/include/jemalloc"
cp "$SRC/lib/libjemalloc_pic.a" "$STAGE/lib/libnumarena_jemalloc_pic.a"
cp "$SRC/include/jemalloc/jemalloc.h" "$STAGE/include/jemalloc/jemalloc.h"
printf '%s\n' "$KEY_TEXT" >"$STAGE/build-info.txt"
touch "$STAGE/done"
rm -rf "$BUILT"
mv "$STAGE" "$BUILT"
copy_out
