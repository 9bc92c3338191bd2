# SPDX-License-Identifier: GPL-2.0-or-later
"""A real Linux guest (TCG) with -object nuksm attached."""

import harness
from harness import PAGE_SIZE, ctl_json

GUEST_MIB = 256
FILL_MIB = 64


def test_guest_boots_and_is_scanned(agent, tcg_guest):
    vm = tcg_guest(agent=agent.sock, fill_mib=FILL_MIB)
    assert f"nuksm-guest: filled {FILL_MIB} MiB" in \
        harness.read_log(vm.serial)

    info = vm.wait_state("active")
    assert info["eligible-pages"] == GUEST_MIB * 1024 * 1024 // PAGE_SIZE
    assert vm.cmd("query-status")["status"] == "running"
    assert [v["pid"] for v in ctl_json(agent.sock, "vms")["vms"]] == [vm.pid]

    # Two more passes: at least one of them started after the fill.
    passes = info["full-scans"]
    info = vm.wait_nuksm(lambda i: i["full-scans"] >= passes + 2,
                         "two more full scans", timeout=30)
    assert info["pages-scanned"] >= FILL_MIB * 1024 * 1024 // PAGE_SIZE

    # The fill is 64 copies of 1 MiB: the copies merge within the guest.
    vm.wait_nuksm(lambda i: i["merged-pages"] > 0, "merged pages",
                  timeout=30)
    status = ctl_json(agent.sock, "status")
    assert status["pages_shared"] > 0 and status["pages_sharing"] > 0

    agent.kill()
    vm.wait_event("NUKSM_AGENT_DISCONNECTED")
    assert vm.cmd("query-status")["status"] == "running"
