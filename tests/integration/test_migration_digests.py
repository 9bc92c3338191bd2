# SPDX-License-Identifier: GPL-2.0-or-later
"""Migration capability nuksm-digests (docs/operations.rst, "Migration
and snapshots"): real nuksmd, real QEMUs (-accel qtest) migrating over
a unix socket.

Two agents stand for two hosts.  At the source, y holds content C,
merged with z's copy, and content of its own; at the destination, x
holds C (or part of it).  y's merged pages go as digests, land on x's
copies, and only what the destination lacks follows in full; every
page arrives intact, checked by content through qtest.
"""

import pytest

import harness
from harness import Qtest, wait_until, write_big
from test_migration import (MIB, OWN_AT, PAGE, SHARED_AT, check_content,
                            complete_in_postcopy, dest_vm, landing,
                            migrate_over_socket, start_holder)
from test_migration import contents  # noqa: F401 (a fixture)

pytestmark = pytest.mark.full_throttle

CAPS = ("return-path", "nuksm-digests")


@pytest.fixture
def hosts(start_agent):
    """The source host's agent and the destination's."""
    return start_agent(name="source"), start_agent(name="destination")


def merged_source(qtest_vm, agent, shared, own):
    """y on @agent, its copy of @shared merged with z's, and @own."""
    start_holder(qtest_vm, agent, shared, name="z")
    y = qtest_vm("y", extra=["-m", "256M"], agent=agent.sock, max_cpu=100)
    q = Qtest(y.qtest_path)
    write_big(q, SHARED_AT, shared)
    write_big(q, OWN_AT, own)
    q.close()
    y.wait_nuksm(lambda i: i["merged-pages"] >= len(shared) // PAGE,
                 "y's copy of C to merge with z's", timeout=90)
    return y


def set_caps(vm, *names, state=True):
    vm.cmd("migrate-set-capabilities",
           capabilities=[{"capability": c, "state": state} for c in names])


def migrate(y, d, sock):
    """Migrate y into d over unix socket @sock, with nuksm-digests at
    both ends, until both say it completed; y's migration figures."""
    migrate_over_socket(y, d, sock, caps=CAPS)
    wait_until(lambda: y.cmd("query-migrate")["status"] in
               ("completed", "failed"), 90, "the migration to end")
    info = y.cmd("query-migrate")
    assert info["status"] == "completed", info
    wait_until(lambda: d.cmd("query-migrate").get("status") == "completed",
               60, "the incoming migration to complete")
    return info


def test_only_what_the_destination_lacks(hosts, qtest_vm, start_vm,
                                         workdir, contents):
    """x holds the first half of C: y's merged pages go as digests, that
    half lands on x's copies, the other half follows in full, and the
    wire carries C's held half as 40-byte records."""
    here, there = hosts
    shared, own = contents
    half = len(shared) // 2
    y = merged_source(qtest_vm, here, shared, own)
    start_holder(qtest_vm, there, shared[:half])
    d = dest_vm(start_vm, workdir, there)

    info = migrate(y, d, workdir / "mig.sock")

    pages = len(shared) // PAGE
    sent = y.nuksm()["digests"]
    land = landing(d)
    assert sent["sent"] >= pages, sent
    assert land["digests"] == sent["sent"], (land, sent)
    # The half x holds lands; the other half is lacking and follows.
    assert land["digests-landed"] >= 0.99 * pages / 2, land
    assert sent["held"] == land["digests-landed"], (sent, land)
    assert sent["lacked"] + sent["unanswered"] >= 0.99 * pages / 2, sent
    assert land["digests-landed"] + land["digests-lacking"] == \
        land["digests"], land
    # Stock migration would send C and y's own pages in full, 40 MiB.
    wire = info["ram"]["transferred"] / MIB
    assert wire <= (len(own) + half) / MIB + 4, info["ram"]
    check_content(d, shared, own)
    check_content(y, shared, own)


def test_all_held_goes_as_digests(hosts, qtest_vm, start_vm, workdir,
                                  contents):
    """x holds all of C: none of it crosses in full, and the incoming
    VM's memory grows by its own pages only."""
    here, there = hosts
    shared, own = contents
    y = merged_source(qtest_vm, here, shared, own)
    start_holder(qtest_vm, there, shared)
    d = dest_vm(start_vm, workdir, there)

    info = migrate(y, d, workdir / "mig.sock")

    pages = len(shared) // PAGE
    land = landing(d)
    assert land["digests-landed"] >= 0.99 * pages, land
    assert info["ram"]["transferred"] / MIB <= len(own) / MIB + 4, \
        info["ram"]
    assert d.nuksm()["merged-pages"] >= land["digests-landed"]
    check_content(d, shared, own)


def test_forgotten_content_lands(start_agent, qtest_vm, start_vm, workdir,
                                 contents):
    """x's copy of C paired with nothing at the destination, whose agent
    forgot it: the digests make it wanted all at once, x offers its pages
    again, and all of C lands as the stream arrives, not a few thousand
    contents a second."""
    metrics = workdir / "textfile"
    metrics.mkdir()
    here = start_agent(name="source")
    there = start_agent("--forget-after", "1", "--metrics-dir", str(metrics),
                        "--metrics-interval", "1", name="destination")
    shared, own = contents
    pages = len(shared) // PAGE
    y = merged_source(qtest_vm, here, shared, own)
    start_holder(qtest_vm, there, shared)
    wait_until(lambda: (harness.agent_metric(
        metrics, "nuksm_pages_forgotten") or 0) >= pages, 30,
        "the destination's agent to forget x's pages")
    d = dest_vm(start_vm, workdir, there)

    info = migrate(y, d, workdir / "mig.sock")

    land = landing(d)
    assert land["digests-landed"] >= 0.99 * pages, land
    assert info["ram"]["transferred"] / MIB <= len(own) / MIB + 4, \
        info["ram"]
    check_content(d, shared, own)


def test_nothing_crosses_a_domain(start_agent, qtest_vm, start_vm, workdir,
                                  contents):
    """x holds C in domain blue; y lands in red: every digest is
    answered as lacking, nothing maps blue's copies, and every page
    arrives in full."""
    here = start_agent(name="source")
    there = start_agent("--vm-domains=allow", name="destination")
    shared, own = contents
    y = merged_source(qtest_vm, here, shared, own)
    x = start_holder(qtest_vm, there, shared, domain="blue")
    d = dest_vm(start_vm, workdir, there, domain="red")
    assert d.nuksm()["merge-domain"] == "red"

    migrate(y, d, workdir / "mig.sock")

    land = landing(d)
    assert land["digests"] >= len(shared) // PAGE, land
    assert land["digests"] == y.nuksm()["digests"]["sent"]
    assert land["digests-landed"] == 0, land
    assert land["digests-lacking"] == land["digests"], land
    assert y.nuksm()["digests"]["held"] == 0
    check_content(d, shared, own)
    check_content(x, shared)


def test_refused_without_nuksm(qtest_vm, start_vm, workdir, agent,
                               contents):
    """The capability needs a nuksm object and the return path, and a
    destination without nuksm cannot take a stream that has it."""
    bare = dest_vm(start_vm, workdir, None, name="bare")
    with pytest.raises(Exception) as err:
        set_caps(bare, *CAPS)
    assert "'nuksm-digests' requires a nuksm object" in str(err.value)

    y = qtest_vm("y", extra=["-m", "256M"], agent=agent.sock)
    with pytest.raises(Exception) as err:
        set_caps(y, "nuksm-digests")
    assert "requires capability 'return-path'" in str(err.value)
    set_caps(y, "xbzrle")
    with pytest.raises(Exception) as err:
        set_caps(y, *CAPS)
    assert "not compatible with 'xbzrle'" in str(err.value)
    set_caps(y, "xbzrle", state=False)

    # Source with it, destination without: the stream says so at once.
    set_caps(y, *CAPS)
    set_caps(bare, "return-path")
    sock = workdir / "mig.sock"
    bare.cmd("migrate-incoming", uri=f"unix:{sock}",
             **{"exit-on-error": False})
    y.cmd("migrate", uri=f"unix:{sock}")
    wait_until(lambda: bare.cmd("query-migrate").get("status") == "failed",
               30, "the destination to refuse the stream")
    assert "Capability nuksm-digests is off, but received capability is on" \
        in bare.log.read_text()
    wait_until(lambda: y.cmd("query-migrate")["status"] == "failed", 30,
               "the source to see the migration fail")
    assert y.cmd("query-status")["status"] == "running"


def test_postcopy_sends_pages_in_full(hosts, qtest_vm, start_vm, workdir,
                                      contents):
    """With postcopy-ram, the destination does not ask for digests (its
    pages are placed by postcopy's userfaultfd): every page goes in full
    and arrives intact."""
    here, there = hosts
    shared, own = contents
    y = merged_source(qtest_vm, here, shared, own)
    start_holder(qtest_vm, there, shared)
    d = dest_vm(start_vm, workdir, there)
    migrate_over_socket(y, d, workdir / "mig.sock", postcopy=True,
                        bandwidth=8 * MIB, caps=CAPS)
    wait_until(lambda: y.cmd("query-migrate")["status"] == "active", 10,
               "the migration to start")
    complete_in_postcopy(y, d)

    assert y.cmd("query-migrate")["ram"]["postcopy-bytes"] >= 16 * MIB
    assert y.nuksm()["digests"]["sent"] == 0
    assert landing(d)["digests"] == 0
    check_content(d, shared, own)


def test_cancelled_then_migrated_again(hosts, qtest_vm, start_vm, workdir,
                                       contents):
    """A migration cancelled while digests are answered: the source runs
    on intact, and the next migration, to a new destination, starts
    afresh (a new salt) and completes with every page in place."""
    here, there = hosts
    shared, own = contents
    y = merged_source(qtest_vm, here, shared, own)
    start_holder(qtest_vm, there, shared)
    d = dest_vm(start_vm, workdir, there)
    migrate_over_socket(y, d, workdir / "mig.sock", bandwidth=4 * MIB,
                        caps=CAPS, **{"exit-on-error": False})
    y.wait_nuksm(lambda i: i["digests"]["sent"] >= 512,
                 "digests to be sent", timeout=30)
    y.cmd("migrate_cancel")
    wait_until(lambda: y.cmd("query-migrate")["status"] == "cancelled", 30,
               "the migration to be cancelled")
    y.cmd("cont")
    check_content(y, shared, own)
    d.kill()

    d2 = dest_vm(start_vm, workdir, there, name="dest2")
    y.cmd("migrate-set-parameters", **{"max-bandwidth": 0})
    migrate(y, d2, workdir / "mig2.sock")
    assert landing(d2)["digests-landed"] >= 0.99 * len(shared) // PAGE
    check_content(d2, shared, own)
