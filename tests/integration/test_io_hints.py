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


def test_a_hinted_page_holds_no_huge_page_back(agent, tcg_guest, workdir):
    """A guest reads a disk one page in four of which are alike: in its
    page cache the alike pages merge, a quarter of each stretch, and so
    split their huge pages (they pay, at the default huge-split); the
    other pages stay on offer from their I/O hint, for nothing else has
    their content.  With huge-split then raised to 512, the merged
    quarter no longer pays: the stretches are rebuilt, pages on offer
    from a hint or not, and every page still reads the disk's content."""
    if not harness.thp_in_use():
        pytest.skip("transparent huge pages are off on this host: there "
                    "is no huge page to rebuild")
    rng = random.Random(12)
    alike = rng.randbytes(4096)
    image = workdir / "disk.img"
    image.write_bytes(b"".join(alike if p % 4 == 0 else rng.randbytes(4096)
                               for p in range(DISK_PAGES)))
    vm = tcg_guest("guest-a", disk=image, governor="full",
                   agent=agent.sock)
    info = vm.wait_nuksm(
        lambda i: i["io-hints"]["pages-merged"] >= DISK_PAGES // 4 * 9 // 10,
        "the alike pages of the disk to merge from their hints",
        timeout=180)
    split = info["huge-pages"]["splits"]
    # The page cache's stretches: a quarter merged in each, at least.
    assert split >= DISK_MIB // 2 * 3 // 4, info["huge-pages"]
    rebuilt = info["huge-pages"]["rebuilt"]
    vm.cmd("qom-set", path="/objects/dedup0", property="huge-split",
           value=512)
    info = vm.wait_nuksm(
        lambda i: i["huge-pages"]["rebuilt"] >= rebuilt +
        DISK_MIB // 2 * 3 // 4,
        "the page cache's stretches to be rebuilt", timeout=120)
    print(f"huge pages: {info['huge-pages']}, io-hints: {info['io-hints']}")
    # The page cache still holds every page of the disk.
    dump = workdir / "ram"
    vm.cmd("pmemsave", val=0, size=256 * MIB, filename=str(dump))
    ram = dump.read_bytes()
    in_ram = {ram[at:at + 4096] for at in range(0, len(ram), 4096)}
    disk = image.read_bytes()
    lost = [p for p in range(DISK_PAGES)
            if disk[p * 4096:(p + 1) * 4096] not in in_ram]
    assert not lost, f"{len(lost)} pages of the disk not in the guest's " \
        f"RAM, the first {lost[:8]}"
