# SPDX-License-Identifier: GPL-2.0-or-later
"""Migration that lands merged (docs/operations.rst, "Migration and
snapshots"): real nuksmd, real QEMUs (-accel qtest) migrating over a file
or a unix socket.

A destination VM runs beside x, which holds content C.  A VM y holding C
and content of its own migrates in: the pages of C land on copies of
what x holds, and take no memory of their own; every page arrives
intact, checked by content through qtest.
"""

import random

import pytest

import harness
from harness import Qtest, read_big, wait_until, write_big

# The VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

PAGE = 4096
MIB = 1 << 20
SHARED_AT = 64 * MIB
OWN_AT = 160 * MIB
SHARED_MIB = 32
OWN_MIB = 8


def pseudo_random(seed, size):
    return random.Random(seed).randbytes(size)


def anon_mib(vm):
    """What the VM's process holds of its own (anonymous), MiB."""
    return harness.proc_kib_field(vm.pid, "smaps_rollup", "Anonymous") / MIB


def landing(vm):
    return vm.nuksm()["landing"]


@pytest.fixture
def contents():
    return (pseudo_random(1, SHARED_MIB * MIB),
            pseudo_random(2, OWN_MIB * MIB))


def start_holder(qtest_vm, agent, shared, name="x", **props):
    """x: a VM on @agent whose @shared content the agent has seen."""
    x = qtest_vm(name, extra=["-m", "256M"], agent=agent.sock, max_cpu=100,
                 **props)
    q = Qtest(x.qtest_path)
    write_big(q, SHARED_AT, shared)
    q.close()
    # Offered once stable: two passes after the write, three to be sure.
    scans = x.nuksm()["full-scans"]
    x.wait_nuksm(lambda i: i["full-scans"] >= scans + 3,
                 "three full scans of x", timeout=60)
    return x


def source_vm(start_vm, workdir, shared, own):
    """y, the VM to migrate, with no nuksm of its own: what the source
    runs does not matter to where it lands."""
    y = start_vm("y", harness.qtest_args(workdir / "y.qtest", mem="256M"))
    q = Qtest(y.qtest_path)
    write_big(q, SHARED_AT, shared)
    write_big(q, OWN_AT, own)
    q.close()
    return y


def dest_vm(start_vm, workdir, agent, name="dest", **props):
    """The incoming VM (-incoming defer), its nuksm object connected
    before anything arrives; without one if @agent is None."""
    objects = []
    if agent:
        props.setdefault("id", "dedup0")
        objects.append(harness.nuksm_object(agent=agent.sock, max_cpu=100,
                                            **props))
    d = start_vm(name, [*harness.qtest_args(workdir / f"{name}.qtest",
                                            *objects, mem="256M"),
                        "-incoming", "defer"])
    if agent:
        d.wait_state("paused")
    return d


def save(y, path):
    """Migrate stopped y into the file at @path."""
    y.cmd("stop")
    y.cmd("migrate", uri=f"file:{path}")
    wait_until(lambda: y.cmd("query-migrate")["status"] == "completed", 60,
               "the migration to the file to complete")


def load(d, path):
    """Migrate the file at @path into d: what d's memory grew, MiB."""
    before = anon_mib(d)
    d.cmd("migrate-incoming", uri=f"file:{path}")
    wait_until(lambda: d.cmd("query-migrate").get("status") == "completed",
               60, "the incoming migration to complete")
    return anon_mib(d) - before


def check_content(vm, shared, own=None):
    q = Qtest(vm.qtest_path)
    try:
        assert read_big(q, SHARED_AT, len(shared)) == shared
        if own is not None:
            assert read_big(q, OWN_AT, len(own)) == own
    finally:
        q.close()


def test_pages_land_merged(agent, qtest_vm, start_vm, workdir, contents):
    """y's pages of C land on copies of x's as they arrive: the
    destination's private memory grows by y's own pages, not by C."""
    shared, own = contents
    shared_pages = len(shared) // PAGE
    x = start_holder(qtest_vm, agent, shared)
    y = source_vm(start_vm, workdir, shared, own)
    path = workdir / "y.migration"
    save(y, path)
    # Stock migration of the same stream, for comparison.
    stock = load(dest_vm(start_vm, workdir, None, name="stock"), path)
    d = dest_vm(start_vm, workdir, agent)
    before = anon_mib(d)

    grown = load(d, path)

    land = landing(d)
    assert land["landed"] >= 0.99 * shared_pages, land
    assert land["offered"] + land["passed"] >= \
        shared_pages + len(own) // PAGE, land
    # C's pages read x's copies: they took no memory of their own.
    assert grown <= stock - 0.8 * SHARED_MIB, \
        f"the destination grew {grown:.1f} MiB, stock {stock:.1f}: {land}"
    # Merged as they landed, not minutes later.
    assert d.nuksm()["merged-pages"] >= land["landed"]
    # And still once the object took over (the agent knew them already:
    # before, its RESTORE was refused and every landed page copied out).
    d.wait_nuksm(lambda i: i["state"] == "active" and i["full-scans"] >= 1,
                 "a full scan of the destination", timeout=60)
    assert d.nuksm()["merged-pages"] >= land["landed"]
    assert anon_mib(d) - before <= stock - 0.8 * SHARED_MIB
    check_content(d, shared, own)
    check_content(x, shared)


def test_landing_off(agent, qtest_vm, start_vm, workdir, contents):
    """landing=off: the pages load as QEMU loads them, and merge once
    the migration is done."""
    shared, own = contents
    start_holder(qtest_vm, agent, shared)
    y = source_vm(start_vm, workdir, shared, own)
    path = workdir / "y.migration"
    save(y, path)
    d = dest_vm(start_vm, workdir, agent, landing="off")
    assert landing(d)["blocked"] == "landing=off"

    load(d, path)

    assert set(landing(d).values()) == {0}, landing(d)
    d.wait_nuksm(lambda i: i["merged-pages"] >= 0.99 * len(shared) // PAGE,
                 "C to merge after the migration", timeout=60)
    check_content(d, shared, own)


@pytest.fixture
def domain_agent(start_agent):
    """An agent that puts each VM in the merge domain it asks for."""
    return start_agent("--vm-domains=allow")


def test_nothing_lands_across_domains(domain_agent, qtest_vm, start_vm,
                                      workdir, contents):
    """x holds C in domain blue; y lands in domain red: none of its pages
    map blue's copies, each is written as sent."""
    shared, own = contents
    x = start_holder(qtest_vm, domain_agent, shared, domain="blue")
    y = source_vm(start_vm, workdir, shared, own)
    path = workdir / "y.migration"
    save(y, path)
    d = dest_vm(start_vm, workdir, domain_agent, domain="red")
    assert d.nuksm()["merge-domain"] == "red"

    load(d, path)

    land = landing(d)
    assert land["offered"] + land["passed"] >= \
        (len(shared) + len(own)) // PAGE, land
    assert land["landed"] == 0 and land["written"] == land["offered"], land
    check_content(d, shared, own)
    check_content(x, shared)


def migrate_over_socket(y, d, sock, postcopy=False, bandwidth=None,
                        caps=(), **incoming):
    """Start migrating y into d over unix socket @sock, with capabilities
    @caps (and postcopy-ram if @postcopy) at both ends; @incoming: more
    arguments of migrate-incoming."""
    caps = [*caps, *(["postcopy-ram"] if postcopy else [])]
    for vm in (y, d):
        if caps:
            vm.cmd("migrate-set-capabilities", capabilities=[
                {"capability": c, "state": True} for c in caps])
    d.cmd("migrate-incoming", uri=f"unix:{sock}", **incoming)
    if bandwidth:
        y.cmd("migrate-set-parameters", **{"max-bandwidth": bandwidth})
    y.cmd("migrate", uri=f"unix:{sock}")


def complete_in_postcopy(y, d):
    """Switch y's migration into d to postcopy once it runs; wait until
    both ends say it completed."""
    y.cmd("migrate-start-postcopy")
    wait_until(lambda: y.cmd("query-migrate")["status"] == "completed", 90,
               "the postcopy migration to complete")
    wait_until(lambda: d.cmd("query-migrate").get("status") == "completed",
               60, "the incoming migration to complete")


def test_postcopy_lands_until_the_switch(agent, qtest_vm, start_vm,
                                        workdir, contents):
    """With postcopy-ram, pages land while the migration is precopy.  y
    rewrites the first MiB of C once it landed, and the migration then
    switches to postcopy: the destination discards those pages, which
    must not keep the copy they landed on, and postcopy's userfaultfd
    brings y's new content; nothing lands after the switch, every page
    arrives, and the VM merges once the migration is done."""
    shared, own = contents
    start_holder(qtest_vm, agent, shared)
    y = source_vm(start_vm, workdir, shared, own)
    d = dest_vm(start_vm, workdir, agent)
    rewritten = pseudo_random(3, MIB)
    final = rewritten + shared[MIB:]

    # Slow enough that most pages go after the switch to postcopy.
    migrate_over_socket(y, d, workdir / "mig.sock", postcopy=True,
                        bandwidth=8 * MIB)
    y.cmd("migrate-set-parameters", **{"max-postcopy-bandwidth": 8 * MIB})
    wait_until(lambda: landing(d)["landed"] >= 2 * MIB // PAGE, 30,
               "C's first 2 MiB to land before the switch")
    assert "blocked" not in landing(d)
    q = Qtest(y.qtest_path)
    write_big(q, SHARED_AT, rewritten)
    q.close()
    y.cmd("migrate-start-postcopy")
    # Said while the VM runs and waits for pages, not only in a log.
    wait_until(lambda: "postcopy" in landing(d).get("blocked", ""), 10,
               "query-nuksm to say that nothing lands after the switch")
    offered = landing(d)["offered"]
    # Read at once, before postcopy's own pass brings them: a discarded
    # page that still mapped its copy would read C, not fault.
    check_content(d, rewritten)
    assert y.cmd("query-migrate")["status"] == "postcopy-active"
    wait_until(lambda: y.cmd("query-migrate")["status"] == "completed", 90,
               "the postcopy migration to complete")
    wait_until(lambda: d.cmd("query-migrate").get("status") == "completed",
               60, "the incoming migration to complete")

    # Most pages came after the switch, and none of them landed.
    info = y.cmd("query-migrate")
    assert info["ram"]["postcopy-bytes"] >= 16 * MIB, info["ram"]
    land = landing(d)
    assert land["offered"] == offered, land
    assert land["landed"] + land["written"] == land["offered"], land
    check_content(d, final, own)
    d.wait_state("active")
    d.wait_nuksm(lambda i: i["merged-pages"] >= len(shared[MIB:]) // PAGE,
                 "C to merge after the migration", timeout=60)
    check_content(d, final, own)


def test_pages_sent_again_win(agent, qtest_vm, start_vm, workdir, contents):
    """y keeps rewriting part of C while it migrates: pages that landed
    merged, or wait in a buffer, are sent again and the last content
    sent is what the destination holds."""
    shared, own = contents
    start_holder(qtest_vm, agent, shared)
    y = source_vm(start_vm, workdir, shared, own)
    d = dest_vm(start_vm, workdir, agent)
    q = Qtest(y.qtest_path)
    final = bytearray(shared)

    migrate_over_socket(y, d, workdir / "mig.sock", bandwidth=16 * MIB)
    rounds = 0
    while y.cmd("query-migrate")["status"] in ("setup", "active") and \
            rounds < 40:
        # A different 256 KiB of C each round, with its own content,
        # while the pages before it may have landed already.
        at = (rounds * 7 % (SHARED_MIB * 4)) * 64 * 4096
        chunk = pseudo_random(1000 + rounds, 64 * PAGE)
        write_big(q, SHARED_AT + at, chunk)
        final[at:at + len(chunk)] = chunk
        rounds += 1
        wait_until(lambda: y.cmd("query-migrate")["status"] != "active" or
                   y.cmd("query-migrate")["ram"]["transferred"] >=
                   rounds * MIB, 30, "the migration to move on")
    q.close()
    y.cmd("migrate-set-parameters", **{"max-bandwidth": 0})
    wait_until(lambda: y.cmd("query-migrate")["status"] == "completed", 60,
               "the migration to complete")
    wait_until(lambda: d.cmd("query-migrate").get("status") == "completed",
               60, "the incoming migration to complete")

    assert rounds >= 4, "the migration was over too soon to rewrite pages"
    assert y.cmd("query-migrate")["ram"]["dirty-sync-count"] >= 2
    assert landing(d)["landed"] >= 0.5 * len(shared) // PAGE
    check_content(d, bytes(final), own)


def test_cancelled_migration(agent, qtest_vm, start_vm, workdir, contents):
    """A migration cancelled half-way: the source runs on with its
    memory intact; the destination, with what landed, fails and quits,
    and the agent lets go of what it mapped."""
    shared, own = contents
    x = start_holder(qtest_vm, agent, shared)
    y = source_vm(start_vm, workdir, shared, own)
    d = dest_vm(start_vm, workdir, agent)
    sock = workdir / "mig.sock"
    # The destination stays to be looked at, as a manager may keep it.
    d.cmd("migrate-incoming", uri=f"unix:{sock}", **{"exit-on-error": False})
    y.cmd("migrate-set-parameters", **{"max-bandwidth": 8 * MIB})
    y.cmd("migrate", uri=f"unix:{sock}")
    d.wait_nuksm(lambda i: i["landing"]["landed"] >= 512,
                 "pages to land", timeout=30)

    y.cmd("migrate_cancel")
    wait_until(lambda: y.cmd("query-migrate")["status"] == "cancelled", 30,
               "the migration to be cancelled")
    wait_until(lambda: d.cmd("query-migrate").get("status") == "failed", 30,
               "the incoming migration to fail")
    y.cmd("cont")
    assert y.cmd("query-status")["status"] == "running"
    check_content(y, shared, own)

    # Each landed page shares x's copy (once x maps it) until the
    # destination goes.
    landed = landing(d)["landed"]
    wait_until(lambda: harness.ctl_json(agent.sock, "status")
               ["pages_sharing"] >= landed, 20, "x to map every copy")
    d.kill()
    wait_until(lambda: harness.ctl_json(agent.sock, "status")["vms"] == 1,
               20, "the agent to let go of the destination")
    check_content(x, shared)
