#!/usr/bin/env bash
# The lab harness itself (cmake/lab/run.sh), whose failure paths only run when something
# else has gone wrong: a program's exit status comes back through the VM, and a program
# still running at the timeout makes run.sh return 124 with the watchdog's report of it (its
# task, state, wait channel and kernel stack), which is all CI keeps of a hung VM; a boot
# that stalls is booted again. A folder
# shared with --share is seen by the VM and cannot be written from it, not even after the
# guest remounts it read-write (virtiofsd serves it from a read-only bind mount).
#
#   harness_test.sh RUN_SH
set -uo pipefail
run_sh="${1:?usage: harness_test.sh RUN_SH}"
out="$(mktemp)"
shared="$(mktemp -d)"
trap 'rm -rf "$out" "$shared"' EXIT
fail() {
  echo "harness_test: $*" >&2
  sed 's/^/  | /' "$out" >&2
  exit 1
}

"$run_sh" --topology 2s -- /bin/true >"$out" 2>&1
status=$?
((status == 0)) || fail "/bin/true came back with status $status, not 0"

"$run_sh" --topology 2s -- /bin/false >"$out" 2>&1
status=$?
((status == 1)) || fail "/bin/false came back with status $status, not 1"

# 60 s: the watchdog reports at 40 s of uptime, long after a loaded host has booted the VM.
"$run_sh" --topology 2s --timeout 60 -- /bin/sleep 600 >"$out" 2>&1
status=$?
((status == 124)) || fail "a program past the timeout came back with status $status, not 124"
grep -q '^lab: TIMEOUT: sleep in topology 2s' "$out" || fail "no TIMEOUT line"
grep -Eq '^lab: watchdog: task [0-9]+ sleep state S wchan [a-z_]+' "$out" ||
  fail "the watchdog did not report the sleeping program's task"
grep -Eq '^lab: watchdog:     \[<0>\] [a-z_]+' "$out" || fail "no kernel stack in the report"
# A boot that has not started the program by the boot deadline is killed and booted again,
# three boots in all (a 1 s deadline: no boot under emulation gets that far so soon).
NUMARENA_LAB_BOOT_DEADLINE=1 "$run_sh" --topology 2s -- /bin/true >"$out" 2>&1
status=$?
((status == 124)) || fail "three stalled boots came back with status $status, not 124"
(($(grep -c '^lab: the VM had not started the program after 1 s' "$out") == 2)) ||
  fail "not two boots again after a stalled boot"
grep -q '^lab: TIMEOUT: the VM did not start true in topology 2s.*3 boots' "$out" ||
  fail "no TIMEOUT line for the stalled boots"
NUMARENA_LAB_BOOT_DEADLINE=soon "$run_sh" --topology 2s -- /bin/true >"$out" 2>&1
status=$?
((status == 2)) || fail "a malformed boot deadline came back with status $status, not 2"
grep -q "NUMARENA_LAB_BOOT_DEADLINE must be a number" "$out" || fail "no line for the bad deadline"
echo "seen from the host" >"$shared/marker"
"$run_sh" --topology 2s --share "$shared" -- "$(command -v busybox)" sh -c \
  "cat '$shared/marker'; mount -o remount,rw '$shared' && echo 'lab: remounted'; echo x > '$shared/written'" \
  >"$out" 2>&1
status=$?
grep -q '^seen from the host' "$out" || fail "the VM did not see the shared folder's file"
[[ ! -e "$shared/written" ]] || fail "the VM wrote into the shared folder on the host"
grep -q 'Read-only file system' "$out" || fail "the VM's write was not refused as read-only"
((status == 1)) || fail "the refused write came back with status $status, not 1"
echo "harness_test: exit statuses 0 and 1 came back; the timeout returned 124 with the watchdog's report; stalled boots were booted again; --share is seen read-only"
