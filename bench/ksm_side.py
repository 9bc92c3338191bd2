# SPDX-License-Identifier: GPL-2.0-or-later
"""The kernel KSM side: the same QEMUs without the nuksm object.

QEMU marks guest RAM MADV_MERGEABLE (machine property mem-merge=on, the
default, set explicitly here); ksmd does the rest.

ksmd also scans every other process with mergeable memory, and its
pages_sharing counts theirs: the saving is therefore taken from our QEMUs
alone, as their anonymous memory minus its proportional share (a KSM page
mapped n times saves n - 1 pages, and counts n times in Anonymous but
once in Pss_Anon); before deduplication starts the two are equal.  With
nothing else mergeable it equals pages_sharing, merged zero pages
included (use_zero_pages=0).  Other mergeable processes still take some
of ksmd's time: setup() waits a while for them to go, and details()
names those that stayed.
"""

import time

import ksm
import procstat
from workloads import PAGE

STATUS_S = 5.0


class KsmSide:
    def __init__(self, control, wait_foreign_s, advisor=False):
        """@advisor: KSM's advisor at its defaults (advisor_mode=
        scan-time), the kernel's best at its default budget."""
        self.ksm = control
        self.wait_foreign_s = wait_foreign_s
        self.advisor = advisor
        self.name = "ksm-advisor" if advisor else "ksm"
        self.settings = None
        self.foreign = {}

    def setup(self, workdir, budget, vms):
        deadline = time.monotonic() + self.wait_foreign_s
        next_status = 0
        while (others := ksm.mergeable_pids()) and \
                time.monotonic() < deadline:
            if time.monotonic() >= next_status:
                next_status = time.monotonic() + STATUS_S
                print(f"bench: waiting for {len(others)} other processes "
                      "with KSM-mergeable memory to exit (other QEMUs?)",
                      flush=True)
            time.sleep(0.5)
        self.note_foreign(set())

    def note_foreign(self, own):
        """Remember the other mergeable processes and their memory."""
        for pid in ksm.mergeable_pids():
            if pid not in own:
                try:
                    anon = procstat.smaps_rollup(pid)["Anonymous"]
                except (FileNotFoundError, ProcessLookupError):
                    continue
                self.foreign[pid] = max(anon, self.foreign.get(pid, 0))

    def teardown(self):
        self.ksm.reset()
        if self.advisor:
            self.ksm.set(**{ksm.ADVISOR_MODE: "none"})

    def vm_args(self, index):
        return ["-machine", "mem-merge=on"]

    def after_start(self, vms, ram_bytes):
        self.ranges = {vm.pid: procstat.guest_ram_ranges(vm)
                       for vm in vms}

    def budget(self, name, ksm_share=None, vms=1):
        """KSM's settings for budget @name: its defaults, ten times their
        speed (paced) or full throttle."""
        self.settings = dict(ksm.AT_KSM_SHARE.get(name, ksm.FULL))
        if self.advisor:
            self.settings.update(ksm.ADVISOR)
        return dict(self.settings)

    def to_defaults(self, vms):
        """KSM's defaults from now on, as a host that merged left them."""
        self.ksm.set(**ksm.DEFAULT, **(ksm.ADVISOR if self.advisor else {}))

    def enable(self, vms):
        self.ksm.set(**self.settings, run=1)

    def saving(self, vms, zero_pages=True):
        saved = 0
        for vm in vms:
            m = procstat.smaps_rollup(vm.pid)
            saved += m["Anonymous"] - m["Pss_Anon"]
        return saved // PAGE

    def cpu(self, vms, main_loop=True):
        return {"ksmd": self.ksm.cpu_ns()}

    def memory(self, vms):
        """Memory the VMs really use: proportional anonymous memory (a
        KSM page shared by n mappers counts 1/n in each)."""
        return sum(procstat.smaps_rollup(vm.pid)["Pss_Anon"] for vm in vms)

    def metadata(self, vms):
        meta = ksm.metadata_bytes([vm.pid for vm in vms], self.saving(vms))
        meta["qemu_outside_ram"] = sum(
            procstat.anon_outside(vm.pid, self.ranges[vm.pid]) for vm in vms)
        return meta

    def details(self, vms):
        self.note_foreign({vm.pid for vm in vms})
        return {"counters": ksm.counters(),
                "foreign_mergeable": {str(pid): anon for pid, anon
                                      in self.foreign.items()}}

    def quiesce(self, vms):
        """Stop ksmd, keeping what it merged."""
        ksm.write("run", 0)
