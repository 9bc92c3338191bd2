# SPDX-License-Identifier: GPL-2.0-or-later
"""Region distilling (hw/mem/nuksm/nuksm-regions.c, after UKSM): guest
RAM in regions of 2 MiB, each on a sampling level.  With distilling=on
(it is off by default), regions start at the bottom, where a pass looks
at one page in 64; a region whose looks find duplicates moves up to the
top, where a pass looks at every page; one whose sharings break, or
that finds nothing, moves down.

The pages are written through qtest at known guest addresses: pc.ram
holds the low guest memory at the same offsets, so region N of the
block is guest address N * 2 MiB.
"""

import os

import pytest

from harness import Qtest, read_big, write_big

# The merge path at the VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

PAGE = 4096
MIB = 1 << 20
REGION = 2 * MIB
TOP = 3
DUP_AT = 64 * MIB        # 4 regions of duplicates
UNIQUE_AT = 128 * MIB    # 4 regions of unique pages
SPAN = 8 * MIB
DISTINCT = 16            # contents of the duplicated pages


def duplicates():
    """SPAN bytes of DISTINCT page contents, repeated."""
    units = [bytes([0xa0 + i]) * PAGE for i in range(DISTINCT)]
    return b"".join(units[i % DISTINCT] for i in range(SPAN // PAGE))


def levels(vm, at, size=SPAN):
    """The levels of the regions of pc.ram from guest address @at."""
    maps = {m["id"]: m for m in vm.cmd("x-query-nuksm-regions")}
    blocks = {b["block"]: b for b in maps["dedup0"]["blocks"]}
    ram = blocks["pc.ram"]
    return ram["levels"][at // REGION:(at + size) // REGION]


def pass_once(vm):
    """Start a pass now and wait for it to end."""
    done = vm.nuksm()["full-scans"]
    vm.cmd("nuksm-scan")
    vm.wait_nuksm(lambda i: i["full-scans"] > done, "a pass", timeout=60)


def passes_until(vm, condition, what, limit=40):
    """Run passes until @condition() holds, at most @limit."""
    for _ in range(limit):
        if condition():
            return
        pass_once(vm)
    raise AssertionError(f"{vm.name}: {what} after {limit} passes: "
                         f"{vm.nuksm()['regions']}, duplicates at "
                         f"{levels(vm, DUP_AT)}, unique at "
                         f"{levels(vm, UNIQUE_AT)}")


def test_duplicates_promote_their_regions(agent, qtest_vm):
    """Every region starts at the bottom.  The regions holding
    duplicates climb to the top, where all their pages merge; the
    regions of unique pages stay at the bottom; query-nuksm counts the
    regions per level as the debug view shows them."""
    vm = qtest_vm(extra=["-m", "512M"], agent=agent.sock, max_cpu=100,
                  distilling="on")
    vm.wait_state("active")
    pass_once(vm)
    regions = vm.nuksm()["regions"]
    assert regions["enabled"] is True
    assert regions["region-size"] == REGION
    assert sum(regions["levels"]) >= 512 * MIB // REGION, regions
    assert levels(vm, DUP_AT) == levels(vm, UNIQUE_AT) == "0000"

    q = Qtest(vm.qtest_path)
    dups = duplicates()
    unique = os.urandom(SPAN)
    write_big(q, DUP_AT, dups)
    write_big(q, UNIQUE_AT, unique)
    passes_until(vm, lambda: levels(vm, DUP_AT) == str(TOP) * 4,
                 "the regions of duplicates at the top")
    passes_until(vm, lambda: vm.nuksm()["merged-pages"] >=
                 SPAN // PAGE - DISTINCT, "the duplicates merged")

    info = vm.nuksm()
    print(f"regions: {info['regions']}, merged {info['merged-pages']}")
    assert levels(vm, UNIQUE_AT) == "0000"
    assert info["regions"]["promotions"] >= 4 * TOP
    maps = vm.cmd("x-query-nuksm-regions")[0]["blocks"]
    counted = [sum(b["levels"].count(str(n)) for b in maps)
               for n in range(TOP + 1)]
    assert info["regions"]["levels"] == counted
    assert "promotions" in vm.hmp("info nuksm")
    assert read_big(q, DUP_AT, SPAN) == dups
    assert read_big(q, UNIQUE_AT, SPAN) == unique


def test_broken_sharings_demote_their_regions(agent, qtest_vm):
    """Regions at the top whose merged pages are all written again (each
    write ends a sharing) move back down to the bottom, and every page
    keeps what was written last."""
    vm = qtest_vm(extra=["-m", "512M"], agent=agent.sock, max_cpu=100,
                  distilling="on")
    vm.wait_state("active")
    q = Qtest(vm.qtest_path)
    write_big(q, DUP_AT, duplicates())
    passes_until(vm, lambda: levels(vm, DUP_AT) == str(TOP) * 4 and
                 vm.nuksm()["merged-pages"] >= SPAN // PAGE - DISTINCT,
                 "the duplicates merged at the top")
    demoted = vm.nuksm()["regions"]["demotions"]

    def rewrite():
        data = os.urandom(SPAN)
        write_big(q, DUP_AT, data)
        return data

    data = rewrite()
    passes_until(vm, lambda: levels(vm, DUP_AT) == "0000",
                 "the regions back at the bottom")
    info = vm.nuksm()
    print(f"regions: {info['regions']}, cow-breaks {info['cow-breaks']}")
    assert info["cow-breaks"] >= SPAN // PAGE - DISTINCT
    assert info["regions"]["demotions"] >= demoted + 4 * TOP
    assert read_big(q, DUP_AT, SPAN) == data


def test_distilling_off_looks_at_every_page(agent, qtest_vm):
    """Distilling is off by default, which puts every region on the top
    level, as qom-set does at run time; on, new judgements move them."""
    vm = qtest_vm(extra=["-m", "512M"], agent=agent.sock, max_cpu=100)
    vm.wait_state("active")
    pass_once(vm)
    regions = vm.nuksm()["regions"]
    assert regions["enabled"] is False
    assert regions["levels"][:TOP] == [0] * TOP, regions
    assert regions["levels"][TOP] >= 512 * MIB // REGION
    assert "(distilling off)" in vm.hmp("info nuksm")
    # The unique pages are looked at, offered, and never merge: without
    # distilling they stay at the top.
    write_big(Qtest(vm.qtest_path), UNIQUE_AT, os.urandom(SPAN))
    for _ in range(3):
        pass_once(vm)
    assert levels(vm, UNIQUE_AT) == str(TOP) * 4

    vm.cmd("qom-set", path="/objects/dedup0", property="distilling",
           value=True)
    passes_until(vm, lambda: levels(vm, UNIQUE_AT) == "0000",
                 "the unique pages' regions down at the bottom")
    assert vm.nuksm()["regions"]["enabled"] is True

    vm.cmd("qom-set", path="/objects/dedup0", property="distilling",
           value=False)
    assert levels(vm, UNIQUE_AT) == str(TOP) * 4
