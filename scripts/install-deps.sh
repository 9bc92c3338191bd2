#!/usr/bin/env bash
# Install what nuksm needs on Debian 12: apt packages (and a deb-src entry
# for Debian 13 "trixie", whose QEMU 10.0 source package we build), then a
# Python virtualenv in $BUILD/venv (Debian's Python refuses system-wide pip
# installs, PEP 668).
#
# SPDX-License-Identifier: GPL-2.0-or-later
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${BUILD:-$top/build}
sources=/etc/apt/sources.list.d/nuksm-trixie-src.sources

step() { printf '\n==> %s\n' "$*"; }

mapfile -t packages < <(grep -Ev '^\s*(#|$)' "$here/debian-packages.txt")

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
        missing+=("$p")
done

need_src=0
[ -f "$sources" ] || need_src=1

if [ ${#missing[@]} -gt 0 ] || [ $need_src = 1 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "nuksm: missing Debian packages: ${missing[*]:-}" >&2
        [ $need_src = 1 ] && echo "nuksm: and the trixie deb-src entry" >&2
        echo "nuksm: run 'make deps' as root (or with sudo) once" >&2
        exit 1
    fi
    if [ $need_src = 1 ]; then
        step "adding deb-src entry for Debian trixie (QEMU 10.0 source)"
        cat > "$sources" <<'SRC'
# Added by nuksm: source packages only, so no binary package is upgraded.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
    step "apt-get update"
    apt-get update -q
    if [ ${#missing[@]} -gt 0 ]; then
        step "installing ${#missing[@]} Debian packages: ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${missing[@]}"
    fi
else
    echo "nuksm: Debian packages present"
fi

venv=$build/venv
stamp=$venv/.nuksm-requirements
if ! cmp -s "$top/requirements.txt" "$stamp" 2>/dev/null; then
    step "creating Python virtualenv $venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        -r "$top/requirements.txt"
    cp "$top/requirements.txt" "$stamp"
else
    echo "nuksm: Python virtualenv up to date ($venv)"
fi
