# SPDX-License-Identifier: GPL-2.0-or-later
"""The nuksm side: one nuksmd, each QEMU with a nuksm object.

Objects are created disabled and enabled together once memory is
filled.  Saving is the agent's pages_sharing plus the zero pages the
QEMUs dropped (KSM counts merged zero pages in pages_sharing too).
"""

import shutil
import tempfile
import time
from pathlib import Path

import harness
import ksm
import procstat
from harness import Agent, ctl_json

ZERO_PAGES_EVERY_S = 1.0
# The nuksm object's max-cpu default (NUKSM_DEFAULT_MAX_CPU).
DEFAULT_MAX_CPU = 10


class BenchAgent(Agent):
    """nuksmd for a benchmark, started: its socket and log in @workdir,
    its store in a directory of its own under /dev/shm (/run is not
    tmpfs on every host), removed when it stops; @args: more of its
    options."""

    def __init__(self, workdir, *args):
        workdir = Path(workdir)
        state_dir = Path(tempfile.mkdtemp(prefix="nuksm-bench-",
                                          dir="/dev/shm"))
        sock = workdir / "nuksmd.sock"
        super().__init__(sock, workdir / "nuksmd.log",
                         ["--socket", sock, "--state-dir", state_dir,
                          *args], state_dir=state_dir)
        self.start()

    def stop(self):
        try:
            if self.running:
                super().stop()
        finally:
            shutil.rmtree(self.state_dir, ignore_errors=True)


class NuksmSide:
    def __init__(self, name="nuksm", props=None):
        """@name: the side's name in the results; @props: more properties
        of the nuksm object, e.g. to switch a part off."""
        self.name = name
        self.props = props or {}
        self.max_cpu = None
        self.zero = 0
        self.zero_at = -ZERO_PAGES_EVERY_S

    def setup(self, workdir, budget, vms):
        """nuksmd for @vms VMs at @budget: at the "idle" budget, its own
        defaults, scan budget included; at the others, whose figures are
        each VM's max-cpu (budget()), a scan budget of a core per VM,
        which never holds one back."""
        args = ["--log-level", "warning"]
        if budget != "idle":
            args += ["--scan-budget", f"{100 * vms}%"]
        self.agent = BenchAgent(workdir, *args)
        self.agent_anon0 = procstat.smaps_rollup(self.agent.pid)["Anonymous"]

    def teardown(self):
        self.agent.stop()

    def vm_args(self, index):
        # mem-merge=off: ksmd (stopped anyway) never touches this side.
        return ["-machine", "mem-merge=off", "-object", harness.nuksm_object(
            id="dedup0", agent=self.agent.sock, enabled="off", **self.props)]

    def after_start(self, vms, ram_bytes):
        for vm in vms:
            vm.wait_state("disabled")
        self.ranges = {vm.pid: procstat.guest_ram_ranges(vm)
                       for vm in vms}
        self.scan_tids = {vm.pid: procstat.threads_named(vm.pid,
                                                         "nuksm-scan")
                          for vm in vms}

    def budget(self, name, ksm_share=None, vms=1):
        """max-cpu for budget @name: 100 at full throttle; at KSM's
        default or paced budget, KSM's measured CPU share split over the
        VMs."""
        if name in ksm.AT_KSM_SHARE:
            self.max_cpu = max(0.01, min(100, round(100 * ksm_share / vms,
                                                    2)))
        else:
            self.max_cpu = 100
        return {"max-cpu": self.max_cpu, "scan-rate": 0}

    def to_defaults(self, vms):
        """max-cpu back to the object's default, as a user has it."""
        for vm in vms:
            vm.cmd("qom-set", path="/objects/dedup0", property="max-cpu",
                   value=DEFAULT_MAX_CPU)

    def enable(self, vms):
        for vm in vms:
            vm.cmd("qom-set", path="/objects/dedup0", property="max-cpu",
                   value=self.max_cpu)
        for vm in vms:
            vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
                   value=True)

    def status(self):
        """nuksmctl's view of the agent: its JSON stays stable while the
        wire protocol changes under a rebuilt agent."""
        return ctl_json(self.agent.sock, "status")

    def saving(self, vms, zero_pages=True):
        """pages_sharing from the agent plus the zero pages dropped.  Those
        are asked over QMP, which costs QEMU's main loop (counted as
        nuksm's): at most once a second, and only with @zero_pages."""
        now = time.monotonic()
        if zero_pages and now - self.zero_at >= ZERO_PAGES_EVERY_S:
            self.zero = sum(vm.nuksm()["zero-pages"] for vm in vms)
            self.zero_at = now
        return self.status()["pages_sharing"] + self.zero

    def cpu(self, vms, main_loop=True):
        """nuksmd, the nuksm-scan threads, the nuksm-writes threads (they
        start with merging, so they are looked up each time) and
        (@main_loop) QEMU's main loop threads, which carry the agent
        connection."""
        parts = {"nuksmd": harness.process_cpu_ns(self.agent.pid),
                 "scan": sum(procstat.thread_cpu_ns(vm.pid, tid)
                             for vm in vms
                             for tid in self.scan_tids[vm.pid]),
                 "writes": sum(procstat.thread_cpu_ns(vm.pid, tid)
                               for vm in vms
                               for tid in procstat.threads_named(
                                   vm.pid, "nuksm-writes"))}
        if main_loop:
            parts["main"] = procstat.main_threads_cpu_ns(vm.pid
                                                         for vm in vms)
        return parts

    def counted_tids(self, vms, main_loop=True):
        """The threads whose CPU cpu() counts, as they are now."""
        tids = set(procstat.threads(self.agent.pid))
        for vm in vms:
            tids |= set(self.scan_tids[vm.pid])
            tids |= set(procstat.threads_named(vm.pid, "nuksm-writes"))
            if main_loop:
                tids.add(vm.pid)
        return tids

    def agent_tids(self):
        """nuksmd's threads, as they are now."""
        return set(procstat.threads(self.agent.pid))

    def store_bytes(self):
        return sum(p.stat().st_blocks * 512
                   for p in self.agent.state_dir.glob("store-*"))

    def memory(self, vms):
        """Anonymous memory (proportional) of the QEMUs and nuksmd, plus
        the store files once, however many QEMUs map them."""
        return (sum(procstat.smaps_rollup(pid)["Pss_Anon"]
                    for pid in [vm.pid for vm in vms] + [self.agent.pid]) +
                self.store_bytes())

    def metadata(self, vms):
        """nuksmd's growth of anonymous memory since before the first VM
        (the store is file memory: not counted), and the QEMUs' anonymous
        memory outside guest RAM, which analyze.py compares with the KSM
        side's QEMUs (same options, same fill, no nuksm object)."""
        return {"agent_bytes":
                procstat.smaps_rollup(self.agent.pid)["Anonymous"] -
                self.agent_anon0,
                "qemu_outside_ram": sum(
                    procstat.anon_outside(vm.pid, self.ranges[vm.pid])
                    for vm in vms)}

    def details(self, vms):
        return {"agent": self.status(),
                "vms": [{k: v for k, v in vm.nuksm().items()
                         if isinstance(v, int)} for vm in vms]}

    def quiesce(self, vms):
        """Nothing to do: with nothing left to merge, the scanner is in
        its steady state already."""
