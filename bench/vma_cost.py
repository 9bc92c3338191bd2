#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Kernel memory per mapping (VMA), as nuksm's isolated merges create them.

Builds what a QEMU with N isolated merged pages looks like: an anonymous,
touched region standing for guest RAM, with a private read-only-faulted
mapping of a tmpfs file (the store) over every other page, each one page
at consecutive file offsets that the kernel cannot merge (a gap between
them).  That adds two mappings per page: the file mapping and the split
of the anonymous one.  Then it reads, before and after, the kernel's slab
caches for mappings (/proc/slabinfo: vm_area_struct, anon_vma_chain,
anon_vma, maple_node; needs root) and /proc/meminfo (Slab, SUnreclaim,
PageTables), and prints the bytes per mapping added.  The figure is
quoted in docs/operations.rst; run it again to re-measure:

    sudo python3 bench/vma_cost.py [--pages 20000] [--rounds 5]

Other processes allocate slab memory meanwhile: each round is measured
separately and the median is printed.
"""

import argparse
import ctypes
import mmap
import os
import statistics
import tempfile

PAGE = os.sysconf("SC_PAGE_SIZE")
CACHES = ("vm_area_struct", "anon_vma_chain", "anon_vma", "maple_node")
MEMINFO = ("Slab", "SUnreclaim", "PageTables")

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long)
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
MAP_FAILED = ctypes.c_void_p(-1).value
MAP_FIXED = 0x10                        # <linux/mman.h>, not in mmap


def slab_bytes():
    """Bytes in the mapping caches: active objects x object size."""
    out = {}
    with open("/proc/slabinfo") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] in CACHES:
                out[fields[0]] = int(fields[1]) * int(fields[3])
    return out


def meminfo_bytes():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            if key in MEMINFO:
                out[key] = int(value.split()[0]) * 1024
    return out


def map_count():
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")


def snapshot():
    return {**slab_bytes(), **meminfo_bytes(), "maps": map_count()}


def one_round(pages, store_fd):
    """Map @pages isolated store pages over fresh anonymous memory; returns
    (before, after) snapshots."""
    size = 2 * pages * PAGE
    ram = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                    mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert ram != MAP_FAILED, os.strerror(ctypes.get_errno())
    ctypes.memset(ram, 1, size)             # guest RAM is resident
    before = snapshot()
    for i in range(pages):
        addr = ram + 2 * i * PAGE
        p = libc.mmap(addr, PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                      mmap.MAP_PRIVATE | MAP_FIXED, store_fd,
                      2 * i * PAGE)
        assert p == addr, os.strerror(ctypes.get_errno())
        ctypes.c_char.from_address(addr).value   # fault the page in
    after = snapshot()
    libc.munmap(ram, size)
    return before, after


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=20000,
                    help="isolated pages per round (2 mappings each)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("vma_cost.py: /proc/slabinfo needs root")
    limit = int(open("/proc/sys/vm/max_map_count").read())
    if map_count() + 2 * args.pages + 100 > limit:
        raise SystemExit(f"vma_cost.py: {args.pages} pages need "
                         f"{2 * args.pages} mappings; vm.max_map_count is "
                         f"{limit}")

    with tempfile.TemporaryFile(dir="/dev/shm") as store:
        os.ftruncate(store.fileno(), 2 * args.pages * PAGE)
        per_map = {k: [] for k in (*CACHES, *MEMINFO)}
        for _ in range(args.rounds):
            before, after = one_round(args.pages, store.fileno())
            added = after["maps"] - before["maps"]
            for k in per_map:
                per_map[k].append((after.get(k, 0) - before.get(k, 0)) /
                                  added)
    print(f"{args.rounds} rounds of {args.pages} isolated pages "
          f"(+{added} mappings each); bytes per mapping added, median:")
    for k, values in per_map.items():
        print(f"  {k:16s} {statistics.median(values):8.1f}")
    caches = sum(statistics.median(per_map[k]) for k in CACHES)
    pt = statistics.median(per_map["PageTables"])
    print(f"  mapping caches   {caches:8.1f}  (sum of the four above)")
    print(f"At vm.max_map_count {limit}: about "
          f"{caches * limit / 2**20:.1f} MiB of slab per process at the "
          f"limit; each extra 65536 mappings cost about "
          f"{caches * 65536 / 2**20:.1f} MiB (+{pt * 65536 / 2**20:.1f} MiB "
          f"page tables)")


if __name__ == "__main__":
    main()
