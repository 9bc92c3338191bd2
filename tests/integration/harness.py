# SPDX-License-Identifier: GPL-2.0-or-later
"""Processes and wire-protocol helpers for the nuksm integration tests.

$BUILD defaults to build/.  Binaries come from $BUILD/bin (what the
Makefile provides), overridable with NUKSM_QEMU, NUKSMD and NUKSMCTL; the
test guest comes from $BUILD/guest (scripts/make-guest.sh), overridable
with NUKSM_GUEST.
"""

import base64
import collections
import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import pwd
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import xxhash
from qemu.qmp import ConnectError, ExecInterruptedError
from qemu.qmp.legacy import QEMUMonitorProtocol

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("BUILD", ROOT / "build"))
QEMU = Path(os.environ.get("NUKSM_QEMU", BUILD / "bin/qemu-system-x86_64"))
NUKSMD = Path(os.environ.get("NUKSMD", BUILD / "bin/nuksmd"))
NUKSMCTL = Path(os.environ.get("NUKSMCTL", BUILD / "bin/nuksmctl"))
GUEST = Path(os.environ.get("NUKSM_GUEST", BUILD / "guest"))

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PR_SET_PDEATHSIG = 1
GUEST_READY = "nuksm-guest: ready"

# The wire protocol, generated from libnuksm/nuksm-proto.h at build time
# ($BUILD/meson/nuksm_proto.py, by libnuksm/nuksm-proto-py.c, which checks
# every layout against the compiler's): no copy of it is kept here.
sys.path.insert(0, str(BUILD / "meson"))
import nuksm_proto as proto  # noqa: E402

from nuksm_proto import (  # noqa: E402,F401 (re-exported for the tests)
    APPLY_MOVE, BATCH, CANDIDATE, CANDIDATE_WANTED, CANDIDATES_MAX, CHARGE,
    COND_AGENT_MEMORY,
    COND_DOMAIN_QUOTA, COND_STORE_FULL,
    CONDITION, DEFAULT_DOMAIN, DOMAIN_SOURCES, ERR_BAD_MESSAGE, ERR_DENIED, ERR_HANDSHAKE,
    ERR_VERSION, ERROR, INFO_DOMAIN, INFO_HOST, INFO_NONE,
    GUEST_NODE, HEADER, HELLO, HELLO_ACK, IDLE_NEVER, INFO, MAX_GNODES,
    MAX_RANGES, MAX_VCPUS, MSG_CANDIDATES, MSG_CHARGE, MSG_CONDITION,
    MSG_ERROR,
    MSG_APPLIED, MSG_APPLY_MOVE,
    MSG_GET_INFO, MSG_GET_PLAN, MSG_GET_POLICY, MSG_GET_SIMILARITY,
    MSG_PLAN, MSG_SIMILARITY,
    MSG_HELLO, MSG_HELLO_ACK, MSG_HOME,
    LIST_VMS, MSG_INFO, MSG_LIST_VMS, MSG_MAX, MSG_MERGE, MSG_MERGED, MSG_MOVE,
    MSG_MOVED, MSG_POLICY, MSG_REFUSED, MSG_RESTORE, MSG_RETRY, MSG_SET_POLICY,
    MSG_SET_PRIORITY, MSG_STORE, MSG_TOPOLOGY, MSG_UNMERGED, MSG_UPLOAD,
    MSG_UPLOAD_REQ, MSG_VM_LIMIT, MSG_VMS, MSG_WANTED, NUKSM_PAGE_SIZE,
    PAGE_RANGE,
    MSG_READS, MSG_SHARE, POLICIES, POLICY, PRIORITY, PROTO_MAGIC,
    PROTO_VERSION, SHARE, SHARE_REASONS,
    READ_REGION, READ_REGION_PAGES, READS, READS_MAX, ROLE_CONTROL,
    ROLE_VM, SLOTREF, SLOTREFS_MAX, STATUS_CHANGED, STATUS_COW,
    STATUS_DISCARDED, STATUS_FAILED, STATUS_GONE, STATUS_MERGED,
    STATUS_NONE, STORE, TOPOLOGY_HEAD, UPLOAD_MAX, VCPU, VM_ENTRY, VM_LIMIT,
    VM_LIMIT_MAP_COUNT, VM_LIMIT_USERFAULTFD, VMS)

POLICY_NAMES = ", ".join(POLICIES)


def cstr(field):
    """A NUL-terminated protocol string field as str."""
    return field.split(b"\0", 1)[0].decode()


def wait_until(predicate, timeout, what):
    """Poll @predicate until it returns a true value, which is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for "
                                 f"{what}")
        time.sleep(0.05)


def proc_kib_field(pid, table, field):
    """Field @field (in kB) of /proc/@pid/@table ("status",
    "smaps_rollup"), bytes."""
    with open(f"/proc/{pid}/{table}") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/{table}")


def anon_huge_bytes(pid):
    """Anonymous memory of @pid in transparent huge pages, bytes."""
    return proc_kib_field(pid, "smaps_rollup", "AnonHugePages")


def thp_in_use():
    """Does the host give transparent huge pages (madvise or always)?"""
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        return "[never]" not in f.read()


def rss(pid):
    """Resident memory of a process, bytes."""
    return proc_kib_field(pid, "status", "VmRSS")


def process_cpu_ns(pid):
    """CPU time of the live threads of a process, ns (schedstat); 0 once
    it is gone."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def thread_cpu_ns(pid, comm):
    """CPU time of the thread of @pid called @comm, ns (schedstat)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == comm:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    return int(f.read().split()[0])
    raise AssertionError(f"no thread {comm} in process {pid}")


def fork_child(fn):
    """Run @fn in a forked child process, which then exits (0 if @fn
    returned); its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def in_child(fn):
    """Run @fn in a forked child process, which then exits: the agent
    drops what its connections leave once the process is gone."""
    _, status = os.waitpid(fork_child(fn), 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child process failed"


def die_with_parent():
    """preexec_fn: the child gets SIGKILL should the test run die."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def as_user(user):
    """Popen arguments that run the child as @user (a name) with no
    supplementary group and no capability; none for None."""
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def read_log(path):
    return path.read_text(errors="replace") if path.exists() else ""


# ---------------------------------------------------------------- protocol

def pack(msg_type, seq, payload=b"", magic=PROTO_MAGIC, length=None):
    """A datagram; @length overrides the header's payload length."""
    size = len(payload) if length is None else length
    return HEADER.pack(magic, msg_type, 0, seq, size) + payload


def hello(version=PROTO_VERSION, role=ROLE_CONTROL, priority=0,
          domain=b"", vm_name=b"", object_id=b""):
    return HELLO.pack(version, role, priority, 0, domain, vm_name, object_id)


class Message:
    def __init__(self, data):
        magic, self.type, flags, self.seq, length = HEADER.unpack_from(data)
        assert magic == PROTO_MAGIC and flags == 0, f"bad header {data[:16]}"
        self.payload = data[HEADER.size:]
        assert len(self.payload) == length, "header length != datagram size"

    def error(self):
        """(code, message) of an ERROR message."""
        assert self.type == MSG_ERROR, f"expected ERROR, got type {self.type}"
        code, _, text = ERROR.unpack(self.payload)
        return code, cstr(text)

    def slot_refs(self):
        """The SlotRef entries of a batch message."""
        count, reserved = BATCH.unpack_from(self.payload)
        assert reserved == 0
        assert len(self.payload) == BATCH.size + count * SLOTREF.size, \
            f"type {self.type}: batch size does not match its count"
        return [SlotRef(*SLOTREF.unpack_from(self.payload,
                                             BATCH.size + i * SLOTREF.size))
                for i in range(count)]


# NuksmSlotRef; ref._replace(gen=...) makes a variant.
SlotRef = collections.namedtuple("SlotRef", "page node slot gen status",
                                 defaults=(STATUS_NONE,))


def pack_candidates(entries):
    """A CANDIDATES payload of (page, digest[, gnode, idle, flags])
    tuples."""
    entries = [tuple(e) + (0, IDLE_NEVER, 0)[len(e) - 2:] for e in entries]
    return BATCH.pack(len(entries), 0) + \
        b"".join(CANDIDATE.pack(*e) for e in entries)


def pack_slot_refs(refs, contents=()):
    """A batch payload of SlotRefs, then @contents (UPLOAD)."""
    refs = list(refs)
    return BATCH.pack(len(refs), 0) + \
        b"".join(SLOTREF.pack(*r) for r in refs) + b"".join(contents)


class RawClient:
    """A hand-driven SOCK_SEQPACKET connection to nuksmd."""

    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.send(data)

    def recv(self):
        """The next message, or None at EOF."""
        data = self.sock.recv(MSG_MAX + 1)
        return Message(data) if data else None

    def recv_with_fds(self, maxfds=4):
        """The next message and the file descriptors that came with it."""
        data, fds, _, _ = socket.recv_fds(self.sock, MSG_MAX + 1, maxfds)
        return (Message(data) if data else None), fds

    def request(self, msg_type, seq, payload=b""):
        self.send(pack(msg_type, seq, payload))
        reply = self.recv()
        assert reply is not None, f"EOF in reply to type {msg_type}"
        assert reply.seq == seq
        return reply

    def messages_until_eof(self):
        """Every message the agent still sends before it hangs up."""
        messages = []
        try:
            while (msg := self.recv()) is not None:
                messages.append(msg)
        except TimeoutError:
            raise AssertionError(f"nuksmd did not hang up (after "
                                 f"{len(messages)} messages)") from None
        return messages


# Counters of an INFO message; store_pages has one entry per node.
Info = collections.namedtuple("Info", "vms pages_shared pages_sharing "
                              "store_pages orphan_pages")


# A CONDITION message: NuksmCondition bits and the reason.
Condition = collections.namedtuple("Condition", "bits reason")


def parse_condition(msg):
    bits, reserved, reason = CONDITION.unpack(msg.payload)
    assert reserved == 0
    return Condition(bits, cstr(reason))


def parse_info(msg):
    fields = INFO.unpack(msg.payload)
    # NuksmMsgInfo's order: 13 fields before pages_shared.
    vms, nodes = fields[2:4]
    shared, sharing, _, _, orphans = fields[13:18]
    return Info(vms, shared, sharing, list(fields[18:18 + nodes]), orphans)


def info_scope(msg):
    """What the counters of INFO @msg cover: INFO_HOST, _DOMAIN, _NONE."""
    return INFO.unpack(msg.payload)[5]


# A NuksmVmEntry of VMS, its fields by name (VM_ENTRY's order).
VmEntry = collections.namedtuple(
    "VmEntry", "client_id pid uid priority domain vm_name object_id "
    "requested_domain domain_source priority_limit merged_pages "
    "merged_local merged_remote nr_gnodes limit home limit_reason "
    "libvirt_name libvirt_uuid agent_cpu_ns throttled_ns uploads_read "
    "uploads_sent read_errno reserved2 reads_local reads_remote "
    "read_window_ms read_hot_regions twin_id twin_pm plan_to plan_verdict "
    "scheme applied_to eligible_pages pages_scanned full_scans zero_pages "
    "cow_breaks pages_volatile scan_rate scan_cpu_ns hints_received "
    "hints_served hints_merged tracked_writes huge_held_pages huge_kept "
    "huge_splits huge_rebuilt rest_ms max_cpu_pm state reserved3 "
    "share_max_cpu_ppm share_reason share_pace share_vms share_budget_ppm "
    "share_yield")


# A SHARE message: a VM's part of the host's scan budget.
Share = collections.namedtuple("Share", "max_cpu_ppm reason pace vms "
                               "budget_ppm yield_")


def list_vms(client, seq, from_id=0):
    """The reply to LIST_VMS from client id @from_id on, one page."""
    return client.request(MSG_LIST_VMS, seq, LIST_VMS.pack(from_id, 0))


def parse_vms(msg):
    """The VmEntry records of VMS message @msg."""
    count, _ = VMS.unpack_from(msg.payload)
    return [VmEntry(*VM_ENTRY.unpack_from(msg.payload,
                                          VMS.size + i * VM_ENTRY.size))
            for i in range(count)]


def pack_reads(regions, window_ms=1000, local=0, remote=0):
    """A READS payload of (region, idle) pairs."""
    regions = list(regions)
    return READS.pack(len(regions), window_ms, local, remote) + \
        b"".join(READ_REGION.pack(r, idle) for r, idle in regions)


def pack_topology(gnodes, vcpus, ranges):
    """A TOPOLOGY payload.  gnodes: (host_nodes, policy); vcpus: (tid,
    gnode); ranges: (first, count, gnode) or (first, count, gnode, host),
    host where page first lies in this process (0 or left out: the agent
    asks for uploads)."""
    def table(entries, layout, size):
        return b"".join(layout.pack(*e) for e in entries) + \
            bytes(layout.size * (size - len(entries)))
    return (TOPOLOGY_HEAD.pack(len(gnodes), len(vcpus), len(ranges), 0) +
            table([(n, p, 0) for n, p in gnodes], GUEST_NODE, MAX_GNODES) +
            table(vcpus, VCPU, MAX_VCPUS) +
            table([(r[0], r[1], r[3] if len(r) > 3 else 0, r[2], 0)
                   for r in ranges], PAGE_RANGE,
                  MAX_RANGES))


def agent_metric(metrics_dir, name):
    """@name's value in the metrics nuksmd last wrote to @metrics_dir
    (--metrics-dir), None if none yet."""
    path = Path(metrics_dir) / "nuksm.prom"
    found = re.search(rf"^{name} (\S+)$",
                      path.read_text() if path.exists() else "", re.M)
    return float(found.group(1)) if found else None


def digest_fragment(d):
    """The 16 bits of digest @d that WANTED names it by (never 0)."""
    return d & 0xffff or 1


class VmClient(RawClient):
    """A raw client in the VM role: HELLO (its reply with /dev/userfaultfd
    if the agent has it), the STOREs, then merges."""

    def __init__(self, path, domain="default", name="vm", timeout=5.0):
        super().__init__(path, timeout)
        self.seq = 1
        self.stores = {}  # node -> read-only fd of its store file
        self.retried = []  # pages the agent sent back in RETRY, in order
        self.wanted = set()  # digest fragments the agent sent in WANTED
        self.charged_ns = 0  # CPU the agent CHARGEd for our messages
        self.share = None  # the agent's last SHARE, a Share
        self.userfaultfd = None  # /dev/userfaultfd from the agent
        self.send(pack(MSG_HELLO, 1, hello(
            role=ROLE_VM, priority=100, domain=domain.encode(),
            vm_name=name.encode(), object_id=b"dedup0")))
        reply, fds = self.recv_with_fds()
        assert reply.type == MSG_HELLO_ACK, f"HELLO refused: {reply.error()}"
        assert len(fds) <= 1
        if fds:
            self.userfaultfd = fds[0]
        (_, self.client_id, _, self.nr_nodes, _, source, self.priority,
         self.priority_limit, _, assigned) = HELLO_ACK.unpack(reply.payload)
        # The agent decides: @domain is only what this client asked for.
        self.requested_domain = domain
        self.domain = cstr(assigned)
        self.domain_source = DOMAIN_SOURCES[source]
        for _ in range(self.nr_nodes):
            msg, fds = self.recv_with_fds()
            assert msg.type == MSG_STORE and len(fds) == 1, \
                f"expected STORE with one fd, got type {msg.type}, {fds}"
            node, reserved, size = STORE.unpack(msg.payload)
            assert msg.seq == 0 and reserved == 0
            self.stores[node] = fds[0]
            self.store_size = size
        msg = self.recv()
        assert msg.type == MSG_CONDITION and msg.seq == 0, \
            f"expected CONDITION after the STOREs, got type {msg.type}"
        self.condition = parse_condition(msg)

    def close(self):
        for fd in self.stores.values():
            os.close(fd)
        self.stores = {}
        if self.userfaultfd is not None:
            os.close(self.userfaultfd)
            self.userfaultfd = None
        super().close()

    def _send(self, msg_type, payload):
        self.seq += 1
        self.send(pack(msg_type, self.seq, payload))

    def _send_batches(self, msg_type, entries, limit, pack_entries):
        entries = list(entries)
        for i in range(0, len(entries), limit):
            self._send(msg_type, pack_entries(entries[i:i + limit]))

    # Batches of any length, sent as messages of at most the limit.

    def topology(self, gnodes, vcpus, ranges):
        self._send(MSG_TOPOLOGY, pack_topology(gnodes, vcpus, ranges))

    def reads(self, regions, window_ms=1000, local=0, remote=0):
        """READS of (region, idle) pairs, in messages of at most
        READS_MAX regions, each with the same counts."""
        regions = list(regions)
        for i in range(0, max(len(regions), 1), READS_MAX):
            self._send(MSG_READS, pack_reads(regions[i:i + READS_MAX],
                                             window_ms, local, remote))

    def vm_limit(self, limit, reason):
        self._send(MSG_VM_LIMIT, VM_LIMIT.pack(limit, 0, reason.encode()))

    def candidates(self, pairs):
        self._send_batches(MSG_CANDIDATES, pairs, CANDIDATES_MAX,
                           pack_candidates)

    def upload(self, refs, contents):
        self._send_batches(MSG_UPLOAD, zip(refs, contents), UPLOAD_MAX,
                           lambda pairs: pack_slot_refs(*zip(*pairs)))

    def merged(self, refs, status=STATUS_MERGED):
        self._send_batches(MSG_MERGED, (r._replace(status=status)
                                        for r in refs),
                           SLOTREFS_MAX, pack_slot_refs)

    def unmerged(self, refs, status=STATUS_COW):
        self._send_batches(MSG_UNMERGED, (r._replace(status=status)
                                          for r in refs),
                           SLOTREFS_MAX, pack_slot_refs)

    def restore(self, refs):
        self._send_batches(MSG_RESTORE, refs, SLOTREFS_MAX, pack_slot_refs)

    def sync(self):
        """(messages before the reply, Info) of a GET_INFO round trip.

        CONDITION messages are not among them: the last one is kept in
        self.condition; nor SHARE messages, the last kept in self.share.
        Nor are RETRY messages: their pages are added to self.retried;
        nor CHARGE messages, added to self.charged_ns; nor WANTED
        messages, their fragments added to self.wanted.

        The agent handles a client's messages in order and sends what one
        produces before it reads the next: the messages are everything
        the agent sent this client so far.
        """
        self._send(MSG_GET_INFO, b"")
        messages = []
        while True:
            msg = self.recv()
            assert msg is not None, "nuksmd hung up"
            if msg.type == MSG_INFO and msg.seq == self.seq:
                return messages, parse_info(msg)
            if msg.type == MSG_CONDITION:
                self.condition = parse_condition(msg)
            elif msg.type == MSG_SHARE:
                self.share = Share._make(SHARE.unpack(msg.payload))
            elif msg.type == MSG_RETRY:
                self.retried += [r.page for r in msg.slot_refs()]
            elif msg.type == MSG_CHARGE:
                (cpu_ns,) = CHARGE.unpack(msg.payload)
                self.charged_ns += cpu_ns
            elif msg.type == MSG_WANTED:
                bits = int.from_bytes(msg.payload, "little")
                self.wanted |= {f for f in range(bits.bit_length())
                                if bits >> f & 1}
            else:
                messages.append(msg)

    def info(self):
        """Info, when the agent has nothing else to say to this client."""
        messages, info = self.sync()
        assert not messages, \
            f"unexpected messages {[m.type for m in messages]}"
        return info

    def take(self, msg_type):
        """The SlotRefs of the @msg_type messages sent so far (only those)."""
        messages, _ = self.sync()
        assert all(m.type == msg_type and m.seq == 0 for m in messages), \
            f"expected type {msg_type}, got {[m.type for m in messages]}"
        return [r for m in messages for r in m.slot_refs()]

    def read_slot(self, node, slot):
        return os.pread(self.stores[node], NUKSM_PAGE_SIZE,
                        slot * NUKSM_PAGE_SIZE)


# ---------------------------------------------------------------- store

STORE_KEY_HEX = 32  # hex digits of a domain's key in its files' names


def store_key(state_dir, domain):
    """The key naming domain @domain's store files in @state_dir: its
    name, keyed with the state directory's secret (HMAC-SHA256)."""
    secret = (Path(state_dir) / "secret").read_bytes()
    return hmac.new(secret, domain.encode(), hashlib.sha256) \
        .hexdigest()[:STORE_KEY_HEX]


def store_path(state_dir, domain=DEFAULT_DOMAIN, node=0):
    """Domain @domain's store file of @node."""
    return Path(state_dir) / f"store-{store_key(state_dir, domain)}-node{node}"


def store_paths(state_dir):
    """Every store file in @state_dir, of every domain and node."""
    return sorted(Path(state_dir).glob("store-*-node*"))


def unregistered_store_mappings(pid, flag="uw"):
    """Mappings of store files in process @pid that are not registered
    for userfaultfd write protection (no "uw" in their VmFlags; with
    @flag "ui", for minor faults): nuksm could not write-protect their
    pages to move or merge them again (sample their reads).  Each as
    (start address, pages, store file)."""
    unregistered = []
    mapping = None
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:
                mapping = fields if len(fields) == 6 and \
                    os.path.basename(fields[5]).startswith("store-") else None
            elif fields[0] == "VmFlags:" and mapping:
                if flag not in fields[1:]:
                    start, end = (int(x, 16) for x in mapping[0].split("-"))
                    unregistered.append((hex(start), (end - start) // 4096,
                                         mapping[5]))
                mapping = None
    return unregistered


class Rewriter:
    """A thread that writes 8 bytes at a random place of a random page of
    guest [@at, @at + len(@content)) through @qtest, over and over, until
    stop(): with probability @same the value that is there (the page
    stays a duplicate, merges again, and the write breaks the sharing
    again), else a new one, kept in @content (a bytearray: what the
    memory must read).  Only it uses @qtest until it stops."""

    def __init__(self, qtest, at, content, seed, same):
        self.qtest, self.at, self.content = qtest, at, content
        self.rng, self.same = random.Random(seed), same
        self.writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self):
        pages = len(self.content) // NUKSM_PAGE_SIZE
        while not self._stop.is_set():
            off = self.rng.randrange(pages) * NUKSM_PAGE_SIZE + \
                self.rng.randrange(NUKSM_PAGE_SIZE // 8) * 8
            if self.rng.random() < self.same:
                value = int.from_bytes(self.content[off:off + 8], "little")
            else:
                value = self.rng.getrandbits(64)
                self.content[off:off + 8] = value.to_bytes(8, "little")
            self.qtest.command(f"writeq {self.at + off:#x} {value:#x}")
            self.writes += 1

    def stop(self):
        self._stop.set()
        self._thread.join()


def wait_store_mappings_registered(pid, timeout=10):
    """Every store mapping of @pid is registered for write protection.
    A commit in progress moves a mapping before it registers it, so an
    unregistered one must stay so for @timeout seconds to count."""
    try:
        wait_until(lambda: not unregistered_store_mappings(pid), timeout,
                   "every store mapping to be registered")
    except AssertionError:
        raise AssertionError(f"unregistered store mappings of {pid}: "
                             f"{unregistered_store_mappings(pid)}") from None


# ---------------------------------------------------------------- nuksmctl

def ctl(sock, *args):
    return subprocess.run([str(NUKSMCTL), "--socket", str(sock), *args],
                          capture_output=True, text=True, timeout=30)


def ctl_ok(sock, *args):
    result = ctl(sock, *args)
    assert result.returncode == 0, \
        f"nuksmctl {' '.join(args)} failed ({result.returncode}): " \
        f"{result.stderr}"
    return result.stdout


def ctl_json(sock, *args):
    return json.loads(ctl_ok(sock, "--json", *args))


def status(agent):
    """nuksmctl status of @agent, as JSON."""
    return ctl_json(agent.sock, "status")


def page_content(seed):
    """A page of content of its own for each @seed."""
    return seed.to_bytes(8, "little") * (NUKSM_PAGE_SIZE // 8)


def digest(data):
    """The XXH3 digest QEMU sends of @data."""
    return xxhash.xxh3_64_intdigest(data)


# ---------------------------------------------------------------- cgroups

def cgroup_dir(controller):
    """Where a cgroup with @controller can be made here: cgroup v2's
    root if it delegates @controller, else v1's hierarchy of it if
    writable, else None."""
    v2 = "/sys/fs/cgroup"
    try:
        with open(f"{v2}/cgroup.subtree_control") as f:
            if controller in f.read().split():
                return v2
    except OSError:
        pass
    v1 = f"/sys/fs/cgroup/{controller}"
    return v1 if os.access(v1, os.W_OK) else None


# ---------------------------------------------------------------- install

def install(prefix, destdir=None, apparmor_dir=None, hooks_dir=None):
    """scripts/install.sh (make install) into @prefix, under @destdir,
    AppArmor's rules into @apparmor_dir and the libvirt hook into
    @hooks_dir if given."""
    env = {**os.environ, "PREFIX": str(prefix), "BUILD": str(BUILD)}
    if destdir:
        env["DESTDIR"] = str(destdir)
    if apparmor_dir:
        env["APPARMOR_DIR"] = str(apparmor_dir)
    if hooks_dir:
        env["LIBVIRT_HOOKS_DIR"] = str(hooks_dir)
    result = subprocess.run([ROOT / "scripts/install.sh"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- nuksmd

def run_nuksmd(*args, timeout=10):
    """Run nuksmd expecting it to exit on its own (bad options etc.)."""
    return subprocess.run([str(NUKSMD), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def connectable(path, kind=socket.SOCK_SEQPACKET):
    with socket.socket(socket.AF_UNIX, kind) as s:
        try:
            s.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return False
    return True


class Agent:
    """A nuksmd process listening on @sock, its store in @state_dir.  It
    writes no metrics unless @args say where (--metrics-dir): agents of
    the tests must not share the host's textfile directory."""

    def __init__(self, sock, log, args, state_dir=None, user=None,
                 binary=None):
        self.sock = Path(sock)
        self.binary = binary or NUKSMD
        self.log = Path(log)
        self.args = [str(a) for a in args]
        if "--metrics-dir" not in self.args:
            self.args += ["--metrics-dir", "none"]
        self.state_dir = state_dir and Path(state_dir)
        self.user = user
        self.proc = None

    def start(self):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([str(self.binary), *self.args],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=die_with_parent,
                                         **as_user(self.user))
        wait_until(self._ready, 10, f"nuksmd to listen on {self.sock}")
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"nuksmd exited with {self.proc.returncode}"
                                 f":\n{self.log_text()}")
        return connectable(self.sock)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid

    def log_text(self):
        return read_log(self.log)

    def stop(self):
        """SIGTERM: nuksmd must exit 0 and remove its socket."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=10)
        assert rc == 0, f"nuksmd exited with {rc}:\n{self.log_text()}"
        assert not self.sock.exists(), f"nuksmd left {self.sock} behind"

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


# ---------------------------------------------------------------- QEMU

def run_qemu(*args, timeout=30):
    """Run QEMU expecting it to exit on its own (bad options etc.)."""
    return subprocess.run([str(QEMU), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def nuksm_object(**props):
    """-object argument; property names use '_' for '-'."""
    opts = ",".join(f"{k.replace('_', '-')}={v}" for k, v in props.items())
    return f"nuksm,{opts}"


class Vm:
    """A QEMU process with a QMP unix socket, driven with qemu.qmp."""

    def __init__(self, workdir, name, args, user=None, binary=None):
        self.name = name
        self.user = user
        self.binary = binary or QEMU
        self.qmp_path = Path(workdir) / f"{name}.qmp"
        self.log = Path(workdir) / f"{name}.log"
        self.serial = Path(workdir) / f"{name}.serial"
        self.qtest_path = Path(workdir) / f"{name}.qtest"
        self.args = [str(a) for a in args]
        self.proc = None
        self.qmp = None

    def start(self):
        cmd = [str(self.binary), "-name", self.name,
               "-qmp", f"unix:{self.qmp_path},server=on,wait=off",
               *self.args]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log,
                                         stderr=subprocess.STDOUT,
                                         preexec_fn=die_with_parent,
                                         **as_user(self.user))
        wait_until(self._qmp_ready, 30, f"QMP socket of {self.name}")
        self.qmp = self._qmp_connect()
        self.qmp.settimeout(30)
        return self

    def _qmp_connect(self):
        """A negotiated QMP session.  QEMU may emit an event (e.g.
        NUKSM_AGENT_CONNECTED) between the capabilities negotiation and its
        reply, which the legacy client takes for a failed negotiation: then
        connect again."""
        for _ in range(2):
            qmp = QEMUMonitorProtocol(str(self.qmp_path))
            try:
                qmp.connect()
                return qmp
            except ConnectError:
                qmp.close()
        qmp = QEMUMonitorProtocol(str(self.qmp_path))
        qmp.connect()
        return qmp

    def _qmp_ready(self):
        self.check_alive()
        return connectable(self.qmp_path, socket.SOCK_STREAM)

    def check_alive(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"QEMU {self.name} exited with "
                                 f"{self.proc.returncode}:\n{self.log_text()}")

    @property
    def pid(self):
        return self.proc.pid

    def log_text(self):
        return read_log(self.log)

    def cmd(self, name, **args):
        return self.qmp.cmd(name, **args)

    def hmp(self, command_line):
        return self.cmd("human-monitor-command", **{"command-line":
                                                    command_line})

    def nuksm(self, obj_id="dedup0"):
        """The query-nuksm entry of object @obj_id."""
        infos = {i["id"]: i for i in self.cmd("query-nuksm")}
        assert obj_id in infos, f"no nuksm object {obj_id}: {infos}"
        return infos[obj_id]

    def wait_nuksm(self, predicate, what, timeout=15, obj_id="dedup0"):
        """The query-nuksm entry of @obj_id once @predicate(entry) holds."""
        def check():
            info = self.nuksm(obj_id)
            return info if predicate(info) else None
        return wait_until(check, timeout, f"{self.name}: {what}")

    def wait_state(self, state, obj_id="dedup0"):
        return self.wait_nuksm(lambda i: i["state"] == state,
                               f"nuksm state {state}", obj_id=obj_id)

    def wait_limited(self, limit, reason):
        """query-nuksm once merging is limited by @limit, for a reason
        that says @reason, which NUKSM_MERGING_LIMITED said too."""
        info = self.wait_state("limited")
        assert info["limit"] == limit
        assert reason in info["limit-reason"]
        event = self.wait_event("NUKSM_MERGING_LIMITED")
        assert event["data"]["limit"] == limit
        return info

    def wait_event(self, name, timeout=15.0):
        """The next event called @name; other events are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {name} event from {self.name} "
                                     f"within {timeout} s")
            try:
                event = self.qmp.pull_event(wait=float(left))
            except TimeoutError:
                continue
            if event["event"] == name:
                return event

    def wait_serial(self, marker, timeout):
        def seen():
            self.check_alive()
            return marker in read_log(self.serial)
        wait_until(seen, timeout, f"'{marker}' on {self.name}'s console")

    def stop(self):
        """Quit over QMP: QEMU must exit 0."""
        self.check_alive()
        try:
            self.cmd("quit")
            self.qmp.close()
        except (EOFError, ExecInterruptedError):
            pass  # QEMU may hang up before its reply is read
        rc = self.proc.wait(timeout=30)
        assert rc == 0, f"QEMU {self.name} exited with {rc}:\n" \
                        f"{self.log_text()}"

    def kill(self):
        """SIGKILL, on purpose: teardown then has no exit status to check."""
        if self.qmp:
            with contextlib.suppress(EOFError, ExecInterruptedError):
                self.qmp.close()
            self.qmp = None
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def cue_guest(cue):
    """Tell the guest listening on socket @cue (guest_args()) to go on."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(cue))
        sock.sendall(b"go\n")


class Qtest:
    """The qtest protocol on a -qtest unix socket: guest memory access."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(path))
        self.reader = self.sock.makefile("r")

    def close(self):
        self.reader.close()
        self.sock.close()

    def command(self, line):
        self.sock.sendall(line.encode() + b"\n")
        reply = self.reader.readline().strip()
        assert reply.startswith("OK"), f"qtest '{line}': {reply}"
        return reply

    def memset(self, addr, size, value):
        self.command(f"memset {addr:#x} {size:#x} {value:#x}")


QTEST_CHUNK = 4 << 20   # bytes per b64write or b64read


def b64write(qtest, addr, data):
    qtest.command(f"b64write {addr:#x} {len(data):#x} "
                  f"{base64.b64encode(data).decode()}")


def b64read(qtest, addr, size):
    reply = qtest.command(f"b64read {addr:#x} {size:#x}")
    return base64.b64decode(reply.split()[1])


def write_big(qtest, addr, data, chunk=QTEST_CHUNK):
    for off in range(0, len(data), chunk):
        b64write(qtest, addr + off, data[off:off + chunk])


def read_big(qtest, addr, size, chunk=QTEST_CHUNK):
    return b"".join(b64read(qtest, addr + off, min(chunk, size - off))
                    for off in range(0, size, chunk))


def write_alike(vm, shared, shared_bytes, own_seed, size, at=64 << 20):
    """Write the first @shared_bytes of @shared at guest address @at of
    qtest VM @vm, then random bytes of its own (@own_seed) up to @size."""
    own = random.Random(own_seed).randbytes(size - shared_bytes)
    q = Qtest(vm.qtest_path)
    write_big(q, at, shared[:shared_bytes] + own)
    q.close()


def merge_identical(vms, seed, size=4 << 20, at=64 << 20):
    """Write the same @size random bytes at guest address @at of every qtest
    VM of @vms, wait until each merged them all, and check that they read
    back; the number of pages."""
    content = random.Random(seed).randbytes(size)
    pages = size // 4096
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    for q in qtests:
        write_big(q, at, content)
    for vm in vms:
        vm.wait_nuksm(lambda i: i["merged-pages"] - i["zero-pages"] >= pages,
                      "the pages to merge", timeout=60)
    for q in qtests:
        assert read_big(q, at, size) == content
        q.close()
    return pages


class QtestBalloon:
    """A legacy virtio-balloon-pci (``-device virtio-balloon-pci,
    disable-legacy=off``) driven over qtest as a guest's driver would:
    inflating it makes QEMU discard guest pages.  Its queue lives in
    guest memory at @ring_at (64 KiB there)."""

    VENDOR, DEVICE = 0x1af4, 0x1002      # virtio, legacy balloon
    IO_BASE = 0xc000                     # where BAR0 goes if unassigned
    # Legacy virtio-pci registers (I/O BAR0).
    GUEST_FEATURES, QUEUE_PFN, QUEUE_NUM, QUEUE_SEL = 0x04, 0x08, 0x0c, 0x0e
    QUEUE_NOTIFY, STATUS = 0x10, 0x12
    ACKNOWLEDGE, DRIVER, DRIVER_OK = 1, 2, 4
    INFLATE_QUEUE = 0
    PFNS_PER_BUFFER = 256

    def __init__(self, qtest, ring_at):
        self.qtest = qtest
        self.slot = next((s for s in range(32) if self._cfg_read(s, 0) ==
                          self.DEVICE << 16 | self.VENDOR), None)
        assert self.slot is not None, "no legacy virtio-balloon-pci"
        if self._cfg_read(self.slot, 0x10) & ~3 == 0:
            self._cfg_write(self.slot, 0x10, self.IO_BASE | 1)
        self.io = self._cfg_read(self.slot, 0x10) & ~3
        # I/O space and bus mastering on.
        self._cfg_write(self.slot, 0x04,
                        self._cfg_read(self.slot, 0x04) & 0xffff | 0x5)
        self._out("outb", self.STATUS, 0)
        self._out("outb", self.STATUS, self.ACKNOWLEDGE | self.DRIVER)
        self._out("outl", self.GUEST_FEATURES, 0)
        self._out("outw", self.QUEUE_SEL, self.INFLATE_QUEUE)
        self.size = self._in("inw", self.QUEUE_NUM)
        # A legacy vring: descriptors, then the available ring, then the
        # used ring on the next page; our PFN buffer after it.
        self.desc = ring_at
        self.avail = ring_at + 16 * self.size
        self.used = (self.avail + 6 + 2 * self.size + 4095) & ~4095
        self.buffer = (self.used + 6 + 8 * self.size + 4095) & ~4095
        self._out("outl", self.QUEUE_PFN, ring_at >> 12)
        self._out("outb", self.STATUS,
                  self.ACKNOWLEDGE | self.DRIVER | self.DRIVER_OK)
        self.avail_idx = 0

    def _cfg_addr(self, slot, off):
        return 0x80000000 | slot << 11 | off

    def _cfg_read(self, slot, off):
        self.qtest.command(f"outl 0xcf8 {self._cfg_addr(slot, off):#x}")
        return int(self.qtest.command("inl 0xcfc").split()[1], 16)

    def _cfg_write(self, slot, off, value):
        self.qtest.command(f"outl 0xcf8 {self._cfg_addr(slot, off):#x}")
        self.qtest.command(f"outl 0xcfc {value:#x}")

    def _out(self, op, reg, value):
        self.qtest.command(f"{op} {self.io + reg:#x} {value:#x}")

    def _in(self, op, reg):
        return int(self.qtest.command(f"{op} {self.io + reg:#x}").split()[1],
                   16)

    def _used_idx(self):
        return struct.unpack("<H", b64read(self.qtest, self.used + 2, 2))[0]

    def inflate(self, addrs):
        """Give the guest pages at @addrs to the host, which discards
        them: they read zero afterwards."""
        pfns = [a // 4096 for a in addrs]
        for i in range(0, len(pfns), self.PFNS_PER_BUFFER):
            chunk = pfns[i:i + self.PFNS_PER_BUFFER]
            slot = self.avail_idx % self.size
            b64write(self.qtest, self.buffer,
                     struct.pack(f"<{len(chunk)}I", *chunk))
            b64write(self.qtest, self.desc + 16 * slot,
                     struct.pack("<QIHH", self.buffer, 4 * len(chunk), 0, 0))
            b64write(self.qtest, self.avail + 4 + 2 * slot,
                     struct.pack("<H", slot))
            self.avail_idx = (self.avail_idx + 1) & 0xffff
            b64write(self.qtest, self.avail,
                     struct.pack("<HH", 0, self.avail_idx))
            self._out("outw", self.QUEUE_NOTIFY, self.INFLATE_QUEUE)
            wait_until(lambda: self._used_idx() == self.avail_idx, 10,
                       "the balloon to take the pages")


def qtest_args(qtest_path, *objects, mem="128M"):
    """A q35 machine under the qtest accelerator with a qtest socket."""
    args = ["-accel", "qtest", "-machine", "q35", "-m", mem,
            "-nodefaults", "-display", "none",
            "-qtest", f"unix:{qtest_path},server=on,wait=off",
            "-qtest-log", "/dev/null"]
    for obj in objects:
        args += ["-object", obj]
    return args


GUEST_CUE_WAIT = "nuksm-guest: waiting for a cue"


# The guest's disk on each bus guest_args() knows: its device, its name in
# the guest.
DISK_BUSES = {"virtio": ("virtio-blk-pci,drive=disk0", "vda"),
              "ide": ("ide-hd,drive=disk0,bus=ide.0", "sda")}


def guest_args(serial, fill_mib, *objects, mem_mib=256, disk=None,
               disk_bus="virtio", cue=None, room_mib=0, read_rate=0):
    """A TCG boot of the build/guest kernel and initramfs; with @disk (a
    raw image), the guest reads all of it, as its virtio-blk /dev/vda or
    (@disk_bus "ide") its IDE /dev/sda, before it says it is ready.  With
    @cue (a socket path) as well, it reads only once cue_guest(@cue) tells
    it to, on its ttyS1.  With @room_mib, it first fills its memory with
    unique pages until @room_mib MiB stay available; with @read_rate, it
    reads that many MiB a second (scripts/make-guest.sh)."""
    device, name = DISK_BUSES[disk_bus]
    append = f"console=ttyS0 quiet panic=-1 nuksm.fill={fill_mib}"
    if disk:
        append += f" nuksm.read={name}"
    if cue:
        append += " nuksm.cue=1"
    if room_mib:
        append += f" nuksm.room={room_mib}"
    if read_rate:
        append += f" nuksm.rate={read_rate}"
    args = ["-accel", "tcg", "-m", str(mem_mib), "-nodefaults",
            "-display", "none", "-no-reboot", "-serial", f"file:{serial}",
            "-kernel", GUEST / "vmlinuz",
            "-initrd", GUEST / "initramfs.cpio.gz", "-append", append]
    if cue:
        args += ["-chardev", f"socket,id=cue,path={cue},server=on,wait=off",
                 "-serial", "chardev:cue"]
    if disk:
        args += ["-drive", f"file={disk},if=none,id=disk0,format=raw",
                 "-device", device]
    for obj in objects:
        args += ["-object", obj]
    return args
