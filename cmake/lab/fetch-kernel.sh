#!/usr/bin/env bash
# Fetches a NUMA lab kernel: one of Debian 12's stock cloud kernels, taken apart with
# `dpkg -x` and never installed. Both have CONFIG_NUMA, ACPI_NUMA, ACPI_HMAT and MIGRATION
# built in, and everything the lab needs without modules (the lab boots from an initramfs,
# so virtio_blk being a module does not matter) except virtiofs, which shows the VM a host
# folder read-only (run.sh --share): 6.1 has it as modules (virtio_pci, fuse, virtiofs), 6.12
# built in. The modules it needs are kept beside the kernel, in modules-<version>/ with the
# order they load in (load-order; empty where all are built in). Neither has 9p.
#
#   series 6.1   linux-image-cloud-amd64       (bookworm's own kernel; the default)
#   series 6.12  linux-image-6.12-cloud-amd64  (bookworm's newer kernel: MPOL_WEIGHTED_INTERLEAVE,
#                                               memory tiers, the interleave index of 6.7+)
#
# Each kernel lands ONCE in the cache folder ${NUMARENA_LAB_CACHE:-$HOME/.cache/numarena-lab};
# later calls only print its path. The metapackage's dependency names the real kernel package,
# so no version is written down here: a Debian point release simply gives a newer kernel the
# next time the cache is empty. apt checks each .deb against the archive's signed index (its
# SHA256), which is the only pin: nothing more is written down for either series.
#
#   cmake/lab/fetch-kernel.sh [SERIES]       prints the path of that series' vmlinuz (fetching
#                                            it if needed); SERIES 6.1 (default) or 6.12
#   NUMARENA_LAB_KERNEL=/path/vmlinuz        skips all of this for series 6.1: uses that kernel
#   NUMARENA_LAB_KERNEL_6_12=/path/vmlinuz   the same for series 6.12
set -euo pipefail

die() { printf 'fetch-kernel: %s\n' "$*" >&2; exit 1; }

SERIES="${1:-6.1}"
case "$SERIES" in
  # KERNEL_LINK: the cache's symlink to vmlinuz-<version> once fetched (6.1 keeps the name
  # it had when the lab had one kernel, so existing caches stay valid).
  6.1) META=linux-image-cloud-amd64 OVERRIDE=NUMARENA_LAB_KERNEL LINK_NAME=vmlinuz ;;
  6.12) META=linux-image-6.12-cloud-amd64 OVERRIDE=NUMARENA_LAB_KERNEL_6_12 LINK_NAME=vmlinuz-series-6.12 ;;
  *) die "no lab kernel series '$SERIES': 6.1 or 6.12" ;;
esac

if [[ -n "${!OVERRIDE:-}" ]]; then
  [[ -r "${!OVERRIDE}" ]] || die "$OVERRIDE=${!OVERRIDE} is not a readable file"
  printf '%s\n' "${!OVERRIDE}"
  exit 0
fi

CACHE="${NUMARENA_LAB_CACHE:-$HOME/.cache/numarena-lab}"
KERNEL_LINK="$CACHE/$LINK_NAME"

# A cached kernel counts once its virtiofs modules are there too (caches from before they
# were kept are fetched again).
cached() {
  [[ -r "$KERNEL_LINK" ]] || return 1
  local kernel
  kernel="$(readlink -f "$KERNEL_LINK")"
  [[ -f "$CACHE/modules-$(basename "$kernel" | sed 's/^vmlinuz-//')/load-order" ]] || return 1
  printf '%s\n' "$kernel"
}
if cached; then exit 0; fi

mkdir -p "$CACHE" || die "cannot create the cache folder $CACHE (set NUMARENA_LAB_CACHE)"
# Parallel test runs may all find the cache empty: one fetches, the others wait for it.
exec 9>"$CACHE/.fetch.lock"
flock 9
if cached; then exit 0; fi

command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  die "needs apt-get and dpkg (Debian/Ubuntu), or set $OVERRIDE to a vmlinuz with CONFIG_NUMA"

if ! apt-cache show "$META" >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]]; then
    printf 'fetch-kernel: %s unknown to apt, running apt-get update\n' "$META" >&2
    apt-get update -qq >&2 || die "apt-get update failed"
  fi
  apt-cache show "$META" >/dev/null 2>&1 ||
    die "apt does not know $META: run 'apt-get update' (Debian 12 main), or set $OVERRIDE"
fi

WORK="$(mktemp -d "$CACHE/.fetch.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"  # lets apt's _apt user write there (no "unsandboxed" warning)
cd "$WORK"

# `apt-get download` fetches the .deb into the current folder without installing anything.
apt-get download -qq "$META" >&2 || die "apt-get download $META failed"
META_DEB="$(ls ./*.deb)"
# "Depends: linux-image-6.1.0-57-cloud-amd64 (= ...)" names the real kernel package.
IMAGE_PKG="$(dpkg-deb -f "$META_DEB" Depends | tr ',' '\n' | grep -o 'linux-image-[^ ]*' | head -n1)"
[[ -n "$IMAGE_PKG" ]] || die "cannot find the kernel package in the Depends of $META_DEB"
apt-get download -qq "$IMAGE_PKG" >&2 || die "apt-get download $IMAGE_PKG failed"
IMAGE_DEB="$(ls ./"$IMAGE_PKG"_*.deb | head -n1)"
mkdir unpacked
dpkg -x "$IMAGE_DEB" unpacked
VMLINUZ="$(ls unpacked/boot/vmlinuz-* 2>/dev/null | head -n1)"
[[ -n "$VMLINUZ" ]] || die "$IMAGE_DEB holds no boot/vmlinuz-*"
NAME="$(basename "$VMLINUZ")"
# A metapackage from another suite (backports) would name another series: refuse it rather
# than run the series' tests on the wrong kernel.
[[ "$NAME" == "vmlinuz-$SERIES".* ]] ||
  die "$META gave $NAME, not a $SERIES kernel (is another suite's $META pinned higher?)"
# virtiofs's modules in load order (each after the modules its depends= names), those the
# kernel has as modules (.ko files; built-in ones are absent).
MODULES_DIR="$CACHE/modules-${NAME#vmlinuz-}"
rm -rf "$MODULES_DIR.tmp" && mkdir "$MODULES_DIR.tmp"
: >"$MODULES_DIR.tmp/load-order"
for module in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_legacy_dev \
  drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci fs/fuse/fuse fs/fuse/virtiofs; do
  found="$(ls unpacked/lib/modules/*/kernel/"$module".ko 2>/dev/null | head -n1 || true)"
  [[ -n "$found" ]] || continue
  cp "$found" "$MODULES_DIR.tmp/"
  basename "$module" >>"$MODULES_DIR.tmp/load-order"
done
rm -rf "$MODULES_DIR" && mv "$MODULES_DIR.tmp" "$MODULES_DIR"
cp "$VMLINUZ" "$CACHE/$NAME.tmp"
# Keep the kernel's config next to it: it documents what the lab's kernel can do.
cp unpacked/boot/config-* "$CACHE/" 2>/dev/null || true
mv -f "$CACHE/$NAME.tmp" "$CACHE/$NAME"
ln -sfn "$NAME" "$KERNEL_LINK"
printf 'fetch-kernel: %s from %s cached in %s\n' "$NAME" "$IMAGE_PKG" "$CACHE" >&2
printf '%s\n' "$CACHE/$NAME"
