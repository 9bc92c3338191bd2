# SPDX-License-Identifier: GPL-2.0-or-later
"""QEMU as an unprivileged user, as libvirt runs it.

Debian, like most distributions, sets vm.unprivileged_userfaultfd=0 and
keeps /dev/userfaultfd to root, so such a QEMU may not create the
userfaultfd that nuksm merges under.  The agent hands a descriptor of
/dev/userfaultfd over with its HELLO_ACK (docs/security.rst).  A QEMU
that gets none says why it cannot merge, once, and scans nothing.
"""

import os
import pwd
from pathlib import Path

import pytest

import harness
from harness import ctl_json, ctl_ok, wait_until

USER = "nobody"


@pytest.fixture(autouse=True)
def userfaultfd_restricted():
    value = Path("/proc/sys/vm/unprivileged_userfaultfd").read_text().strip()
    if value != "0":
        pytest.skip(f"vm.unprivileged_userfaultfd={value} on this host: "
                    "any QEMU may create a userfaultfd, so the agent's "
                    "handover is not what makes it merge (Debian's "
                    "default is 0)")


@pytest.fixture
def shared_dirs(workdir, shm_dir):
    """Let USER create its sockets and, as an agent, its store."""
    os.chmod(workdir, 0o1777)
    os.chmod(shm_dir, 0o1777)


def let_user_connect(agent):
    """The socket's group made USER's, as docs/operations.rst says."""
    os.chown(agent.sock, -1, pwd.getpwnam(USER).pw_gid)


def qemu(installed):
    """The installed QEMU: USER can run it wherever the checkout is."""
    return installed / "bin/nuksm-qemu-system-x86_64"


def credentials(pid):
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status)
    return int(fields["Uid"].split()[0]), int(fields["CapEff"], 16)


def test_unprivileged_qemu_merges(shared_dirs, installed, start_agent,
                                  qtest_vm):
    """Two QEMUs as USER, without any capability, merge with the
    userfaultfd they make from the agent's /dev/userfaultfd, and every
    page reads back; reads of the merged pages are sampled through it."""
    agent = start_agent(binary=installed / "sbin/nuksmd")
    let_user_connect(agent)
    vms = [qtest_vm(name, user=USER, binary=qemu(installed),
                    agent=agent.sock, max_cpu=100)
           for name in ("vm0", "vm1")]
    for vm in vms:
        assert credentials(vm.pid) == (pwd.getpwnam(USER).pw_uid, 0)
        vm.wait_state("active")
    harness.merge_identical(vms, seed=21)

    # Minor faults on that userfaultfd catch the reads of merged pages.
    vms[0].cmd("qom-set", path="/objects/dedup0", property="hot-window",
               value=200)
    q = harness.Qtest(vms[0].qtest_path)

    def reads_caught():
        harness.read_big(q, 64 << 20, 4 << 20)
        reads = vms[0].nuksm()["hotness"]["reads"]
        assert reads["source"] == "minor-faults", reads
        return reads["reads"] >= 4
    wait_until(reads_caught, 60, "vm0's reads of merged pages to be caught")
    q.close()


def test_qemu_without_userfaultfd_says_so(shared_dirs, installed,
                                          start_agent, qtest_vm):
    """An agent run as USER cannot open /dev/userfaultfd, so a QEMU as
    USER cannot merge: it is limited by userfaultfd with the reason, in
    query-nuksm, HMP and one event and one log line however often it
    reconnects, and it scans nothing.  Once a root agent takes over, it
    merges."""
    agent = start_agent(user=USER, binary=installed / "sbin/nuksmd")
    assert "cannot open /dev/userfaultfd" in agent.log_text()
    let_user_connect(agent)
    # Enabled once QMP listens, so that the test sees the event.
    vm = qtest_vm(user=USER, binary=qemu(installed), agent=agent.sock,
                  max_cpu=100, enabled="off")
    vm.wait_state("disabled")
    vm.cmd("qom-set", path="/objects/dedup0", property="enabled", value=True)
    info = vm.wait_state("limited")
    assert info["limit"] == "userfaultfd"
    assert "vm.unprivileged_userfaultfd=0" in info["limit-reason"]
    assert "agent handed over no /dev/userfaultfd" in info["limit-reason"]
    event = vm.wait_event("NUKSM_MERGING_LIMITED")
    assert event["data"]["limit"] == "userfaultfd"
    assert "limited by userfaultfd" in vm.hmp("info nuksm")
    wait_until(lambda: ctl_json(agent.sock, "vms")["vms"][0]["limit"] ==
               "userfaultfd", 10, "the agent to learn the VM's limit")
    entry = ctl_json(agent.sock, "vms")["vms"][0]
    assert "vm.unprivileged_userfaultfd=0" in entry["limit_reason"]
    table = ctl_ok(agent.sock, "vms")
    assert "limited by userfaultfd: this process may not" in table
    assert "merging limited by userfaultfd" in agent.log_text()

    # Reconnecting tries again, once, and changes nothing.
    agent.kill()
    vm.wait_state("disconnected")
    agent.start()
    let_user_connect(agent)
    vm.wait_state("limited")
    info = vm.nuksm()
    assert info["pages-scanned"] == 0 and info["full-scans"] == 0
    assert vm.log_text().count("merging limited by userfaultfd") == 1

    agent.kill()
    for path in [agent.state_dir, *agent.state_dir.iterdir()]:
        os.chown(path, 0, 0)  # root's agent wants its state root's
    agent.user = None
    agent.start()
    let_user_connect(agent)
    event = vm.wait_event("NUKSM_MERGING_RESUMED", timeout=30)
    assert event["data"]["limit"] == "userfaultfd"
    vm.wait_nuksm(lambda i: i["state"] == "active" and i["full-scans"] > 0,
                  "scanning to start", timeout=30)
    assert ctl_json(agent.sock, "vms")["vms"][0]["limit"] is None
