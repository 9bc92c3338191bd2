# SPDX-License-Identifier: GPL-2.0-or-later
"""Write tracking: a pass spares hashing the pages nothing wrote.

The scanner write-protects the pages it sees for the first time and
those it found stable; a write faults to QEMU's "nuksm-writes" thread,
which lifts the protection of the page's 2 MiB stretch.  These tests
look at what a user sees: a page written once is hashed once, an idle
VM's passes hash next to nothing, every write is still noticed (a page
written into a duplicate merges), writes are never held, and huge pages
stay huge; private copies in windows (between merged pages) are tracked
too.
"""

import random

import pytest

import harness
from harness import Qtest, b64read, b64write, write_big

# The merge path at the VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

PAGE = 4096
MIB = 1 << 20
REGION_AT = 64 * MIB
REGION = 16 * MIB
PAGES = REGION // PAGE


def next_passes(vm, n):
    """Start a pass now and wait for @n passes to end; returns the pages
    they hashed."""
    before = vm.nuksm()
    for _ in range(n):
        done = vm.nuksm()["full-scans"]
        vm.cmd("nuksm-scan")
        vm.wait_nuksm(lambda i: i["full-scans"] > done, "a pass",
                      timeout=60)
    return vm.nuksm()["pages-scanned"] - before["pages-scanned"]


def test_idle_passes_spare_unwritten_pages(agent, qtest_vm):
    """16 MiB of unique pages, nothing to merge: each is hashed once, and
    then a pass hashes next to none of them (nothing offers them again:
    the agent keeps them in its unstable table).  Then a write is
    noticed: a page written with the content of another merges with it,
    and every page reads what was written, while the region's huge pages
    stay huge."""
    # A lone duplicate in a huge page merges only at huge-split=1
    # (test_huge_pages.py); here the point is that its write is noticed.
    vm = qtest_vm("vm0", extra=["-m", "512M"], agent=agent.sock,
                  max_cpu=100, huge_split=1)
    vm.wait_state("active")
    q = Qtest(vm.qtest_path)
    content = bytearray(random.Random(1).randbytes(REGION))
    before = vm.nuksm()["pages-scanned"]
    write_big(q, REGION_AT, bytes(content))
    huge_before = harness.anon_huge_bytes(vm.pid)

    # Pass 1 protects the pages it sees for the first time, pass 2 finds
    # them still protected and hashes each once, pass 3 on spares them.
    next_passes(vm, 3)
    hashed = next_passes(vm, 4)
    assert hashed < PAGES // 8, \
        f"4 idle passes hashed {hashed} pages of {PAGES} unwritten ones"
    info = vm.nuksm()
    once = info["pages-scanned"] - before
    assert PAGES <= once < PAGES + PAGES // 8, \
        f"{once} hashes of {PAGES} pages written once: not one each"
    assert info["hashing"]["pages-sampled"] == 0, info["hashing"]
    if harness.thp_in_use():
        assert harness.anon_huge_bytes(vm.pid) >= huge_before, \
            "write tracking split huge pages"

    # Pages of three stretches written: page 1 becomes a copy of page 0,
    # page 1000 and page 3000 get new content.
    content[PAGE:2 * PAGE] = content[:PAGE]
    b64write(q, REGION_AT + PAGE, content[:PAGE])
    for p in (1000, 3000):
        fresh = random.Random(p).randbytes(PAGE)
        content[p * PAGE:(p + 1) * PAGE] = fresh
        b64write(q, REGION_AT + p * PAGE, fresh)
    vm.wait_nuksm(lambda i: i["merged-pages"] >= 2,
                  "the written copy to merge", timeout=60)
    for p in range(PAGES):
        assert b64read(q, REGION_AT + p * PAGE, PAGE) == \
            bytes(content[p * PAGE:(p + 1) * PAGE]), f"page {p} differs"
    if harness.thp_in_use():
        # The stretch of pages 0 and 1 is merged now: 2 MiB split.
        assert harness.anon_huge_bytes(vm.pid) >= huge_before - 2 * MIB, \
            "lifting write protection split huge pages"
    q.close()


def test_every_written_stretch_is_noticed(agent, qtest_vm):
    """Once the region is tracked, one page of each of its 2 MiB
    stretches is written with the content of its neighbour, one write
    (and one fault) after the other, while the scanner rests: every write
    completes, and every copy merges."""
    # A lone duplicate in a huge page merges only at huge-split=1
    # (test_huge_pages.py); here the point is that its write is noticed.
    vm = qtest_vm("vm0", extra=["-m", "512M"], agent=agent.sock,
                  max_cpu=100, huge_split=1)
    vm.wait_state("active")
    q = Qtest(vm.qtest_path)
    content = random.Random(2).randbytes(REGION)
    write_big(q, REGION_AT, content)
    next_passes(vm, 3)
    for p in range(0, PAGES, 512):
        b64write(q, REGION_AT + (p + 1) * PAGE,
                 content[p * PAGE:(p + 1) * PAGE])
    vm.wait_nuksm(lambda i: i["merged-pages"] >= 2 * PAGES // 512,
                  "the written copies to merge", timeout=60)
    q.close()


def test_copies_in_windows_are_tracked(agent, qtest_vm):
    """Two regions whose every other page is a duplicate of the other's:
    once they merge, the pages between lie in windows as private copies
    (nuksm-remap.c), as many as the merged pages.  Idle passes spare them
    as they spare anonymous pages, and a write to one is still noticed:
    a copy written with the content of another merges with it."""
    vm = qtest_vm("vm0", extra=["-m", "512M"], agent=agent.sock,
                  max_cpu=100)
    vm.wait_state("active")
    q = Qtest(vm.qtest_path)
    rng = random.Random(3)
    shared = [rng.randbytes(PAGE) for _ in range(PAGES // 2)]
    regions = []
    for r in range(2):
        content = bytearray(REGION)
        for i in range(PAGES // 2):
            content[2 * i * PAGE:(2 * i + 1) * PAGE] = shared[i]
            content[(2 * i + 1) * PAGE:(2 * i + 2) * PAGE] = \
                rng.randbytes(PAGE)
        write_big(q, REGION_AT + r * REGION, bytes(content))
        regions.append(content)
    vm.wait_nuksm(lambda i: i["merged-pages"] >= PAGES,
                  "the duplicates to merge", timeout=120)

    next_passes(vm, 3)
    hashed = next_passes(vm, 4)
    assert hashed < PAGES // 8, \
        f"4 idle passes hashed {hashed} pages; {PAGES} lie between merged ones"

    # Page 1 of the first region, a copy in a window, becomes a copy of
    # page 3.
    content = regions[0]
    content[PAGE:2 * PAGE] = content[3 * PAGE:4 * PAGE]
    b64write(q, REGION_AT + PAGE, bytes(content[3 * PAGE:4 * PAGE]))
    vm.wait_nuksm(lambda i: i["merged-pages"] >= PAGES + 2,
                  "the written copy to merge", timeout=60)
    for r, content in enumerate(regions):
        for p in range(PAGES):
            assert b64read(q, REGION_AT + r * REGION + p * PAGE, PAGE) == \
                bytes(content[p * PAGE:(p + 1) * PAGE]), \
                f"page {p} of region {r} differs"
    q.close()
