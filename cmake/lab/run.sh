#!/usr/bin/env bash
# Runs one program inside the NUMA lab: a QEMU virtual machine with a chosen NUMA topology,
# booting Debian's stock cloud kernel (cmake/lab/fetch-kernel.sh) from a busybox initramfs
# that holds the program and every shared library it needs. Returns the program's exit status.
#
#   cmake/lab/run.sh --topology 2s|snc4|cxl|tiny [options] -- BINARY [ARGS...]
#
#   --topology T      a file cmake/lab/topologies/T.sh (see README.md)
#   --kernel SERIES   the lab kernel to boot: 6.1 (default, env NUMARENA_LAB_KERNEL_SERIES) or 6.12
#                     (cmake/lab/fetch-kernel.sh)
#   --timeout S       kill the VM after S seconds and fail (default 300, env NUMARENA_LAB_TIMEOUT)
#   --keep-log        keep the console log and work files even when the program passed
#   --file PATH       also copy PATH (and the libraries it needs) into the VM at the same path;
#                     repeatable, e.g. for a tool the test executes
#   --share DIR       show the host's folder DIR to the VM read-only at the same path
#                     (virtiofs) instead of copying what it holds: files under DIR are not
#                     copied; e.g. --share /usr for programs whose libraries are large
#                     (libtorch) or many (Python's); repeatable
#   --env NAME=VALUE  set an environment variable for the program; repeatable
#   --print-qemu      print the QEMU command line and exit (no VM is started)
#
# Inside the VM the program runs as a child of the init script (never as pid 1) in /tmp,
# with /proc, /sys, /dev, /dev/shm and cgroup2 mounted, /tmp writable, as root, stdin from /dev/null,
# stdout and stderr merged into one stream that run.sh prints. The init script writes
# `NUMARENA_LAB_EXIT=<status>` after the program ends, then powers the VM off.
#
# The program learns what QEMU was given from:
#   NUMARENA_LAB_TOPOLOGY=<name>              e.g. 2s
#   NUMARENA_LAB_TOPOLOGY_FILE=/lab/topology.txt
#   NUMARENA_LAB_KERNEL_SERIES=<series>       6.1 or 6.12 (--kernel)
#   NUMARENA_LAB_DEADLINE=<seconds>           the VM's uptime (/proc/uptime) at which the
#                                             watchdog reports what is still running
# (format in README.md; tests/support/lab_support.hpp parses it). Sanitizer options
# (ASAN_OPTIONS, UBSAN_OPTIONS, LSAN_OPTIONS, TSAN_OPTIONS) are passed through.
#
# Environment: NUMARENA_LAB_BOOT_DEADLINE (seconds a boot may take before the program starts,
# default 120: a boot past it is killed and booted again, at most three boots in all, within
# --timeout; 0 turns it off), NUMARENA_LAB_CACHE (kernel cache), NUMARENA_LAB_KERNEL / NUMARENA_LAB_KERNEL_6_12
# (use this vmlinuz for series 6.1 / 6.12),
# NUMARENA_LAB_LOG_DIR (where failed runs' logs go; default $TMPDIR/numarena-lab-logs),
# NUMARENA_LAB_ACCEL (tcg | kvm | auto; default tcg: KVM here failed with "emulation failure"
# under nested virtualisation and left the VM hung, so it is opt-in; auto = KVM when /dev/kvm
# is usable, falling back to TCG only if KVM cannot start at all).
set -euo pipefail

LAB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
EXIT_MARKER="NUMARENA_LAB_EXIT="

die() { printf 'lab: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

topology="" kernel_series="${NUMARENA_LAB_KERNEL_SERIES:-6.1}" timeout="${NUMARENA_LAB_TIMEOUT:-300}" keep_log=0 print_qemu=0
extra_files=() extra_env=() shares=()
while (($#)); do
  case "$1" in
    --topology) topology="${2:?--topology needs a name}"; shift 2 ;;
    --topology=*) topology="${1#*=}"; shift ;;
    --kernel) kernel_series="${2:?--kernel needs a series (6.1 or 6.12)}"; shift 2 ;;
    --kernel=*) kernel_series="${1#*=}"; shift ;;
    --timeout) timeout="${2:?--timeout needs seconds}"; shift 2 ;;
    --timeout=*) timeout="${1#*=}"; shift ;;
    --keep-log) keep_log=1; shift ;;
    --file) extra_files+=("${2:?--file needs a path}"); shift 2 ;;
    --share) shares+=("$(readlink -f "${2:?--share needs a folder}")"); shift 2 ;;
    --env) extra_env+=("${2:?--env needs NAME=VALUE}"); shift 2 ;;
    --print-qemu) print_qemu=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) die "unknown option '$1' (the program and its arguments go after --)" ;;
  esac
done
(($# >= 1)) || usage
[[ -n "$topology" ]] || die "--topology is required; one of: $(cd "$LAB_DIR/topologies" && ls *.sh | sed 's/\.sh$//' | tr '\n' ' ')"
[[ "$timeout" =~ ^[0-9]+$ && "$timeout" -gt 0 ]] || die "--timeout must be a positive number of seconds, not '$timeout'"
boot_deadline="${NUMARENA_LAB_BOOT_DEADLINE:-120}"
[[ "$boot_deadline" =~ ^[0-9]+$ ]] ||
  die "NUMARENA_LAB_BOOT_DEADLINE must be a number of seconds (0: off), not '$boot_deadline'"
topology_file="$LAB_DIR/topologies/$topology.sh"
[[ -f "$topology_file" ]] ||
  die "no topology '$topology' (no $topology_file); one of: $(cd "$LAB_DIR/topologies" && ls *.sh | sed 's/\.sh$//' | tr '\n' ' ')"

program="$1"; shift
[[ "$program" == */* ]] || program="$(command -v "$program" || true)"
[[ -f "$program" && -x "$program" ]] || die "'$program' is not an executable file"
program="$(readlink -f "$program")"

for share in "${shares[@]}"; do
  [[ -d "$share" && "$share" != / ]] || die "--share $share: not a folder (or /)"
  [[ "$share" != *[\'\\]* ]] || die "--share $share: the path may not hold a quote or a backslash"
done
# virtiofsd: QEMU's own (Debian's qemu-system-common) or the standalone package's.
VIRTIOFSD=""
if ((${#shares[@]})); then
  for candidate in /usr/lib/qemu/virtiofsd /usr/libexec/virtiofsd "$(command -v virtiofsd || true)"; do
    if [[ -n "$candidate" && -x "$candidate" ]]; then VIRTIOFSD="$candidate"; break; fi
  done
  [[ -n "$VIRTIOFSD" ]] || die "--share needs virtiofsd (Debian 12: qemu-system-common has /usr/lib/qemu/virtiofsd)"
fi

for tool in qemu-system-x86_64 cpio ldd busybox; do
  command -v "$tool" >/dev/null || die "needs $tool (tools/dev.sh deps installs qemu-system-x86, cpio, busybox-static)"
done
BUSYBOX="$(command -v busybox)"
# The initramfs has no libraries for busybox itself: it must be the static build.
if ldd "$BUSYBOX" >/dev/null 2>&1; then die "$BUSYBOX is dynamically linked; install busybox-static"; fi

# ---- the topology: one definition -> QEMU options + the tests' description ----------------
LAB_SUMMARY="" LAB_SMP="" LAB_NODE_IDS=() LAB_NODE_CPUS=() LAB_NODE_MEM_MIB=() LAB_DISTANCES=()
LAB_HMAT_INITIATOR=() LAB_HMAT_LB=()
# shellcheck source=/dev/null
source "$topology_file"
node_count=${#LAB_NODE_IDS[@]}
((node_count >= 1)) || die "$topology_file defines no LAB_NODE_IDS"
((${#LAB_NODE_CPUS[@]} == node_count && ${#LAB_NODE_MEM_MIB[@]} == node_count &&
  ${#LAB_DISTANCES[@]} == node_count)) ||
  die "$topology_file: LAB_NODE_CPUS, LAB_NODE_MEM_MIB and LAB_DISTANCES need one entry per node"
hmat=0
if ((${#LAB_HMAT_LB[@]})); then
  hmat=1
  ((${#LAB_HMAT_INITIATOR[@]} == node_count)) ||
    die "$topology_file: with LAB_HMAT_LB every node needs an entry in LAB_HMAT_INITIATOR"
fi

total_mib=0
qemu_numa=() qemu_dist=()  # QEMU wants every node declared before the distances
description="topology $topology
summary $LAB_SUMMARY
hmat $hmat
nodes ${LAB_NODE_IDS[*]}
"
for ((i = 0; i < node_count; i++)); do
  id=${LAB_NODE_IDS[i]}
  mem=${LAB_NODE_MEM_MIB[i]}
  total_mib=$((total_mib + mem))
  # virtiofs (--share): the daemon reads and writes the guest's memory, so it must be shared
  if ((${#shares[@]})); then
    qemu_numa+=(-object "memory-backend-memfd,id=mem$id,size=${mem}M,share=on")
  else
    qemu_numa+=(-object "memory-backend-ram,id=mem$id,size=${mem}M")
  fi
  spec="node,nodeid=$id,memdev=mem$id"
  for cpu in ${LAB_NODE_CPUS[i]}; do spec+=",cpus=$cpu"; done
  if ((hmat)); then spec+=",initiator=${LAB_HMAT_INITIATOR[i]}"; fi
  qemu_numa+=(-numa "$spec")
  read -r -a row <<<"${LAB_DISTANCES[i]}"
  ((${#row[@]} == node_count)) || die "$topology_file: distance row $i has ${#row[@]} entries, want $node_count"
  for ((j = 0; j < node_count; j++)); do
    if ((i != j)); then qemu_dist+=(-numa "dist,src=$id,dst=${LAB_NODE_IDS[j]},val=${row[j]}"); fi
  done
  description+="cpus $id ${LAB_NODE_CPUS[i]}
mem_mib $id $mem
distances $id ${LAB_DISTANCES[i]}
"
  if ((hmat)); then description+="hmat_initiator $id ${LAB_HMAT_INITIATOR[i]}
"; fi
done
qemu_numa+=("${qemu_dist[@]}")
for entry in "${LAB_HMAT_LB[@]}"; do
  read -r initiator target latency bandwidth <<<"$entry"
  [[ -n "$bandwidth" ]] || die "$topology_file: LAB_HMAT_LB entry '$entry' needs 'initiator target latency_ns bandwidth_MBps'"
  qemu_numa+=(-numa "hmat-lb,initiator=$initiator,target=$target,hierarchy=memory,data-type=access-latency,latency=$latency"
              -numa "hmat-lb,initiator=$initiator,target=$target,hierarchy=memory,data-type=access-bandwidth,bandwidth=${bandwidth}M")
  description+="hmat_lb $initiator $target $latency $bandwidth
"
done

machine="pc"
((hmat)) && machine+=",hmat=on"

accel="${NUMARENA_LAB_ACCEL:-tcg}"
case "$accel" in
  auto) if [[ -r /dev/kvm && -w /dev/kvm ]]; then accel_args=(-accel kvm -accel tcg); else accel_args=(-accel tcg); fi ;;
  kvm) accel_args=(-accel kvm) ;;
  tcg) accel_args=(-accel tcg) ;;
  *) die "NUMARENA_LAB_ACCEL must be auto, kvm or tcg, not '$accel'" ;;
esac

# Kernel command line. numa_balancing=disable: the kernel must not migrate pages behind the
# tests' backs (tests that want it can write /proc/sys/kernel/numa_balancing).
# mitigations=off: page-table isolation makes every syscall a TLB flush under TCG.
# no_timer_check: on a loaded host the emulated timer interrupt can miss the kernel's boot-time
# IO-APIC check, which then panics ("IO-APIC + timer doesn't work!"); seen here under load 17.
append="console=ttyS0 quiet panic=-1 oops=panic numa_balancing=disable mitigations=off no_timer_check"

# ---- work dir, logs ---------------------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/numarena-lab.XXXXXX")"
console_log="$work/console.log"
output_log="$work/output.log"
qemu_cmd=(qemu-system-x86_64 -machine "$machine" "${accel_args[@]}" -m "${total_mib}M"
          -smp "$LAB_SMP" "${qemu_numa[@]}"
          -kernel KERNEL -initrd "$work/initrd.cpio" -append "$append"
          -nodefaults -no-user-config -display none -no-reboot
          -serial "file:$console_log" -serial "file:$output_log")
for ((i = 0; i < ${#shares[@]}; i++)); do
  qemu_cmd+=(-chardev "socket,id=share$i,path=$work/share$i.sock"
             -device "vhost-user-fs-pci,chardev=share$i,tag=share$i")
done
if ((print_qemu)); then
  rm -rf "$work"
  printf '%q ' "${qemu_cmd[@]}"; printf '\n'
  exit 0
fi

kernel="$("$LAB_DIR/fetch-kernel.sh" "$kernel_series")" ||
  die "no $kernel_series kernel (cmake/lab/fetch-kernel.sh $kernel_series failed)"
qemu_cmd=("${qemu_cmd[@]/#KERNEL/$kernel}")

keep_work() {
  local dir="${NUMARENA_LAB_LOG_DIR:-${TMPDIR:-/tmp}/numarena-lab-logs}"
  local dest
  mkdir -p "$dir"
  dest="$dir/$(basename "$program").$topology.linux-$kernel_series.$(date +%Y%m%d-%H%M%S).$$"
  rm -f "$work/initrd.cpio"  # large and rebuilt by the next run
  rm -rf "$work/root"
  mv "$work" "$dest"
  work=""  # nothing left for cleanup to remove
  printf 'lab: console log: %s/console.log (program output: %s/output.log)\n' "$dest" "$dest" >&2
}
share_daemons=()
# start_share_daemons: one virtiofsd per --share folder, serving it read-only. The daemon runs
# as root (it must, to serve the files as their owners), so it gets a mount namespace of its
# own in which the folder is a read-only bind mount: nothing in the VM can write to the host,
# whatever the guest mounts. Each daemon ends when its QEMU disconnects.
start_share_daemons() {
  local i sock waited
  share_daemons=()
  for ((i = 0; i < ${#shares[@]}; i++)); do
    sock="$work/share$i.sock"
    rm -f "$sock"
    unshare --mount --propagation private sh -c \
      'mount --bind -o ro "$1" "$1" && exec "$2" --socket-path="$3" -o source="$1" -o sandbox=chroot -o cache=always' \
      sh "${shares[i]}" "$VIRTIOFSD" "$sock" >"$work/virtiofsd$i.log" 2>&1 &
    share_daemons+=($!)
    waited=0
    while [[ ! -S "$sock" ]] && ((waited++ < 100)); do sleep 0.1; done
    [[ -S "$sock" ]] || die "virtiofsd for --share ${shares[i]} did not start (it needs root for its read-only mount namespace): $(cat "$work/virtiofsd$i.log")"
  done
}
stop_share_daemons() {
  local pid
  for pid in "${share_daemons[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  share_daemons=()
}
cleanup() {
  stop_share_daemons
  if [[ -n "${work:-}" && -d "$work" ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- the initramfs ------------------------------------------------------------------------
root="$work/root"
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,lab,etc,root}
cp "$BUSYBOX" "$root/bin/busybox"

lib_dirs=()
# under_share PATH: whether PATH (resolved) is inside a --share folder, which the VM sees as is.
under_share() {
  local real share
  real="$(readlink -f "$1")"
  for share in "${shares[@]}"; do
    [[ "$real" == "$share" || "$real" == "$share"/* ]] && return 0
  done
  return 1
}
# copy_with_libs PATH: PATH and every library ldd lists, each at its own absolute path; what
# lies in a --share folder is only named in LD_LIBRARY_PATH.
copy_with_libs() {
  local file="$1" line lib
  if ! under_share "$file"; then
    mkdir -p "$root$(dirname "$file")"
    cp -L "$file" "$root$file"
  fi
  local ldd_out
  if ! ldd_out="$(ldd "$file" 2>&1)"; then
    [[ "$ldd_out" == *"not a dynamic executable"* || "$ldd_out" == *"statically linked"* ]] && return 0
    die "ldd $file failed: $ldd_out"
  fi
  while IFS= read -r line; do
    lib=""
    case "$line" in
      *"not found"*) die "ldd $file: ${line# } (is LD_LIBRARY_PATH set for the build?)" ;;
      *" => "/*) lib="${line#* => }"; lib="${lib% (0x*}" ;;
      [[:space:]]/*) lib="${line#"${line%%[![:space:]]*}"}"; lib="${lib% (0x*}" ;;
    esac
    [[ -n "$lib" && ! -e "$root$lib" ]] || continue
    if ! under_share "$lib"; then
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    fi
    case " ${lib_dirs[*]} " in *" $(dirname "$lib") "*) ;; *) lib_dirs+=("$(dirname "$lib")") ;; esac
  done <<<"$ldd_out"
}
# With the host's /usr shared, its top-level links into it (merged /usr: /lib -> usr/lib,
# /lib64 -> usr/lib64) come along, so the loader and library paths ldd printed resolve.
for link in /lib /lib32 /lib64 /libx32; do
  if [[ -L "$link" ]] && under_share "$link"; then ln -s "$(readlink "$link")" "$root$link"; fi
done
# /usr is only whole with two things of /etc: the alternatives links (Debian's libblas.so.3
# and liblapack.so.3 are /usr links to /etc/alternatives, which links back into /usr) and the
# loader's cache (libraries opened by name, as Python's extension modules do). Both are small.
if under_share /usr; then
  mkdir -p "$root/etc"
  [[ -d /etc/alternatives ]] && cp -a /etc/alternatives "$root/etc/"
  [[ -f /etc/ld.so.cache ]] && cp /etc/ld.so.cache "$root/etc/"
fi
# The kernel modules virtiofs needs where they are not built in (Debian's 6.1 cloud kernel;
# 6.12 has them built in), in the order they load: fetch-kernel.sh keeps them beside the kernel.
if ((${#shares[@]})); then
  modules_dir="$(dirname "$kernel")/modules-$(basename "$kernel" | sed 's/^vmlinuz-//')"
  mkdir -p "$root/lab/modules"
  if [[ -f "$modules_dir/load-order" ]]; then
    cp "$modules_dir/load-order" "$root/lab/modules/"
    while read -r module; do cp "$modules_dir/$module.ko" "$root/lab/modules/"; done <"$modules_dir/load-order"
  elif [[ -z "${NUMARENA_LAB_KERNEL:-}${NUMARENA_LAB_KERNEL_6_12:-}" ]]; then
    die "--share needs the kernel's virtiofs modules in $modules_dir (cmake/lab/fetch-kernel.sh $kernel_series fetches them)"
  fi
fi
copy_with_libs "$program"
for f in "${extra_files[@]}"; do
  [[ -e "$f" ]] || die "--file $f does not exist"
  copy_with_libs "$(readlink -f "$f")"
done

printf '%s' "$description" >"$root/lab/topology.txt"

# Quotes a word for the VM's shell (busybox ash): single quotes, ' as '\''.
shell_quote() { local s="${1//\'/\'\\\'\'}"; printf "'%s'" "$s"; }

# The watchdog's moment, in the VM's uptime: 20 s before the host kills the VM (the kernel
# starts a second or two after QEMU), or half way on a very short timeout.
deadline=$((timeout > 40 ? timeout - 20 : timeout / 2))
{
  printf 'export PATH=/bin:/sbin HOME=/root TMPDIR=/tmp\n'
  printf 'export NUMARENA_LAB_TOPOLOGY=%s\n' "$(shell_quote "$topology")"
  printf 'export NUMARENA_LAB_TOPOLOGY_FILE=/lab/topology.txt\n'
  printf 'export NUMARENA_LAB_KERNEL_SERIES=%s\n' "$(shell_quote "$kernel_series")"
  printf 'export NUMARENA_LAB_DEADLINE=%s\n' "$deadline"
  if ((${#lib_dirs[@]})); then
    printf 'export LD_LIBRARY_PATH=%s\n' "$(shell_quote "$(IFS=:; echo "${lib_dirs[*]}")")"
  fi
  for name in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS; do
    if [[ -n "${!name:-}" ]]; then printf 'export %s=%s\n' "$name" "$(shell_quote "${!name}")"; fi
  done
  for kv in "${extra_env[@]}"; do
    [[ "$kv" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env wants NAME=VALUE, not '$kv'"
    printf 'export %s=%s\n' "${kv%%=*}" "$(shell_quote "${kv#*=}")"
  done
  printf 'exec %s' "$(shell_quote "$program")"
  for arg in "$@"; do printf ' %s' "$(shell_quote "$arg")"; done
  printf '\n'
} >"$root/lab/command"

cat >"$root/init" <<EOF
#!/bin/busybox sh
# NUMA lab init: mount the kernel's file systems, run /lab/command as a child, report its
# exit status on the output port (ttyS1), power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# /tmp stays on the initramfs (itself a writable tmpfs): a tmpfs mounted over it would hide
# programs copied in from a host path under /tmp.
chmod 1777 /tmp
mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
EOF
if ((${#shares[@]})); then
  cat >>"$root/init" <<EOF
# The host's folders shared read-only (run.sh --share), at their host paths.
if [ -f /lab/modules/load-order ]; then
  for module in \$(cat /lab/modules/load-order); do insmod /lab/modules/\$module.ko; done
fi
EOF
  for ((i = 0; i < ${#shares[@]}; i++)); do
    cat >>"$root/init" <<EOF
mkdir -p '${shares[i]}'
if ! mount -t virtiofs -o ro share$i '${shares[i]}'; then
  echo "lab: cannot mount the host's ${shares[i]} (virtiofs tag share$i); dmesg says:" > /dev/ttyS1
  dmesg | tail -n 20 > /dev/ttyS1
  echo "${EXIT_MARKER}2" > /dev/ttyS1
  poweroff -f
fi
EOF
  done
fi
cat >>"$root/init" <<EOF
echo "lab: running \$(sed -n 's/^exec //p' /lab/command)" > /dev/console
cd /tmp
# A pipe, not the tty itself: programs see a non-terminal stdout (no colours, block buffering
# like under ctest) and the tty's last close drains it before the exit marker is written.
mkfifo /tmp/.lab-output
cat /tmp/.lab-output > /dev/ttyS1 &
copier=\$!
# A program still running at the deadline is about to be killed with the VM, and CI keeps
# only what run.sh prints: the watchdog writes every task's state, kernel wait channel and
# kernel stack, and the kernel log's end, to the console (run.sh prints it on a timeout).
(
  while [ "\$(cut -d. -f1 /proc/uptime)" -lt ${deadline} ]; do sleep 1; done
  echo "lab: watchdog: still running at \$(cut -d' ' -f1 /proc/uptime) s of uptime"
  for task in /proc/[0-9]*/task/[0-9]*; do
    [ -e \$task/exe ] || continue  # kernel threads have no executable
    echo "lab: watchdog: task \${task##*/} \$(cat \$task/comm) state \$(cut -d')' -f2 \$task/stat | cut -d' ' -f2) wchan \$(cat \$task/wchan)"
    sed 's/^/lab: watchdog:     /' \$task/stack 2>/dev/null
  done
  dmesg | tail -n 40 | sed 's/^/lab: watchdog: dmesg: /'
) > /dev/console 2>&1 &
sh /lab/command < /dev/null > /tmp/.lab-output 2>&1
status=\$?
# The watchdog is left to poweroff. Killing it here (as first written) lost the marker on
# ttyS1 in 2 of 53 VMs of a loaded suite run: its children, orphaned to init, can end while
# init waits, 'wait' may return before the copier is done, and a marker written while the
# copier still holds ttyS1 open is not drained before the power goes. The copier is waited
# for until it is gone.
while kill -0 \$copier 2>/dev/null; do wait \$copier; done
# The kernel log is quiet during boot (speed); a failed run gets all of it in the console log.
[ "\$status" = 0 ] || dmesg > /dev/console
echo "${EXIT_MARKER}\$status" > /dev/ttyS1
echo "${EXIT_MARKER}\$status" > /dev/console
sync
poweroff -f
EOF
chmod +x "$root/init"

(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 >"$work/initrd.cpio")

# ---- boot ---------------------------------------------------------------------------------
started=$SECONDS
# A kernel that panics before /init started the program (the emulated machine failing a boot
# check on an overloaded host), or a boot still short of the program after the boot deadline
# (an RCU stall on a loaded host's emulated CPUs: CI lost a whole 300 s timeout to one), is
# booted again, at most three boots in all: the program never ran, so nothing is repeated.
# The marker line "lab: running" on the console says the program was started.
boot_stalled=0
for attempt in 1 2 3; do
  : >"$console_log"
  : >"$output_log"
  remaining=$((timeout - (SECONDS - started)))
  ((remaining > 0)) || remaining=1
  attempt_started=$SECONDS
  start_share_daemons
  set +e
  timeout --kill-after=10 "$remaining" "${qemu_cmd[@]}" </dev/null >"$work/qemu.log" 2>&1 &
  qemu_pid=$!
  boot_stalled=0
  if ((boot_deadline > 0)); then
    while kill -0 "$qemu_pid" 2>/dev/null && ! grep -q '^lab: running' "$console_log"; do
      if ((SECONDS - attempt_started >= boot_deadline)); then
        boot_stalled=1
        kill -TERM "$qemu_pid" 2>/dev/null  # timeout(1) passes it on to QEMU
        break
      fi
      sleep 1
    done
  fi
  wait "$qemu_pid"
  qemu_status=$?
  set -e
  stop_share_daemons
  if ((boot_stalled)); then
    cp "$console_log" "$work/console.boot-failure-$attempt.log"
    if ((attempt == 3 || timeout - (SECONDS - started) <= 0)); then
      qemu_status=124
      break
    fi
    printf 'lab: the VM had not started the program after %s s (attempt %s): %s; booting again\n' \
      "$boot_deadline" "$attempt" \
      "$(tr -d '\r' <"$console_log" | grep -v '^ *$' | tail -n1 | cut -c1-160 | grep . || echo "the console is empty")" >&2
    continue
  fi
  if grep -q '^lab: running' "$console_log" || ! grep -q 'Kernel panic' "$console_log" ||
    ((attempt == 3)); then
    break
  fi
  printf 'lab: the kernel panicked while booting (attempt %s): %s; booting again\n' \
    "$attempt" "$(tr -d '\r' <"$console_log" | grep -m1 'Kernel panic')" >&2
  cp "$console_log" "$work/console.boot-failure-$attempt.log"
done
elapsed=$((SECONDS - started))

# The output port is a tty: strip the carriage returns of its \r\n line ends.
tr -d '\r' <"$output_log" | grep -v "^${EXIT_MARKER}" || true
status_line="$(tr -d '\r' <"$output_log" | grep "^${EXIT_MARKER}" | tail -n1 || true)"
# The init writes the marker to the console too, after the output port: if the output port's
# last bytes were lost at power-off, the console still says how the program ended.
if [[ -z "$status_line" ]]; then
  status_line="$(tr -d '\r' <"$console_log" | grep "^${EXIT_MARKER}" | tail -n1 || true)"
  if [[ -n "$status_line" ]]; then
    printf 'lab: the output port lost the exit marker; the console has it: %s\n' \
      "$status_line" >&2
  fi
fi

if ((boot_stalled)); then
  printf 'lab: TIMEOUT: the VM did not start %s in topology %s on Linux %s: %s boots each still booting after %s s (NUMARENA_LAB_BOOT_DEADLINE); the last console lines:\n' \
    "$(basename "$program")" "$topology" "$kernel_series" "$attempt" "$boot_deadline" >&2
  tail -n 30 "$console_log" | tr -d '\r' | sed 's/^/lab: console: /' >&2
  keep_work
  exit 124
fi
if ((qemu_status == 124 || qemu_status == 137)); then
  printf 'lab: TIMEOUT: %s in topology %s did not finish within %s s (--timeout) on Linux %s\n' \
    "$(basename "$program")" "$topology" "$timeout" "$kernel_series" >&2
  if grep -q '^lab: watchdog:' "$console_log"; then
    tr -d '\r' <"$console_log" | grep '^lab: watchdog:' | head -n 400 >&2
  elif ! grep -q '^lab: running' "$console_log"; then
    printf 'lab: the program never started (the VM was still booting):\n' >&2
    tail -n 30 "$console_log" | tr -d '\r' | sed 's/^/lab: console: /' >&2
  fi
  keep_work
  exit 124
fi
if [[ -z "$status_line" ]]; then
  printf 'lab: the VM stopped (qemu status %s after %s s) without reporting an exit status' \
    "$qemu_status" "$elapsed" >&2
  printf ' (kernel panic, or the program killed init?)\n' >&2
  if [[ -s "$work/qemu.log" ]]; then sed 's/^/lab: qemu: /' "$work/qemu.log" >&2; fi
  tail -n 30 "$console_log" | tr -d '\r' | sed 's/^/lab: console: /' >&2
  keep_work
  exit 125
fi
status="${status_line#"$EXIT_MARKER"}"
if ((status != 0)); then
  printf 'lab: %s exited with status %s in topology %s on Linux %s (%s s)\n' \
    "$(basename "$program")" "$status" "$topology" "$kernel_series" "$elapsed" >&2
  # An OOM kill (status 137) is explained only in the kernel log, which CI does not keep:
  # print the kernel's report (who asked, for which nodes, each node's free pages).
  if grep -q 'invoked oom-killer' "$console_log"; then
    tr -d '\r' <"$console_log" |
      sed -n '/invoked oom-killer/,/Killed process/p' |
      grep -vE '^\[ *[0-9.]+\] +\[ *[0-9]+\] |Tasks state|hugepages_|Swap cache|Free swap|Total swap|pages (RAM|reserved|HighMem|hwpoisoned)' |
      head -n 90 | sed 's/^/lab: oom: /' >&2 || true
  fi
  keep_work
elif ((keep_log)); then
  keep_work
else
  printf 'lab: %s passed in topology %s on Linux %s (%s s)\n' "$(basename "$program")" "$topology" \
    "$kernel_series" "$elapsed" >&2
fi
exit "$status"
