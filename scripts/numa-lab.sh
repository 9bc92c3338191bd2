#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Run the NUMA lab (`make numa-lab`, docs/testing.rst): boot the test
# guest's kernel with build/numa-lab/initramfs.cpio.gz
# (scripts/make-numa-lab.sh) on two NUMA nodes of 1 GiB and one CPU
# each, stream its console, and exit 0 only if the lab inside printed
# "numa-lab: PASS".
#
# Environment:
#   NUMA_LAB_ACCEL    tcg (default) or kvm; nested KVM may not boot it
#   NUMA_LAB_TIMEOUT  seconds before the guest is killed (default 600)
#   NUMA_LAB_APPEND   more kernel parameters, e.g. numalab.pages=4096
#   NUKSM_QEMU        the outer QEMU (default build/bin/qemu-system-x86_64)
#
# The console goes to the terminal and to build/numa-lab/console.log.
#
# Copyright (c) 2026 nuksm developers

set -eu

BUILD=${BUILD:-build}
QEMU=${NUKSM_QEMU:-$BUILD/bin/qemu-system-x86_64}
ACCEL=${NUMA_LAB_ACCEL:-tcg}
TIMEOUT=${NUMA_LAB_TIMEOUT:-600}
KERNEL=$BUILD/guest/vmlinuz
INITRD=$BUILD/numa-lab/initramfs.cpio.gz
LOG=$BUILD/numa-lab/console.log

say() {
    echo "numa-lab.sh: $*"
}

die() {
    echo "numa-lab.sh: error: $*" >&2
    exit 1
}

[ -x "$QEMU" ] || die "$QEMU not found: run 'make' first"
[ -s "$KERNEL" ] || die "$KERNEL not found: run 'make guest' first"
[ -s "$INITRD" ] || die "$INITRD not found: run scripts/make-numa-lab.sh"

case $ACCEL in
tcg) accel="-accel tcg -cpu max" ;;
kvm) accel="-accel kvm -cpu host" ;;
*) die "NUMA_LAB_ACCEL must be tcg or kvm, not '$ACCEL'" ;;
esac

rc_file=$(mktemp)
trap 'rm -f "$rc_file"' EXIT
start=$(date +%s)
say "booting a $ACCEL guest with 2 NUMA nodes (timeout ${TIMEOUT}s)"

# QEMU's console carries \r\n: strip the \r, unbuffered, so that the log
# greps cleanly and progress shows as it comes.
# shellcheck disable=SC2086
{
    set +e
    timeout -k 10 "$TIMEOUT" "$QEMU" $accel -machine q35 -smp 2 -m 2G \
        -object memory-backend-ram,id=m0,size=1G \
        -object memory-backend-ram,id=m1,size=1G \
        -numa node,nodeid=0,cpus=0,memdev=m0 \
        -numa node,nodeid=1,cpus=1,memdev=m1 \
        -nodefaults -display none -no-reboot -monitor none \
        -serial stdio \
        -kernel "$KERNEL" -initrd "$INITRD" \
        -append "console=ttyS0 quiet panic=-1 ${NUMA_LAB_APPEND:-}" \
        </dev/null 2>&1
    echo $? >"$rc_file"
} | sed -u 's/\r$//' | tee "$LOG"

rc=$(cat "$rc_file")
took=$(($(date +%s) - start))
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "the guest did not finish within ${TIMEOUT}s and was killed"
elif [ "$rc" != 0 ]; then
    say "QEMU exited with status $rc"
fi
if grep -q '^numa-lab: PASS' "$LOG"; then
    say "PASS in ${took}s (console: $LOG)"
    exit 0
fi
if ! grep -q '^numa-lab: FAIL' "$LOG"; then
    say "no verdict from the guest"
fi
say "FAIL in ${took}s (console: $LOG)"
exit 1
