# SPDX-License-Identifier: GPL-2.0-or-later
"""Governors (hw/mem/nuksm/nuksm-governor.c): named presets of the
scanner's budget, after UKSM's, set per VM and changed at run time with
qom-set.  qtest /nuksm/governor checks what each preset sets and that
explicit properties override it; this test checks that the scanner keeps
to what the governor says, with real work to do."""

import random
import time

from harness import Qtest, thread_cpu_ns, write_big

MIB = 1 << 20
PAGE = 4096
AT = 64 * MIB
SIZE = 384 * MIB


def test_governor_holds_the_scanner_and_lets_it_go(agent, qtest_vm):
    """Under "quiet" (0.5% of a core) the scanner, with 384 MiB of pages
    to hash, keeps its thread within that share; qom-set governor
    "full" lets it go at once, and the pass ends.  Then an explicit
    max-cpu overrides whatever governor comes next."""
    # Named threads: the scanner is found by its name.
    vm = qtest_vm("vm0", extra=["-m", "512M", "-name", "vm0,debug-threads=on"],
                  agent=agent.sock, governor="quiet", enabled="off")
    budget = vm.nuksm()["budget"]
    assert (budget["governor"], budget["max-cpu"]) == ("quiet", 0.5)
    # Written while paused, so that all of it waits for the window.
    q = Qtest(vm.qtest_path)
    rng = random.Random(7)
    write_big(q, AT, b"".join(rng.randbytes(MIB)
                              for _ in range(SIZE // MIB)))
    pages = SIZE // PAGE
    passes = vm.nuksm()["full-scans"]
    vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
           value=True)
    vm.wait_state("active")
    # The first pass only write-protects the pages it sees for the first
    # time: the next one has them all to hash (nuksm_scan_quiet()).
    vm.wait_nuksm(lambda i: i["full-scans"] > passes, "the first pass",
                  timeout=60)
    passes = vm.nuksm()["full-scans"]

    window = 4.0
    cpu = thread_cpu_ns(vm.pid, "nuksm-scan")
    time.sleep(window)
    used = (thread_cpu_ns(vm.pid, "nuksm-scan") - cpu) / 1e9
    info = vm.nuksm()
    print(f"quiet: {100 * used / window:.2f}% of a core, "
          f"{info['pages-scanned']} pages hashed")
    # Twice the share, and a slice of overshoot: hashing these pages
    # unthrottled takes far more (hundreds of ms).
    assert used <= 2 * 0.005 * window + 0.01, \
        f"the scanner used {used:.3f} s of CPU in {window} s under quiet"
    assert info["full-scans"] == passes, "a pass ended: too little work"
    assert info["pages-scanned"] < 2 * pages

    vm.cmd("qom-set", path="/objects/dedup0", property="governor",
           value="full")
    start = time.monotonic()
    cpu = thread_cpu_ns(vm.pid, "nuksm-scan")
    info = vm.wait_nuksm(lambda i: i["full-scans"] > passes,
                         "the pass to end under full", timeout=120)
    wall = time.monotonic() - start
    used = (thread_cpu_ns(vm.pid, "nuksm-scan") - cpu) / 1e9
    print(f"full: the pass ended in {wall:.1f} s at "
          f"{100 * used / wall:.1f}% of a core")
    assert info["budget"]["governor"] == "full"
    assert used > 10 * 0.005 * wall, \
        f"the scanner used only {used:.3f} s of CPU in {wall:.1f} s " \
        "under full"

    vm.cmd("qom-set", path="/objects/dedup0", property="max-cpu", value=2)
    vm.cmd("qom-set", path="/objects/dedup0", property="governor",
           value="low")
    budget = vm.nuksm()["budget"]
    # Its own budget stays its cap within the host's (nuksmd's default).
    assert budget.pop("host-share")["budget"] == 20
    assert budget == {"governor": "low", "max-cpu": 2,
                      "max-cpu-source": "property", "scan-rate": 0,
                      "scan-rate-source": "governor", "rest-ms": 2000}
    q.close()
