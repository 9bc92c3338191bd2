# SPDX-License-Identifier: GPL-2.0-or-later
"""The host's scan budget (agent/merge/budget.h, agent/core/shares.h):
one budget of CPU for every VM's scanner, shared by what each merges,
and --run, when merging works at all, with real QEMUs and their
scanners.  Unit tests (test-shares) check the
division itself; these check that the agent gives it by what VMs really
do and that QEMU keeps to it."""

import os
import random
import subprocess
import sys
import time

from harness import (Qtest, ctl_json, process_cpu_ns, thread_cpu_ns,
                     wait_until, write_big)

MIB = 1 << 20
PAGE = 4096
AT = 64 * MIB
BUDGET_LOOK_S = 2       # agent/merge/budget.h


def share(vm):
    """The VM's part of the host's budget; without one (no budget, and
    merging not held), reason "off"."""
    return vm.nuksm()["budget"].get("host-share", {"reason": "off"})


def shares(vms):
    return [share(vm) for vm in vms]


def resting(vms, pace):
    """Every VM of @vms rests, at pace @pace; their shares, else None."""
    now = shares(vms)
    return all(s["reason"] == "resting" and s["pace"] == pace
               for s in now) and now


def fill(vm, data, at=AT):
    q = Qtest(vm.qtest_path)
    write_big(q, at, data)
    q.close()


def test_the_budget_goes_to_the_vm_that_merges(start_agent, qtest_vm):
    """Three VMs, each with memory of its own, share a budget of 20% of
    a core: once their passes found nothing to merge they rest, sharing
    it evenly (each within its own 10%), at a pace of three.  Then two
    of them are given 16 MiB alike: they leave their rest, merge, and
    while they do have ten times the third's part and more, the third
    left a hundredth of the budget; nuksmctl shows the same parts."""
    agent = start_agent("--scan-budget", "20%")
    vms = [qtest_vm(f"vm{i}", agent=agent.sock) for i in range(3)]
    for i, vm in enumerate(vms):
        fill(vm, random.Random(i).randbytes(8 * MIB))
    rest = wait_until(lambda: resting(vms, 3), 90,
                      "the three VMs to rest")
    for s in rest:
        assert abs(s["max-cpu"] - 20 / 3) < 1e-3, s
        assert (s["budget"], s["vms"]) == (20, 3), s

    alike = random.Random(99).randbytes(16 * MIB)
    fill(vms[0], alike)
    fill(vms[1], alike)

    def yielding():
        now = shares(vms)
        return [s["reason"] for s in now] == \
            ["yielding", "yielding", "resting"] and now
    now = wait_until(yielding, 90, "vm0 and vm1 to yield, vm2 to rest")
    for s in now[:2]:
        assert s["max-cpu"] > 10 * now[2]["max-cpu"], now
        assert s["pace"] == 1 and s["yield"] > 0, now
    assert now[2]["pace"] == 1, now     # one VM rests: its own periods
    assert sum(s["max-cpu"] for s in now) <= 20 + 1e-6, now

    listed = {vm["name"]: vm["share"]
              for vm in ctl_json(agent.sock, "vms")["vms"]}
    assert listed["vm2"]["reason"] == "resting", listed
    assert listed["vm0"]["max_cpu"] > 10 * listed["vm2"]["max_cpu"], listed
    status = ctl_json(agent.sock, "status")
    assert (status["scan_budget"], status["vms"]) == (0.2, 3), status

    for vm in vms[:2]:
        vm.wait_nuksm(lambda i: i["merged-pages"] >= 16 * MIB // PAGE,
                      "the pages alike to merge", timeout=60)


def awake(vm):
    """Has @vm left its rest (signs of duplicates, or merges)?"""
    return share(vm)["reason"] in ("signalled", "yielding")


def wait_awake(vms, what):
    """Wait until each of @vms was seen awake, within a few looks."""
    woke = set()

    def all_woke():
        woke.update(vm.name for vm in vms if awake(vm))
        return len(woke) == len(vms)
    wait_until(all_woke, 6 * BUDGET_LOOK_S, what)


def test_a_resting_vm_written_into_wakes_at_once(start_agent, qtest_vm):
    """Three VMs rest at a pace of three, each having hashed 8 MiB of its
    own.  Pages alike written into two of them wake them within a look
    or two and merge, where their rest alone would wait its pace times
    longer: first into memory they never touched (their resident
    memory grows; nothing is there to track), then over the pages their
    scanners had found stable (the writes to tracked pages, which
    query-nuksm counts, are told at once).  The third VM rests on."""
    agent = start_agent("--scan-budget", "20%")
    vms = [qtest_vm(f"vm{i}", agent=agent.sock) for i in range(3)]
    for i, vm in enumerate(vms):
        fill(vm, random.Random(i).randbytes(8 * MIB))
    wait_until(lambda: resting(vms, 3), 90, "the three VMs to rest")

    untouched = random.Random(98).randbytes(8 * MIB)
    for vm in vms[:2]:
        fill(vm, untouched, at=AT + 16 * MIB)
    wait_awake(vms[:2], "vm0 and vm1 to wake, their memory grown")
    for vm in vms[:2]:
        vm.wait_nuksm(lambda i: i["merged-pages"] >= 8 * MIB // PAGE,
                      "the pages written into untouched memory to merge",
                      timeout=60)
    wait_until(lambda: resting(vms, 3), 90, "the three VMs to rest again")

    written = [vm.nuksm()["tracked-writes"] for vm in vms]
    over = random.Random(99).randbytes(8 * MIB)
    for vm in vms[:2]:
        fill(vm, over)
    wait_awake(vms[:2], "vm0 and vm1 to wake, their tracked pages written")
    for vm, before in zip(vms[:2], written):
        assert vm.nuksm()["tracked-writes"] > before
        vm.wait_nuksm(lambda i: i["merged-pages"] >= 16 * MIB // PAGE,
                      "the pages written over stable ones to merge",
                      timeout=60)
    wait_until(lambda: share(vms[2])["reason"] == "resting", 6 *
               BUDGET_LOOK_S, "vm2 to rest on")
    assert vms[2].nuksm()["merged-pages"] == 0


def test_no_budget_leaves_each_vm_its_own(start_agent, qtest_vm):
    """--scan-budget=0: no VM is told a part, and its scanner keeps its
    own governor's budget; nuksmctl says so."""
    agent = start_agent("--scan-budget", "0")
    vm = qtest_vm("vm0", agent=agent.sock)
    vm.wait_state("active")
    wait_until(lambda: vm.nuksm()["full-scans"] >= 2, 30, "two passes")
    assert "host-share" not in vm.nuksm()["budget"]
    assert ctl_json(agent.sock, "vms")["vms"][0]["share"]["reason"] == "off"
    assert ctl_json(agent.sock, "status")["scan_budget"] == 0


def test_resting_vms_cost_what_one_costs(start_agent, qtest_vm):
    """Six idle VMs, once resting, cost nuksm (their scanner threads and
    nuksmd, by the CPU counters; the samplers QEMU's main loop runs are
    in the benchmark's figures) at most half a percent of a core in
    all: each VM's passes and periodic samplers run six times less
    often."""
    agent = start_agent("--scan-budget", "20%")
    vms = [qtest_vm(f"vm{i}", agent=agent.sock,
                    extra=["-name", f"vm{i},debug-threads=on"])
           for i in range(6)]
    for i, vm in enumerate(vms):
        fill(vm, random.Random(i).randbytes(8 * MIB))
    wait_until(lambda: resting(vms, 6), 120, "the six VMs to rest")

    def cpu_ns():
        return process_cpu_ns(agent.pid) + \
            sum(thread_cpu_ns(vm.pid, "nuksm-scan") for vm in vms)
    start = cpu_ns()
    # A measure, not a wait: long enough for every VM's samplers to run
    # at their pace.
    window = 12
    time.sleep(window)
    used = (cpu_ns() - start) / 1e9
    print(f"6 resting VMs: {100 * used / window:.3f}% of a core")
    assert resting(vms, 6), "a VM left its rest with nothing to do"
    assert used <= 0.005 * window, \
        f"nuksm took {used:.3f} s of CPU in {window} s for 6 idle VMs"


HOG = """
import os, sys, time
with open(sys.argv[1] + "/cgroup.procs", "w") as f:
    f.write(str(os.getpid()))
hog = bytearray(int(sys.argv[2]) << 20)
for i in range(0, len(hog), 4096):
    hog[i] = 1
print("ready", flush=True)
time.sleep(600)
"""


def test_pressure_rests_and_resumes(new_cgroup, start_agent, qtest_vm):
    """run=pressure, looking at a memory cgroup of 256 MiB (v2 or v1,
    whichever the host has): nearly empty,
    it has memory to spare, so merging rests (every VM held, nuksmctl
    and the VMs say so) and pages alike in two VMs stay apart.  A
    process that fills the cgroup past 80% makes memory short: the VMs
    are let go within a look and the pages merge.  Once it exits,
    merging rests again and what merged stays merged."""
    cgroup = new_cgroup("memory")
    limit = "memory.max" if os.path.exists(f"{cgroup}/memory.max") \
        else "memory.limit_in_bytes"        # cgroup v1
    with open(f"{cgroup}/{limit}", "w") as f:
        f.write(str(256 * MIB))
    agent = start_agent("--run", "pressure", "--pressure-cgroup", cgroup,
                        "--pressure-stall", "0")
    vms = [qtest_vm(name, agent=agent.sock) for name in ("a", "b")]

    def held():
        return [s["reason"] for s in shares(vms)] == ["held", "held"]
    wait_until(held, 30, "merging to rest")
    status = ctl_json(agent.sock, "status")
    assert (status["run"], status["held"]) == ("pressure", True), status
    assert status["memory_available"] > 0.8, status
    alike = random.Random(5).randbytes(4 * MIB)
    for vm in vms:
        fill(vm, alike)
    # A bound, not a wait: two looks, in which VMs at work would have
    # offered and merged these pages (a write cuts their rest short).
    time.sleep(2 * BUDGET_LOOK_S)
    assert [vm.nuksm()["merged-pages"] for vm in vms] == [0, 0]

    hog = subprocess.Popen([sys.executable, "-c", HOG, cgroup, "230"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "ready"
        # The goal: merging at full budget within 10 s of the pressure.
        wait_until(lambda: not ctl_json(agent.sock, "status")["held"],
                   10, "memory to be short")
        wait_until(lambda: not any(s["reason"] == "held"
                                   for s in shares(vms)),
                   10, "the VMs to be let go")
        for vm in vms:
            vm.wait_nuksm(lambda i: i["merged-pages"] >= 4 * MIB // PAGE,
                          "the pages alike to merge", timeout=60)
    finally:
        hog.kill()
        hog.wait()
    wait_until(held, 30, "merging to rest again")
    for vm in vms:
        assert vm.nuksm()["merged-pages"] >= 4 * MIB // PAGE
