# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksm under KVM, where /dev/kvm works.  Linux guests hang under this
nested KVM, so the guest is a boot sector (tests/guests/kvm-bootblock.S,
in the style of QEMU's migration-test one) whose vCPU fills a region
with identical pages, then on a key rewrites every other page, then
keeps writing 64 other pages: merged pages are backed right for KVM,
vCPU writes break the sharing and land where QEMU reads, and hotness
comes from KVM's dirty log."""

import os
import struct
import subprocess

import pytest

import harness
from harness import wait_until

REGION_START, REGION_PAGES = 4 << 20, 512
PAGE = 4096
HOT_PAGES = 64


def region_pattern():
    page = b"".join(struct.pack("<I", 0x5a5a0000 | i) for i in range(1024))
    return page * REGION_PAGES


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
    debug = workdir / "debugcon.log"
    vm = start_vm("kvm0", [
        "-accel", "kvm", "-machine", "q35", "-m", "64M", "-nodefaults",
        "-display", "none",
        "-drive", f"file={bootblock},format=raw,if=virtio,snapshot=on",
        "-chardev", f"file,id=dbg,path={debug}",
        "-device", "isa-debugcon,iobase=0xe9,chardev=dbg",
        "-object", harness.nuksm_object(id="dedup0", agent=agent.sock,
                                        max_cpu=100, hot_window=500)])
    wait_until(lambda: "F" in harness.read_log(debug), 120,
               "the guest to fill its region")

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
    keeps sweeping, and what it reads stays the shared content."""
    vm = start_kvm_guest(start_vm, workdir, "kvm-reader", reader, agent,
                         hot_window=100)
    vm.wait_nuksm(lambda i: i["merged-pages"] - i["zero-pages"] >=
                  REGION_PAGES, "the region to merge", timeout=60)
    before = vm.nuksm()["hotness"]["reads"]
    info = vm.wait_nuksm(
        lambda i: i["hotness"]["reads"]["windows"] >= before["windows"] + 10
        and i["hotness"]["reads"]["reads"] >= before["reads"] + 5,
        "the vCPU's reads to be caught in five windows", timeout=60)
    reads = info["hotness"]["reads"]
    assert reads["source"] == "minor-faults" and reads["read-regions"] >= 1
    assert info["reads-local"] + info["reads-remote"] == reads["reads"]
    swept = sweeps(vm, workdir)
    wait_until(lambda: sweeps(vm, workdir) > swept, 10,
               "the guest to go on sweeping")
    assert pmemsave(vm, workdir, REGION_START, REGION_PAGES * PAGE) == \
        region_pattern()
    assert vm.nuksm()["merged-pages"] - vm.nuksm()["zero-pages"] >= \
        REGION_PAGES
