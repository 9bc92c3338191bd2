# SPDX-License-Identifier: GPL-2.0-or-later
"""Read sampling of merged pages, end to end: real nuksmd, real QEMUs
(-accel qtest), reads and writes through the qtest protocol, which QEMU
serves in its main loop as it serves a device's DMA.

Each window, nuksm drops the page-table entry of a merged page per read
region and catches the next access to it as a userfaultfd minor fault
(hw/mem/nuksm/nuksm-reads.c, docs/placement.rst).
"""

import random
import time

import harness
from harness import Qtest, read_big, wait_until, write_big
from test_merge import enable, make_pair

PAGE = 4096
MIB = 1 << 20
REGION_PAGES = 512              # NUKSM_READ_REGION_PAGES
SHARED_AT = 64 * MIB


def reads(vm):
    return vm.nuksm()["hotness"]["reads"]


def merged_non_zero(vm):
    info = vm.nuksm()
    return info["merged-pages"] - info["zero-pages"]


def merge(vms, content):
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    for q in qtests:
        write_big(q, SHARED_AT, content)
    enable(vms)
    pages = len(content) // PAGE
    wait_until(lambda: all(merged_non_zero(vm) >= pages for vm in vms), 120,
               f"{pages} pages to merge in both VMs")
    for vm in vms:
        harness.wait_store_mappings_registered(vm.pid)
    return qtests


def set_prop(vm, name, value):
    vm.cmd("qom-set", path="/objects/dedup0", property=name, value=value)


def test_reads_of_merged_pages_are_caught(start_agent, qtest_vm):
    """The VM that reads its merged pages has its reads caught, in every
    region it reads, local or remote; the VM that reads nothing has none,
    however many windows pass."""
    agent, vms = make_pair(start_agent(), qtest_vm)
    size = 16 * MIB
    regions = size // PAGE // REGION_PAGES
    qtests = merge(vms, random.Random(7).randbytes(size))
    # A window must be long enough for a whole sweep of vm0's reads to
    # reach each region's probed page: three sweeps' time.
    began = time.monotonic()
    read_big(qtests[0], SHARED_AT, size)
    window_ms = max(200, int(3000 * (time.monotonic() - began)))
    for vm in vms:
        assert not harness.unregistered_store_mappings(vm.pid, "ui")
        set_prop(vm, "hot-window", window_ms)
    windows = [reads(vm)["windows"] for vm in vms]

    def vm0_read_everywhere():
        read_big(qtests[0], SHARED_AT, size)
        caught = reads(vms[0])
        # Its first sweep faults in every page, which marks every region
        # read; the probes' reads are the samples counted.
        return caught["read-regions"] == regions and \
            caught["reads"] >= regions
    wait_until(vm0_read_everywhere, 60 + window_ms // 50,
               f"vm0's reads to be caught in all {regions} regions")
    wait_until(lambda: reads(vms[1])["windows"] >= windows[1] + 10,
               30 + window_ms // 50,
               "ten windows of vm1")
    info = [vm.nuksm() for vm in vms]
    caught = info[0]["hotness"]["reads"]
    assert caught["reads"] >= regions and caught["probes"] >= regions
    assert info[0]["reads-local"] + info[0]["reads-remote"] == \
        caught["reads"]
    assert caught["lost"] == 0
    assert info[1]["hotness"]["reads"]["read-regions"] == 0
    assert info[1]["hotness"]["reads"]["reads"] == 0
    assert info[1]["hotness"]["reads"]["probes"] >= regions
    # Reading them changed nothing: they are still merged, still equal.
    assert all(merged_non_zero(vm) >= size // PAGE for vm in vms)
    assert read_big(qtests[1], SHARED_AT, size) == \
        read_big(qtests[0], SHARED_AT, size)
    for q in qtests:
        q.close()


def test_read_sampling_loses_no_write(start_agent, qtest_vm):
    """A writer keeps hitting merged pages while read sampling drops page
    after page from the page table in 10 ms windows: every page ends with
    exactly what was last written, and the other VM's are untouched."""
    agent, vms = make_pair(start_agent(), qtest_vm)
    size = 32 * MIB
    original = random.Random(9).randbytes(size)
    qtests = merge(vms, original)
    for vm in vms:
        set_prop(vm, "hot-window", 10)
        set_prop(vm, "read-samples", 65536)
    began = reads(vms[0])
    content = bytearray(original)
    # Mostly the same value back: the page stays a duplicate, merges
    # again, and is sampled and written again.
    writer = harness.Rewriter(qtests[0], SHARED_AT, content, seed=11,
                              same=0.9)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = reads(vms[0])
            if now["windows"] - began["windows"] >= 500 and \
                    now["probes"] - began["probes"] >= 5000 and \
                    vms[0].nuksm()["cow-breaks"] >= 500:
                break
            time.sleep(0.2)
    finally:
        writer.stop()
    now = reads(vms[0])
    assert now["windows"] - began["windows"] >= 500, now
    assert now["probes"] - began["probes"] >= 5000, now
    assert vms[0].nuksm()["cow-breaks"] >= 500, "too few writes hit merges"
    assert read_big(qtests[0], SHARED_AT, size) == bytes(content)
    assert read_big(qtests[1], SHARED_AT, size) == original, \
        "vm1 saw vm0's writes"
    for q in qtests:
        q.close()
