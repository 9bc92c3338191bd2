# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksmctl against a real nuksmd, and nuksmd's own options."""

import grp
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

import harness
from harness import (POLICY_NAMES, ctl, ctl_json, ctl_ok, run_nuksmd,
                     wait_until)


def host_nodes():
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    return len(nodes) or 1


def agent_version():
    out = run_nuksmd("--version")
    assert out.returncode == 0
    name, version = out.stdout.split()
    assert name == "nuksmd"
    return version


def status_fields(text):
    """The 'key: value' lines of `nuksmctl status`, nodes excluded."""
    fields = {}
    for line in text.splitlines():
        if not line.startswith(" "):
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def vms_table(text):
    """Rows of `nuksmctl vms` as dicts keyed by the header's columns; the
    notes after them (limits, fairness) start with no digit."""
    lines = text.splitlines()
    header = lines[0].split()
    return [dict(zip(header, line.split())) for line in lines[1:]
            if line[:1].isdigit()]


def test_status(agent, qtest_vm):
    qtest_vm(agent=agent.sock).wait_state("active")
    # The VM's first read window ends within a second: its READS then
    # tells nuksmd it samples reads.
    def reading():
        fields = status_fields(ctl_ok(agent.sock, "status"))
        return fields if fields["read hotness"].startswith("1 ") else None
    fields = wait_until(reading, 30, "the VM's first READS")
    # Whether it rests yet depends on how far its passes went.
    assert fields.pop("resting VMs") in ("0", "1")
    assert fields == {
        "agent version": agent_version(),
        "policy": "global",
        "NUMA nodes": str(host_nodes()),
        "VMs": "1",
        "read hotness": "1 of 1 VMs sample reads (minor faults)",
        "pages shared": "0",
        "pages sharing": "0",
        "pages moved": "0 (0 pending)",
        "orphan pages": "0",
        "merging": "not held back",
        "scan budget": "20% of a core, shared by the VMs",
        "run": "always: merging works",
        "store pages": "",
    }


def test_status_json(agent, qtest_vm):
    qtest_vm("vm0", agent=agent.sock).wait_state("active")
    qtest_vm("vm1", agent=agent.sock, read_samples=0).wait_state("active")
    # vm0's first read window ends within a second; vm1 samples none.
    wait_until(lambda: ctl_json(agent.sock, "status")["vms_reading"] == 1,
               30, "vm0's first READS")
    status = ctl_json(agent.sock, "status")
    assert status.pop("vms_resting") in (0, 1, 2)
    assert status == {
        "agent_version": agent_version(),
        "policy": "global",
        "scope": "host",
        "nodes": host_nodes(),
        "vms": 2,
        "vms_reading": 1,
        "pages_shared": 0,
        "pages_sharing": 0,
        "pages_moved": 0,
        "moves_pending": 0,
        "orphan_pages": 0,
        "store_pages": [0] * host_nodes(),
        "conditions": [],
        "condition_reason": "",
        "scan_budget": 0.2,
        "run": "always",
        "held": False,
        "memory_available": 0,
        "memory_stall": 0,
    }


def test_vms_lists_connected_vms(agent, qtest_vm):
    blue = qtest_vm("vm-blue", id="dedup-b", agent=agent.sock,
                    domain="blue", priority=7)
    plain = qtest_vm("vm-plain", agent=agent.sock)
    blue.wait_state("active", obj_id="dedup-b")
    plain.wait_state("active")
    # Each VM's first read window ends within a second, with a READS.
    wait_until(lambda: ctl_json(agent.sock, "status")["vms_reading"] == 2,
               30, "both VMs' first READS")

    rows = {int(r["PID"]): r for r in vms_table(ctl_ok(agent.sock, "vms"))}
    assert set(rows) == {blue.pid, plain.pid}
    # nuksmd decides the domain: "blue" is only what the VM asked for.
    assert (rows[blue.pid]["DOMAIN"], rows[blue.pid]["FROM"]) == \
        ("default", "shared")
    assert rows[blue.pid]["NAME"] == "vm-blue"
    assert rows[blue.pid]["OBJECT"] == "dedup-b"
    assert rows[blue.pid]["PRIORITY"] == "7"
    assert rows[plain.pid]["DOMAIN"] == "default"
    assert rows[plain.pid]["OBJECT"] == "dedup0"
    assert rows[plain.pid]["PRIORITY"] == "100"
    assert {r["MERGED"] for r in rows.values()} == {"0"}
    # A window of hot-window ms, twice that once both rest (their pace).
    assert {(r["READS"], r["HOT"]) for r in rows.values()} == {("0/0", "0")}
    assert {r["WINDOW"] for r in rows.values()} <= {"1000ms", "2000ms"}
    assert {r["SHARE"].split("(")[0] for r in rows.values()} <= \
        {"10%"}, rows

    listing = ctl_json(agent.sock, "vms")
    assert listing["total"] == 2
    by_pid = {vm["pid"]: vm for vm in listing["vms"]}
    # Each VM's HELLO took the agent's CPU; nothing left it unread.
    assert by_pid[blue.pid].pop("agent_cpu_seconds") > 0
    assert by_pid[blue.pid].pop("throttled_seconds") == 0
    # Its twin, once the agent's periodic look ran, can only be the other
    # VM; on one node there is nothing to plan.
    twin = by_pid[blue.pid].pop("twin")
    assert twin is None or twin["id"] == by_pid[plain.pid]["id"], twin
    assert by_pid[blue.pid].pop("plan") is None
    assert by_pid[blue.pid].pop("scheme") == "global"
    assert by_pid[blue.pid].pop("moved_to") is None
    # New, then resting: a part of the 20% budget, up to its own 10%.
    share = by_pid[blue.pid].pop("share")
    assert share["reason"] in ("new", "resting") and \
        0 < share["max_cpu"] <= 0.1, share
    assert by_pid[blue.pid].pop("read_window_ms") in (1000, 2000)
    assert set(by_pid[blue.pid].pop("scanner")) == {
        "eligible_pages", "pages_scanned", "full_scans", "zero_pages",
        "cow_breaks", "pages_volatile", "cpu_seconds"}
    # What its scanner counts, once it told the agent (VM_STATS).
    eligible = blue.nuksm("dedup-b")["eligible-pages"]
    wait_until(lambda: next(vm for vm in ctl_json(agent.sock, "vms")["vms"]
                            if vm["pid"] == blue.pid)["scanner"]
               ["eligible_pages"] == eligible > 0, 10,
               "the VM's scanner figures in the list")
    assert by_pid[blue.pid] == {
        "id": int(rows[blue.pid]["ID"]), "pid": blue.pid,
        "uid": os.getuid(),
        "domain": "default", "domain_source": "shared",
        "requested_domain": "blue", "name": "vm-blue", "object": "dedup-b",
        "priority": 7, "priority_limit": 1000, "merged_pages": 0,
        "merged_local": 0,
        "merged_remote": 0, "home": [0], "limit": None,
        "limit_reason": None, "libvirt": None,
        "uploads_read": 0, "uploads_sent": 0, "read_error": None,
        # Sampling, but no merged page, so no read of one caught yet.
        "reads_local": 0, "reads_remote": 0,
        "read_hot_regions": 0, "read_slowdown": None,
    }
    assert by_pid[plain.pid]["name"] == "vm-plain"
    assert {r["LIMIT"] for r in rows.values()} == {"-"}
    assert {r["LIBVIRT"] for r in rows.values()} == {"-"}
    assert {r["UPLOADS"] for r in rows.values()} == {"read"}
    assert listing["read_fairness"] is None


def test_vms_show_libvirt_registrations(start_agent, qtest_vm, workdir):
    """A registration of the libvirt hook names the VM whose connection
    comes from its pid; one naming another pid, or not parsing, names
    none (libvirt-hooks/qemu.d/nuksm writes them)."""
    registry = workdir / "libvirt"
    registry.mkdir()
    agent = start_agent("--libvirt-dir", registry)
    web = qtest_vm("vm-web", agent=agent.sock)
    other = qtest_vm("vm-other", agent=agent.sock)
    web.wait_state("active")
    other.wait_state("active")
    uuid = "6d1c3c2e-8a4b-4f57-9a1e-0c5d3b7e9f10"
    (registry / f"{uuid}.conf").write_text(
        f"[vm]\nname=web1\nuuid={uuid}\npid={web.pid}\n"
        "domain=tenant-a\n")
    (registry / "other.conf").write_text("[vm]\nname=x\npid=oops\n")
    (registry / "gone.conf").write_text(
        "[vm]\nname=gone\nuuid=u\npid=999999999\n")
    # Only root writes registrations: others' files name no VM.
    rogue = f"[vm]\nname=rogue\nuuid=r\npid={other.pid}\n"
    (registry / "writable.conf").write_text(rogue)
    os.chmod(registry / "writable.conf", 0o666)
    (registry / "nobodys.conf").write_text(rogue)
    os.chown(registry / "nobodys.conf", pwd.getpwnam("nobody").pw_uid, -1)

    by_pid = {vm["pid"]: vm for vm in ctl_json(agent.sock, "vms")["vms"]}
    assert by_pid[web.pid]["libvirt"] == {"name": "web1", "uuid": uuid}
    assert by_pid[other.pid]["libvirt"] is None
    rows = {int(r["PID"]): r for r in vms_table(ctl_ok(agent.sock, "vms"))}
    assert (rows[web.pid]["LIBVIRT"], rows[other.pid]["LIBVIRT"]) == \
        ("web1", "-")
    # The domain stopped: its hook removed the file.
    (registry / f"{uuid}.conf").unlink()
    assert all(vm["libvirt"] is None
               for vm in ctl_json(agent.sock, "vms")["vms"])


def test_priority_change_reaches_agent(agent, qtest_vm):
    vm = qtest_vm(agent=agent.sock, priority=10)
    vm.wait_state("active")
    vm.cmd("qom-set", path="/objects/dedup0", property="priority", value=500)
    assert vm.nuksm()["priority"] == 500
    harness.wait_until(
        lambda: ctl_json(agent.sock, "vms")["vms"][0]["priority"] == 500,
        5, "nuksmctl vms to show priority 500")


def test_policy_get_and_set(agent, qtest_vm):
    vm = qtest_vm(agent=agent.sock)
    assert vm.wait_state("active")["policy"] == "global"
    assert ctl_ok(agent.sock, "policy") == "global\n"

    assert ctl_ok(agent.sock, "policy", "fair") == "fair\n"
    assert ctl_ok(agent.sock, "policy") == "fair\n"
    assert ctl_json(agent.sock, "policy") == {"policy": "fair"}
    vm.wait_nuksm(lambda i: i["policy"] == "fair", "policy fair")
    assert vm.cmd("query-nuksm-agent")["policy"] == "fair"

    assert ctl_json(agent.sock, "policy", "priority") == {
        "policy": "priority"}
    vm.wait_nuksm(lambda i: i["policy"] == "priority", "policy priority")


def test_unknown_policy_is_refused(agent):
    result = ctl(agent.sock, "policy", "nope")
    assert result.returncode == 2
    assert "unknown policy 'nope'" in result.stderr
    assert POLICY_NAMES in result.stderr
    assert ctl_ok(agent.sock, "policy") == "global\n"


def make_stale_socket(path):
    """A socket file nobody listens on, as a killed agent leaves behind."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.bind(str(path))


@pytest.mark.parametrize("leftover", ["no-file", "stale-socket"])
def test_agent_absent(workdir, nuksmctl_bin, leftover):
    sock = workdir / "absent.sock"
    if leftover == "stale-socket":
        make_stale_socket(sock)
    result = ctl(sock, "status")
    assert result.returncode == 1
    assert f"cannot connect to nuksmd at {sock}" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("option,value,allowed", [
    ("--policy", "nope", POLICY_NAMES),
    ("--fake-numa", "0", "1..64"),
    ("--fake-numa", "65", "1..64"),
    ("--log-level", "loud", "error, warning, info, debug"),
    ("--restore-grace", "-1", "0..86400"),
    ("--restore-grace", "86401", "0..86400"),
    ("--restore-grace", "soon", "0..86400"),
    ("--cold-windows", "0", "1..255"),
    ("--cold-windows", "256", "1..255"),
    ("--replace-rate", "-5", "0..1000000 pages per second"),
    ("--replace-rate", "fast", "0..1000000 pages per second"),
    ("--forget-after", "0", "1..3600 seconds"),
    ("--forget-after", "3601", "1..3600 seconds"),
    ("--socket-group", "no-such-group", "a group whose members may connect"),
])
def test_nuksmd_rejects_bad_option(workdir, nuksmd_bin, option, value,
                                   allowed):
    sock = workdir / "bad.sock"
    result = run_nuksmd("--socket", sock, option, value)
    assert result.returncode != 0
    assert f"nuksmd: {option}: " in result.stderr
    assert f"'{value}'" in result.stderr
    assert allowed in result.stderr
    assert not sock.exists()


def test_nuksmd_rejects_unknown_argument(workdir, nuksmd_bin):
    result = run_nuksmd("--socket", workdir / "x.sock", "--bogus")
    assert result.returncode != 0
    assert "--bogus" in result.stderr


def test_second_agent_on_same_socket(agent):
    result = run_nuksmd("--socket", agent.sock)
    assert result.returncode != 0
    assert f"already listening on {agent.sock}" in result.stderr
    assert agent.sock.exists()
    assert ctl_json(agent.sock, "status")["vms"] == 0


def test_stale_socket_is_replaced(workdir, start_agent):
    make_stale_socket(workdir / "nuksmd.sock")
    agent = start_agent()
    assert "removed stale socket" in agent.log_text()
    assert ctl_json(agent.sock, "status")["policy"] == "global"


def test_sigterm_as_soon_as_listening_stops_cleanly(workdir, shm_dir):
    """A SIGTERM as soon as the socket exists (systemd stopping a unit it
    just started) stops nuksmd cleanly: exit 0, socket removed.  The
    handler was once installed after the socket, and such a SIGTERM
    killed it about one time in five."""
    for i in range(20):
        sock = workdir / f"early{i}.sock"
        proc = subprocess.Popen([str(harness.NUKSMD), "--socket", sock,
                                 "--state-dir", shm_dir / f"early{i}",
                                 "--log-level", "warning"])
        try:
            # Not harness.wait_until(): its 50 ms would miss the moment.
            deadline = time.monotonic() + 10
            while not sock.exists():
                assert time.monotonic() < deadline and proc.poll() is None, \
                    f"nuksmd did not create {sock}"
                time.sleep(0.0005)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
            assert not sock.exists()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_socket_group(start_agent, workdir):
    """--socket-group (socket-group=): the socket is 0660 in that group,
    for hosts where systemd's socket does not set it."""
    group = grp.getgrnam("nogroup")     # Debian's base-passwd has it
    agent = start_agent("--socket-group", group.gr_name)
    st = agent.sock.stat()
    assert (st.st_gid, stat.S_IMODE(st.st_mode)) == (group.gr_gid, 0o660)


def write_config(path, text):
    path.write_text(text)
    return path


def test_config_file_and_overrides(workdir, start_agent):
    sock = workdir / "cfg.sock"
    config = write_config(workdir / "nuksmd.conf", (
        "[nuksmd]\n"
        f"socket={sock}\n"
        "policy=local\n"
        "fake-numa=3\n"
        "log-level=warning\n"))

    agent = start_agent(name="cfg", args=["--config", config])
    status = ctl_json(sock, "status")
    assert (status["policy"], status["nodes"]) == ("local", 3)
    agent.stop()
    assert "listening on" not in agent.log_text()  # log-level=warning

    agent = start_agent(name="cfg", args=[
        "--config", config, "--policy", "fair", "--fake-numa", "2",
        "--log-level", "info"])
    status = ctl_json(sock, "status")
    assert (status["policy"], status["nodes"]) == ("fair", 2)
    assert f"listening on {sock}" in agent.log_text()


@pytest.mark.parametrize("text,expected", [
    ("[nuksmd]\ncolour=blue\n", "unknown key 'colour'"),
    ("[other]\npolicy=fair\n", "has no [nuksmd] group"),
    ("[nuksmd]\npolicy=nope\n", "nuksmd.conf: policy: unknown policy"),
    ("[nuksmd]\nfake-numa=99\n", "nuksmd.conf: fake-numa: invalid node"),
    ("[nuksmd]\nrestore-grace=x\n",
     "nuksmd.conf: restore-grace: invalid grace period"),
    ("[nuksmd]\ncold-windows=0\n",
     "nuksmd.conf: cold-windows: invalid window count"),
    ("[nuksmd]\nreplace-rate=x\n",
     "nuksmd.conf: replace-rate: invalid rate"),
    ("[nuksmd]\nstate-dir=\n",
     "nuksmd.conf: state-dir: state directory must not be empty"),
    ("[nuksmd]\nlibvirt-dir=\n",
     "nuksmd.conf: libvirt-dir: libvirt registry directory must not be "
     "empty"),
    ("[nuksmd]\ncolocate-domain-room=0\n",
     "nuksmd.conf: colocate-domain-room: invalid share of a node's room "
     "'0' (allowed: 1..100%)"),
    ("[nuksmd]\nscan-budget=5 cores\n",
     "nuksmd.conf: scan-budget: invalid scan budget '5 cores' (allowed: 0 "
     "for none, or 0.001%..102400% of one core)"),
    ("[nuksmd]\nrun=sometimes\n",
     "nuksmd.conf: run: unknown run mode 'sometimes' (allowed: always, "
     "pressure, off)"),
    ("[nuksmd]\npressure-available=100%\n",
     "nuksmd.conf: pressure-available: invalid share of memory '100' "
     "(allowed: 1..99%)"),
    ("not a key file\n", "--config: cannot load"),
])
def test_config_errors(workdir, nuksmd_bin, text, expected):
    config = write_config(workdir / "nuksmd.conf", text)
    result = run_nuksmd("--config", config, "--socket", workdir / "c.sock")
    assert result.returncode != 0
    assert expected in result.stderr


def test_missing_config_file(workdir, nuksmd_bin):
    missing = workdir / "missing.conf"
    result = run_nuksmd("--config", missing)
    assert result.returncode != 0
    assert f"--config: cannot load {missing}" in result.stderr


def test_fake_numa_nodes_in_qmp(start_agent, qtest_vm):
    agent = start_agent("--fake-numa", "4")
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")
    info = vm.cmd("query-nuksm-agent")
    assert info["store-pages-per-node"] == [
        {"node": n, "pages": 0} for n in range(4)]
    assert info["vms"] == 1
    assert info["version"] == agent_version()
    assert ctl_json(agent.sock, "status")["store_pages"] == [0, 0, 0, 0]


@pytest.mark.parametrize("kind", ["stream", "two sockets"])
def test_socket_activation_takes_one_seqpacket_socket(workdir, shm_dir,
                                                      nuksmd_bin, kind):
    """Socket activation with anything but one ListenSequentialPacket=
    socket: nuksmd says what it takes and exits 1."""
    if not shutil.which("systemd-socket-activate"):
        pytest.skip("systemd-socket-activate is missing")
    sock = workdir / "nuksmd.sock"
    listen = ["-l", str(sock)]
    if kind == "two sockets":
        listen = ["--seqpacket", *listen, "-l", str(workdir / "second.sock")]
    proc = subprocess.Popen(
        ["systemd-socket-activate", *listen, str(nuksmd_bin),
         "--state-dir", str(shm_dir / "state")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_until(sock.exists, 10, "the activation socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM if kind == "stream"
                       else socket.SOCK_SEQPACKET) as s:
        s.connect(str(sock))
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 1, out
    expected = ("not a listening unix seqpacket socket" if kind == "stream"
                else "systemd passed 2 sockets: nuksmd takes exactly one")
    assert expected in out
