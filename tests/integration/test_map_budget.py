# SPDX-License-Identifier: GPL-2.0-or-later
"""The mapping budget (hw/mem/nuksm/nuksm-maps.c): merging never uses the
mappings QEMU needs for itself; and what merging costs in mappings.

A merged page whose slot is out of line with its neighbours' (slot -
page differs) costs QEMU up to two mappings (VMAs), and a process may
hold at most vm.max_map_count of them.  These tests lower that limit (a
host-wide sysctl: they need root, and always put the original value
back) to a little above what two qtest VMs use, make scattered
duplicates out of line, and check that nuksm stops merging at its
budget, says so, keeps QEMU working, and resumes when the limit is
raised.
"""

import os
import random
import re
import time
from pathlib import Path

import pytest

from harness import Qtest, b64read, ctl_json, wait_until, write_big

# The merge path at the VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

PAGE = 4096
MIB = 1 << 20
MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
# nuksm-maps.c: the headroom kept for QEMU.
RESERVE = 4096
# Where the test content goes in each VM (256 MiB of RAM).
AT = 64 * MIB


def headroom(limit):
    return max(RESERVE, limit // 10)


def map_count(pid):
    """The mappings of process @pid, counted as nuksm does."""
    with open(f"/proc/{pid}/maps", "rb") as f:
        return f.read().count(b"\n")


def cpu_seconds(pid):
    """User + system CPU time of process @pid (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def merged_non_zero(vm):
    info = vm.nuksm()
    return info["merged-pages"] - info["zero-pages"]


@pytest.fixture
def max_map_count():
    """set(value) changes vm.max_map_count; the original value is put
    back at teardown whatever happened (set.original holds it)."""
    if os.geteuid() != 0:
        pytest.skip("changing vm.max_map_count needs root")
    original = MAX_MAP_COUNT.read_text().strip()

    def set_limit(value):
        MAX_MAP_COUNT.write_text(f"{value}\n")

    set_limit.original = int(original)
    try:
        yield set_limit
    finally:
        MAX_MAP_COUNT.write_text(original + "\n")
        assert MAX_MAP_COUNT.read_text().strip() == original


@pytest.fixture
def two_vms(agent, qtest_vm):
    """Two 256 MiB qtest VMs on one agent, disabled until enable()."""
    vms = [qtest_vm(name, extra=["-m", "256M"], agent=agent.sock,
                    max_cpu=100, enabled="off")
           for name in ("vm0", "vm1")]
    for vm in vms:
        vm.wait_state("disabled")
    return vms


def enable(vms):
    for vm in vms:
        vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
               value=True)


def scattered(vm_index, pages, layout="alike", seed=0):
    """@pages pages: the odd ones unique to VM @vm_index, the even ones
    duplicates.  Laid out "alike", the even ones are the same in every VM
    (and distinct from each other), so their slots can follow both VMs'
    pages.  "shuffled": the same contents, on even pages in an order of
    each VM's own, as page cache lies in long-running guests: the slots
    can follow one VM's pages only.  "twice": each VM holds each of
    @pages / 4 contents twice, in an order of its own: no slot order
    follows every copy, not even within one VM.  Each @seed gives other
    contents."""
    shared = random.Random(f"shared {seed}").randbytes(pages * PAGE)
    unique = random.Random(f"vm{vm_index} {seed}").randbytes(pages * PAGE)
    even = list(range(0, pages, 2))
    if layout == "twice":
        even = [p % (pages // 2) for p in even]
    if layout != "alike":
        random.Random(f"order {vm_index} {seed}").shuffle(even)
    content = bytearray(pages * PAGE)
    for k, page in enumerate(range(0, pages, 2)):
        src = even[k] * PAGE
        content[page * PAGE:(page + 1) * PAGE] = shared[src:src + PAGE]
    for page in range(1, pages, 2):
        content[page * PAGE:(page + 1) * PAGE] = \
            unique[page * PAGE:(page + 1) * PAGE]
    return bytes(content)


def test_merging_stops_at_the_map_budget(agent, two_vms, max_map_count):
    """With vm.max_map_count a little above what the VMs use, scattered
    duplicates merge up to the budget, and then only where a merge costs
    no mapping (nor does any huge page come back while its duplicates
    wait): the state becomes limited (map-count) with
    NUKSM_MERGING_LIMITED once, the mappings stay within the budget,
    nothing spins, and QEMU still allocates
    (object-add, a 4 MiB qtest read, HMP xp).  Raising the limit again
    resumes merging (NUKSM_MERGING_RESUMED) and every duplicate merges,
    with no new guest content: the pages held back are offered again.

    Without the budget, merging runs into the limit and the 4 MiB read
    makes GLib abort QEMU."""
    vms = two_vms
    pages = 12288                       # 48 MiB, 6144 duplicates per VM
    contents = [scattered(i, pages, "twice")
                for i in range(len(vms))]
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    for q, content in zip(qtests, contents):
        write_big(q, AT, content)

    # Room for 3000 mappings per VM above what the VMs use now and the
    # headroom nuksm keeps: each VM holds 3072 contents twice, in an
    # order of its own, which takes far more.
    base = max(map_count(vm.pid) for vm in vms)
    limit = base + RESERVE + 3000
    assert headroom(limit) == RESERVE
    max_map_count(limit)
    enable(vms)

    for vm in vms:
        event = vm.wait_event("NUKSM_MERGING_LIMITED", timeout=60)
        assert event["data"]["id"] == "dedup0"
        assert event["data"]["limit"] == "map-count"
        assert f"of {limit} mappings in use (vm.max_map_count), " \
               f"{RESERVE} kept for QEMU" in event["data"]["reason"]
        info = vm.nuksm()
        assert info["state"] == "limited"
        assert info["limit"] == "map-count"
        assert "vm.max_map_count" in info["limit-reason"]
        assert info["mappings-limit"] == limit
        assert info["mappings-budget"] == limit - RESERVE
        assert "limited by map-count" in vm.hmp("info nuksm")
    # The agent knows too (VM_LIMIT): nuksmctl vms shows it.
    def limited_entries():
        entries = ctl_json(agent.sock, "vms")["vms"]
        return entries if all(e["limit"] == "map-count"
                              for e in entries) else None
    entries = wait_until(limited_entries, 10,
                         "nuksmctl vms to show the limit")
    for entry in entries:
        assert "vm.max_map_count" in entry["limit_reason"]

    # Merging stopped at the budget, and stays there without spinning:
    # the pages refused are held back, not offered again and again.
    time.sleep(1)
    cpu = [cpu_seconds(vm.pid) for vm in vms]
    merged = [merged_non_zero(vm) for vm in vms]
    window = 4.0
    time.sleep(window)
    for i, vm in enumerate(vms):
        info = vm.nuksm()
        used = cpu_seconds(vm.pid) - cpu[i]
        assert info["state"] == "limited"
        # Only merges that cost no mapping go on (a copy next to one
        # mapped: the pages the scanner had not offered yet), and none
        # goes back: a stretch whose duplicates wait for mappings still
        # pays for its split, and keeps it.
        assert merged_non_zero(vm) >= merged[i], "merges went back"
        assert info["huge-pages"]["rebuilt"] == 0, info["huge-pages"]
        assert 1000 < merged[i] < pages // 2, \
            f"{vm.name}: {merged[i]} pages merged"
        # nuksm's merges stop at the budget; what QEMU maps of its own
        # meanwhile (its headroom is for that) may count a few more.
        assert info["mappings"] <= info["mappings-budget"] + 8, info
        real = map_count(vm.pid)
        assert real <= info["mappings-budget"] + 64, \
            f"{vm.name}: {real} mappings, budget {info['mappings-budget']}"
        assert used < 0.05 * window, \
            f"{vm.name} used {used:.2f} s of CPU in {window} s at the limit"
        print(f"{vm.name}: limited with {merged[i]} merged pages, "
              f"{real} mappings (nuksm says {info['mappings']}), budget "
              f"{info['mappings-budget']}, limit {limit}, CPU "
              f"{100 * used / window:.1f}%")
        # No second event while the limit holds.
        assert all(e["event"] != "NUKSM_MERGING_LIMITED"
                   for e in vm.qmp.get_events(wait=False))

    # QEMU still allocates what it needs.
    vm = vms[0]
    vm.cmd("object-add", **{"qom-type": "memory-backend-ram",
                            "id": "extra", "size": 64 * MIB})
    vm.cmd("object-del", id="extra")
    assert b64read(qtests[0], AT, 4 * MIB) == contents[0][:4 * MIB]
    out = vm.hmp(f"xp /32768xg {AT:#x}")
    assert out.count("\n") >= 16384
    for vm in vms:
        vm.check_alive()

    # A raised limit takes effect within a second: merging resumes, and
    # the pages held back are offered again, with no new guest content
    # (nothing was written since, and nothing merged for seconds above).
    max_map_count(max_map_count.original)
    start = time.monotonic()
    for vm in vms:
        event = vm.wait_event("NUKSM_MERGING_RESUMED", timeout=30)
        assert event["data"] == {"id": "dedup0", "limit": "map-count"}
        info = vm.wait_state("active")
        assert "limit" not in info and "limit-reason" not in info
    resumed = time.monotonic() - start
    wait_until(lambda: all(merged_non_zero(vm) >= pages // 2
                           for vm in vms), 120,
               "every duplicate to merge once resumed")
    print(f"resumed {resumed:.1f} s after the limit was raised; every "
          f"duplicate merged after {time.monotonic() - start:.1f} s")
    for q, content in zip(qtests, contents):
        assert b64read(q, AT, len(content)) == content
        q.close()


def test_mappings_per_merged_page(two_vms, capsys):
    """What merging costs in mappings: a run of contiguous duplicates
    costs a few mappings in all; so do scattered duplicates (every other
    page) that lie alike in both VMs, whose slots the agent keeps in line
    with the pages (agent/core/lines.h) and whose windows QEMU maps with
    the pages between copied in (nuksm_remap_merge_window()); shuffled
    duplicates (each VM's in an order of its own) cost the first VM as
    little, whose pages the slots follow, and the other one per merged
    page; duplicates that each VM holds twice at most two.  nuksm's own
    estimate of the mappings in use stays close to the
    real count.  The figures are quoted in docs/operations.rst."""
    vms = two_vms
    runs = 4096                         # 16 MiB of contiguous duplicates
    scatter = 2048                      # every other page of 16 MiB
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    contiguous = random.Random(5).randbytes(runs * PAGE)
    for q in qtests:
        write_big(q, AT, contiguous)
    before = [map_count(vm.pid) for vm in vms]
    enable(vms)
    merged = runs
    wait_until(lambda: all(merged_non_zero(vm) >= merged for vm in vms),
               120, "the contiguous duplicates to merge")
    time.sleep(2)       # a few passes more: nothing else merges
    added = {"contiguous": [map_count(vm.pid) - b
                            for vm, b in zip(vms, before)]}

    layouts = {"alike": scatter, "shuffled": scatter, "twice": scatter}
    for seed, layout in enumerate(layouts):
        before = [map_count(vm.pid) for vm in vms]
        for i, q in enumerate(qtests):
            write_big(q, AT + 32 * MIB * (seed + 1),
                      scattered(i, 2 * scatter, layout, seed))
        merged += scatter
        wait_until(lambda: all(merged_non_zero(vm) >= merged for vm in vms),
                   120, f"the scattered duplicates laid out {layout} to "
                   "merge")
        time.sleep(2)
        added[layout] = [map_count(vm.pid) - b for vm, b in zip(vms, before)]
        for vm in vms:
            info = vm.nuksm()
            assert info["state"] == "active"
            assert abs(info["mappings"] - map_count(vm.pid)) <= 64, \
                f"nuksm estimates {info['mappings']} mappings, there are " \
                f"{map_count(vm.pid)}"

    pages = {"contiguous": runs, **layouts}
    for i, vm in enumerate(vms):
        with capsys.disabled():
            print(f"\n{vm.name}: " + "; ".join(
                f"{pages[name]} merged pages {name}: {n[i]:+d} mappings "
                f"({n[i] / pages[name]:.3f} per page)"
                for name, n in added.items()))
    # A mapping per 2 MiB stretch, and a few more.
    for name in ("contiguous", "alike"):
        assert max(added[name]) <= 64, \
            f"{pages[name]} merged pages {name} cost {added[name]} mappings"
    # One VM keeps the shuffled pages in line; the other pays a mapping
    # per page, its windows ending where the ones around them did.
    assert min(added["shuffled"]) <= 64, \
        f"{scatter} merged pages shuffled cost {added['shuffled']} mappings"
    assert max(added["shuffled"]) <= scatter + 64, \
        f"{scatter} merged pages shuffled cost {added['shuffled']} mappings"
    assert max(added["twice"]) <= 2 * scatter + 64, \
        f"{scatter} merged pages twice cost {added['twice']} mappings"
    for q in qtests:
        q.close()


def test_copies_in_windows_merge_in_place(agent, qtest_vm):
    """Shuffled duplicates: in the VM whose pages the slots follow, a
    stretch's first merge maps a window with the pages between copied
    in, and its later merges drop their copies inside that window
    (nuksm_remap_merge_in_place(): no mapping changes).  Such a page
    reads its slot, is not taken for a copy-on-write break, and a write
    to it is kept and ends its sharing alone."""
    vms = [qtest_vm(f"vm{i}", extra=["-m", "256M", "-trace",
                                     "nuksm_remap_merge_in_place"],
                    agent=agent.sock, max_cpu=100, enabled="off")
           for i in range(2)]
    pages = 8192                        # 32 MiB, 4096 duplicates per VM
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    contents = [scattered(i, pages, "shuffled") for i in range(2)]
    for q, content in zip(qtests, contents):
        write_big(q, AT, content)
    enable(vms)
    wait_until(lambda: all(merged_non_zero(vm) >= pages // 2 for vm in vms),
               120, "the shuffled duplicates to merge")
    merged_in_place = re.compile(
        r"nuksm_remap_merge_in_place \S+: \d+ pages in place, (\d+) merged")
    in_place = [sum(int(n) for n in merged_in_place.findall(vm.log_text()))
                for vm in vms]
    assert max(in_place) > pages // 8, f"pages merged in place: {in_place}"
    for vm in vms:
        assert vm.nuksm()["cow-breaks"] == 0
    for q, content in zip(qtests, contents):
        assert b64read(q, AT, len(content)) == content

    # Every duplicate of vm0 written: each write is kept, vm1 keeps its
    # pages merged, and vm0 counts one copy-on-write break per page.
    written = bytearray(contents[0])
    for page in range(0, pages, 2):
        written[page * PAGE:page * PAGE + 8] = (page + 1).to_bytes(8, "little")
        qtests[0].command(f"writeq {AT + page * PAGE:#x} {page + 1:#x}")
    wait_until(lambda: vms[0].nuksm()["cow-breaks"] >= pages // 2, 60,
               "vm0 to count its copy-on-write breaks")
    assert vms[0].nuksm()["cow-breaks"] == pages // 2
    assert b64read(qtests[0], AT, len(written)) == bytes(written)
    assert b64read(qtests[1], AT, len(contents[1])) == contents[1]
    assert vms[1].nuksm()["cow-breaks"] == 0
    assert merged_non_zero(vms[1]) >= pages // 2
    for q in qtests:
        q.close()
