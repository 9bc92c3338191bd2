# SPDX-License-Identifier: GPL-2.0-or-later
"""Write hotness from nuksm's own dirty-memory client (qemu-patches/0005):
it sees the guest's writes, and it disturbs neither calc-dirty-rate nor
live migration, which use the dirty log at the same time."""

import random
import threading
import time

import harness
from harness import Qtest, wait_until
from test_merge import read_big, write_big

MIB = 1 << 20
PAGE = 4096
AT = 32 * MIB


def hotness(vm):
    return vm.nuksm()["hotness"]


def test_writes_make_pages_hot(agent, qtest_vm):
    """Pages written during a window are counted in it; quiet windows
    count none (qtest itself writes nothing).  A qtest write lands at one
    instant, so the test rewrites 4 MiB every 200 ms or so until a window
    sees it all: one window out of two, or one out of 16 while the
    scanner of this VM, idle so far, has settled, until its next pass
    finds the written pages."""
    vm = qtest_vm(agent=agent.sock, hot_window=1000)
    vm.wait_state("active")
    q = Qtest(vm.qtest_path)
    data = random.Random(1).randbytes(4 * MIB)

    def written_seen():
        write_big(q, AT, data)
        return hotness(vm)["hot-pages"] >= len(data) // PAGE

    wait_until(written_seen, 40, "a window to see the 4 MiB written")
    q.close()
    wait_until(lambda: hotness(vm)["hot-pages"] == 0, 10,
               "a window without writes")


def test_beside_calc_dirty_rate(agent, qtest_vm):
    """calc-dirty-rate (dirty-bitmap mode) turns the dirty log on and off
    while nuksm samples every 10 ms (every 160 ms while the scanner has
    settled): both keep working."""
    vm = qtest_vm(agent=agent.sock, hot_window=10)
    vm.wait_state("active")
    q = Qtest(vm.qtest_path)
    data = random.Random(2).randbytes(MIB)
    for _ in range(3):
        before = hotness(vm)["samples"]
        vm.cmd("calc-dirty-rate", **{"calc-time": 1, "mode": "dirty-bitmap"})
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            write_big(q, AT, data)
        wait_until(lambda: vm.cmd("query-dirty-rate")["status"] ==
                   "measured", 10, "calc-dirty-rate to finish")
        wait_until(lambda: hotness(vm)["samples"] > before + 10, 10,
                   "nuksm to go on sampling")

    def written_seen():
        write_big(q, AT, data)
        return hotness(vm)["hot-pages"] >= MIB // PAGE

    wait_until(written_seen, 10, "nuksm to see writes after calc-dirty-rate")
    q.close()
    assert "error" not in hotness(vm)


def test_live_migration_while_sampling(agent, qtest_vm, start_vm, workdir):
    """A live migration started while nuksm samples every 10 ms and the
    guest writes: the destination ends with exactly the source's memory
    (migration's dirty bitmap lost nothing to nuksm's)."""
    src = qtest_vm("src", agent=agent.sock, hot_window=10)
    src.wait_state("active")
    sock = workdir / "migrate.sock"
    dest = start_vm("dest", [*harness.qtest_args(
        workdir / "dest.qtest",
        harness.nuksm_object(id="dedup0", agent=agent.sock,
                             hot_window=10)),
        "-incoming", f"unix:{sock}"])
    q = Qtest(src.qtest_path)
    rnd = random.Random(3)
    size = 16 * MIB
    write_big(q, AT, rnd.randbytes(size))
    wait_until(lambda: hotness(src)["samples"] >= 3, 10, "samples")

    stop = threading.Event()
    writes = []

    def writer():
        # The qtest socket takes one client: the writer borrows ours.
        while not stop.is_set():
            off = rnd.randrange(0, size, PAGE)
            write_big(q, AT + off, rnd.randbytes(64 * PAGE))
            writes.append(off)

    # Slow enough that the first pass outlasts the writer.
    src.cmd("migrate-set-parameters", **{"max-bandwidth": 8 * MIB})
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        src.cmd("migrate", uri=f"unix:{sock}")
        time.sleep(1.5)
    finally:
        stop.set()
        thread.join()
    assert len(writes) >= 20, f"only {len(writes)} writes during migration"
    assert src.cmd("query-migrate")["status"] == "active"
    src.cmd("migrate-set-parameters", **{"max-bandwidth": 1 << 40})
    wait_until(lambda: src.cmd("query-migrate")["status"] == "completed",
               60, "the migration to complete")
    expected = read_big(q, AT, size)
    q.close()
    d = Qtest(dest.qtest_path)
    assert read_big(d, AT, size) == expected
    d.close()
