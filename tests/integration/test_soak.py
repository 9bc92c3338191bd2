# SPDX-License-Identifier: GPL-2.0-or-later
"""Soak: many VMs churning while the agent is killed again and again.

Eight qtest VMs hold pages drawn from a small pool of contents, so that
they merge with each other and within themselves.  The test keeps a model
of every page and, for NUKSM_SOAK_SECONDS (default 60, as in `make
check`; `make soak` runs longer), rewrites pages with new or the same
content (copy-on-write, rewrites), discards pages through a virtio
balloon the test drives over qtest (they read zero then), SIGKILLs and restarts the agent, keeps some VMs SIGSTOPped
across restarts for longer than the restore grace, and SIGKILLs one VM.
The last third of the run churns on without kills.  At the end every page
of every VM must equal its model, the store must hold exactly the pages
that VMs reference, and the last agent's memory must not have grown over
that third.  A summary goes to $BUILD/soak.json.
"""

import base64
import json
import os
import random
import shutil
import signal
import time


import pytest

import harness
from harness import Qtest, QtestBalloon, rss, wait_until

# The merge path at the VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

PAGE = 4096
MIB = 1 << 20
VMS = 8
REGION_AT = 64 * MIB       # the pages under test, in each VM
RING_AT = 16 * MIB         # the balloon's queue, in each VM
REGION_PAGES = 2048        # 8 MiB each
POOL = 48                  # distinct contents
CHURN_PAGES = 96           # pages rewritten or discarded per step
ZERO = -1                  # the model of a discarded page
RESTART_EVERY = 20         # steps between two agent kills
GRACE = 1                  # --restore-grace of the agents, seconds


def content(index):
    """Page content number @index of the pool, or a zero page (ZERO)."""
    if index == ZERO:
        return bytes(PAGE)
    return random.Random(index).randbytes(PAGE)


def identify(data):
    """Which content of the pool @data is, in words."""
    for index in (ZERO, *range(POOL)):
        if data == content(index):
            return "zeros" if index == ZERO else f"content {index}"
    return "no content of the pool"


def status(agent):
    return harness.ctl_json(agent.sock, "status")


class Guest:
    """A VM, its qtest connection and the model of its pages."""

    def __init__(self, vm, rng):
        self.vm = vm
        self.qtest = Qtest(vm.qtest_path)
        self.balloon = QtestBalloon(self.qtest, RING_AT)
        self.model = [rng.randrange(POOL) for _ in range(REGION_PAGES)]
        # What befell each page, for the message of a page that differs:
        # (step, agent run, what, content number) tuples.
        self.history = [[] for _ in range(REGION_PAGES)]
        self.slept_through = []    # agent runs it was stopped across
        self.stopped = False
        self.alive = True

    def write(self, pages, rng, fresh, when=(0, 0)):
        """Write pool contents to @pages; with @fresh, contents they may
        not have had (copy-on-write), else their own (a rewrite).  @when is
        (step, agent run), for the pages' history."""
        for p in pages:
            if fresh:
                self.model[p] = rng.randrange(POOL)
            self.history[p].append((*when, "write", self.model[p]))
            data = base64.b64encode(content(self.model[p])).decode()
            self.qtest.command(f"b64write {REGION_AT + p * PAGE:#x} "
                               f"{PAGE:#x} {data}")

    def discard(self, pages, when):
        """The balloon takes @pages: QEMU discards them."""
        self.balloon.inflate([REGION_AT + p * PAGE for p in pages])
        for p in pages:
            self.model[p] = ZERO
            self.history[p].append((*when, "discard", ZERO))

    def check(self):
        """Read every page back: the number of pages checked."""
        chunk = 256
        for first in range(0, REGION_PAGES, chunk):
            reply = self.qtest.command(f"b64read "
                                       f"{REGION_AT + first * PAGE:#x} "
                                       f"{chunk * PAGE:#x}")
            data = base64.b64decode(reply.split()[1])
            for i in range(chunk):
                got = data[i * PAGE:(i + 1) * PAGE]
                page = first + i
                assert got == content(self.model[page]), \
                    (f"{self.vm.name}: page {page} differs from its model "
                     f"(content {self.model[page]}): it holds "
                     f"{identify(got)}; its history, as (step, agent run, "
                     f"what, content): {self.history[page]}; it was "
                     f"stopped across agent runs {self.slept_through}")
        return REGION_PAGES

    def stop(self):
        os.kill(self.vm.pid, signal.SIGSTOP)
        self.stopped = True

    def cont(self):
        os.kill(self.vm.pid, signal.SIGCONT)
        self.stopped = False


def settled(agent, guests):
    """Merging has caught up: no orphan, every slot referenced and holding
    a page in the store files, and the VMs' merged pages add up to the
    agent's references.  The figures compared go to settled.seen, for the
    message of a test that times out."""
    st = status(agent)
    merged = {g.vm.name: g.vm.nuksm()["merged-pages"] -
              g.vm.nuksm()["zero-pages"] for g in guests}
    settled.seen = {"store data pages": store_data_pages(agent.state_dir),
                    "store pages": sum(st["store_pages"]),
                    "orphan pages": st["orphan_pages"],
                    "pages shared": st["pages_shared"],
                    "pages sharing": st["pages_sharing"],
                    "merged per VM": merged}
    return (settled.seen["store data pages"] == sum(st["store_pages"]) and
            st["orphan_pages"] == 0 and
            sum(st["store_pages"]) == st["pages_shared"] and
            sum(merged.values()) == st["pages_shared"] + st["pages_sharing"])


def wait_settled(agent, guests):
    try:
        wait_until(lambda: settled(agent, guests), 120, "merging to settle")
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen: {settled.seen}") from None


def store_data_pages(state_dir):
    """Pages that hold data in the store files (not holes)."""
    pages = 0
    for path in harness.store_paths(state_dir):
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = 0
            while True:
                try:
                    data = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:
                    break
                hole = os.lseek(fd, data, os.SEEK_HOLE)
                pages += (hole - data) // PAGE
                pos = hole
        finally:
            os.close(fd)
    return pages


def keep_logs(agent, guests):
    """Copy the agent's and the VMs' logs to $BUILD/soak-failure, as the
    test's directories go when it ends."""
    kept = harness.BUILD / "soak-failure"
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir()
    for log in (agent.log, *(g.vm.log for g in guests)):
        if log.exists():
            shutil.copy(log, kept / log.name)
    print(f"logs kept in {kept}")


def test_soak(start_agent, qtest_vm):
    seconds = float(os.environ.get("NUKSM_SOAK_SECONDS", "60"))
    rng = random.Random(int(os.environ.get("NUKSM_SOAK_SEED", "1")))
    agent = start_agent("--restore-grace", str(GRACE))
    guests = []
    for i in range(VMS):
        vm = qtest_vm(f"soak{i}", agent=agent.sock, max_cpu=100,
                      extra=["-device",
                             "virtio-balloon-pci,disable-legacy=off"])
        guests.append(Guest(vm, rng))
    for g in guests:
        g.write(range(REGION_PAGES), rng, fresh=False)
        g.vm.wait_state("active")
    wait_until(lambda: status(agent)["pages_sharing"] > REGION_PAGES, 120,
               "the first merges")
    wait_settled(agent, guests)

    summary = {"seconds": seconds, "vms": VMS, "agent_kills": 0,
               "vms_stopped_across_restarts": 0, "vm_kills": 0,
               "pages_written": 0, "pages_discarded": 0,
               "pages_checked": 0}
    start = time.monotonic()
    step = 0
    rss_calm = None
    while time.monotonic() - start < seconds:
        step += 1
        calm = time.monotonic() - start > seconds * 2 / 3
        if calm and rss_calm is None:
            # From here on the same agent runs to the end.
            for g in guests:
                if g.stopped:
                    g.cont()
            wait_settled(agent, [g for g in guests if g.alive])
            rss_calm = rss(agent.pid)
        running = [g for g in guests if g.alive and not g.stopped]
        g = rng.choice(running)
        pages = rng.sample(range(REGION_PAGES), CHURN_PAGES)
        action = rng.random()
        if action < 0.1:
            g.discard(pages, (step, summary["agent_kills"]))
            summary["pages_discarded"] += CHURN_PAGES
        else:
            g.write(pages, rng, fresh=action < 0.75,
                    when=(step, summary["agent_kills"]))
            summary["pages_written"] += CHURN_PAGES

        if step % RESTART_EVERY == 0 and not calm:
            # Some VMs sleep through the restart and its grace period.
            sleepers = rng.sample(running, rng.randrange(0, 3))
            for s in sleepers:
                s.stop()
                s.slept_through.append(summary["agent_kills"] + 1)
            agent.kill()
            log_before = len(agent.log_text())
            agent.start()
            summary["agent_kills"] += 1
            summary["vms_stopped_across_restarts"] += len(sleepers)
            for r in running:
                if r not in sleepers:
                    r.vm.wait_state("active")
            if sleepers:
                # The new agent looked at who maps its orphans, after the
                # grace period, and the sleepers' pages were still there.
                wait_until(lambda: status(agent)["orphan_pages"] == 0 or
                           "keeping" in agent.log_text()[log_before:],
                           10 + GRACE, "the new agent's look at orphans")
            for s in sleepers:
                s.cont()
        if not summary["vm_kills"] and (step > 3 * RESTART_EVERY or calm):
            victim = rng.choice([g for g in running if not g.stopped])
            victim.vm.kill()
            victim.alive = False
            summary["vm_kills"] += 1

    for g in guests:
        if g.stopped:
            g.cont()
    live = [g for g in guests if g.alive]
    for g in live:
        g.vm.wait_state("active")
    wait_settled(agent, live)
    try:
        for g in live:
            summary["pages_checked"] += g.check()
    except AssertionError:
        keep_logs(agent, guests)
        raise
    st = status(agent)
    summary["agent_rss_calm"] = rss_calm
    summary["agent_rss_last"] = rss(agent.pid)
    summary["pages_shared"] = st["pages_shared"]
    summary["pages_sharing"] = st["pages_sharing"]
    (harness.BUILD / "soak.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    assert summary["agent_kills"] >= 2 and summary["vm_kills"] == 1
    assert summary["pages_discarded"] > 0
    assert summary["agent_rss_last"] <= rss_calm + 8 * MIB
    for g in live:
        g.qtest.close()
