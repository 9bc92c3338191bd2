# SPDX-License-Identifier: GPL-2.0-or-later
"""make install (scripts/install.sh), and nuksm run from what it installed:
the units pass systemd-analyze verify, nuksmd is socket-activated with the
installed configuration, and two installed QEMUs as an unprivileged user
merge through it."""

import configparser
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

import harness
from harness import wait_until

USER = "nobody"


def unit(path):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(path)
    return parser


def test_install_layout(installed):
    assert os.access(installed / "sbin/nuksmd", os.X_OK)
    assert os.access(installed / "bin/nuksmctl", os.X_OK)
    qemu = installed / "bin/nuksm-qemu-system-x86_64"
    assert qemu.resolve() == installed / "lib/nuksm/qemu/bin/qemu-system-x86_64"
    assert (installed / "lib/nuksm/qemu/share/qemu/bios-256k.bin").is_file()
    assert (installed / "etc/nuksm/nuksmd.conf").is_file()
    assert os.access(installed / "lib/nuksm/nuksm-libvirt", os.X_OK)
    assert os.access(installed.parent / "libvirt-hooks/qemu.d/nuksm",
                     os.X_OK)
    # Monitoring: the alert rules and the Grafana dashboard, and the unit
    # may write node_exporter's textfile directory.
    for name in ("nuksm.rules.yml", "nuksm-grafana.json"):
        assert (installed / "share/nuksm/monitoring" / name).is_file()
    service = unit(installed / "lib/systemd/system/nuksmd.service")
    assert service["Service"]["ReadWritePaths"] == \
        "-/var/lib/prometheus/node-exporter"
    assert service["Service"]["ExecStart"] == \
        f"{installed}/sbin/nuksmd --config {installed}/etc/nuksm/nuksmd.conf"
    assert "@" not in (installed / "lib/systemd/system/nuksmd.service") \
        .read_text().replace("file://", "")


def test_install_into_destdir_leaves_debian_alone(tmp_path):
    """PREFIX=/usr into a DESTDIR, as a package would: configuration in
    /etc, nothing where Debian's QEMU lives; an edited nuksmd.conf stays
    on a second install."""
    harness.install("/usr", tmp_path)
    conf = tmp_path / "etc/nuksm/nuksmd.conf"
    assert conf.is_file()
    service = unit(tmp_path / "usr/lib/systemd/system/nuksmd.service")
    assert service["Service"]["ExecStart"] == \
        "/usr/sbin/nuksmd --config /etc/nuksm/nuksmd.conf"
    assert not (tmp_path / "usr/bin/qemu-system-x86_64").exists()
    assert not (tmp_path / "usr/share/qemu").exists()
    assert os.access(tmp_path / "etc/libvirt/hooks/qemu.d/nuksm", os.X_OK)
    # Where systemd-sysctl and `sysctl --system` read vendor settings.
    sysctl = (tmp_path / "usr/lib/sysctl.d/60-nuksm.conf").read_text()
    assert re.search(r"^vm\.max_map_count = 1048576$", sysctl, re.M)
    conf.write_text("[nuksmd]\npolicy=fair\n")
    harness.install("/usr", tmp_path)
    assert conf.read_text() == "[nuksmd]\npolicy=fair\n"
    assert (tmp_path / "etc/nuksm/nuksmd.conf.dist").is_file()


def test_apparmor_rules_parse(tmp_path):
    """The rules land in AppArmor's place, are included once from
    libvirt's local QEMU rules, and Debian's whole libvirt-qemu
    abstraction with them parses."""
    if not shutil.which("apparmor_parser"):
        pytest.skip("apparmor_parser is missing (package apparmor)")
    host = Path("/etc/apparmor.d")
    if not (host / "abstractions/libvirt-qemu").exists():
        pytest.skip("libvirt's AppArmor abstraction is not installed "
                    "(libvirt-daemon-system)")
    staged = tmp_path / "etc/apparmor.d"
    shutil.copytree(host / "abstractions", staged / "abstractions")
    shutil.copytree(host / "local", staged / "local")
    for _ in range(2):
        harness.install("/usr", tmp_path)
    local = (staged / "local/abstractions/libvirt-qemu").read_text()
    assert local.count("include <abstractions/nuksm-qemu>") == 1
    rules = (staged / "abstractions/nuksm-qemu").read_text()
    assert "/usr/lib/nuksm/qemu/share/qemu/** r," in rules
    profile = tmp_path / "profile"
    profile.write_text("include <tunables/global>\n"
                       "profile nuksm-test {\n"
                       "  include <abstractions/libvirt-qemu>\n"
                       "}\n")
    result = subprocess.run(["apparmor_parser", "--skip-kernel-load",
                             "--skip-cache", "-I", str(staged),
                             "-I", str(host), str(profile)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_units_verify(installed):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is missing: cannot verify the units")
    units = [installed / "lib/systemd/system" / u
             for u in ("nuksmd.service", "nuksmd.socket")]
    result = subprocess.run(["systemd-analyze", "verify", *map(str, units)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), \
        result.stderr


@pytest.fixture
def activated_agent(installed, workdir, shm_dir):
    """The installed nuksmd, started by systemd-socket-activate on the
    installed socket unit's settings, with the installed configuration."""
    if not shutil.which("systemd-socket-activate"):
        pytest.skip("systemd-socket-activate is missing: cannot activate "
                    "nuksmd the way nuksmd.socket does")
    socket_unit = unit(installed / "lib/systemd/system/nuksmd.socket")["Socket"]
    sock = workdir / "nuksmd.sock"
    log = workdir / "nuksmd.log"
    os.chmod(workdir, 0o1777)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["systemd-socket-activate", "--seqpacket", "-l", str(sock),
             str(installed / "sbin/nuksmd"), "--config",
             str(installed / "etc/nuksm/nuksmd.conf"),
             "--state-dir", str(shm_dir / "state")],
            stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=harness.die_with_parent)
    wait_until(lambda: sock.exists(), 10, "the activation socket")
    os.chmod(sock, int(socket_unit["SocketMode"], 8))
    os.chown(sock, -1, pwd.getpwnam(USER).pw_gid)  # stands for SocketGroup
    yield sock, proc, log
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0, harness.read_log(log)
    assert sock.exists(), "nuksmd removed systemd's socket"


def test_installed_programs_merge(installed, activated_agent, qtest_vm):
    sock, proc, log = activated_agent
    qemu = installed / "bin/nuksm-qemu-system-x86_64"
    vms = [qtest_vm(name, user=USER, binary=qemu, agent=sock, max_cpu=100)
           for name in ("vm0", "vm1")]
    for vm in vms:
        vm.wait_state("active")
    assert "listening on " + str(sock) in harness.read_log(log)
    pages = harness.merge_identical(vms, seed=31)
    status = subprocess.run([installed / "bin/nuksmctl", "--socket", sock,
                             "--json", "status"], capture_output=True,
                            text=True, timeout=30, check=True)
    assert json.loads(status.stdout)["pages_sharing"] >= pages
