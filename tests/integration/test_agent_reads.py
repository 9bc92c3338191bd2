# SPDX-License-Identifier: GPL-2.0-or-later
"""Read hotness in nuksmd (agent/numa/reads.h), driven by raw clients that
play VMs: what READS report shows in nuksmctl vms, and moves merged
copies under fair.  No QEMU: the clients say what QEMU's read sampling
would have seen.  Rogue READS are among test_agent_merge.py's rogues.
"""

import time

import pytest

import harness
from harness import MSG_MOVE, MSG_MOVED, READ_REGION_PAGES, SlotRef
from test_agent_merge import content, digest, merge
from test_placement import PRIORITY_SEED, mix64

# agent/numa/reads.h
READS_REPLACE_SECONDS = 5
COLD_WINDOWS = 3             # nuksmd's default --cold-windows
LOCAL_NS, REMOTE_NS = 82, 132


@pytest.fixture
def vms():
    """vms(agent, name=) -> a VmClient, closed at teardown."""
    clients = []

    def connect(agent, name="vm"):
        client = harness.VmClient(agent.sock, name=name)
        clients.append(client)
        return client
    yield connect
    for client in clients:
        client.close()


def report_ram(client, pages, host_node=None):
    """TOPOLOGY: one guest node with RAM pages [0, @pages), its memory
    bound to @host_node (its home) if given; HOME answers."""
    gnode = (1 << host_node, harness.proto.MEMPOLICY_BIND) \
        if host_node is not None else (0, 0)
    client.topology([gnode], [], [(0, pages, 0)])
    assert [m.type for m in client.sync()[0]] == [harness.MSG_HOME]


def listed(agent):
    """nuksmctl --json vms: {VM name: its entry}, and read_fairness."""
    listing = harness.ctl_json(agent.sock, "vms")
    return {vm["name"]: vm for vm in listing["vms"]}, \
        listing["read_fairness"]


def slowdown(local, remote):
    return (LOCAL_NS * local + REMOTE_NS * remote) / \
        (LOCAL_NS * (local + remote))


def test_reads_show_in_nuksmctl_vms(start_agent, vms):
    agent = start_agent("--fake-numa", "2")
    a, b = vms(agent, "a"), vms(agent, "b")
    for client in (a, b):
        report_ram(client, 16 * READ_REGION_PAGES)
    entries, fairness = listed(agent)
    assert [(e["read_window_ms"], e["read_slowdown"])
            for e in entries.values()] == [(0, None)] * 2
    assert fairness is None

    # Region 0 read lately (hot), 1 read 5 samples ago (cold), 2 never.
    a.reads([(0, 0), (1, 5), (2, harness.IDLE_NEVER)], window_ms=500,
            local=30, remote=10)
    a.info()
    entries, fairness = listed(agent)
    assert {k: entries["a"][k] for k in
            ("reads_local", "reads_remote", "read_window_ms",
             "read_hot_regions")} == {
        "reads_local": 30, "reads_remote": 10, "read_window_ms": 500,
        "read_hot_regions": 1}
    assert entries["a"]["read_slowdown"] == \
        pytest.approx(slowdown(30, 10), abs=1e-4)
    assert entries["b"]["read_slowdown"] is None
    assert fairness == 1.0      # over the one VM with reads

    # Region 0 cools down, 1 and 3 are read; b's reads are all remote.
    a.reads([(0, COLD_WINDOWS), (1, 0), (3, 2)], local=40, remote=10)
    b.reads([(5, 0)], window_ms=250, local=0, remote=20)
    for client in (a, b):
        client.info()
    entries, fairness = listed(agent)
    assert (entries["a"]["read_hot_regions"], entries["a"]["reads_local"]) \
        == (2, 40)
    assert (entries["b"]["read_hot_regions"], entries["b"]["read_window_ms"]) \
        == (1, 250)
    assert fairness == pytest.approx(slowdown(40, 10) / slowdown(0, 20),
                                     abs=1e-4)
    # A region reported never read again is forgotten.
    a.reads([(1, harness.IDLE_NEVER)], local=40, remote=10)
    a.info()
    assert listed(agent)[0]["a"]["read_hot_regions"] == 1

    rows = {r["NAME"]: r for r in
            vms_rows(harness.ctl_ok(agent.sock, "vms"))}
    assert (rows["a"]["READS"], rows["a"]["WINDOW"], rows["a"]["HOT"]) == \
        ("40/10", "1000ms", "1")
    assert (rows["b"]["READS"], rows["b"]["WINDOW"]) == ("0/20", "250ms")
    assert "NUMA-tax fairness by sampled reads" in \
        harness.ctl_ok(agent.sock, "vms")


def vms_rows(text):
    """The rows of `nuksmctl vms`, by the header's columns."""
    lines = text.splitlines()
    header = lines[0].split()
    return [dict(zip(header, line.split())) for line in lines[1:]
            if line[:1].isdigit()]


def moves(msg):
    """The (from, to) SlotRefs of a MOVE message."""
    count, _ = harness.BATCH.unpack_from(msg.payload)
    size = harness.SLOTREF.size
    refs = [SlotRef(*harness.SLOTREF.unpack_from(msg.payload,
                                                 harness.BATCH.size + i * size))
            for i in range(2 * count)]
    return list(zip(refs[0::2], refs[1::2]))


def answer_moves(client):
    """Answer every MOVE sent to @client so far with MOVED (merged): the
    moves it got, and the store pages per node INFO gave after them.
    The co-location plan's COLOCATION, which comes every few seconds, is
    not about copies."""
    messages, info = client.sync()
    messages = [m for m in messages if m.type != harness.proto.MSG_COLOCATION]
    assert all(m.type == MSG_MOVE for m in messages), \
        [m.type for m in messages]
    done = [mv for m in messages for mv in moves(m)]
    if done:
        payload = harness.BATCH.pack(len(done), 0) + b"".join(
            harness.SLOTREF.pack(*old) +
            harness.SLOTREF.pack(*new._replace(status=harness.STATUS_MERGED))
            for old, new in done)
        client.send(harness.pack(MSG_MOVED, 0, payload))
    return done, info.store_pages


def settle_moves(clients, expected, timeout=20):
    """Answer MOVEs until the store holds @expected pages per node (the
    new copies all made, the old ones all freed); the time the first
    MOVE came."""
    first = None
    deadline = time.monotonic() + timeout
    while True:
        for client in clients:
            done, store = answer_moves(client)
            if done and first is None:
                first = time.monotonic()
        if store == expected:
            return first
        assert time.monotonic() < deadline, \
            f"store pages {store}, expected {expected}"
        time.sleep(0.05)


def on_node0_when_both_read(data):
    """Contents fair puts on node 0 when VMs of nodes 0 and 1 both read
    them: the draw (agent/core/policy.c) with equal shares, the node-0
    VM's first."""
    count = 0
    for page in data:
        draw = (mix64(digest(page) ^ PRIORITY_SEED) >> 11) * 2.0 ** -53
        count += draw * 2 < 1
    return count


def test_fair_moves_copies_to_their_readers(start_agent, vms):
    """fair: copies merged cold are balanced over the nodes; once VM a
    (home node 1) reads them, all go to node 1; once VM b (home 0) reads
    them too, the contents split between the nodes; each pass no sooner
    than READS_REPLACE_SECONDS after the READS that asked for it."""
    agent = start_agent("--fake-numa", "2", "--policy", "fair")
    a, b = vms(agent, "a"), vms(agent, "b")
    n = 64
    report_ram(a, n, host_node=1)
    report_ram(b, n)
    data = [content(i) for i in range(n)]
    merge(b, [a], {a: list(range(n)), b: list(range(n))}, data)
    assert a.info().store_pages == [n // 2, n // 2]   # cold: balanced

    a.reads([(0, 0)])
    asked = time.monotonic()
    first_move = settle_moves([a, b], [0, n])
    assert first_move - asked >= READS_REPLACE_SECONDS - 0.5
    # Nothing more to move while reads stay as they are.
    time.sleep(0.5)
    assert answer_moves(a) == ([], [0, n])
    assert answer_moves(b) == ([], [0, n])

    b.reads([(0, 1)])
    asked = time.monotonic()
    on0 = on_node0_when_both_read(data)
    assert 0 < on0 < n
    first_move = settle_moves([a, b], [on0, n - on0])
    assert first_move - asked >= READS_REPLACE_SECONDS - 0.5
    entries = listed(agent)[0]
    assert entries["a"]["merged_pages"] == entries["b"]["merged_pages"] == n
