#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Write the seed corpora of the fuzz targets (tests/fuzz/README.rst).

    build/venv/bin/python tests/fuzz/make-corpus.py

corpus/proto/: one valid message of every type.
corpus/agent/: scripts for fuzz-agent.c (an op byte; for the send ops a
16-bit little-endian length and a datagram) that walk the agent through
its protocol: handshakes, a merge, uploads, restarts with RESTORE,
reconnections, TOPOLOGY and re-placement with MOVE/MOVED, READS, and
rogue messages.  The seeds are committed; run this again after a protocol
change and commit what changed.
"""

import shutil
import struct
import sys
from pathlib import Path

import xxhash

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))
import harness as h  # noqa: E402  (the protocol's constants and packers)

P = h.proto                  # every message type and layout, generated
MEMPOLICY_BIND = h.proto.MEMPOLICY_BIND
HOME_BACKEND = h.proto.HOME_BACKEND

# fuzz-agent.c's ops, and the values it fills in.
OP_SEND_A, OP_SEND_B, OP_SEND_C = 0, 1, 2
OP_RECONNECT_A, OP_RECONNECT_B, OP_TIMERS, OP_RESTART = 3, 4, 5, 6
OWN_TID = 1         # becomes the client's pid
GEN_CURRENT = 0     # becomes the slot's current generation

PAGE = bytes(range(256)) * 16
LIST_ALL = P.LIST_VMS.pack(0, 0)    # LIST_VMS from the first client id
DIGEST = xxhash.xxh3_64_intdigest(PAGE)


def msg(msg_type, payload=b"", seq=1):
    return h.pack(msg_type, seq, payload)


topology = h.pack_topology


def home(homes, sources):
    return h.proto.HOME.pack(len(homes), 0, bytes(homes), bytes(sources))


def move(page, old, new, status):
    """A MOVE/MOVED entry: page from (node, slot) to (node, slot)."""
    return h.SLOTREF.pack(page, *old, GEN_CURRENT, h.STATUS_NONE) + \
        h.SLOTREF.pack(page, *new, GEN_CURRENT, status)


def batch(entries):
    return h.BATCH.pack(len(entries), 0) + b"".join(entries)


def refs(*entries, status=h.STATUS_NONE):
    """A slot-ref batch of (page, node, slot) at the current generation."""
    return h.pack_slot_refs(h.SlotRef(p, n, s, GEN_CURRENT, status)
                            for p, n, s in entries)


def vm_stats(counters, rest_ms, max_cpu_pm, state):
    """A VM_STATS payload: its first @counters, the later ones 0."""
    count = P.VM_STATS.format.count("Q")
    return P.VM_STATS.pack(*counters, *[0] * (count - len(counters)),
                           rest_ms, max_cpu_pm, state, 0)


def proto_seeds():
    vm_entry = h.VM_ENTRY.pack(*h.VmEntry(
        client_id=1, pid=100, uid=0, priority=10, domain=b"default",
        vm_name=b"vm0", object_id=b"dedup0", requested_domain=b"blue",
        domain_source=0, priority_limit=500, merged_pages=5,
        merged_local=3, merged_remote=2, nr_gnodes=2, limit=2,
        home=bytes([0, 1]) + bytes(62),
        limit_reason=b"65000 of 65530 mappings in use", libvirt_name=b"vm0",
        libvirt_uuid=b"0c4f3a7e-2f7b-4e0c-9d1e-3a6b5c4d2e1f",
        agent_cpu_ns=2000000, throttled_ns=0, uploads_read=4,
        uploads_sent=1, read_errno=0, reserved2=0, reads_local=30,
        reads_remote=12, read_window_ms=1000, read_hot_regions=2,
        twin_id=2, twin_pm=500, plan_to=1, plan_verdict=0, scheme=1,
        applied_to=1, eligible_pages=32768, pages_scanned=100, full_scans=2,
        zero_pages=5, cow_breaks=1, pages_volatile=3, scan_rate=0,
        scan_cpu_ns=10 ** 9, hints_received=7, hints_served=6,
        hints_merged=4, tracked_writes=9, huge_held_pages=8, huge_kept=1,
        huge_splits=2, huge_rebuilt=1, rest_ms=500, max_cpu_pm=200, state=1,
        reserved3=0, share_max_cpu_ppm=20000, share_reason=1, share_pace=1,
        share_vms=2, share_budget_ppm=50000, share_yield=100))
    return {
        "hello-vm": msg(P.MSG_HELLO, h.hello(role=h.ROLE_VM, priority=10,
                                             domain=b"default",
                                             vm_name=b"vm0",
                                             object_id=b"dedup0")),
        "hello-control": msg(P.MSG_HELLO, h.hello()),
        "hello-ack": msg(P.MSG_HELLO_ACK,
                         h.HELLO_ACK.pack(h.PROTO_VERSION, 1, 0, 2, b"0.1.0",
                                          0, 10, 500, 0, b"default")),
        "error": msg(P.MSG_ERROR, h.ERROR.pack(h.ERR_BAD_MESSAGE, 0,
                                               b"malformed message")),
        "set-policy": msg(P.MSG_SET_POLICY, h.POLICY.pack(3)),
        "policy": msg(P.MSG_POLICY, h.POLICY.pack(4), seq=0),
        "get-policy": msg(P.MSG_GET_POLICY),
        "set-priority": msg(P.MSG_SET_PRIORITY, h.PRIORITY.pack(500)),
        "get-info": msg(P.MSG_GET_INFO),
        # policy, VMs, nodes, conditions, scope, VMs reading, the scan
        # budget, VMs resting, run, held, available and stall per mille;
        # pages shared, sharing, moved, to move, orphans; store pages of
        # nodes 0 and 1; the condition's reason.
        "info": msg(P.MSG_INFO, h.INFO.pack(b"0.1.0", 0, 2, 2,
                                            h.COND_STORE_FULL, h.INFO_HOST, 0,
                                            50000, 0, 1, 0, 180, 0,
                                            3, 4, 5, 7, 9, 10, 20,
                                            *[0] * 62, b"store full")),
        "list-vms": msg(P.MSG_LIST_VMS, P.LIST_VMS.pack(2, 0)),
        "get-similarity": msg(P.MSG_GET_SIMILARITY),
        "get-plan": msg(P.MSG_GET_PLAN),
        "apply-move": msg(P.MSG_APPLY_MOVE, h.APPLY_MOVE.pack(1, 1)),
        "vm-stats": msg(P.MSG_VM_STATS, vm_stats(
            [32768, 100, 2, 5, 1, 3, 0, 10 ** 9, 7, 6, 4], 500, 200, 1),
            seq=0),
        "get-sketch": msg(P.MSG_GET_SKETCH, struct.pack("=II", 1, 0)),
        "vms": msg(P.MSG_VMS, h.VMS.pack(2, 3) + vm_entry * 2),
        "store": msg(P.MSG_STORE, h.STORE.pack(1, 0, 1 << 36), seq=0),
        "candidates": msg(P.MSG_CANDIDATES, h.pack_candidates(
            [(1, DIGEST, 0, 255), (2, DIGEST ^ 1, 1, 0)])),
        "upload-req": msg(P.MSG_UPLOAD_REQ, refs((1, 0, 0)), seq=0),
        "upload": msg(P.MSG_UPLOAD, h.pack_slot_refs(
            [h.SlotRef(1, 0, 0, 7)], [PAGE])),
        "merge": msg(P.MSG_MERGE, refs((1, 0, 0), (2, 1, 5)), seq=0),
        "merged": msg(P.MSG_MERGED, h.pack_slot_refs(
            [h.SlotRef(1, 0, 0, 7, h.STATUS_MERGED),
             h.SlotRef(2, 1, 5, 7, h.STATUS_FAILED)])),
        "unmerged": msg(P.MSG_UNMERGED, h.pack_slot_refs(
            [h.SlotRef(1, 0, 0, 7, h.STATUS_COW),
             h.SlotRef(2, 1, 5, 7, h.STATUS_DISCARDED),
             h.SlotRef(3, 0, 2, 7, P.STATUS_PRUNED),
             h.SlotRef(4, 1, 3, 7, P.STATUS_REBUILT)])),
        "restore": msg(P.MSG_RESTORE, refs((1, 0, 0), (9, 1, 2))),
        "topology": msg(P.MSG_TOPOLOGY, topology(
            [(0b01, MEMPOLICY_BIND), (0b10, 0)], [(1234, 0), (1235, 1)],
            [(0, 1024, 0), (1024, 1024, 1)])),
        "home": msg(P.MSG_HOME, home([1, 0], [HOME_BACKEND, 0]), seq=0),
        "move": msg(P.MSG_MOVE, batch([move(1, (0, 0), (1, 0),
                                            h.STATUS_NONE)]), seq=0),
        "moved": msg(P.MSG_MOVED, batch([move(1, (0, 0), (1, 0),
                                              h.STATUS_MERGED)])),
        "refused": msg(P.MSG_REFUSED, refs((1, 0, 0)), seq=0),
        "retry": msg(P.MSG_RETRY, refs((1, 0, 0)), seq=0),
        "wanted": msg(P.MSG_WANTED, struct.pack("<Q", 0b110) +
                      bytes(P.FRAGMENTS // 8 - 8), seq=0),
        "condition": msg(P.MSG_CONDITION, h.CONDITION.pack(
            h.COND_STORE_FULL, 0, b"store full"), seq=0),
        "vm-limit": msg(P.MSG_VM_LIMIT, h.VM_LIMIT.pack(
            1, 0, b"no userfaultfd"), seq=0),
        "charge": msg(P.MSG_CHARGE, h.CHARGE.pack(2000000), seq=0),
        "reads": msg(P.MSG_READS, h.pack_reads([(0, 0), (1, 4), (2, 255)],
                                               local=30, remote=12), seq=0),
    }


def send(op, datagram):
    return bytes([op]) + struct.pack("<H", len(datagram)) + datagram


def a(msg_type, payload=b""):
    return send(OP_SEND_A, msg(msg_type, payload))


def b(msg_type, payload=b""):
    return send(OP_SEND_B, msg(msg_type, payload))


def c(msg_type, payload=b""):
    return send(OP_SEND_C, msg(msg_type, payload))


def op(code):
    return bytes([code])


def candidates(*entries):
    """(page, digest[, gnode, idle]) entries."""
    return h.pack_candidates(entries)


# A's page 1 and B's page 7 hold PAGE: B is asked to upload it to node 0
# slot 0, then both map it.
MERGE_ONE = [
    a(P.MSG_CANDIDATES, candidates((1, DIGEST))),
    b(P.MSG_CANDIDATES, candidates((7, DIGEST))),
    b(P.MSG_UPLOAD, h.pack_slot_refs([h.SlotRef(7, 0, 0, GEN_CURRENT)],
                                     [PAGE])),
    a(P.MSG_MERGED, refs((1, 0, 0), status=h.STATUS_MERGED)),
    b(P.MSG_MERGED, refs((7, 0, 0), status=h.STATUS_MERGED)),
]


def page(n):
    """Distinct page contents, and their digests."""
    content = bytes([n]) * h.NUKSM_PAGE_SIZE
    return content, xxhash.xxh3_64_intdigest(content)


# Eight contents, in A's pages 1..8 and B's pages 11..18: B uploads them
# to node 0 slots 0..7 and both map them.
BATCH_PAGES = [page(n) for n in range(1, 9)]
MERGE_BATCH = [
    a(P.MSG_CANDIDATES, candidates(*[(1 + i, d)
                                     for i, (_, d) in enumerate(BATCH_PAGES)])),
    b(P.MSG_CANDIDATES, candidates(*[(11 + i, d)
                                     for i, (_, d) in enumerate(BATCH_PAGES)])),
    b(P.MSG_UPLOAD, h.pack_slot_refs(
        [h.SlotRef(11 + i, 0, i, GEN_CURRENT) for i in range(8)],
        [c for c, _ in BATCH_PAGES])),
    a(P.MSG_MERGED, refs(*[(1 + i, 0, i) for i in range(8)],
                         status=h.STATUS_MERGED)),
    b(P.MSG_MERGED, refs(*[(11 + i, 0, i) for i in range(8)],
                         status=h.STATUS_MERGED)),
]

# The contents of MERGE_BATCH in A's and B's pages 0..7: A, which joined
# first, keeps its pages in line with their slots, 0..7 of node 0.
MERGE_IN_LINE = [
    a(P.MSG_CANDIDATES, candidates(*[(i, d)
                                     for i, (_, d) in enumerate(BATCH_PAGES)])),
    b(P.MSG_CANDIDATES, candidates(*[(i, d)
                                     for i, (_, d) in enumerate(BATCH_PAGES)])),
    b(P.MSG_UPLOAD, h.pack_slot_refs(
        [h.SlotRef(i, 0, i, GEN_CURRENT) for i in range(8)],
        [c for c, _ in BATCH_PAGES])),
    a(P.MSG_MERGED, refs(*[(i, 0, i) for i in range(8)],
                         status=h.STATUS_MERGED)),
    b(P.MSG_MERGED, refs(*[(i, 0, i) for i in range(8)],
                         status=h.STATUS_MERGED)),
]

# A's only guest node is bound to host node 1, its home; B's home is 0.
A_ON_NODE_1 = a(P.MSG_TOPOLOGY, topology([(0b10, MEMPOLICY_BIND)],
                                         [(OWN_TID, 0)], [(0, 1 << 20, 0)]))
POLICY_IDS = {name: i for i, name in enumerate(h.POLICIES)}


def set_policy(name):
    return c(P.MSG_SET_POLICY, h.POLICY.pack(POLICY_IDS[name]))


def placement_seed(policy):
    """Pages paired across nodes under @policy, hot and cold, then a
    re-placement pass of the pages merged under global."""
    hot, cold = 0, 255
    return [
        c(P.MSG_HELLO, h.hello()), A_ON_NODE_1, *MERGE_BATCH,
        set_policy(policy),
        a(P.MSG_CANDIDATES, candidates((21, 1001, 0, hot), (22, 1002, 0, hot),
                                       (23, 1003, 0, cold))),
        b(P.MSG_CANDIDATES, candidates((31, 1001, 0, hot), (32, 1002, 0, cold),
                                       (33, 1003, 0, cold))),
        op(OP_TIMERS), op(OP_TIMERS), c(P.MSG_GET_INFO),
    ]


def agent_seeds():
    control = h.hello()
    seeds = {
        "control": [
            c(P.MSG_HELLO, control), c(P.MSG_GET_INFO), c(P.MSG_LIST_VMS, LIST_ALL),
            c(P.MSG_GET_POLICY), c(P.MSG_SET_POLICY, h.POLICY.pack(3)),
            a(P.MSG_SET_PRIORITY, h.PRIORITY.pack(5)), b(P.MSG_LIST_VMS, LIST_ALL),
        ],
        "version-mismatch": [
            c(P.MSG_HELLO, h.hello(version=h.PROTO_VERSION - 1)),
        ],
        "merge": [
            *MERGE_ONE,
            a(P.MSG_UNMERGED, refs((1, 0, 0), status=h.STATUS_COW)),
            c(P.MSG_HELLO, control), c(P.MSG_GET_INFO),
        ],
        "merge-outcomes": [
            # Two pages of A: A uploads, B's page joins the ready slot.
            a(P.MSG_CANDIDATES, candidates((1, DIGEST), (2, DIGEST))),
            a(P.MSG_UPLOAD, h.pack_slot_refs([h.SlotRef(2, 0, 0, 0)],
                                             [PAGE])),
            a(P.MSG_MERGED, refs((1, 0, 0), status=h.STATUS_CHANGED)),
            b(P.MSG_CANDIDATES, candidates((7, DIGEST))),
            b(P.MSG_MERGED, refs((7, 0, 0), status=h.STATUS_GONE)),
        ],
        "landing": [
            # A's page 1 lands on B's page 7: B uploads, A maps it; A's
            # page 2 finds nothing and is written (RETRY); B's page 8
            # pairs with it, which A, still landing, may not upload.
            b(P.MSG_CANDIDATES, candidates((7, DIGEST))),
            a(P.MSG_CANDIDATES, candidates(
                (1, DIGEST, 0, h.IDLE_NEVER, P.CANDIDATE_LANDING),
                (2, DIGEST + 1, 0, h.IDLE_NEVER, P.CANDIDATE_LANDING))),
            b(P.MSG_UPLOAD, h.pack_slot_refs([h.SlotRef(7, 0, 0, 0)],
                                             [PAGE])),
            a(P.MSG_MERGED, refs((1, 0, 0), status=h.STATUS_MERGED)),
            b(P.MSG_CANDIDATES, candidates((8, DIGEST + 1))),
            a(P.MSG_CANDIDATES, candidates((3, DIGEST))),
        ],
        "upload-changed": [
            a(P.MSG_CANDIDATES, candidates((1, DIGEST))),
            b(P.MSG_CANDIDATES, candidates((7, DIGEST))),
            b(P.MSG_UPLOAD, h.pack_slot_refs([h.SlotRef(7, 0, 0, 0)],
                                             [bytes(4096)])),
            a(P.MSG_CANDIDATES, candidates((1, DIGEST))),
        ],
        "restart-restore": [
            *MERGE_ONE,
            op(OP_RESTART),
            a(P.MSG_RESTORE, refs((1, 0, 0))),
            b(P.MSG_RESTORE, refs((7, 0, 0))),
            a(P.MSG_CANDIDATES, candidates((2, DIGEST))),
            a(P.MSG_MERGED, refs((2, 0, 0), status=h.STATUS_MERGED)),
            op(OP_TIMERS),
            c(P.MSG_HELLO, control), c(P.MSG_GET_INFO),
        ],
        "restart-grace-over": [
            *MERGE_ONE,
            op(OP_RESTART),
            op(OP_TIMERS),
            a(P.MSG_RESTORE, refs((1, 0, 0))),
        ],
        "reconnect": [
            *MERGE_ONE,
            op(OP_RECONNECT_A),
            a(P.MSG_RESTORE, refs((1, 0, 0))),
            op(OP_RECONNECT_B),
            b(P.MSG_CANDIDATES, candidates((8, DIGEST))),
            a(P.MSG_UNMERGED, refs((1, 0, 0), status=h.STATUS_DISCARDED)),
        ],
        "batch-restart": [
            *MERGE_BATCH,
            op(OP_RESTART),
            a(P.MSG_RESTORE, refs(*[(1 + i, 0, i) for i in range(0, 8, 2)])),
            op(OP_TIMERS),
            c(P.MSG_HELLO, control), c(P.MSG_GET_INFO),
        ],
        "topology-moves": [
            c(P.MSG_HELLO, control),
            A_ON_NODE_1,
            *MERGE_ONE,
            # Under local, A's page moves to a copy on node 1.
            c(P.MSG_SET_POLICY, h.POLICY.pack(2)),
            op(OP_TIMERS),
            op(OP_TIMERS),
            a(P.MSG_MOVED, batch([move(1, (0, 0), (1, 0),
                                       h.STATUS_MERGED)])),
            c(P.MSG_LIST_VMS, LIST_ALL), c(P.MSG_GET_INFO),
        ],
        # fair: A (home 1) reads the merged pages, whose copies move to
        # node 1; then B reads them too, and A sends a READS outside its
        # TOPOLOGY.
        "reads-moves": [
            c(P.MSG_HELLO, control),
            A_ON_NODE_1,
            b(P.MSG_TOPOLOGY, topology([(0, 0)], [(OWN_TID, 0)],
                                       [(0, 1 << 20, 0)])),
            *MERGE_IN_LINE,
            set_policy("fair"),
            a(P.MSG_READS, h.pack_reads([(0, 0)], local=8)),
            op(OP_TIMERS), op(OP_TIMERS),
            a(P.MSG_MOVED, batch([move(i, (0, i), (1, i), h.STATUS_MERGED)
                                  for i in range(8)])),
            b(P.MSG_MOVED, batch([move(i, (0, i), (1, i), h.STATUS_MERGED)
                                  for i in range(8)])),
            b(P.MSG_READS, h.pack_reads([(0, 1), (1, 255)], remote=8)),
            op(OP_TIMERS), op(OP_TIMERS), op(OP_TIMERS),
            c(P.MSG_LIST_VMS, LIST_ALL),
            a(P.MSG_READS, h.pack_reads([(1 << 20, 0)])),
        ],
        "rogue": [
            a(P.MSG_MERGED, refs((1, 0, 0), status=h.STATUS_MERGED)),
            b(P.MSG_HELLO, h.hello(role=h.ROLE_VM, priority=1,
                                   domain=b"default")),
            c(P.MSG_CANDIDATES, candidates((1, DIGEST))),
            send(OP_SEND_A, b"NKSM" + bytes(12)),
            a(P.MSG_MOVE, batch([move(1, (0, 0), (1, 0), h.STATUS_NONE)])),
        ],
    }
    for policy in ("ksm-order", "fair", "priority", "adaptive"):
        seeds["placement-" + policy] = placement_seed(policy)
    return seeds


def write(directory, seeds):
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for name, data in seeds.items():
        if isinstance(data, list):
            data = b"".join(data)
        (directory / name).write_bytes(data)
    print(f"{directory}: {len(seeds)} seeds")


def main():
    write(HERE / "corpus" / "proto", proto_seeds())
    write(HERE / "corpus" / "agent", agent_seeds())


if __name__ == "__main__":
    main()
