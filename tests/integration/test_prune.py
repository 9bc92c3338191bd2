# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksmctl prune and run (SET_RUN, PRUNE; agent/merge/budget.h,
hw/mem/nuksm/nuksm-prune.h): merging stopped in a merge domain or on
the host, with every merged page unmerged at a bounded rate and every
page intact, then let go again; with real QEMUs, their scanners and
nuksmctl."""

import random
import subprocess
import time

from harness import NUKSMCTL, Qtest, ctl, ctl_json, ctl_ok, read_big, \
    wait_until, write_big

MIB = 1 << 20
PAGE = 4096
AT = 64 * MIB
SIZE = 8 * MIB
BUDGET_LOOK_S = 2       # agent/merge/budget.h


def fill(vm, data, at=AT):
    q = Qtest(vm.qtest_path)
    write_big(q, at, data)
    q.close()


def content(vm, at=AT, size=SIZE):
    q = Qtest(vm.qtest_path)
    data = read_big(q, at, size)
    q.close()
    return data


def merged(vm):
    """The VM's pages that map a merged copy (pages dropped as zeros,
    which the kernel's zero page backs, are not nuksm's sharing)."""
    info = vm.nuksm()
    return info["merged-pages"] - info["zero-pages"]


def reason(vm):
    return vm.nuksm()["budget"].get("host-share", {"reason": "off"})[
        "reason"]


def test_prune_unmerges_a_domain_with_every_page_intact(start_agent,
                                                         qtest_vm):
    """Two VMs of merge domain "blue" and two of "green" merge 8 MiB
    alike each.  nuksmctl prune blue, at 8 MiB/s, while the guest writes
    1 MiB of one blue VM: it waits until no page of blue is merged,
    which the rate makes take a second at least; every page of blue
    holds what it held, or what the guest wrote; blue rests (its VMs
    held, its pages not merged again over two looks) and green keeps
    its merged pages.  nuksmctl run always lets blue merge again."""
    agent = start_agent("--vm-domains=allow")
    vms = {name: qtest_vm(name, agent=agent.sock, domain=domain)
           for name, domain in (("b0", "blue"), ("b1", "blue"),
                                ("g0", "green"), ("g1", "green"))}
    alike = random.Random(1).randbytes(SIZE)
    for vm in vms.values():
        fill(vm, alike)
    for vm in vms.values():
        vm.wait_nuksm(lambda i: i["merged-pages"] >= SIZE // PAGE,
                      "the pages alike to merge", timeout=90)

    written = random.Random(2).randbytes(MIB)
    start = time.monotonic()
    prune = subprocess.Popen([NUKSMCTL, "--socket", agent.sock, "prune",
                              "blue", "--rate", "8"], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    q = Qtest(vms["b0"].qtest_path)
    write_big(q, AT + 2 * MIB, written)
    q.close()
    out, err = prune.communicate(timeout=60)
    assert prune.returncode == 0, err
    took = time.monotonic() - start
    assert "merging rests in merge domain blue; 2 VMs" in out
    assert out.rstrip().endswith("no page is merged any more")
    # 2048 pages a VM at 2048 pages/s, the two side by side.
    assert took >= 0.9, f"prune took {took:.2f} s at 8 MiB/s"

    expected = alike[:2 * MIB] + written + alike[3 * MIB:]
    assert content(vms["b0"]) == expected
    assert content(vms["b1"]) == alike
    for name in ("b0", "b1"):
        assert merged(vms[name]) == 0
        assert reason(vms[name]) == "held"
    for name in ("g0", "g1"):
        assert merged(vms[name]) >= SIZE // PAGE
        assert reason(vms[name]) != "held"
        assert content(vms[name]) == alike
    listed = {v["name"]: v for v in ctl_json(agent.sock, "vms")["vms"]}
    assert listed["b0"]["merged_pages"] == listed["b1"]["merged_pages"] == 0
    # A bound, not a wait: two looks in which a VM at work would merge.
    time.sleep(2 * BUDGET_LOOK_S)
    assert merged(vms["b0"]) == merged(vms["b1"]) == 0

    assert ctl_json(agent.sock, "run", "always") == {"run": "always",
                                                     "held": False}
    for name in ("b0", "b1"):
        vms[name].wait_nuksm(lambda i: i["merged-pages"] >= SIZE // PAGE
                             - MIB // PAGE,
                             "blue's pages to merge again", timeout=90)
    assert content(vms["b0"]) == expected
    assert content(vms["b1"]) == alike


def test_prune_of_the_host_and_run(start_agent, qtest_vm):
    """nuksmctl prune without a domain stops merging on the whole host
    (run=off, as nuksmctl status says) and unmerges every page; nuksmctl
    run pressure and always then say when it merges again; a bad mode or
    rate is refused with the values allowed, and nothing changes."""
    agent = start_agent()
    vms = [qtest_vm(f"vm{i}", agent=agent.sock) for i in range(2)]
    alike = random.Random(3).randbytes(SIZE)
    for vm in vms:
        fill(vm, alike)
    for vm in vms:
        vm.wait_nuksm(lambda i: i["merged-pages"] >= SIZE // PAGE,
                      "the pages alike to merge", timeout=90)

    out = ctl_json(agent.sock, "prune")
    assert out == {"vms": 2, "merged_pages": 0}
    status = ctl_json(agent.sock, "status")
    assert (status["run"], status["held"], status["pages_sharing"]) == \
        ("off", True, 0)
    for vm in vms:
        assert merged(vm) == 0 and content(vm) == alike

    bad = ctl(agent.sock, "run", "sometimes")
    assert bad.returncode == 2
    assert "allowed: always, pressure, off" in bad.stderr
    bad = ctl(agent.sock, "prune", "--rate", "0")
    assert bad.returncode == 2 and "--rate: 0 is out of range" in bad.stderr
    assert ctl_json(agent.sock, "status")["run"] == "off"

    assert "run: pressure: merging" in ctl_ok(agent.sock, "run", "pressure")
    assert ctl_json(agent.sock, "status")["run"] == "pressure"
    ctl_ok(agent.sock, "run", "always")
    wait_until(lambda: all(merged(vm) >= SIZE // PAGE for vm in vms), 90,
               "the pages to merge again")
    for vm in vms:
        assert content(vm) == alike
