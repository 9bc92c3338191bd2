#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build the NUMA lab's initramfs (`make numa-lab`, see docs/testing.rst):
#
#   ${BUILD:-build}/numa-lab/initramfs.cpio.gz
#
# It boots with the test guest's kernel (build/guest/vmlinuz, from
# scripts/make-guest.sh) in a guest with two NUMA nodes and holds:
#
#   /bin/busybox              taken from build/guest/initramfs.cpio.gz
#   /lab/bin/                 qemu-system-x86_64, nuksmd, nuksmctl,
#                             store-nodes and qtest-reader from this build
#                             (stripped copies)
#   /lib*/...                 every shared library they load, and ld.so
#   /lab/share/qemu/          the firmware a q35 qtest VM loads
#   /lab/lab.sh               tests/numa-lab/lab.sh, the check itself
#   /init                     mounts, runs lab.sh, powers off
#
# Nothing is downloaded or installed.  The image is rebuilt whenever one
# of its inputs is newer than it.
#
# Copyright (c) 2026 nuksm developers

set -eu

BUILD=${BUILD:-build}
QEMU=${NUKSM_QEMU:-$BUILD/bin/qemu-system-x86_64}
NUKSMD=${NUKSMD:-$BUILD/bin/nuksmd}
NUKSMCTL=${NUKSMCTL:-$BUILD/bin/nuksmctl}
STORE_NODES=$BUILD/meson/store-nodes
QTEST_READER=$BUILD/meson/qtest-reader
GUEST_INITRD=$BUILD/guest/initramfs.cpio.gz
LAB_SH=$(dirname "$0")/../tests/numa-lab/lab.sh
OUT=$BUILD/numa-lab
IMAGE=$OUT/initramfs.cpio.gz
SCRIPT=$0

say() {
    echo "make-numa-lab: $*"
}

die() {
    echo "make-numa-lab: error: $*" >&2
    exit 1
}

# The firmware a q35 machine under -accel qtest -nodefaults opens.
FIRMWARE="bios-256k.bin kvmvapic.bin"

# QEMU's data directory: the build tree's bundle, else an installed one.
firmware_dir() {
    qdir=$(dirname "$(readlink -f "$QEMU")")
    for d in "$qdir/qemu-bundle/usr/local/share/qemu" \
             "$qdir/../share/qemu" /usr/share/qemu /usr/share/seabios; do
        if [ -e "$d/bios-256k.bin" ]; then
            echo "$d"
            return
        fi
    done
}

inputs() {
    echo "$SCRIPT" "$LAB_SH" "$GUEST_INITRD" "$STORE_NODES" "$QTEST_READER"
    for b in "$QEMU" "$NUKSMD" "$NUKSMCTL"; do
        readlink -f "$b"
    done
}

up_to_date() {
    [ -s "$IMAGE" ] || return 1
    for f in $(inputs); do
        [ "$IMAGE" -nt "$f" ] || return 1
    done
}

for f in "$QEMU" "$NUKSMD" "$NUKSMCTL"; do
    [ -x "$f" ] || die "$f not found: run 'make' first"
done
for f in "$STORE_NODES" "$QTEST_READER"; do
    [ -x "$f" ] || die "$f not found: run 'make tools' first"
done
[ -s "$GUEST_INITRD" ] || die "$GUEST_INITRD not found: run 'make guest' first"
[ -f "$LAB_SH" ] || die "$LAB_SH not found"

if up_to_date; then
    say "$IMAGE is up to date"
    exit 0
fi

for tool in ldd cpio gzip; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
fwdir=$(firmware_dir)
[ -n "$fwdir" ] || die "cannot find bios-256k.bin next to $QEMU"

mkdir -p "$OUT"
scratch=$(mktemp -d "$OUT/scratch.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
root=$scratch/root
mkdir -p "$root/bin" "$root/lab/bin" "$root/lab/share/qemu"

say "taking busybox from $GUEST_INITRD"
gzip -dc "$GUEST_INITRD" | (cd "$scratch" && cpio -id --quiet bin/busybox)
[ -x "$scratch/bin/busybox" ] ||
    die "cannot extract bin/busybox from $GUEST_INITRD"
cp "$scratch/bin/busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"

# Stripped copies: QEMU's debug info alone is most of its 70 MB.
for b in "$QEMU" "$NUKSMD" "$NUKSMCTL" "$STORE_NODES" "$QTEST_READER"; do
    real=$(readlink -f "$b")
    name=$(basename "$b")
    say "adding $name ($real)"
    cp "$real" "$root/lab/bin/$name"
    if command -v strip >/dev/null; then
        strip --strip-unneeded "$root/lab/bin/$name" ||
            die "strip $name failed"
    fi
done

# Every library the binaries load, at the path ldd resolves it to (the
# loader's default search path covers it), plus libgcc_s, which glibc
# dlopen()s when a thread exits through pthread_exit().
libs=$(for b in "$QEMU" "$NUKSMD" "$NUKSMCTL" "$STORE_NODES" "$QTEST_READER"; do
           ldd "$(readlink -f "$b")"
       done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }
                   $1 ~ /^\// { print $1 }' | sort -u)
gcc_s=$(ldconfig -p 2>/dev/null |
        awk '$1 == "libgcc_s.so.1" && $NF ~ /x86.64/ { print $NF; exit }')
for lib in $libs $gcc_s; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
say "added $(echo $libs $gcc_s | wc -w) shared libraries"

for f in $FIRMWARE; do
    [ -e "$fwdir/$f" ] || die "no $f in $fwdir"
    cp -L "$fwdir/$f" "$root/lab/share/qemu/$f"
done
say "added firmware from $fwdir: $FIRMWARE"

cp "$LAB_SH" "$root/lab/lab.sh"
chmod 755 "$root/lab/lab.sh"
cat >"$root/init" <<'EOF'
#!/bin/sh
# nuksm NUMA lab guest: mount the basics, run the lab, power off.
/bin/busybox mkdir -p /proc /sys /dev /run /tmp /usr/bin /usr/sbin /sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
exec </dev/console >/dev/console 2>&1
export PATH=/lab/bin:/bin:/sbin:/usr/bin:/usr/sbin
/bin/sh /lab/lab.sh
rc=$?
if [ "$rc" -gt 1 ]; then
    echo "numa-lab: FAIL: lab.sh stopped with exit status $rc"
fi
poweroff -f
EOF
chmod 755 "$root/init"

say "writing $IMAGE"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) \
    >"$scratch/initramfs.cpio" || die "cpio failed"
gzip -6 "$scratch/initramfs.cpio" || die "gzip failed"
mv "$scratch/initramfs.cpio.gz" "$IMAGE"
say "wrote $IMAGE ($(du -k "$IMAGE" | cut -f1) KiB)"
