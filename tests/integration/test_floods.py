# SPDX-License-Identifier: GPL-2.0-or-later
"""Floods and exhaustion: one client cannot take what others need.

Each test plays a misbehaving client with raw sockets against a real
nuksmd while well-behaved clients merge, and checks the bound that holds
it back, the agent's memory, and that the others are not disturbed.
"""

import os
import random
import re
import select
import subprocess
import time
import traceback

import pytest

import harness
from harness import (COND_AGENT_MEMORY, COND_STORE_FULL, MSG_GET_POLICY,
                     MSG_MERGE, MSG_UPLOAD_REQ, RawClient, VmClient, digest,
                     pack, rss, status, wait_until)

PAGE = harness.NUKSM_PAGE_SIZE
MIB = 1 << 20
# Where the duplicates go in qtest VMs.
AT = 64 * MIB
# Mirrors agent/merge/merge.c and agent/server/clients.h.
CLIENT_IN_FLIGHT_MAX = 1 << 16
CLIENT_HANDSHAKES_PER_UID = 16
CLIENT_VMS_PER_PID = 16
# Mirrors LEDGER_UPLOAD_SECONDS in agent/merge/ledger.h.
UPLOAD_SECONDS = 5
NOBODY = 65534


page = harness.page_content


def merge_offered(a, b, data):
    """Clients @a, then @b offer pages 0.. holding @data (one content
    each, the same in both) and merge them: the number merged."""
    a.candidates((i, digest(d)) for i, d in enumerate(data))
    a.info()
    b.candidates((i, digest(d)) for i, d in enumerate(data))
    requests = b.take(MSG_UPLOAD_REQ)
    b.upload(requests, [data[r.page] for r in requests])
    merged = 0
    for client in (b, a):
        refs = client.take(MSG_MERGE)
        client.merged(refs)
        client.info()
        merged += len(refs)
    return merged // 2


def merge_pages(agent, pages, seed, domain="honest", keep=None):
    """Two clients of @domain merge @pages pages: the number merged.  The
    clients then leave, and their slots are freed, unless they are added
    to the list @keep."""
    data = [page(seed + i) for i in range(pages)]
    a, b = VmClient(agent.sock, domain), VmClient(agent.sock, domain)
    try:
        return merge_offered(a, b, data)
    finally:
        if keep is None:
            a.close()
            b.close()
        else:
            keep += [a, b]


def merge_first(client, data):
    """@client merges two of its pages holding @data: the UPLOAD_REQ."""
    client.candidates([(0, digest(data)), (1 << 40, digest(data))])
    requests = client.take(MSG_UPLOAD_REQ)
    client.upload(requests, [data])
    client.merged(client.take(MSG_MERGE))
    client.info()
    return requests


def while_in_child(fn, meanwhile):
    """Run @fn in a forked child process; once it returned, run
    @meanwhile here while the child still lives, and what @fn returned
    (its connections) is kept; then the child exits (the agent drops what
    its connections leave once it is gone)."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(ready_r)
            os.close(done_w)
            connections = fn()
            os.write(ready_w, b"y")
            os.read(done_r, 1)  # connections stay open until then
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(done_r)
    try:
        assert os.read(ready_r, 1) == b"y", "the child process failed"
        meanwhile()
    finally:
        os.close(done_w)
        os.close(ready_r)
        _, status_ = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status_) == 0, \
        "the child process failed"


class Forked:
    """@count forked processes, process i running @fn(i, ready, released):
    each a process of its own, as rogue QEMUs are.  fn calls ready(value)
    once it is under way, which wait_ready() returns (as str) for each,
    and may poll released(); once fn returned, the process keeps what it
    returned (its connections) until release(), then exits (the agent
    drops what they leave once it is gone)."""

    def __init__(self, count, fn):
        self.done_r, self.done_w = os.pipe()
        self.children = []  # (pid, the read end of its ready pipe)
        for i in range(count):
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                self._child(i, fn, ready_w)
            os.close(ready_w)
            self.children.append((pid, os.fdopen(ready_r)))

    def _child(self, i, fn, ready_w):
        code = 1
        try:
            os.close(self.done_w)
            ready = os.fdopen(ready_w, "w")

            def released():
                return bool(select.select([self.done_r], [], [], 0)[0])

            def tell(value=""):
                print(value, file=ready, flush=True)
            connections = fn(i, tell, released)
            os.read(self.done_r, 1)  # connections stay open until then
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)

    def wait_ready(self):
        """What each process said it was ready with."""
        values = [f.readline() for _, f in self.children]
        assert all(values), "a flood process failed"
        return [v.strip() for v in values]

    def release(self):
        """Let the processes go, and wait for their exit."""
        os.close(self.done_w)
        codes = []
        for pid, f in self.children:
            f.close()
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        os.close(self.done_r)
        assert codes == [0] * len(codes), "a flood process failed"


class TurnedAway:
    """Two clients of one domain that offer @pages pages of one content
    each while a condition holds, and are turned away: nothing merges.
    As QEMU, they offer them again only once the condition ends, so the
    agent must see by itself that it ended."""

    def __init__(self, agent, pages, seed):
        self.agent = agent
        self.data = [page(seed + i) for i in range(pages)]
        self.clients = [VmClient(agent.sock, "turned-away")
                        for _ in range(2)]
        held = self.clients[0].condition.bits
        assert held
        for client in self.clients:
            client.candidates((i, digest(d)) for i, d in enumerate(self.data))
            assert client.take(MSG_UPLOAD_REQ) == []
            assert client.condition.bits == held

    def wait_for_the_end(self, what):
        """Wait, sending no candidate (GET_INFOs only), until every
        client was told that the condition ended; print how long that
        took after @what."""
        start = time.monotonic()

        def ended():
            for client in self.clients:
                client.info()
            return all(c.condition.bits == 0 for c in self.clients)
        wait_until(ended, 30, f"the condition to end by itself after {what}")
        assert status(self.agent)["conditions"] == []
        print(f"condition ended {time.monotonic() - start:.1f} s after "
              f"{what}")

    def merge(self):
        """Offer the pages again, as QEMU does once a condition ended:
        the number merged."""
        return merge_offered(*self.clients, self.data)

    def close(self):
        for client in self.clients:
            client.close()


def test_self_pairing_client_never_uploading_is_bounded(agent):
    """A client that pairs its own candidates and never uploads holds at
    most CLIENT_IN_FLIGHT_MAX pages in flight; other domains merge on,
    and the agent answers at once after it leaves."""
    rss_before = rss(agent.pid)

    def claim():
        rogue = VmClient(agent.sock, domain="rogue")
        pairs = 150_000
        # Pages 2i and 2i+1 share a content: every pair asks for a slot.
        rogue.candidates((p, 1_000_000 + p // 2) for p in range(2 * pairs))
        requests = rogue.take(MSG_UPLOAD_REQ)
        assert 0 < len(requests) <= CLIENT_IN_FLIGHT_MAX // 2
        assert sum(status(agent)["store_pages"]) == len(requests)
        return rogue

    def merge_meanwhile():
        # The bound holds the rogue's process, not this one.
        assert merge_pages(agent, 1000, seed=7) == 1000
        assert rss(agent.pid) - rss_before < 64 * MIB
    # The rogue's uploads go with its process; the honest pages stay,
    # parked while their (this test's) process lives.
    while_in_child(claim, merge_meanwhile)
    wait_until(lambda: sum(status(agent)["store_pages"]) == 1000, 10,
               "the rogue's slots to be freed")


# Its memory figure counts what the allocator keeps of 2 Mi RETRY entries
# sent and freed: ASan's quarantine keeps them all.  Sending back past the
# bound is also tested under ASan, by test_agent_merge.py.
@pytest.mark.allocator
def test_candidates_waiting_on_one_slot_are_bounded(agent):
    """Candidates joining a slot whose upload never comes stop at
    CLIENT_IN_FLIGHT_MAX; the rest are sent back (RETRY), not
    remembered."""
    rss_before = rss(agent.pid)

    def join():
        rogue = VmClient(agent.sock, domain="rogue")
        # 2 Mi candidates would cost some 90 MiB of table entries.  Read
        # between slices, as QEMU does: a VM that does not read its
        # RETRYs is disconnected like any client that does not read.
        total, bound, requests = 2 << 20, 1 << 16, []
        started = time.monotonic()
        for first in range(0, total, 1 << 17):
            rogue.candidates((p, 42) for p in range(first,
                                                    first + (1 << 17)))
            messages, _ = rogue.sync()
            assert {m.type for m in messages} <= {MSG_UPLOAD_REQ}
            requests += [r for m in messages for r in m.slot_refs()]
        elapsed = time.monotonic() - started
        # One slot, asked for once, and again only each time its upload
        # is overdue: then the late page is sent back and a later
        # candidate takes its place among the waiters.
        assert {(r.node, r.slot) for r in requests} == \
            {(requests[0].node, requests[0].slot)}
        reassigned = len(requests) - 1
        assert reassigned <= elapsed // UPLOAD_SECONDS
        assert len(set(rogue.retried)) == len(rogue.retried)
        waiting = total - len(rogue.retried)
        assert bound - reassigned <= waiting <= bound
        assert status(agent)["store_pages"][0] == 1
        assert rss(agent.pid) - rss_before < 32 * MIB
        return rogue

    def merge_meanwhile():
        assert merge_pages(agent, 500, seed=9) == 500
    while_in_child(join, merge_meanwhile)


@pytest.mark.allocator
def test_client_not_reading_costs_at_most_its_queue(agent):
    """Requests whose small replies are never read: the client is
    disconnected once its queue, counted with its overhead, passes 8 MiB,
    and the memory goes back once it is gone."""
    merge_pages(agent, 10, seed=500_000)  # warm up the agent's heap
    rss_before = rss(agent.pid)
    hogs = []
    for _ in range(3):
        hog = RawClient(agent.sock, timeout=0.5)
        hog.request(harness.MSG_HELLO, 1, harness.hello())
        request = pack(MSG_GET_POLICY, 2)
        try:
            for _ in range(200_000):
                hog.send(request)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        hogs.append(hog)
    wait_until(lambda: status(agent)["vms"] == 0 and
               "does not read its messages" in agent.log_text(), 10,
               "the hogs to be disconnected")
    assert agent.log_text().count("does not read its messages") == 3
    for hog in hogs:
        hog.close()
    wait_until(lambda: rss(agent.pid) - rss_before < 16 * MIB, 10,
               "the agent to give the queues' memory back")
    assert merge_pages(agent, 100, seed=5) == 100


# Floods that end: what the agent holds once they are gone, and how fast
# another domain merges meanwhile.  The bystander's pages stay parked
# while this test's process lives, which the RSS before includes.


@pytest.fixture
def domains_agent(start_agent):
    """An agent that puts each VM in the domain it asks for: the rogues'
    and the bystander's."""
    return start_agent("--vm-domains=allow")


BYSTANDER_PAGES = 2000
# What the agent may still hold after a flood, beyond its RSS before: what
# its heap keeps free without giving it back (TRIM_SLACK_BYTES in
# agent/merge/effects.c, 4 MiB) and the slot table, which keeps its
# highest size (6.5 MiB after 8 processes' slots).
RSS_AFTER_FLOOD = 16 * MIB


def timed_merge(agent, seed):
    """A bystander domain's two clients merge BYSTANDER_PAGES pages: the
    time it took, s."""
    start = time.monotonic()
    assert merge_pages(agent, BYSTANDER_PAGES, seed,
                       domain="bystander") == BYSTANDER_PAGES
    return time.monotonic() - start


def peak_rss(pid):
    """The highest resident memory of a process so far, bytes."""
    return harness.proc_kib_field(pid, "status", "VmHWM")


def wait_memory_back(agent, before, timeout=10):
    """Wait until the agent's RSS is within RSS_AFTER_FLOOD of @before,
    as it gives back what a flood used: its RSS then."""
    deadline = time.monotonic() + timeout
    while (now := rss(agent.pid)) - before >= RSS_AFTER_FLOOD:
        if time.monotonic() > deadline:
            raise AssertionError(f"the agent still holds {now / MIB:.1f} MiB "
                                 f"{timeout} s after the flood, "
                                 f"{before / MIB:.1f} MiB before it")
        time.sleep(0.05)
    return now


def report(what, before, peak, after, quiet, during):
    """Print a flood's figures (bytes, s), for the record."""
    print(f"\n{what}: agent RSS {before / MIB:.1f} MiB before, "
          f"{peak / MIB:.1f} MiB at the peak, {after / MIB:.1f} MiB after; "
          f"a bystander domain merged {BYSTANDER_PAGES} pages in "
          f"{quiet:.2f} s before, {during:.2f} s during the flood")


def flood_unread(sock, hogs, ready, released):
    """@hogs control clients at once send requests and never read the
    replies, each until the agent disconnects it (its queue full); round
    after round, calling ready() after the first, until released(): the
    clients of the round then close."""
    request = pack(MSG_GET_POLICY, 2)
    rounds = 0
    while not released():
        clients = {}
        for _ in range(hogs):
            hog = RawClient(sock)
            hog.request(harness.MSG_HELLO, 1, harness.hello())
            hog.sock.setblocking(False)
            clients[hog.sock] = hog
        while clients and not released():
            _, writable, _ = select.select([], list(clients), [], 0.1)
            for s in writable:
                try:
                    for _ in range(64):
                        s.send(request)
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    clients.pop(s).close()
        for hog in clients.values():
            hog.close()
        rounds += 1
        if rounds == 1:
            ready()


@pytest.mark.allocator
def test_clients_not_reading_give_their_memory_back(domains_agent):
    """Clients that never read their replies, 8 at once from 4 processes,
    each until the agent disconnects it, round after round: once they are
    gone, whether the agent disconnected them or they closed, the agent's
    memory falls back near its level before the flood.  Another domain
    merges meanwhile."""
    agent = domains_agent
    quiet = timed_merge(agent, seed=1_000_000)  # warms the agent up too
    before = rss(agent.pid)
    # One process's queues hold 8 MiB together.
    flood = Forked(4, lambda i, ready, released:
                   flood_unread(agent.sock, 2, ready, released))
    try:
        flood.wait_ready()
        during = timed_merge(agent, seed=2_000_000)
    finally:
        flood.release()
    assert "does not read its messages" in agent.log_text()
    after = wait_memory_back(agent, before)
    report("clients that do not read", before, peak_rss(agent.pid), after,
           quiet, during)


def claim_slots(sock, process, pairs, ready):
    """CLIENT_VMS_PER_PID VM connections of this process each offer @pairs
    pairs of pages of one content each, every pair its own, and never
    upload: ready(the uploads the process was asked for).  Returns the
    connections."""
    # The agent has the other processes' candidates to handle too.
    clients = [VmClient(sock, domain=f"rogue{process}", timeout=30)
               for _ in range(CLIENT_VMS_PER_PID)]
    for k, client in enumerate(clients):
        first = (process * CLIENT_VMS_PER_PID + k) * pairs
        client.candidates((p, 1_000_000 + first + p // 2)
                          for p in range(2 * pairs))
    ready(sum(len(client.take(MSG_UPLOAD_REQ)) for client in clients))
    return clients


def only_bystander_slots(agent):
    """Whether the store holds only the last bystander's pages, parked
    (the clients of a merge, of this process, take over the last one's
    and drop them)."""
    return sum(status(agent)["store_pages"]) == BYSTANDER_PAGES


def test_a_process_is_bounded_over_all_its_connections(domains_agent):
    """2 processes of 16 VM connections each claim slots and never upload:
    each holds at most CLIENT_IN_FLIGHT_MAX pages in flight over all its
    connections, and what they held is freed once they are gone."""
    agent = domains_agent
    # 16 x 4096 pairs: twice what the bound lets one process claim.
    flood = Forked(2, lambda i, ready, released:
                   claim_slots(agent.sock, i, 4096, ready))
    try:
        asked = [int(n) for n in flood.wait_ready()]
        # Each slot puts two pages of the process in flight.
        assert asked == [CLIENT_IN_FLIGHT_MAX // 2] * 2
        assert sum(status(agent)["store_pages"]) == sum(asked)
    finally:
        flood.release()
    wait_until(lambda: sum(status(agent)["store_pages"]) == 0, 20,
               "the rogues' slots to be freed")


def connect_vms(sock, process, ready):
    """CLIENT_VMS_PER_PID VM connections of this process, named by
    process and connection: ready(their client ids).  Returns them."""
    clients = [VmClient(sock, name=f"vm{process}.{k}", timeout=30)
               for k in range(CLIENT_VMS_PER_PID)]
    ready(" ".join(str(client.client_id) for client in clients))
    return clients


def test_every_vm_is_listed_past_one_datagram(agent):
    """More VMs than one VMS holds: LIST_VMS pages them in order of id,
    each page from the id asked for, and nuksmctl lists every VM once."""
    processes = harness.proto.VMS_MAX_ENTRIES // CLIENT_VMS_PER_PID + 2
    flood = Forked(processes, lambda i, ready, released:
                   connect_vms(agent.sock, i, ready))
    try:
        ids = sorted(int(n) for line in flood.wait_ready()
                     for n in line.split())
        assert len(ids) > harness.proto.VMS_MAX_ENTRIES
        control = RawClient(agent.sock)
        control.request(harness.MSG_HELLO, 1, harness.hello())
        first = harness.parse_vms(harness.list_vms(control, 2))
        assert [e.client_id for e in first] == \
            ids[:harness.proto.VMS_MAX_ENTRIES]
        rest = harness.parse_vms(harness.list_vms(control, 3,
                                                  from_id=ids[-5]))
        assert [e.client_id for e in rest] == ids[-5:]
        control.close()
        listed = harness.ctl_json(agent.sock, "vms")
        assert sorted(vm["id"] for vm in listed["vms"]) == ids
        assert listed["total"] == len(ids)
        assert {vm["name"] for vm in listed["vms"]} == \
            {f"vm{i}.{k}" for i in range(processes)
             for k in range(CLIENT_VMS_PER_PID)}
    finally:
        flood.release()


@pytest.mark.allocator
def test_processes_holding_slots_give_their_memory_back(domains_agent):
    """8 processes of 16 VM connections each claim slots and never upload,
    each up to its bound: once they are gone, the agent's memory falls
    back near its level before.  Another domain merges meanwhile."""
    agent = domains_agent
    quiet = timed_merge(agent, seed=1_000_000)
    before = rss(agent.pid)
    flood = Forked(8, lambda i, ready, released:
                   claim_slots(agent.sock, i, 4096, ready))
    try:
        flood.wait_ready()
        during = timed_merge(agent, seed=2_000_000)
    finally:
        flood.release()
    wait_until(lambda: only_bystander_slots(agent), 20,
               "the rogues' slots to be freed")
    after = wait_memory_back(agent, before)
    report("8 processes claiming slots", before, peak_rss(agent.pid), after,
           quiet, during)


def silent_connections(sock, count):
    """In a child running as nobody: connect @count times, send nothing.
    Returns the child, which prints a line once connected, then, once the
    agent closed them all, how many it closed to make room for newer ones
    and how many for want of a HELLO in time; then it waits for a line on
    stdin."""
    code = f"""
import os, socket, sys
os.setgid({NOBODY}); os.setuid({NOBODY})
socks = []
for _ in range({count}):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect({str(sock)!r})
    socks.append(s)
print("connected", flush=True)
dropped = timed_out = 0
for s in socks:
    s.settimeout(15)
    try:
        while data := s.recv(65536):
            dropped += b"to make room" in data
            timed_out += b"no HELLO within" in data
    except OSError:
        pass
print(dropped, timed_out, flush=True)
sys.stdin.readline()
"""
    return subprocess.Popen(["/usr/bin/python3", "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, preexec_fn=harness.die_with_parent)


def test_silent_connections_time_out(agent):
    """Connections that never send HELLO: one uid holds at most 16 at a
    time, each for 5 s, and each one more closes its oldest; VMs and
    root's nuksmctl get in meanwhile."""
    # Let nobody reach the socket (mkdtemp made its directory 0700).
    os.chmod(agent.sock.parent, 0o711)
    os.chmod(agent.sock, 0o666)
    child = silent_connections(agent.sock, 40)
    try:
        assert child.stdout.readline().strip() == "connected"
        # Others are served while the silent ones hang on.
        assert status(agent)["vms"] == 0
        vm = VmClient(agent.sock)
        vm.close()
        dropped, timed_out = map(int, child.stdout.readline().split())
        assert dropped == 40 - CLIENT_HANDSHAKES_PER_UID
        assert timed_out == CLIENT_HANDSHAKES_PER_UID
        assert agent.log_text().count("no HELLO within 5 s") == \
            CLIENT_HANDSHAKES_PER_UID
    finally:
        child.communicate("\n", timeout=30)
    assert status(agent)["vms"] == 0


def merged_non_zero(vm):
    info = vm.nuksm()
    return info["merged-pages"] - info["zero-pages"]


def test_store_full_is_one_visible_condition(start_agent, small_tmpfs,
                                             qtest_vm):
    """A store on a full tmpfs: one condition, visible in nuksmctl and in
    real VMs' query-nuksm with one event, logged once.  Once the tmpfs
    is grown, merging resumes by itself: the duplicates two VMs offered
    while it was full merge, with no new guest content, and new ones
    merge too."""
    # A domain may fill the whole store: else it stops at its quota
    # (test_quotas.py) before the store is full.
    agent = start_agent(args=["--socket", small_tmpfs.parent / "nuksmd.sock",
                              "--state-dir", small_tmpfs / "state",
                              "--domain-store-max", "100%"],
                        state_dir=False)
    watcher = VmClient(agent.sock, domain="other")
    assert watcher.condition.bits == 0
    vms = [qtest_vm(name, agent=agent.sock) for name in ("vm0", "vm1")]
    for vm in vms:
        vm.wait_state("active")

    merged, holders = 0, []
    for round_ in range(4):
        merged += merge_pages(agent, 400, seed=10_000 * (round_ + 1),
                              keep=holders)
    assert merged < 4 * 400
    st = status(agent)
    assert st["conditions"] == ["store-full"]
    assert "cannot write to the store" in st["condition_reason"]
    watcher.info()
    assert watcher.condition.bits == COND_STORE_FULL
    assert agent.log_text().count("store full:") == 1
    for vm in vms:
        info = vm.wait_limited("store-full", "cannot write to the store")
    # nuksmctl vms says it of every VM, as query-nuksm does.
    entries = {e["pid"]: e
               for e in harness.ctl_json(agent.sock, "vms")["vms"]}
    for vm in vms:
        assert entries[vm.pid]["limit"] == "store-full"
        assert entries[vm.pid]["limit_reason"] == \
            vm.nuksm()["limit-reason"]

    # 4 MiB of duplicates in both VMs, offered while the store is full:
    # they are turned away, and QEMU offers them again only once the
    # condition ends (a few passes make sure they were offered).
    content = random.Random(3).randbytes(4 * MIB)
    pages = len(content) // PAGE
    before = [merged_non_zero(vm) for vm in vms]
    scans = [vm.nuksm()["full-scans"] for vm in vms]
    qtests = [harness.Qtest(vm.qtest_path) for vm in vms]
    for q in qtests:
        harness.write_big(q, AT, content)
    for vm, done in zip(vms, scans):
        vm.wait_nuksm(lambda i: i["full-scans"] >= done + 4,
                      "four passes over the duplicates", timeout=120)
    assert [merged_non_zero(vm) for vm in vms] == before
    assert status(agent)["conditions"] == ["store-full"]

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)],
                   check=True)
    start = time.monotonic()
    wait_until(lambda: status(agent)["conditions"] == [], 30,
               "store-full to end by itself once the store has room")
    ended = time.monotonic() - start
    for vm in vms:
        vm.wait_state("active")
        event = vm.wait_event("NUKSM_MERGING_RESUMED")
        assert event["data"]["limit"] == "store-full"
    wait_until(lambda: all(merged_non_zero(vm) >= b + pages
                           for vm, b in zip(vms, before)), 120,
               "the duplicates offered while the store was full to merge")
    print(f"store-full ended {ended:.1f} s after the tmpfs grew; the "
          f"{pages} duplicates of each VM merged after "
          f"{time.monotonic() - start:.1f} s")
    for q in qtests:
        assert harness.read_big(q, AT, len(content)) == content
        q.close()
    watcher.info()
    assert watcher.condition.bits == 0
    assert agent.log_text().count("store full:") == 1
    assert "store full no more" in agent.log_text()
    assert merge_pages(agent, 50, seed=99_000) == 50
    for client in [watcher, *holders]:
        client.close()


@pytest.fixture
def memory_cgroup(new_cgroup):
    """A fresh memory cgroup (v2 or v1): a dict with 'path', 'limit_file'
    and 'procs_file'."""
    path = new_cgroup("memory")
    v1 = path.startswith("/sys/fs/cgroup/memory/")
    return {"path": path,
            "limit_file": f"{path}/"
                          f"{'memory.limit_in_bytes' if v1 else 'memory.max'}",
            "procs_file": f"{path}/cgroup.procs"}


def test_memory_cgroup_limit_is_store_full(memory_cgroup, start_agent):
    """The agent's memory cgroup near its limit: store-full, not an OOM
    kill.  Once the limit is raised, the condition ends by itself: no
    candidate comes to try, since the clients whose pages it turned away
    (as QEMU would) offer them again only once it ends."""
    own_cgroup = open("/proc/self/cgroup").read()
    origin = next(line.split(":", 2)[2] for line in own_cgroup.splitlines()
                  if ":memory:" in line or line.startswith("0::"))
    base = harness.cgroup_dir("memory")
    with open(memory_cgroup["limit_file"], "w") as f:
        f.write(str(40 * MIB))
    # The agent starts inside it, so that it charges its store there.
    with open(memory_cgroup["procs_file"], "w") as f:
        f.write(str(os.getpid()))
    try:
        agent = start_agent()
    finally:
        with open(f"{base}{origin}/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
    holders, merged = [], 0
    for round_ in range(4):
        merged += merge_pages(agent, 3000, seed=50_000 * (round_ + 1),
                              keep=holders)
    assert agent.running, "the OOM killer took the agent"
    assert merged < 4 * 3000
    st = status(agent)
    assert st["conditions"] == ["store-full"]
    assert "memory cgroup" in st["condition_reason"]
    assert agent.log_text().count("store full:") == 1
    turned_away = TurnedAway(agent, 50, seed=900_000)

    with open(memory_cgroup["limit_file"], "w") as f:
        f.write(str(256 * MIB))
    turned_away.wait_for_the_end("the raised limit")
    assert turned_away.merge() == 50
    assert agent.log_text().count("store full:") == 1
    assert "store full no more" in agent.log_text()
    turned_away.close()
    for client in holders:
        client.close()
    agent.stop()


@pytest.mark.allocator
def test_memory_budget_holds_back_candidates(start_agent):
    """Past --memory-max no candidate is taken, which nuksmctl and the VMs
    see.  Once the flood's process is gone, the condition ends by itself:
    no candidate comes to try, since the clients whose pages it turned
    away (as QEMU would) offer them again only once it ends."""
    agent = start_agent("--memory-max", "16")
    watcher = VmClient(agent.sock, domain="other")
    turned_away = []

    def flood():
        client = VmClient(agent.sock, domain="rogue")
        # Each round joins 65536 more pages to one slot: references pile.
        merge_first(client, page(77))
        for round_ in range(64):
            first = 1 + round_ * CLIENT_IN_FLIGHT_MAX
            client.candidates((p, digest(page(77))) for p in
                              range(first, first + CLIENT_IN_FLIGHT_MAX))
            client.merged(client.take(MSG_MERGE))
            client.info()
            if status(agent)["conditions"]:
                break
        st = status(agent)
        assert st["conditions"] == ["agent-memory"]
        assert "--memory-max" in st["condition_reason"]
        watcher.info()
        assert watcher.condition.bits == COND_AGENT_MEMORY
        assert merge_pages(agent, 10, seed=1) == 0

    def offer_meanwhile():
        turned_away.append(TurnedAway(agent, 10, seed=2))
    while_in_child(flood, offer_meanwhile)

    turned_away[0].wait_for_the_end("the flood's process went")
    assert turned_away[0].merge() == 10
    assert agent.log_text().count("agent memory budget used:") == 1
    assert "agent memory budget used no more" in agent.log_text()
    turned_away[0].close()
    watcher.close()


def test_a_process_not_reading_holds_one_queue(agent):
    """One process's connections that do not read hold 8 MiB of replies
    together, not 8 MiB each: the one that passes it is disconnected with
    a share of it."""
    hogs = []
    for _ in range(4):
        hog = RawClient(agent.sock, timeout=0.5)
        hog.request(harness.MSG_HELLO, 1, harness.hello())
        hogs.append(hog)
    request = pack(MSG_GET_POLICY, 2)
    live = list(hogs)
    while live:
        for hog in list(live):
            try:
                hog.send(request)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                live.remove(hog)
    wait_until(lambda: "over its process's connections" in agent.log_text(),
               10, "a hog to be disconnected")
    line = next(l for l in agent.log_text().splitlines()
                if "over its process's connections" in l)
    own, process = (int(w) for w in re.findall(r"(\d+) KiB", line))
    assert process > 7 * 1024 and own < process * 3 // 4, line
    for hog in hogs:
        hog.close()
    assert merge_pages(agent, 10, seed=77_000) == 10


# A domain's share of the agent's CPU (agent/merge/throttle.h).

HOG_CPU_PERCENT = 20
# Mirrors THROTTLE_LIMITED_PERCENT in agent/merge/throttle.h.
LIMITED_PERCENT = 25


def flood_candidates(sock, ready, released):
    """A VM of domain hog sends, until released(), the same batches of
    candidates again and again, with nothing to merge: each costs the
    agent lookups in its tables, and this process little.  It reads what
    the agent sends back, as a QEMU does, so that only its CPU counts."""
    hog = VmClient(sock, "hog")
    rng = random.Random(hog.client_id)
    batches = [pack(harness.MSG_CANDIDATES, 0, harness.pack_candidates(
        (b * harness.CANDIDATES_MAX + i, rng.getrandbits(64))
        for i in range(harness.CANDIDATES_MAX))) for b in range(8)]
    ready()
    while not released():
        for batch in batches:
            hog.send(batch)     # blocks while the agent leaves it unread
        while select.select([hog.sock], [], [], 0)[0]:
            hog.recv()
    return hog


def domain_cpu(agent, domain):
    """(agent CPU s, s left unread) of @domain's VMs, as nuksmctl shows."""
    vms = [vm for vm in harness.ctl_json(agent.sock, "vms")["vms"]
           if vm["domain"] == domain]
    return (sum(vm["agent_cpu_seconds"] for vm in vms),
            sum(vm["throttled_seconds"] for vm in vms))


class Merger:
    """Two VMs of domain honest that merge 200 new pages at a time, then
    write to them (UNMERGED): as much merging as they are let do, while
    the store holds none of it for long."""

    def __init__(self, agent):
        self.a = VmClient(agent.sock, "honest")
        self.b = VmClient(agent.sock, "honest")
        self.seed = 1_000_000

    def merge(self):
        """One round: the pages it merged."""
        data = [page(self.seed + i) for i in range(200)]
        self.seed += len(data)
        self.a.candidates((i, digest(d)) for i, d in enumerate(data))
        self.a.info()
        self.b.candidates((i, digest(d)) for i, d in enumerate(data))
        requests = self.b.take(MSG_UPLOAD_REQ)
        self.b.upload(requests, [data[r.page] for r in requests])
        merged = 0
        for client in (self.b, self.a):
            refs = client.take(MSG_MERGE)
            client.merged(refs)
            client.unmerged(refs)
            client.info()
            merged += len(refs)
        assert merged == 2 * len(data)
        return len(data)

    def merge_for(self, seconds):
        """Rounds for @seconds: the pages merged per second."""
        merged, start = 0, time.monotonic()
        while time.monotonic() - start < seconds:
            merged += self.merge()
        return merged / (time.monotonic() - start)


def test_a_domain_takes_its_cpu_share_while_others_wait(start_agent,
                                                        workdir):
    """Four processes of domain hog flood the agent with candidates,
    against one domain honest that merges: hog gets its cpu-max of the
    agent's thread (20%) while honest is served, and is told so
    (domain-quota), honest is not; once the flood ends, so does hog's
    limit.  Alone, hog is never left unread."""
    config = workdir / "cpu.conf"
    config.write_text("[nuksmd]\nvm-domains=allow\n\n"
                      f"[domain hog]\ncpu-max={HOG_CPU_PERCENT}%\n")
    agent = start_agent("--config", config)
    honest = Merger(agent)
    quiet = honest.merge_for(2)
    observer = VmClient(agent.sock, "hog")
    flood = Forked(4, lambda i, ready, released:
                   flood_candidates(agent.sock, ready, released))
    try:
        flood.wait_ready()
        # Alone, once honest's last merge is past, hog is never left
        # unread.
        time.sleep(0.5)
        cpu0, unread0 = domain_cpu(agent, "hog")
        alone0 = time.monotonic()
        time.sleep(1)
        cpu1, unread1 = domain_cpu(agent, "hog")
        alone = (cpu1 - cpu0) / (time.monotonic() - alone0)
        assert unread1 == unread0
        # With honest merging, hog takes its share.
        start = time.monotonic()
        during = honest.merge_for(4)
        cpu2, unread2 = domain_cpu(agent, "hog")
        share = (cpu2 - cpu1) / (time.monotonic() - start)
        assert unread2 > 0
        assert share < (HOG_CPU_PERCENT + 10) / 100, \
            f"domain hog took {share:.0%} of a core, past its cpu-max"
        # Told while honest merges on (alone, hog's limit ends).
        wait_until(lambda: honest.merge() and observer.sync() and
                   observer.condition.bits == harness.COND_DOMAIN_QUOTA,
                   10, "hog told of its CPU quota")
        assert "share of nuksmd's CPU" in observer.condition.reason
        assert "'hog'" in observer.condition.reason
        assert honest.a.condition.bits == honest.b.condition.bits == 0
    finally:
        flood.release()
    wait_until(lambda: observer.sync() and observer.condition.bits == 0,
               5, "hog's CPU limit ended")
    assert agent.log_text().count("takes its share of nuksmd's CPU") == 1
    assert "'hog' within its share of nuksmd's CPU" in agent.log_text()
    print(f"\ndomain hog took {alone:.0%} of a core alone, {share:.0%} "
          f"while honest merged; honest merged {quiet:.0f} pages/s before, "
          f"{during:.0f} during the flood")


def test_the_agent_takes_at_most_its_max_cpu(start_agent):
    """With --max-cpu=20%, two processes flooding the agent with
    candidates (alone, they take its whole core: the test above) get a
    fifth of a core, and a VM that asks meanwhile is answered, again and
    again: the VMs left unread are read again in turn, not the flood
    first each time."""
    agent = start_agent("--max-cpu=20%", "--vm-domains=allow")
    flood = Forked(2, lambda i, ready, released:
                   flood_candidates(agent.sock, ready, released))
    try:
        flood.wait_ready()
        time.sleep(0.5)
        cpu0, unread0 = harness.process_cpu_ns(agent.pid), \
            domain_cpu(agent, "hog")[1]
        start = time.monotonic()
        time.sleep(2)
        share = (harness.process_cpu_ns(agent.pid) - cpu0) / 1e9 / \
            (time.monotonic() - start)
        assert domain_cpu(agent, "hog")[1] > unread0
        assert share < 0.30, f"nuksmd took {share:.0%} of a core"
        other = VmClient(agent.sock, "other")
        for _ in range(20):
            assert other.info()
        other.close()
    finally:
        flood.release()
    assert "at its --max-cpu, 20% of a core" in agent.log_text()
    print(f"\nnuksmd took {share:.0%} of a core at --max-cpu=20%")
