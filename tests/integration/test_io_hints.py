# SPDX-License-Identifier: GPL-2.0-or-later
"""I/O hints (hw/mem/nuksm/nuksm-hints.c, qemu-patches/0008): the guest
pages a disk transfer moved reach the scanner, which offers them at once.
Two TCG guests read the same disk image, each from its own copy, into
their page cache, one with hints and one without: through virtio-blk,
and through the IDE controller's DMA, which QEMU's DMA helpers serve
(as they do AHCI's and SCSI's)."""

import random
import shutil

import pytest

import harness

MIB = 1 << 20
DISK_MIB = 32
DISK_PAGES = DISK_MIB * MIB // 4096


@pytest.mark.parametrize("disk_bus", ["virtio", "ide"])
def test_disk_reads_are_hinted_and_merge(agent, tcg_guest, workdir,
                                         disk_bus):
    """The guest with hints is told of every page it read (pages-hinted
    covers the disk), the scanner serves them, and most of its merges of
    the disk's pages come from a hint; the guest without hints is told of
    nothing, and its walk finds the same pages later, so that the two
    share them."""
    image = workdir / "disk-a.img"
    image.write_bytes(random.Random(11).randbytes(DISK_MIB * MIB))
    copy = workdir / "disk-b.img"
    shutil.copyfile(image, copy)

    hinted = tcg_guest("guest-a", disk=image, disk_bus=disk_bus,
                       agent=agent.sock, governor="full")
    plain = tcg_guest("guest-b", disk=copy, disk_bus=disk_bus,
                      agent=agent.sock, governor="full", io_hints="off")
    _, name = harness.DISK_BUSES[disk_bus]
    for vm in (hinted, plain):
        assert f"nuksm-guest: read {name}" in harness.read_log(vm.serial)

    info = hinted.wait_nuksm(
        lambda i: i["io-hints"]["pages-merged"] >= DISK_PAGES // 2,
        "the hinted pages of the disk to merge", timeout=180)
    hints = info["io-hints"]
    print(f"hints: {hints}, merged {info['merged-pages']}")
    assert hints["enabled"] is True
    assert hints["pages-hinted"] >= DISK_PAGES
    assert hints["pages-served"] > 0
    assert hints["pages-hinted"] >= hints["pages-served"]

    info = plain.nuksm()
    assert info["io-hints"] == {"enabled": False, "pages-hinted": 0,
                                "pages-dropped": 0, "pages-served": 0,
                                "pages-merged": 0}
    assert "io-hints off: 0 pages hinted" in plain.hmp("info nuksm")
