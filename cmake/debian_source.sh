# Sourced by the scripts that build a library libnumarena.so carries inside it from Debian's
# own source package (cmake/jemalloc/build.sh, cmake/abseil/build.sh): downloading the three
# files of a source package into a cache, checking them against pinned SHA-256 sums, and
# unpacking them with Debian's patches applied. Plain HTTP is fine: the pinned sums are the
# trust anchor, the same ones apt checks through the signed Release/Sources files.
#
# The sourcing script sets, before calling these functions:
#   PACKAGE   the library's name in messages ("jemalloc", "Abseil")
#   DSC ORIG DEBIAN   the .dsc, the upstream tarball and the Debian tarball's file names
#   SHA256    an associative array: file name -> pinned SHA-256
#   POOL      the mirror folder that holds them ($MIRROR/pool/main/j/jemalloc)
#   MIRROR    the mirror (from NUMARENA_DEBIAN_MIRROR)
#   CACHE     the cache folder (downloads go to CACHE/downloads)
#   REMEDY    what else the user can do when the download fails (one line, no full stop)
#   BUILT     the cache folder of this build (it holds a file "done" once complete)
#   CACHE_VARIABLE  the environment variable that moves CACHE (for messages)
# and defines die() and copy_out() (copies BUILT's output to where the caller wants it).

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# debian_source_fetch FILE: into CACHE/downloads, checked against its pinned sum.
debian_source_fetch() {
  local file="$1" path="$CACHE/downloads/$1"
  if [[ -f "$path" && "$(sha_of "$path")" == "${SHA256[$file]}" ]]; then return 0; fi
  rm -f "$path" "$path.part"
  printf 'numarena %s build: downloading %s\n' "${PACKAGE,,}" "$POOL/$file" >&2
  if ! curl -fsSL --retry 3 --connect-timeout 20 -o "$path.part" "$POOL/$file"; then
    rm -f "$path.part"
    die "could not download $POOL/$file.
  libnumarena.so contains its own $PACKAGE, built from Debian's source package, fetched
  once and cached in $CACHE. Either give this machine network access to $MIRROR,
  set NUMARENA_DEBIAN_MIRROR to a reachable Debian mirror, put $DSC, $ORIG and $DEBIAN
  into $CACHE/downloads/, or $REMEDY."
  fi
  local got; got="$(sha_of "$path.part")"
  if [[ "$got" != "${SHA256[$file]}" ]]; then
    rm -f "$path.part"
    die "$POOL/$file has SHA-256 $got, expected ${SHA256[$file]}: refusing to build it"
  fi
  mv "$path.part" "$path"
}

# debian_source_fetch_all: the three files, and a check that the pinned tarball sums are the
# ones the (pinned) .dsc lists: a mistake in either shows.
debian_source_fetch_all() {
  mkdir -p "$CACHE/downloads" || die "cannot create $CACHE/downloads"
  debian_source_fetch "$DSC"
  debian_source_fetch "$ORIG"
  debian_source_fetch "$DEBIAN"
  local file
  for file in "$ORIG" "$DEBIAN"; do
    grep -Eq "^ ${SHA256[$file]} [0-9]+ $(sed 's/[.+]/\\&/g' <<<"$file")\$" \
      "$CACHE/downloads/$DSC" || die "$DSC does not list SHA-256 ${SHA256[$file]} for $file"
  done
}

# debian_source_unpack WORK TOP: unpacks ORIG into WORK (its top folder must be TOP), the
# Debian folder into it, and applies Debian's patches in series order (as dpkg-source
# would). Prints the source folder.
debian_source_unpack() {
  local work="$1" top="$2" src="$1/$2" patch
  tar -xf "$CACHE/downloads/$ORIG" -C "$work"
  [[ -d "$src" ]] || die "$ORIG did not unpack into $top/"
  tar -xJf "$CACHE/downloads/$DEBIAN" -C "$src"
  if [[ -f "$src/debian/patches/series" ]]; then
    while read -r patch _; do
      [[ -z "$patch" || "$patch" == \#* ]] && continue
      patch -d "$src" -p1 --quiet --forward <"$src/debian/patches/$patch" >&2 ||
        die "Debian patch $patch does not apply"
    done <"$src/debian/patches/series"
  fi
  printf '%s\n' "$src"
}

# debian_source_prepare TOP: when BUILT is complete, copy_out and exit. Otherwise, holding
# CACHE/.lock (build folders that configure at once, build and build-asan, wait for one
# another here; the second finds the first one's result), fetch the source package and unpack
# it into a new WORK folder (removed at exit); sets WORK and SRC (WORK/TOP).
debian_source_prepare() {
  if [[ -f "$BUILT/done" ]]; then copy_out; exit 0; fi
  mkdir -p "$CACHE" || die "cannot create $CACHE (set $CACHE_VARIABLE)"
  exec 9>"$CACHE/.lock"
  flock 9
  if [[ -f "$BUILT/done" ]]; then copy_out; exit 0; fi
  debian_source_fetch_all
  WORK="$(mktemp -d "$CACHE/.build.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  SRC="$(debian_source_unpack "$WORK" "$1")"
}
