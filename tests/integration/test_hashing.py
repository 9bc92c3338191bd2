# SPDX-License-Identifier: GPL-2.0-or-later
"""The scanner's change test (hw/mem/nuksm/nuksm-strength.c): a sampled
digest of a few 64-byte lines of a page says whether it changed, and
nominates pages that look like the zero page; only a full compare under
write protection proves a page zero or equal to another.

With write tracking, a page nothing writes between the pass that first
sees it and the next is hashed once, in full, and needs no sample.  The
samples look at pages written again meanwhile: a write releases the
protection of its whole stretch, which then does not tell which page
changed.  So these tests keep rewriting their pages while the passes
look at them (rewriting()).

Line 1 of a page (bytes 64 to 127) is the last line a sampled digest
reads (lines go in bit-reversed order: it is the 33rd): at every strength
below a whole page, a page whose data is all there looks like the zero
page to its sample.
"""

import contextlib
import threading

import pytest

from harness import Qtest, read_big, write_big

# The merge path at the VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

PAGE = 4096
MIB = 1 << 20
REGION_AT = 64 * MIB
HIDDEN_AT = 64           # line 1
PAGES = 1024             # 4 MiB


def hidden_page(i):
    """Zero but for 8 bytes in line 1, which tell page @i."""
    page = bytearray(PAGE)
    page[HIDDEN_AT:HIDDEN_AT + 8] = (i + 1).to_bytes(8, "little")
    return bytes(page)


def assert_kept(q, pages):
    data = read_big(q, REGION_AT, len(pages) * PAGE)
    for i, page in enumerate(pages):
        assert data[i * PAGE:(i + 1) * PAGE] == page, \
            f"page {i} lost its data"


@contextlib.contextmanager
def rewriting(vm, write):
    """Call @write(qtest) over and over until the block ends."""
    stop = threading.Event()
    q = Qtest(vm.qtest_path)

    def loop():
        while not stop.is_set():
            write(q)
    writer = threading.Thread(target=loop)
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join()
        q.close()


def passes(vm, n):
    """Start a pass now and wait for @n passes to end."""
    for _ in range(n):
        done = vm.nuksm()["full-scans"]
        vm.cmd("nuksm-scan")
        vm.wait_nuksm(lambda i: i["full-scans"] > done, "a pass",
                      timeout=60)


def test_pages_zero_where_sampled_are_kept(agent, qtest_vm):
    """Pages whose data lies only where no sample below a whole page
    reads look like the zero page: they are nominated, the commit's full
    compare finds them not zero, and they keep their data.  Each such
    miss costs a full compare, so the adaptive strength rises, to a whole
    page here, where the samples see the data."""
    vm = qtest_vm(extra=["-m", "512M"], agent=agent.sock, max_cpu=100)
    vm.wait_state("active")
    assert vm.nuksm()["hashing"]["strength"] == 256
    pages = [hidden_page(i) for i in range(PAGES)]
    data = b"".join(pages)
    with rewriting(vm, lambda q: write_big(q, REGION_AT, data)):
        vm.wait_nuksm(lambda i: i["hashing"]["misses"] >= PAGES // 2,
                      "the samples to nominate the pages", timeout=60)
    passes(vm, 3)

    assert_kept(Qtest(vm.qtest_path), pages)
    hashing = vm.nuksm()["hashing"]
    print(f"hashing: {hashing}, zero pages {vm.nuksm()['zero-pages']}")
    assert hashing["adaptive"] is True
    assert hashing["penalty-us"] > 0
    assert hashing["strength"] == PAGE
    # Found not zero, each is offered, with its full digest.
    assert hashing["pages-hashed"] >= PAGES
    assert f"hashing adaptive, now {PAGE} bytes" in vm.hmp("info nuksm")


def test_fixed_strength_does_not_adapt(agent, qtest_vm):
    """hash-strength fixes the strength: the same misses leave it where
    it is, and the pages keep their data all the same."""
    vm = qtest_vm(extra=["-m", "512M"], agent=agent.sock, max_cpu=100,
                  hash_strength=128)
    vm.wait_state("active")
    pages = [hidden_page(i) for i in range(PAGES)]
    data = b"".join(pages)
    with rewriting(vm, lambda q: write_big(q, REGION_AT, data)):
        vm.wait_nuksm(lambda i: i["hashing"]["misses"] >= PAGES // 2,
                      "the samples to nominate the pages", timeout=60)
    passes(vm, 3)

    hashing = vm.nuksm()["hashing"]
    assert (hashing["strength"], hashing["adaptive"]) == (128, False)
    assert_kept(Qtest(vm.qtest_path), pages)
    assert "hashing fixed at 128 bytes" in vm.hmp("info nuksm")
    # Adaptive again from where it is.
    vm.cmd("qom-set", path="/objects/dedup0", property="hash-strength",
           value=0)
    vm.wait_nuksm(lambda i: i["hashing"]["adaptive"], "adaptive again")


def test_strength_falls_where_samples_are_right(agent, qtest_vm):
    """Zero pages, which their samples nominate rightly: every full
    compare confirms them, no miss, and the strength falls to its
    weakest, one line, while each is dropped."""
    vm = qtest_vm(extra=["-m", "512M"], agent=agent.sock, max_cpu=100)
    vm.wait_state("active")
    with rewriting(vm, lambda q: q.memset(REGION_AT, 4 * PAGES * PAGE, 0)):
        vm.wait_nuksm(lambda i: i["hashing"]["strength"] == 64,
                      "the strength to fall", timeout=60)
    passes(vm, 3)

    info = vm.nuksm()
    print(f"hashing: {info['hashing']}, zero pages {info['zero-pages']}")
    assert info["zero-pages"] >= 4 * PAGES
    assert info["hashing"]["misses"] == 0
    assert info["hashing"]["strength"] == 64
    assert info["hashing"]["pages-sampled"] > 0
    assert info["hashing"]["profit-us"] > 0


def test_pages_alike_where_sampled_do_not_merge(agent, qtest_vm):
    """Two VMs: pages alike in every line a sample reads but line 1, and
    pages alike throughout.  Only the latter merge: a sampled digest only
    tells whether a page changed; the agent's key is the full digest, and
    the commit compares pages in full."""
    vms = [qtest_vm(f"vm{n}", extra=["-m", "512M"], agent=agent.sock,
                    max_cpu=100, hash_strength=64) for n in range(2)]
    sampled_alike = PAGES // 2
    contents = []
    for n, vm in enumerate(vms):
        vm.wait_state("active")
        pages = []
        for i in range(PAGES):
            page = bytearray(b"\x5a" * PAGE)
            page[:8] = (i + 1).to_bytes(8, "little")
            if i < sampled_alike:
                page[HIDDEN_AT:HIDDEN_AT + 8] = (n + 1).to_bytes(8, "little")
            pages.append(bytes(page))
        write_big(Qtest(vm.qtest_path), REGION_AT, b"".join(pages))
        contents.append(pages)
    for vm in vms:
        vm.wait_nuksm(lambda i: i["merged-pages"] >= PAGES - sampled_alike,
                      "the pages alike throughout to merge", timeout=60)
    for vm in vms:
        passes(vm, 2)
    for vm, pages in zip(vms, contents):
        assert vm.nuksm()["merged-pages"] == PAGES - sampled_alike
        assert_kept(Qtest(vm.qtest_path), pages)
