# SPDX-License-Identifier: GPL-2.0-or-later
"""Huge pages kept where merging does not pay (hw/mem/nuksm/nuksm-huge.h).

QEMU advises guest RAM for transparent huge pages.  A merge splits the
huge page around it: in a huge page, duplicates are held back until
huge-split of its 512 pages would go.  Two VMs hold 32 regions of 2 MiB
that are their own but for their first page, alike in both, and 32
regions alike in both: the alike regions merge, the others keep their
huge pages, and every page reads what was written.  Once writes end the
merges of a region split so, its huge page is rebuilt.
"""

import random

import pytest

import harness
from harness import Qtest, read_big, write_big

# The merge path at the VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

PAGE = 4096
MIB = 1 << 20
HUGE = 2 * MIB
AT = 64 * MIB
LONE = 32               # regions alike in their first page only
ALIKE = 32              # regions alike in all their pages


def require_thp():
    if not harness.thp_in_use():
        pytest.skip("transparent huge pages are off on this host: "
                    "there is no huge page to keep")


def contents(index):
    """What VM @index holds from AT: LONE regions of its own with a
    first page alike in both VMs, then ALIKE regions alike in both."""
    own = random.Random(100 + index)
    alike = random.Random(7)
    out = bytearray()
    for _ in range(LONE):
        out += alike.randbytes(PAGE) + own.randbytes(HUGE - PAGE)
    out += alike.randbytes(ALIKE * HUGE)
    return bytes(out)


def start_pair(agent, qtest_vm, **props):
    """Two VMs filled while nuksm is paused, so that both start out with
    all their huge pages; then merging starts."""
    vms, data = [], []
    for i in range(2):
        vm = qtest_vm(f"vm{i}", extra=["-m", "512M"], agent=agent.sock,
                      max_cpu=100, enabled="off", **props)
        vm.wait_state("disabled")
        data.append(contents(i))
        q = Qtest(vm.qtest_path)
        write_big(q, AT, data[i])
        q.close()
        vms.append(vm)
    huge = [harness.anon_huge_bytes(vm.pid) for vm in vms]
    if min(huge) < (LONE + ALIKE) * HUGE:
        pytest.skip(f"the kernel gave the VMs {huge} bytes of huge pages, "
                    f"not the {(LONE + ALIKE) * HUGE} written: no huge "
                    "pages to keep (memory too fragmented?)")
    for vm in vms:
        vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
               value=True)
    return vms, data


def settled(vm, merged):
    """query-nuksm once @merged pages merged and two more passes ended
    (what is held back stays so)."""
    info = vm.wait_nuksm(lambda i: i["merged-pages"] >= merged,
                         f"{merged} pages to merge", timeout=120)
    scans = info["full-scans"]
    return vm.wait_nuksm(lambda i: i["full-scans"] >= scans + 2,
                         "two more passes", timeout=60)


def check_intact(vm, data):
    q = Qtest(vm.qtest_path)
    assert read_big(q, AT, len(data)) == data, f"{vm.name}: content lost"
    q.close()


def test_lone_duplicates_keep_their_huge_pages(agent, qtest_vm):
    """At the default huge-split: the alike regions merge whole (split:
    they pay), the lone duplicates are held back and at least 90% of
    their huge pages stay; query-nuksm says so."""
    require_thp()
    vms, data = start_pair(agent, qtest_vm)
    for vm, d in zip(vms, data):
        info = settled(vm, ALIKE * 512)
        huge = info["huge-pages"]
        assert huge["split"] == 64, huge
        assert huge["kept"] >= LONE * 9 // 10, huge
        assert huge["held-pages"] >= huge["kept"], huge
        assert huge["splits"] >= ALIKE, huge
        assert info["merged-pages"] < ALIKE * 512 + LONE // 10, \
            f"lone duplicates merged: {info['merged-pages']} pages, {huge}"
        kept = harness.anon_huge_bytes(vm.pid)
        assert kept >= LONE * HUGE * 9 // 10, \
            f"{vm.name}: {kept >> 20} MiB of huge pages left, not " \
            f"{LONE * 2 * 9 // 10} or more"
        check_intact(vm, d)


def test_huge_split_1_splits_for_any_duplicate(agent, qtest_vm):
    """huge-split=1 is KSM's way: every duplicate merges, the lone ones
    too, and their huge pages split."""
    require_thp()
    vms, data = start_pair(agent, qtest_vm, huge_split=1)
    for vm, d in zip(vms, data):
        info = settled(vm, ALIKE * 512 + LONE)
        assert info["huge-pages"]["kept"] == 0, info["huge-pages"]
        assert harness.anon_huge_bytes(vm.pid) < LONE * HUGE // 10
        check_intact(vm, d)


def test_huge_pages_come_back_when_merging_ends(agent, qtest_vm):
    """The alike regions merge whole, their huge pages split; then the
    guest of VM 0 writes content of its own over them: every sharing
    breaks, no merge pays for the split any more, and its scanner
    rebuilds the huge pages (at least 90% of them, as query-nuksm and
    AnonHugePages say), every page reading what was written last.
    VM 1's pages still map their copies: its huge pages stay split."""
    require_thp()
    vms, data = start_pair(agent, qtest_vm)
    for vm in vms:
        settled(vm, ALIKE * 512)
    before = harness.anon_huge_bytes(vms[0].pid)
    written = random.Random(55).randbytes(ALIKE * HUGE)
    q = Qtest(vms[0].qtest_path)
    write_big(q, AT + LONE * HUGE, written)
    q.close()
    # The sharing's end is counted as the breaks are seen, which may
    # trail a stretch's rebuild: wait for both.
    vms[0].wait_nuksm(
        lambda i: i["huge-pages"]["rebuilt"] >= ALIKE * 9 // 10 and
        i["merged-pages"] < ALIKE * 512 // 10,
        "the written regions' sharing to break and their huge pages to be "
        "rebuilt", timeout=120)
    after = harness.anon_huge_bytes(vms[0].pid)
    assert after >= before + ALIKE * HUGE * 9 // 10, \
        f"{after >> 20} MiB of huge pages after, {before >> 20} before"
    check_intact(vms[0], data[0][:LONE * HUGE] + written)
    check_intact(vms[1], data[1])
    other = vms[1].nuksm()
    assert other["huge-pages"]["rebuilt"] == 0, other["huge-pages"]
    assert other["merged-pages"] >= ALIKE * 512, other
