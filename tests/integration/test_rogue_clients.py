# SPDX-License-Identifier: GPL-2.0-or-later
"""Misbehaving clients on nuksmd's socket, spoken to with raw datagrams.

Each rogue must be answered with an ERROR naming the problem and then be
disconnected, while a VM connected to the same agent stays active and
nuksmctl keeps working.
"""

import os
import signal
import subprocess

import pytest

import harness
from harness import (ERR_BAD_MESSAGE, ERR_HANDSHAKE, ERR_VERSION, HELLO_ACK,
                     INFO, MSG_GET_INFO, MSG_GET_POLICY, MSG_HELLO,
                     MSG_HELLO_ACK, MSG_INFO, MSG_MAX, MSG_POLICY,
                     MSG_SET_POLICY, MSG_SET_PRIORITY, POLICY, PRIORITY,
                     PROTO_VERSION, ROLE_VM, RawClient, VmClient, cstr,
                     ctl_json, hello, pack)


@pytest.fixture
def served_vm(agent, qtest_vm):
    """A qtest VM connected to @agent, as the bystander of every rogue."""
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")
    return vm


@pytest.fixture
def raw(agent):
    client = RawClient(agent.sock)
    yield client
    client.close()


def handshake(client):
    reply = client.request(MSG_HELLO, 1, hello())
    assert reply.type == MSG_HELLO_ACK
    return reply


def assert_bystanders_fine(agent, vm):
    assert vm.nuksm()["state"] == "active"
    assert vm.cmd("query-nuksm-agent")["vms"] == 1
    status = ctl_json(agent.sock, "status")
    assert status["vms"] == 1
    assert [v["pid"] for v in ctl_json(agent.sock, "vms")["vms"]] == [vm.pid]
    assert agent.running


def test_well_behaved_raw_client(agent, served_vm, raw):
    """The datagram layouts used by the rogues below are the real ones."""
    ack = handshake(raw)
    version, client_id, policy, nodes, agent_version, _, _, _, admin, _ = \
        HELLO_ACK.unpack(ack.payload)
    assert version == PROTO_VERSION
    assert client_id >= 2  # the VM was client 1
    assert harness.POLICIES[policy] == "global"
    assert nodes >= 1
    assert cstr(agent_version) != ""
    assert admin == 1  # root's control client

    info = raw.request(MSG_GET_INFO, 2)
    assert info.type == MSG_INFO
    fields = INFO.unpack(info.payload)
    assert fields[2] == 1  # vms

    reply = raw.request(MSG_SET_POLICY, 3, POLICY.pack(3))
    assert (reply.type, POLICY.unpack(reply.payload)) == (MSG_POLICY, (3,))
    served_vm.wait_nuksm(lambda i: i["policy"] == "fair", "policy fair")
    reply = raw.request(MSG_GET_POLICY, 4)
    assert POLICY.unpack(reply.payload) == (3,)


VALID_HELLO = pack(MSG_HELLO, 7, hello())

ROGUES = {
    # name: (handshake first?, datagram, expected ERROR code, text in the
    #        ERROR message, seq the ERROR echoes)
    "garbage": (False, b"\xde\xad\xbe\xef" * 16, ERR_BAD_MESSAGE,
                "bad magic", 0),
    "truncated-header": (False, VALID_HELLO[:10], ERR_BAD_MESSAGE,
                         "shorter than its header", 0),
    "oversized": (False, VALID_HELLO + b"\0" * (MSG_MAX + 100),
                  ERR_BAD_MESSAGE, "exceeds the 65536-byte limit", 7),
    "wrong-magic": (False, pack(MSG_HELLO, 7, hello(), magic=0x12345678),
                    ERR_BAD_MESSAGE, "bad magic", 0),
    "wrong-payload-length": (False, pack(MSG_HELLO, 7, hello(),
                                         length=HELLO_ACK.size),
                             ERR_BAD_MESSAGE, "payload length", 7),
    "short-payload": (False, pack(MSG_HELLO, 7, hello()[:100]),
                      ERR_BAD_MESSAGE, "wrong payload size", 7),
    "request-before-hello": (False, pack(MSG_GET_INFO, 7), ERR_HANDSHAKE,
                             "GET_INFO before HELLO", 7),
    "second-hello": (True, VALID_HELLO, ERR_HANDSHAKE, "second HELLO", 7),
    "policy-out-of-range": (True, pack(MSG_SET_POLICY, 7,
                                       POLICY.pack(len(harness.POLICIES))),
                            ERR_BAD_MESSAGE, "unknown policy", 7),
    "agent-only-message": (True, pack(MSG_POLICY, 7, POLICY.pack(1)),
                           ERR_BAD_MESSAGE, "only nuksmd sends it", 7),
    "unknown-type": (True, pack(99, 7), ERR_BAD_MESSAGE,
                     "unknown message type", 7),
    "unterminated-string": (False, pack(MSG_HELLO, 7, hello(
                                domain=b"d" * 64)),
                            ERR_BAD_MESSAGE, "unterminated string", 7),
    "vm-priority-out-of-range": (False, pack(MSG_HELLO, 7, hello(
                                     role=ROLE_VM, priority=1001,
                                     domain=b"default")),
                                 ERR_BAD_MESSAGE, "priority out of range", 7),
    "vm-without-domain": (False, pack(MSG_HELLO, 7, hello(
                              role=ROLE_VM, priority=100)),
                          ERR_BAD_MESSAGE, "empty domain", 7),
    "priority-from-control-client": (True, pack(MSG_SET_PRIORITY, 7,
                                                PRIORITY.pack(5)),
                                     ERR_BAD_MESSAGE,
                                     "SET_PRIORITY from a control client", 7),
}


@pytest.mark.parametrize("name", ROGUES)
def test_rogue_is_disconnected(agent, served_vm, raw, name):
    after_hello, datagram, code, text, seq = ROGUES[name]
    if after_hello:
        handshake(raw)
    raw.send(datagram)

    replies = raw.messages_until_eof()
    assert len(replies) == 1, f"expected one ERROR, got {len(replies)}"
    assert replies[0].error()[0] == code
    assert text in replies[0].error()[1]
    assert replies[0].seq == seq
    assert_bystanders_fine(agent, served_vm)
    assert ctl_json(agent.sock, "policy") == {"policy": "global"}


@pytest.mark.parametrize("version", [0, PROTO_VERSION + 1, 0xFFFFFFFF])
def test_wrong_protocol_version(agent, served_vm, raw, version):
    raw.send(pack(MSG_HELLO, 9, hello(version=version)))

    replies = raw.messages_until_eof()
    assert len(replies) == 1
    code, message = replies[0].error()
    assert code == ERR_VERSION
    assert f"nuksmd speaks {PROTO_VERSION}" in message
    assert f"client speaks {version}" in message
    assert_bystanders_fine(agent, served_vm)


def test_raw_vm_client_comes_and_goes(agent, served_vm, raw):
    """A VM-role client counts while connected and is forgotten at EOF."""
    reply = raw.request(MSG_HELLO, 1, hello(role=ROLE_VM, priority=3,
                                            domain=b"raw", object_id=b"r0"))
    assert reply.type == MSG_HELLO_ACK
    listing = ctl_json(agent.sock, "vms")
    assert listing["total"] == 2
    [entry] = [v for v in listing["vms"] if v["object"] == "r0"]
    assert (entry["domain"], entry["requested_domain"], entry["priority"]) \
        == ("default", "raw", 3)

    raw.send(pack(MSG_SET_PRIORITY, 2, PRIORITY.pack(9)))
    harness.wait_until(
        lambda: 9 in [v["priority"] for v in ctl_json(agent.sock, "vms")
                      ["vms"]], 5, "priority 9 to show up")

    raw.close()
    harness.wait_until(lambda: ctl_json(agent.sock, "status")["vms"] == 1,
                       5, "the agent to forget the raw VM")
    assert_bystanders_fine(agent, served_vm)


def test_many_rogues_in_a_row(agent, served_vm):
    """The agent keeps serving after a burst of bad connections."""
    for n in range(50):
        client = RawClient(agent.sock)
        client.send(b"x" * (n + 1))
        assert client.messages_until_eof()[0].error()[0] == ERR_BAD_MESSAGE
        client.close()
    assert_bystanders_fine(agent, served_vm)


def test_silent_client_does_not_block_others(agent, served_vm, raw):
    """A client that connects and says nothing holds no one up."""
    assert ctl_json(agent.sock, "status")["vms"] == 1
    assert_bystanders_fine(agent, served_vm)


# ------------------------------------------------ squatting on handshakes

# Mirrors agent/server/clients.h.
CLIENT_HANDSHAKES_PER_UID = 16
CLIENTS_MAX = 1024
CLIENT_CONTROLS_PER_UID = 16

SQUATTER = r"""
import os, select, socket, sys, time
path, workers, each = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + 120    # bounded, whatever the test does
stop_r, stop_w = os.pipe()           # EOF: stop

def squat(signal_w, count_w):
    # Hold @each connections that never speak; open another for each the
    # agent closes.  One byte on @signal_w at the first closed, the count
    # of closed ones on @count_w at the end.
    socks, closed = [], 0
    while time.monotonic() < deadline:
        while len(socks) < each:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(path)
            except OSError:
                s.close()
                break
            socks.append(s)
        ready, _, _ = select.select([stop_r, *socks], [], [], 0.05)
        if stop_r in ready:
            break
        for s in ready:
            socks.remove(s)
            s.close()
            closed += 1
            if closed == 1:
                os.write(signal_w, b"x")
    os.write(count_w, str(closed).encode())

children = []
for _ in range(workers):
    signal_r, signal_w = os.pipe()
    count_r, count_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(stop_w)
        squat(signal_w, count_w)
        os._exit(0)
    os.close(signal_w)
    os.close(count_w)
    children.append((pid, signal_r, count_r))
for _, signal_r, _ in children:
    os.read(signal_r, 1)
print("squatting", flush=True)
sys.stdin.readline()
os.close(stop_w)
for pid, _, _ in children:
    os.waitpid(pid, 0)
print(sum(int(os.read(count_r, 32) or b"0") for _, _, count_r in children),
      flush=True)
"""


@pytest.fixture
def squatter(agent):
    """Processes of our uid (as every QEMU under libvirt has one) that hold
    twice CLIENT_HANDSHAKES_PER_UID connections without a HELLO between
    them, opening a new one each time the agent closes one; running once
    the fixture returns.  Its .closed, after .stop(), counts the
    connections the agent closed on it."""
    workers, each = 8, CLIENT_HANDSHAKES_PER_UID * 2 // 8
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-c", SQUATTER, str(agent.sock), str(workers),
         str(each)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, preexec_fn=harness.die_with_parent)

    def stop():
        out, _ = proc.communicate("\n", timeout=30)
        proc.closed = int(out.split()[-1])
        return proc.closed
    proc.stop = stop
    assert proc.stdout.readline().strip() == "squatting"
    yield proc
    if proc.returncode is None:
        proc.kill()
        proc.wait()


def test_handshake_squatters_cannot_lock_a_qemu_out(agent, squatter,
                                                    qtest_vm):
    """Processes of the QEMUs' uid that keep the agent's room for
    handshakes full (issue 30: a QEMU started meanwhile stayed
    disconnected for as long as they went on): a QEMU and clients that
    send HELLO as they connect get in at once, each time."""
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")
    for _ in range(20):
        VmClient(agent.sock).close()
        handshake(RawClient(agent.sock))
    assert squatter.poll() is None, "the squatter gave up"
    # They were squatting all along: the agent closed their connections.
    assert squatter.stop() > 20
    assert "closed without HELLO to make room" in agent.log_text()
    assert_bystanders_fine(agent, vm)


def test_a_client_closed_early_reads_why(agent, served_vm):
    """A client rejected while more of its datagrams wait unread reads the
    ERROR that says why, not a connection reset."""
    client = RawClient(agent.sock)
    # Stopped, the agent reads neither before both are there.
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        client.send(b"x" * 7)
        client.send(pack(MSG_HELLO, 1, hello()))
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    messages = client.messages_until_eof()
    assert messages[0].error()[0] == ERR_BAD_MESSAGE
    client.close()
    assert_bystanders_fine(agent, served_vm)


def test_a_full_agent_says_so(agent, tmp_path):
    """With CLIENTS_MAX clients past their HELLO, a newcomer that sends
    HELLO as it connects reads an ERROR that says the agent is full (it
    got a connection reset), while root's nuksmctl still gets in."""
    agent.sock.parent.chmod(0o711)
    agent.sock.chmod(0o666)
    uids = range(70_000, 70_000 + CLIENTS_MAX // CLIENT_CONTROLS_PER_UID)
    done_r, done_w = os.pipe()      # EOF: the holders may go
    holders = []
    for uid in uids:
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(done_w)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                clients = [RawClient(agent.sock)
                           for _ in range(CLIENT_CONTROLS_PER_UID)]
                for client in clients:
                    handshake(client)
                os.write(ready_w, b"x")
                os.read(done_r, 1)
            finally:
                os._exit(0)
        os.close(ready_w)
        got_in = os.read(ready_r, 1) == b"x"
        os.close(ready_r)
        holders.append(pid)
        assert got_in, f"uid {uid} did not get in"
    try:
        assert ctl_json(agent.sock, "status")["vms"] == 0

        def newcomer():
            os.setgroups([])
            os.setgid(69_999)
            os.setuid(69_999)
            client = RawClient(agent.sock)
            client.send(pack(MSG_HELLO, 1, hello()))
            (error,) = client.messages_until_eof()
            assert error.error()[0] == ERR_HANDSHAKE
            assert f"too many clients (limit {CLIENTS_MAX})" in \
                error.error()[1]
        harness.in_child(newcomer)
    finally:
        os.close(done_r)
        os.close(done_w)
        for pid in holders:
            os.waitpid(pid, 0)
