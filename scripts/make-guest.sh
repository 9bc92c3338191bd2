#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build the tiny test guest used by `make demo` and the integration tests:
#
#   ${BUILD:-build}/guest/vmlinuz             Debian's cloud kernel
#   ${BUILD:-build}/guest/initramfs.cpio.gz   busybox + /init
#
# Nothing is installed on the host: the kernel and busybox packages are
# fetched with `apt-get download` and unpacked with `dpkg-deb -x` into a
# scratch directory.
#
# The guest's /init prints "nuksm-guest: ready" on the console once it is
# up.  With `nuksm.fill=N` on the kernel command line it first writes N MiB
# of a fixed pattern to a tmpfs, so that every guest holds the same pages:
# one 1 MiB unit of distinct pages (the text of `seq`), repeated N times.
# With `nuksm.read=DEV` it then reads all of /dev/DEV (a virtio-blk disk,
# or an IDE disk, sda, through the PIIX controller's DMA) into its page
# cache, as `cat`-ing files does, and prints "nuksm-guest: read DEV"; it
# holds the disk open from then on, so that what it read stays cached.
# With `nuksm.cue=1` as well, it reads only once a line arrives on its
# second serial port (ttyS1), having printed "nuksm-guest: waiting for a
# cue", so that a benchmark starts the read when it starts measuring.
# With `nuksm.room=N` it first fills a tmpfs with random data (unique
# pages, as applications' memory is) until N MiB of its memory stay
# available, and with `nuksm.rate=R` it reads R MiB a second rather than
# all at once: its page cache then keeps only the last N MiB or so of
# what it read, and each page cache page lives about N/R seconds, as in
# XLH's kernel builds and web servers, whose page cache keeps changing.
#
# Boot it with:
#   qemu-system-x86_64 -accel tcg -m 256 -nodefaults -display none \
#     -serial stdio -kernel vmlinuz -initrd initramfs.cpio.gz \
#     -append 'console=ttyS0 quiet panic=-1 nuksm.fill=64' -L /usr/share/seabios
#
# Copyright (c) 2026 nuksm developers

set -eu

BUILD=${BUILD:-build}
OUT=$BUILD/guest
SCRIPT=$0

say() {
    echo "make-guest: $*"
}

die() {
    echo "make-guest: error: $*" >&2
    exit 1
}

# The PIIX IDE controller's driver and the SCSI disk's, loaded only to
# read an IDE disk (nuksm.read=sd*): I/O hints of QEMU's DMA helpers.
IDE_MODULES="scsi_common scsi_mod libata ata_piix sd_mod"

up_to_date() {
    [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initramfs.cpio.gz" ] &&
        [ "$OUT/vmlinuz" -nt "$SCRIPT" ] &&
        [ "$OUT/initramfs.cpio.gz" -nt "$SCRIPT" ]
}

# The versioned kernel package the cloud meta-package depends on.
kernel_package() {
    apt-cache depends linux-image-cloud-amd64 |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }'
}

write_init() {
    cat >"$1" <<'EOF'
#!/bin/sh
# nuksm test guest: mount the basics, optionally fill memory, then idle.
/bin/busybox mkdir -p /proc /sys /dev /usr/bin /usr/sbin /sbin /fill
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1

# The virtio balloon driver, for RAM discard tests (-device virtio-balloon),
# and virtio-blk's, for I/O hints.
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev \
         virtio_pci virtio_balloon virtio_blk; do
    insmod /modules/$m.ko || echo "nuksm-guest: cannot load $m"
done

fill=0
free=0
read=
cue=0
room=0
rate=0
for arg in $(cat /proc/cmdline); do
    case $arg in
    nuksm.fill=*) fill=${arg#nuksm.fill=} ;;
    nuksm.free=1) free=1 ;;
    nuksm.read=*) read=${arg#nuksm.read=} ;;
    nuksm.cue=1) cue=1 ;;
    nuksm.room=*) room=${arg#nuksm.room=} ;;
    nuksm.rate=*) rate=${arg#nuksm.rate=} ;;
    esac
done
case $fill in
''|*[!0-9]*) echo "nuksm-guest: bad nuksm.fill='$fill'"; fill=0 ;;
esac
case $room in
''|*[!0-9]*) echo "nuksm-guest: bad nuksm.room='$room'"; room=0 ;;
esac
case $rate in
''|*[!0-9]*) echo "nuksm-guest: bad nuksm.rate='$rate'"; rate=0 ;;
esac

if [ "$fill" -gt 0 ]; then
    mount -t tmpfs -o size=$((fill + 1))m tmpfs /fill
    seq 10000000 10200000 | head -c 1048576 >/fill/unit
    i=0
    while [ "$i" -lt "$fill" ]; do
        cat /fill/unit
        i=$((i + 1))
    done >/fill/data
    rm /fill/unit
    echo "nuksm-guest: filled $fill MiB"
    # nuksm.free=1: give the pages back; their content stays in free RAM.
    if [ "$free" = 1 ]; then
        rm /fill/data
        umount /fill
        echo "nuksm-guest: freed $fill MiB"
    fi
fi

if [ "$room" -gt 0 ]; then
    available=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
    busy=$((available - room))
    if [ "$busy" -gt 0 ]; then
        mkdir -p /busy
        mount -t tmpfs -o size=$((busy + 1))m tmpfs /busy
        head -c $((busy * 1048576)) /dev/urandom >/busy/data
    fi
    echo "nuksm-guest: $room MiB left available ($busy MiB busy)"
fi

# read_disk DEV R: read all of DEV into the page cache; with R > 0, R MiB
# and then a second's rest at a time (short-lived page cache in a guest
# with little room).
read_disk() {
    [ "$2" -gt 0 ] || { dd if="$1" of=/dev/null bs=1M 2>/dev/null; return; }
    size=$(($(cat "/sys/block/${1#/dev/}/size") / 2048))
    mib=0
    while [ "$mib" -lt "$size" ]; do
        dd if="$1" of=/dev/null bs=1M skip="$mib" count="$2" 2>/dev/null ||
            return 1
        mib=$((mib + $2))
        sleep 1
    done
}

if [ -n "$read" ]; then
    case $read in
    sd*)
        for m in @IDE_MODULES@; do
            insmod /modules/$m.ko || echo "nuksm-guest: cannot load $m"
        done
        ;;
    esac
    i=0
    while [ ! -b "/dev/$read" ] && [ "$i" -lt 10 ]; do
        sleep 1
        i=$((i + 1))
    done
    if [ "$cue" = 1 ]; then
        # Open first: what arrives before ttyS1 is open is lost.
        exec 3</dev/ttyS1
        echo "nuksm-guest: waiting for a cue"
        read -r _ <&3
        exec 3<&-
    fi
    # Hold the disk open for good, as a mounted file system does: the
    # last close of a block device drops its page cache (kill_bdev() in
    # the kernel's blkdev_put()), so without this what each dd read
    # would be freed as it exits and its pages reused a second later.
    exec 4<"/dev/$read"
    if read_disk "/dev/$read" "$rate"; then
        echo "nuksm-guest: read $read"
    else
        echo "nuksm-guest: cannot read /dev/$read"
    fi
fi

echo "nuksm-guest: ready"
while :; do
    sleep 3600
done
EOF
    sed -i "s/@IDE_MODULES@/$IDE_MODULES/" "$1"
    chmod 755 "$1"
}

if up_to_date; then
    say "$OUT is up to date"
    exit 0
fi

for tool in apt-get apt-cache dpkg-deb cpio gzip; do
    command -v "$tool" >/dev/null || die "$tool not found (Debian host needed)"
done

kpkg=$(kernel_package)
[ -n "$kpkg" ] || die "cannot resolve the package linux-image-cloud-amd64 depends on (apt-get update?)"

mkdir -p "$OUT"
scratch=$(mktemp -d "$OUT/scratch.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
chmod 755 "$scratch"  # apt-get download drops to the _apt user

say "downloading $kpkg and busybox-static"
(cd "$scratch" && apt-get download -q "$kpkg" busybox-static) ||
    die "apt-get download failed"

for deb in "$scratch"/*.deb; do
    say "unpacking $(basename "$deb")"
    dpkg-deb -x "$deb" "$scratch/root" || die "cannot unpack $deb"
done

kernel=$(ls "$scratch"/root/boot/vmlinuz-* 2>/dev/null | head -n 1)
[ -n "$kernel" ] || die "no /boot/vmlinuz-* in $kpkg"
[ -x "$scratch/root/bin/busybox" ] || die "no /bin/busybox in busybox-static"

say "assembling the initramfs"
initrd=$scratch/initrd
mkdir -p "$initrd/bin"
cp "$scratch/root/bin/busybox" "$initrd/bin/busybox"
mkdir -p "$initrd/modules"
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev \
         virtio_pci virtio_balloon virtio_blk $IDE_MODULES; do
    ko=$(find "$scratch/root/lib/modules" "$scratch/root/usr/lib/modules" \
         -name "$m.ko" 2>/dev/null | head -n 1)
    [ -n "$ko" ] || die "no $m.ko in $kpkg"
    cp "$ko" "$initrd/modules/"
done
ln -s busybox "$initrd/bin/sh"
write_init "$initrd/init"
(cd "$initrd" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) \
    >"$scratch/initramfs.cpio" || die "cpio failed"
gzip -9 "$scratch/initramfs.cpio" || die "gzip failed"

cp "$kernel" "$scratch/vmlinuz"
mv "$scratch/initramfs.cpio.gz" "$OUT/initramfs.cpio.gz"
mv "$scratch/vmlinuz" "$OUT/vmlinuz"
say "wrote $OUT/vmlinuz ($(basename "$kernel")) and $OUT/initramfs.cpio.gz"
