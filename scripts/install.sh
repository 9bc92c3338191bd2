#!/usr/bin/env bash
# Install what make built (make install): nuksmd, nuksmctl, the patched
# QEMU in a tree of its own, the systemd units, a sysctl.d file raising
# vm.max_map_count, a configuration file, Prometheus alert rules and a
# Grafana dashboard, the AppArmor rules libvirt's QEMU profiles need, the
# libvirt hook and the domain XML helper behind `nuksmctl libvirt`.
#
#   PREFIX=/usr/local   where it goes (bin, sbin, lib, share under it)
#   DESTDIR=            staging root, prepended to every path (packaging)
#   APPARMOR_DIR=/etc/apparmor.d   where AppArmor reads its profiles
#   LIBVIRT_HOOKS_DIR=/etc/libvirt/hooks   where libvirtd finds hooks
#
# The QEMU is $PREFIX/lib/nuksm/qemu/bin/qemu-system-x86_64 with its
# firmware in $PREFIX/lib/nuksm/qemu/share/qemu (QEMU finds it relative
# to itself), linked as $PREFIX/bin/nuksm-qemu-system-x86_64: Debian's
# own qemu-system-x86_64 and /usr/share/qemu stay untouched.
#
# SPDX-License-Identifier: GPL-2.0-or-later
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${BUILD:-$top/build}
prefix=${PREFIX:-/usr/local}
destdir=${DESTDIR:-}

case $prefix in
    /*) ;;
    *) echo "install: PREFIX must be an absolute path, got '$prefix'" >&2
       exit 2 ;;
esac
# /usr's configuration lives in /etc, any other prefix's under it.
if [ "$prefix" = /usr ]; then
    sysconfdir=/etc
else
    sysconfdir=$prefix/etc
fi
bindir=$prefix/bin
sbindir=$prefix/sbin
docdir=$prefix/share/doc/nuksm
monitoringdir=$prefix/share/nuksm/monitoring
qemudir=$prefix/lib/nuksm/qemu
unitdir=$prefix/lib/systemd/system
apparmordir=${APPARMOR_DIR:-/etc/apparmor.d}
hooksdir=${LIBVIRT_HOOKS_DIR:-/etc/libvirt/hooks}

step() { printf '==> %s\n' "$*"; }

step "installing nuksmd, nuksmctl and nuksm-libvirt into $destdir$prefix"
"$build/venv/bin/meson" configure "$build/meson" -Dprefix="$prefix" \
    >/dev/null
"$build/venv/bin/meson" install -C "$build/meson" --quiet \
    ${destdir:+--destdir "$destdir"}

step "installing QEMU into $destdir$qemudir"
install -D -m 0755 "$build/qemu/qemu-system-x86_64" \
    "$destdir$qemudir/bin/qemu-system-x86_64"
# The firmware and keymaps the build links into its data directory, as
# files (links to what the build did not make are left out).
install -d "$destdir$qemudir/share/qemu"
for f in "$build/qemu/qemu-bundle/usr/local/share/qemu"/*; do
    if [ -e "$f" ]; then
        cp -RL --no-preserve=mode,ownership "$f" "$destdir$qemudir/share/qemu/"
    fi
done
install -d "$destdir$bindir"
ln -sfn "../lib/nuksm/qemu/bin/qemu-system-x86_64" \
    "$destdir$bindir/nuksm-qemu-system-x86_64"

step "installing systemd units into $destdir$unitdir"
for unit in nuksmd.service nuksmd.socket; do
    install -d "$destdir$unitdir"
    sed -e "s|@sbindir@|$sbindir|g" -e "s|@sysconfdir@|$sysconfdir|g" \
        -e "s|@docdir@|$docdir|g" "$top/systemd/$unit.in" \
        > "$destdir$unitdir/$unit"
    chmod 0644 "$destdir$unitdir/$unit"
done

step "installing $destdir$prefix/lib/sysctl.d/60-nuksm.conf"
install -D -m 0644 "$top/systemd/60-nuksm.conf" \
    "$destdir$prefix/lib/sysctl.d/60-nuksm.conf"
echo "    it raises vm.max_map_count from the next boot; 'sysctl --system'" \
     "applies it now"

step "installing $destdir$sysconfdir/nuksm/nuksmd.conf and the docs"
install -d "$destdir$sysconfdir/nuksm"
# An edited configuration stays; the shipped one lands beside it.
if [ -e "$destdir$sysconfdir/nuksm/nuksmd.conf" ]; then
    install -m 0644 "$top/systemd/nuksmd.conf" \
        "$destdir$sysconfdir/nuksm/nuksmd.conf.dist"
else
    install -m 0644 "$top/systemd/nuksmd.conf" \
        "$destdir$sysconfdir/nuksm/nuksmd.conf"
fi
install -d "$destdir$docdir"
install -m 0644 "$top"/docs/*.rst "$top/README.rst" "$destdir$docdir/"

step "installing the alert rules and the Grafana dashboard into" \
     "$destdir$monitoringdir"
install -d "$destdir$monitoringdir"
install -m 0644 "$top/monitoring/nuksm.rules.yml" \
    "$top/monitoring/nuksm-grafana.json" "$destdir$monitoringdir/"

step "installing AppArmor rules into $destdir$apparmordir"
install -d "$destdir$apparmordir/abstractions"
sed -e "s|@qemudir@|$qemudir|g" "$top/apparmor/nuksm-qemu.in" \
    > "$destdir$apparmordir/abstractions/nuksm-qemu"
chmod 0644 "$destdir$apparmordir/abstractions/nuksm-qemu"
# Debian's libvirt-qemu abstraction includes this file, the admin's own:
# add one line to it, once.
local_rules=$destdir$apparmordir/local/abstractions/libvirt-qemu
include_line='include <abstractions/nuksm-qemu>'
if [ -e "$destdir$apparmordir/abstractions/libvirt-qemu" ]; then
    install -d "$(dirname "$local_rules")"
    touch "$local_rules"
    if ! grep -qxF "$include_line" "$local_rules"; then
        printf '# nuksm (make install)\n%s\n' "$include_line" \
            >> "$local_rules"
    fi
    echo "    domains started from now on get the rules (running ones at" \
         "their next start)"
else
    echo "    libvirt's AppArmor abstraction is not installed: add" \
         "'$include_line' to its local rules once it is"
fi

step "installing the libvirt hook into $destdir$hooksdir/qemu.d"
install -D -m 0755 "$top/libvirt-hooks/qemu.d/nuksm" \
    "$destdir$hooksdir/qemu.d/nuksm"
echo "    libvirtd reads its hooks when it starts: restart it once" \
     "(systemctl restart libvirtd)"
