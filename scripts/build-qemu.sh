#!/usr/bin/env bash
# Fetch QEMU 10.0 from Debian's source package, apply qemu-patches/, overlay
# the nuksm sources by symlinks (edits in the repository take effect on the
# next build), configure (again whenever the configure arguments below
# change) and build qemu-system-x86_64, the option ROMs and the nuksm qtest.
#
#   QEMU_SRC=/path/to/qemu-10.0   use your own 10.0 tree (patched in place)
#   QEMU_VERSION=1:10.0.x+ds-...  Debian source version to fetch
#
# SPDX-License-Identifier: GPL-2.0-or-later
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${BUILD:-$top/build}
version=${QEMU_VERSION:-1:10.0.13+ds-0+deb13u1}
patches=$top/qemu-patches
qbuild=$build/qemu

step() { printf '\n==> %s\n' "$*"; }

# QEMU's configure names the compiler itself, so meson would not add ccache
# on its own: put ccache's compiler links first when it is installed.
if [ -d /usr/lib/ccache ]; then
    export PATH=/usr/lib/ccache:$PATH
fi

# Checksum of the patch series: a changed series means a fresh tree.
series_sum() {
    (cd "$patches" && cat series $(cat series)) | sha256sum | cut -c1-16
}

apply_patches() {
    local src=$1
    while read -r p; do
        [ -n "$p" ] || continue
        echo "    applying $p"
        patch -d "$src" -p1 --quiet --forward < "$patches/$p"
    done < "$patches/series"
}

# Newest 10.0.x Debian offers, for when the pinned version is gone.
newest_10_0() {
    apt-cache showsrc qemu 2>/dev/null |
        sed -n 's/^Version: \(1:10\.0\..*\)/\1/p' | sort -V | tail -n 1
}

fetch_debian_source() {
    local src=$1 dl=$build/qemu-dl
    rm -rf "$src" "$dl"
    mkdir -p "$dl"
    step "fetching QEMU $version (Debian source package)"
    if ! (cd "$dl" && apt-get source --download-only -q "qemu=$version"); then
        apt-get update -q >/dev/null || true
        local newest
        newest=$(newest_10_0)
        [ -n "$newest" ] || {
            echo "nuksm: no QEMU 10.0.x source package found; run 'make deps'" >&2
            exit 1
        }
        echo "nuksm: QEMU $version is not available, using $newest" >&2
        version=$newest
        (cd "$dl" && apt-get source --download-only -q "qemu=$version")
    fi
    step "unpacking (dpkg-source applies Debian's own patches)"
    dpkg-source --no-check -x "$dl"/qemu_*.dsc "$src" >/dev/null
    rm -rf "$dl"
}

if [ -n "${QEMU_SRC:-}" ]; then
    src=$(cd "$QEMU_SRC" && pwd)
    case $(cat "$src/VERSION" 2>/dev/null) in
        10.0.*) ;;
        *) echo "nuksm: QEMU_SRC=$src is not a QEMU 10.0 tree" >&2; exit 1 ;;
    esac
else
    src=$build/qemu-src
fi

stamp=$src/.nuksm-patches
want="$(series_sum) ${QEMU_SRC:-$version}"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    if [ -z "${QEMU_SRC:-}" ]; then
        fetch_debian_source "$src"
    elif [ -f "$stamp" ]; then
        echo "nuksm: $src carries an older nuksm patch series;" \
             "restore it (e.g. git checkout) and rerun" >&2
        exit 1
    fi
    step "applying qemu-patches/"
    apply_patches "$src"
    echo "$want" > "$stamp"
    rm -rf "$qbuild"
fi

step "overlaying nuksm sources into $src"
ln -sfn "$top/hw/mem/nuksm" "$src/hw/mem/nuksm"
ln -sfn "$top/qapi/nuksm.json" "$src/qapi/nuksm.json"
ln -sfn "$top/tests/qtest/nuksm-test.c" "$src/tests/qtest/nuksm-test.c"

# Only what nuksm and its tests need, plus what Debian's QEMU has that
# changes how nuksm behaves: malloc_trim() gives back the heap a merge
# burst leaves holed (hw/mem/nuksm/nuksm-scan.c); GnuTLS's SHA-256 digests
# a page 4x faster than GLib's, for capability nuksm-digests
# (hw/mem/nuksm/nuksm-digests.c).
configure_args=(
    --python="$build/venv/bin/python3"
    --target-list=x86_64-softmmu
    --without-default-features
    --enable-kvm --enable-tcg --enable-numa --enable-malloc-trim
    --enable-gnutls
    --disable-docs --disable-install-blobs --disable-download
    --enable-werror
)
configured=$qbuild/.nuksm-configure
if [ "$(cat "$configured" 2>/dev/null)" != "${configure_args[*]}" ]; then
    step "configuring QEMU in $qbuild"
    rm -rf "$qbuild"
    mkdir -p "$qbuild"
    (cd "$qbuild" && "$src/configure" "${configure_args[@]}" \
        > configure.log 2>&1) || {
        tail -n 30 "$qbuild/configure.log" >&2
        exit 1
    }
    echo "${configure_args[*]}" > "$configured"
fi

step "building QEMU (progress every 5%)"
# ninja's own progress is one line per step; keep the log readable.
# pipefail makes a failed build fail the script.
ninja -C "$qbuild" qemu-system-x86_64 tests/qtest/nuksm-test 2>&1 | awk '
    /^\[[0-9]+\/[0-9]+\]/ {
        split(substr($1, 2), n, "/"); pct = int(100 * n[1] / n[2])
        if (pct >= next_pct) { printf "    %3d%% (%s)\n", pct, $1; fflush(); next_pct = pct - pct % 5 + 5 }
        next
    }
    { print; fflush() }'

step "building option ROMs (linuxboot_dma.bin for -kernel)"
make -s -C "$qbuild/pc-bios/optionrom" >/dev/null

# Run from its build tree, QEMU looks for firmware in qemu-bundle's data
# directory: link Debian's SeaBIOS and iPXE NIC ROMs and the option ROMs
# built here into it.
datadir=$qbuild/qemu-bundle/usr/local/share/qemu
mkdir -p "$datadir"
ln -sf /usr/share/seabios/*.bin /usr/lib/ipxe/qemu/*.rom \
    "$qbuild"/pc-bios/optionrom/*.bin "$datadir/"

mkdir -p "$build/bin"
ln -sf "$qbuild/qemu-system-x86_64" "$build/bin/qemu-system-x86_64"
echo "nuksm: $build/bin/qemu-system-x86_64 ready"
