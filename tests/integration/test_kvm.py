# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksm under KVM, where /dev/kvm works.  Linux guests hang under this
nested KVM, so the guests are boot sectors, in the style of QEMU's
migration-test one.  kvm-bootblock.S's vCPU fills a region with
identical pages, then on a key rewrites every other page, then keeps
writing 64 other pages: merged pages are backed right for KVM, vCPU
writes break the sharing and land where QEMU reads, and hotness comes
from KVM's dirty log.  kvm-reader.S's vCPU fills five regions and keeps
reading some of them: read sampling catches a vCPU's reads, and fair
places the copies by them (nuKSM's five-page example)."""

import os
import struct
import subprocess

import pytest

import harness
from harness import wait_until
from test_placement import (SHARE_READS, copy_nodes, home, node_cpus, pin,
                            reads_caught, remote_share)

# The merge path at the VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

REGION_START, REGION_PAGES = 4 << 20, 512
PAGE = 4096
HOT_PAGES = 64
# kvm-reader.S: P0..P4, a region each, from REGION_START; the byte of
# the sector that says which of them the guest reads.
READER_REGIONS = 5
READ_MASK_AT = 509


def region_pattern():
    page = b"".join(struct.pack("<I", 0x5a5a0000 | i) for i in range(1024))
    return page * REGION_PAGES


def reader_pattern(region):
    """What kvm-reader.S writes in region @region (Pk)."""
    first = region * REGION_PAGES
    return b"".join(struct.pack("<1024I", *(0x5a000000 | p << 10 | i
                                            for i in range(1024)))
                    for p in range(first, first + REGION_PAGES))


def patched_disk(base, disk, at, value):
    """A copy of boot disk @base at @disk, its byte @at set to @value."""
    image = bytearray(base.read_bytes())
    image[at] = value
    disk.write_bytes(image)
    return disk


def reader_disk(reader, workdir, mask):
    """A copy of the reader's disk that reads the regions in @mask."""
    return patched_disk(reader, workdir / f"kvm-reader-{mask:02x}.img",
                        READ_MASK_AT, mask)


def assemble(out, name):
    """tests/guests/@name.S, assembled, on a 1 MiB raw disk image."""
    source = harness.ROOT / f"tests/guests/{name}.S"
    subprocess.run(["gcc", "-m32", "-c", "-o", out / f"{name}.o", source],
                   check=True, timeout=60)
    subprocess.run(["ld", "-m", "elf_i386", "-e", "start", "-Ttext",
                    "0x7c00", "--oformat", "binary", "-o",
                    out / f"{name}.img", out / f"{name}.o"],
                   check=True, timeout=60)
    assert (out / f"{name}.img").stat().st_size == 512
    os.truncate(out / f"{name}.img", 1 << 20)
    return out / f"{name}.img"


@pytest.fixture(scope="module")
def bootblock(tmp_path_factory):
    """The writing boot sector (kvm-bootblock.S) on a disk image."""
    return assemble(tmp_path_factory.mktemp("kvm-guest"), "kvm-bootblock")


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    """The reading boot sector (kvm-reader.S) on a disk image."""
    return assemble(tmp_path_factory.mktemp("kvm-reader"), "kvm-reader")


@pytest.fixture
def kvm(qemu_bin):
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip("/dev/kvm is missing or not usable here: the KVM "
                    "tests need it")
    probe = subprocess.run([qemu_bin, "-accel", "kvm", "-machine", "none",
                            "-nodefaults", "-display", "none", "-monitor",
                            "stdio"], input="quit\n", capture_output=True,
                           text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"KVM does not start here: {probe.stderr.strip()}")


def pmemsave(vm, workdir, addr, size):
    path = workdir / "pmem.bin"
    vm.cmd("pmemsave", val=addr, size=size, filename=str(path))
    return path.read_bytes()


def test_kvm_guest_merges_and_writes_land(kvm, bootblock, agent, start_vm,
                                          workdir):
    vm = start_kvm_guest(start_vm, workdir, "kvm0", bootblock, agent,
                         hot_window=500)
    debug = workdir / "kvm0-debugcon.log"

    # Identical pages the vCPU wrote merge; QEMU reads them back whole.
    vm.wait_nuksm(lambda i: i["merged-pages"] - i["zero-pages"] >=
                  REGION_PAGES, "the region to merge", timeout=60)
    expected = bytearray(region_pattern())
    assert pmemsave(vm, workdir, REGION_START, len(expected)) == expected
    cow_before = vm.nuksm()["cow-breaks"]

    # The vCPU writes every other merged page: each write breaks the
    # sharing and lands in the page QEMU now maps (KVM followed the
    # remaps), the other pages keep the shared content.
    vm.cmd("send-key", keys=[{"type": "qcode", "data": "a"}])
    wait_until(lambda: "FW" in harness.read_log(debug), 30,
               "the guest to write every other page")
    for n in range(0, REGION_PAGES, 2):
        expected[n * PAGE:n * PAGE + 4] = struct.pack("<I", 0xc0de0000 | n)
    assert pmemsave(vm, workdir, REGION_START, len(expected)) == expected
    vm.wait_nuksm(lambda i: i["cow-breaks"] - cow_before >=
                  REGION_PAGES // 2, "the scanner to see the breaks")

    # The 64 pages the vCPU keeps writing show in KVM's dirty log.
    info = vm.wait_nuksm(lambda i: i["hotness"]["hot-pages"] >= HOT_PAGES,
                         "the written pages to show as hot", timeout=30)
    assert info["hotness"]["source"] == "dirty-log"
    assert "error" not in info["hotness"]


def start_kvm_guest(start_vm, workdir, name, disk, agent, **props):
    debug = workdir / f"{name}-debugcon.log"
    vm = start_vm(name, [
        "-accel", "kvm", "-machine", "q35", "-m", "64M", "-nodefaults",
        "-display", "none",
        "-drive", f"file={disk},format=raw,if=virtio,snapshot=on",
        "-chardev", f"file,id=dbg,path={debug}",
        "-device", "isa-debugcon,iobase=0xe9,chardev=dbg",
        "-object", harness.nuksm_object(id="dedup0", agent=agent.sock,
                                        max_cpu=100, **props)])
    wait_until(lambda: "F" in harness.read_log(debug), 120,
               f"{name} to fill its region")
    return vm


def sweeps(vm, workdir):
    return struct.unpack("<I", pmemsave(vm, workdir, 16 << 20, 4))[0]


def test_kvm_vcpu_reads_of_merged_pages_are_caught(kvm, reader, agent,
                                                   start_vm, workdir):
    """A vCPU that only reads merged pages, through KVM: read sampling
    catches its reads (minor faults of KVM's own page faults), the guest
    keeps sweeping, and what it reads stays the shared content.  The
    other VM, whose vCPU reads none of them, has none caught."""
    vms = [start_kvm_guest(start_vm, workdir, name,
                           reader_disk(reader, workdir, mask), agent,
                           hot_window=100)
           for name, mask in (("kvm-reader", 0x1f), ("kvm-idle", 0))]
    pages = READER_REGIONS * REGION_PAGES
    for vm in vms:
        vm.wait_nuksm(lambda i: i["merged-pages"] - i["zero-pages"] >= pages,
                      "the regions to merge", timeout=60)
    before = [vm.nuksm()["hotness"]["reads"] for vm in vms]
    info = vms[0].wait_nuksm(
        lambda i: i["hotness"]["reads"]["windows"] >= before[0]["windows"] +
        10 and i["hotness"]["reads"]["reads"] >= before[0]["reads"] + 5,
        "the vCPU's reads to be caught in five windows", timeout=60)
    reads = info["hotness"]["reads"]
    assert reads["source"] == "minor-faults" and \
        reads["read-regions"] >= READER_REGIONS
    assert info["reads-local"] + info["reads-remote"] == reads["reads"]
    idle = vms[1].wait_nuksm(
        lambda i: i["hotness"]["reads"]["windows"] >= before[1]["windows"] +
        10, "ten windows of the idle VM", timeout=60)["hotness"]["reads"]
    # Its vCPU reads none of P0..P4; at most the first 2 MiB, where
    # the firmware's shadow (the same in both VMs) merged.
    assert idle["read-regions"] <= 1 and idle["probes"] > 0
    assert idle["reads"] * 5 <= reads["reads"]
    swept = sweeps(vms[0], workdir)
    wait_until(lambda: sweeps(vms[0], workdir) > swept, 10,
               "the guest to go on sweeping")
    for vm in vms:
        assert pmemsave(vm, workdir, REGION_START, REGION_PAGES * PAGE) == \
            reader_pattern(0)
        assert vm.nuksm()["merged-pages"] - vm.nuksm()["zero-pages"] >= \
            pages


def test_kvm_fair_follows_vcpu_reads_five_pages(kvm, reader, start_agent,
                                                start_vm, workdir):
    """nuKSM's five-page example with vCPUs doing the reading: two KVM
    guests on different logical nodes hold P0..P4; A's vCPU reads P0, P2
    and P3, B's P1, P2 and P3, nobody P4.  Under fair, once settled, P0's
    copies are on A's node, P1's on B's, P2's and P3's split half and
    half, and the larger remote share of sampled reads is at most half
    of what ksm-order gives."""
    agent = start_agent("--fake-numa", "2", "--policy", "ksm-order")
    cpus = node_cpus()
    vms = []
    for n, (name, mask) in enumerate((("kvm-a", 0b01101),
                                      ("kvm-b", 0b01110))):
        vm = start_kvm_guest(start_vm, workdir, name,
                             reader_disk(reader, workdir, mask), agent,
                             hot_window=200, enabled="off")
        pin(vm.pid, cpus[n])
        vms.append(vm)
    for n, vm in enumerate(vms):
        wait_until(lambda: home(vm) == [(n, "pinned")], 10,
                   f"{vm.name}'s home to become node {n}")
        vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
               value=True)
    pages = READER_REGIONS * REGION_PAGES
    for vm in vms:
        vm.wait_nuksm(lambda i: i["merged-pages"] - i["zero-pages"] >= pages,
                      "P0..P4 to merge", timeout=120)

    def shares():
        """Each VM's remote share over ten read windows and SHARE_READS
        reads at least."""
        before = [vm.nuksm() for vm in vms]
        for vm, b in zip(vms, before):
            vm.wait_nuksm(lambda i: i["hotness"]["reads"]["windows"] >=
                          b["hotness"]["reads"]["windows"] + 10 and
                          reads_caught(vm, b) >= SHARE_READS,
                          f"{SHARE_READS} reads in ten read windows or more",
                          timeout=120)
        return [remote_share(vm, b) for vm, b in zip(vms, before)]
    ksm_order = shares()

    harness.ctl_ok(agent.sock, "policy", "fair")
    size = REGION_PAGES * PAGE

    def at(k):
        return REGION_START + k * size

    def settled():
        a0 = copy_nodes(vms[0], at(0), size).get(0, 0)
        b1 = copy_nodes(vms[1], at(1), size).get(1, 0)
        split = [copy_nodes(vms[0], at(k), size).get(0, 0) / REGION_PAGES
                 for k in (2, 3)]
        return a0 == REGION_PAGES and b1 == REGION_PAGES and \
            all(0.4 <= s <= 0.6 for s in split)
    wait_until(settled, 120, "fair to place the copies by the vCPUs' reads")
    fair = shares()
    print("remote shares of sampled reads: ksm-order", ksm_order,
          "fair", fair)
    assert max(fair) <= max(ksm_order) / 2, (ksm_order, fair)
    for vm in vms:
        for k in range(READER_REGIONS):
            assert pmemsave(vm, workdir, at(k), size) == reader_pattern(k)
