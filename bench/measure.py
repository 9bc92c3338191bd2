# SPDX-License-Identifier: GPL-2.0-or-later
"""One side on one workload at one budget: start the VMs, fill them,
switch deduplication on, sample saving and CPU until done, then measure
the steady state, memory, metadata and copy-on-write breaks."""

import random
import shutil
import signal
import statistics
import subprocess
import time

import harness
import procstat
import stages
from harness import Qtest, Vm
from workloads import (MIB, PAGE, SMALL_BUDGET_SAMPLE_S, Rewriter, fill,
                       pipeline)

# In the steady state: each sample asks nuksmd over a new connection,
# which would be most of what it does once nothing is left to merge.
STEADY_SAMPLE_S = 2.0
STATUS_S = 5.0
# Without an expected saving: done once it grew less than this in PLATEAU_S.
PLATEAU_S = 10.0
PLATEAU_GROWTH = 0.002


def log(msg):
    print(f"bench: {msg}", flush=True)


def cpu_total(parts):
    return sum(parts.values())


class Run:
    def __init__(self, workload, budget, side, workdir, idle, cow_chunks,
                 perf_data=None, profile=False):
        self.wl = workload
        self.budget = budget
        self.side = side
        self.workdir = workdir
        # Steady state: seconds left to settle, then seconds measured.
        self.settle_s, self.idle_s = idle
        if workload.steady_s:
            self.settle_s = self.idle_s = workload.steady_s
        self.cow_chunks = cow_chunks
        # perf record -a -g into @perf_data: over the whole run, or, to
        # @profile it (stages.py), while it merges.
        self.perf_data = perf_data
        self.profile = profile
        self.perf = None
        self.tag = f"[{workload.name}/{budget} {side.name}]"
        self.vms = []
        self.qtests = []
        # Disk workloads: each guest's copy of the image, and the seconds
        # from the start of the measurement to each guest's having read it
        self.disks = []
        self.reads_done = {}
        # QEMU's main loop counts for nuksm only when it does nothing
        # else: no vCPU (qtest) and no rewriting through qtest.
        self.main_loop = not workload.tcg and not workload.rewrite_rate
        self.sample_s = (workload.sample_s if budget == "full" else
                         max(workload.sample_s, SMALL_BUDGET_SAMPLE_S))

    def start_vms(self):
        wl = self.wl
        image = wl.disk_mib and self.disk_image()
        for i in range(wl.vms):
            name = f"{self.side.name}{i}"
            if wl.tcg:
                disk = cue = None
                if image:
                    disk = self.workdir / f"{name}.img"
                    shutil.copyfile(image, disk)
                    self.disks.append(disk)
                    cue = self.workdir / f"{name}.cue"
                args = harness.guest_args(f"{self.workdir}/{name}.serial",
                                          wl.fill_mib, mem_mib=wl.mem_mib,
                                          disk=disk, cue=cue,
                                          room_mib=wl.room_mib,
                                          read_rate=wl.read_rate)
            else:
                args = harness.qtest_args(f"{self.workdir}/{name}.qtest",
                                          mem=f"{wl.mem_mib}M")
            # Named threads: nuksm's scanner is found by its name.
            vm = Vm(self.workdir, name, [*args, "-name",
                                         f"{name},debug-threads=on",
                                         *self.side.vm_args(i)])
            self.vms.append(vm)
            vm.start()
        if wl.disk_mib:
            for vm in self.vms:
                vm.wait_serial(harness.GUEST_CUE_WAIT, timeout=180)
                room_line = f"nuksm-guest: {wl.room_mib} MiB left available"
                if wl.room_mib and \
                        room_line not in harness.read_log(vm.serial):
                    raise RuntimeError(f"{vm.name} did not leave "
                                       f"{wl.room_mib} MiB of room: see "
                                       f"{vm.serial}")
                log(f"{self.tag} {vm.name} booted, waiting to read its disk")
        elif wl.tcg:
            for vm in self.vms:
                vm.wait_serial(harness.GUEST_READY, timeout=180)
                log(f"{self.tag} {vm.name} booted, "
                    f"{wl.fill_mib} MiB page cache filled")
        else:
            for i, vm in enumerate(self.vms):
                q = Qtest(vm.qtest_path)
                q.sock.settimeout(120)
                self.qtests.append(q)
                start = time.monotonic()
                fill(wl, q, i)
                log(f"{self.tag} {vm.name}: {wl.mem_mib} MiB filled in "
                    f"{time.monotonic() - start:.1f} s")

    def disk_image(self):
        """The workload's disk image: random, so that it holds neither
        zero pages nor duplicates within itself; the same in every run."""
        image = self.workdir / f"{self.wl.name}-disk.img"
        if not image.exists():
            rng = random.Random(self.wl.name)
            with open(image, "wb") as f:
                for _ in range(self.wl.disk_mib):
                    f.write(rng.randbytes(MIB))
        return image

    def start_reads(self):
        for vm in self.vms:
            harness.cue_guest(self.workdir / f"{vm.name}.cue")

    def note_reads_done(self, t):
        for vm in self.vms:
            if vm.name not in self.reads_done and \
                    "nuksm-guest: read vda" in harness.read_log(vm.serial):
                self.reads_done[vm.name] = t
                log(f"{self.tag} {vm.name} has read its disk at t={t:.1f} s")

    def saving(self, zero_pages=True):
        return self.side.saving(self.vms, zero_pages=zero_pages)

    def cpu(self):
        return self.side.cpu(self.vms, main_loop=self.main_loop)

    def main_loop_cpu_ns(self):
        """QEMU's main threads, on either side."""
        return procstat.main_threads_cpu_ns(vm.pid for vm in self.vms)

    def qemu_cpu_ns(self):
        return sum(harness.process_cpu_ns(vm.pid) for vm in self.vms)

    def sample(self, zero_pages=True):
        t = time.monotonic() - self.t0
        if self.disks and len(self.reads_done) < len(self.vms):
            self.note_reads_done(t)
        saved = self.saving(zero_pages)
        cpu = cpu_total(self.cpu()) - self.cpu0
        self.timeline.append((round(t, 3), saved, cpu))
        if t >= self.next_status:
            self.next_status += STATUS_S
            expected = self.wl.expected_saving()
            of = f" of {expected * PAGE / MIB:.0f}" if expected else ""
            log(f"{self.tag} t={t:5.1f} s saved {saved * PAGE / MIB:7.1f}"
                f"{of} MiB, CPU {cpu / 1e9:6.2f} s")
        return t, saved

    def done(self, t, saved):
        wl = self.wl
        if wl.duration:
            return t >= wl.duration
        expected = wl.expected_saving()
        if expected is not None:
            return saved >= 0.99 * expected
        old = [s for ts, s, _ in self.timeline if ts <= t - PLATEAU_S]
        return bool(old) and saved > 0 and \
            saved - old[-1] <= PLATEAU_GROWTH * saved

    def measure(self):
        self.timeline = []
        self.next_status = STATUS_S
        self.parts0 = self.cpu()
        self.cpu0 = cpu_total(self.parts0)
        qemu_cpu0 = self.qemu_cpu_ns()
        rewriter = None
        if self.wl.rewrite_rate:
            rewriter = Rewriter(self.wl, self.qtests[0])
        self.t0 = time.monotonic()
        self.side.enable(self.vms)
        if self.disks:
            self.start_reads()
        if rewriter:
            rewriter.start()
        try:
            while True:
                t, saved = self.sample()
                if self.done(t, saved):
                    break
                if t > self.wl.timeout:
                    log(f"{self.tag} timed out after {t:.0f} s")
                    break
                time.sleep(self.sample_s)
            merge_end, merge_cpu = self.timeline[-1][0], self.timeline[-1][2]
            if self.profile:
                self.stop_perf()
                profiled = {"cpu_s": merge_cpu / 1e9,
                            "merge_s": merge_end,
                            "merged_pages": self.timeline[-1][1],
                            "tids": self.side.counted_tids(self.vms,
                                                           self.main_loop),
                            "agent_tids": self.side.agent_tids(),
                            "main_tids": ({vm.pid for vm in self.vms}
                                          if self.main_loop else set())}
            if self.budget == "idle":
                self.side.to_defaults(self.vms)
            # Steady state: whatever there was to merge is merged.  Both
            # sides settle first (nuksm's rests grow to their longest).
            if not self.wl.duration:
                for seconds in (self.settle_s, self.idle_s):
                    idle_start = self.timeline[-1]
                    main_loop_start = self.main_loop_cpu_ns()
                    parts_start = self.cpu()
                    end_at = time.monotonic() + seconds
                    while time.monotonic() < end_at:
                        time.sleep(min(STEADY_SAMPLE_S,
                                       max(0, end_at - time.monotonic())))
                        self.sample(zero_pages=False)
        finally:
            if rewriter:
                rewriter.stop()
        end, _, cpu_end = self.timeline[-1]
        result = {"merge_s": merge_end, "merge_cpu_s": merge_cpu / 1e9,
                  "merge_cpu_share": merge_cpu / 1e9 / max(merge_end, 1e-3),
                  # Control: every thread of the QEMUs, on both sides.
                  "qemu_cpu_s": (self.qemu_cpu_ns() - qemu_cpu0) / 1e9}
        if self.wl.duration:
            # The second half of a fixed-length run is its steady state.
            half = [(t, s, c) for t, s, c in self.timeline if t >= end / 2]
            result["idle_cpu_share"] = (cpu_end - half[0][2]) / 1e9 / \
                max(end - half[0][0], 1e-3)
            result["steady_saving"] = statistics.mean(s for _, s, _ in half)
        else:
            result["idle_cpu_share"] = (cpu_end - idle_start[2]) / 1e9 / \
                max(end - idle_start[0], 1e-3)
            # What QEMU's main loops use on either side: the KSM side's
            # is the baseline nuksm's is compared with (analyze.py).
            result["main_loop_idle_share"] = (
                (self.main_loop_cpu_ns() - main_loop_start) / 1e9 /
                max(end - idle_start[0], 1e-3))
            result["idle_cpu_parts_share"] = {
                k: (v - parts_start[k]) / 1e9 / max(end - idle_start[0], 1e-3)
                for k, v in self.cpu().items() if k in parts_start}
        if self.profile:
            result["stages"] = {
                **stages.breakdown(self.perf_data, profiled.pop("tids"),
                                   profiled.pop("agent_tids"),
                                   profiled.pop("main_tids")),
                **profiled}
        if rewriter:
            result["rewrites"] = rewriter.written
        if self.disks:
            result["disk_mib"] = self.wl.disk_mib
            result["reads_done_s"] = self.reads_done
        result["over_time"] = self.wl.over_time
        return result

    def stop_perf(self):
        if self.perf:
            self.perf.send_signal(signal.SIGINT)
            self.perf.wait()
            self.perf = None

    def cow_latency(self):
        """Extra time a guest write takes on a merged page (the
        copy-on-write break), per page: memset over merged pages minus
        the same memset again over the now private copies.  Pages are
        read first, as a guest would have, so both sides start from a
        mapped read-only page."""
        kind, offset, size = [r for r in self.wl.regions()
                              if r[0] == "shared"][-1]
        # Its last stretch contiguous in guest physical memory
        addr, _, size = list(self.wl.segments(offset, size))[-1]
        q = self.qtests[0]
        chunk = 8 * MIB
        pages = chunk // PAGE
        per_page, private = [], []
        for c in range(min(self.cow_chunks, size // chunk)):
            base = addr + c * chunk
            pipeline(q, [f"readq {base + p * PAGE:#x}" for p in range(pages)])
            start = time.perf_counter()
            q.memset(base, chunk, 0xa5)
            merged = time.perf_counter() - start
            start = time.perf_counter()
            q.memset(base, chunk, 0x5b)
            again = time.perf_counter() - start
            per_page.append((merged - again) / pages * 1e9)
            private.append(again / pages * 1e9)
        return {"cow_break_ns": statistics.median(per_page),
                "cow_break_ns_all": [round(x) for x in per_page],
                "private_write_ns": statistics.median(private)}

    def run(self, ksm_share=None):
        wl = self.wl
        log(f"{self.tag} starting {wl.vms} VMs ({wl.title})")
        self.side.setup(self.workdir, self.budget, wl.vms)
        try:
            self.start_vms()
            self.side.after_start(self.vms, wl.mem_mib * MIB)
            params = self.side.budget(self.budget, ksm_share=ksm_share,
                                      vms=wl.vms)
            log(f"{self.tag} enabling, budget {params}")
            memory_before = self.side.memory(self.vms)
            mappings_before = procstat.mappings(vm.pid for vm in self.vms)
            physical_before = procstat.physical()
            if self.perf_data:
                self.perf = subprocess.Popen(
                    ["perf", "record", "-a", "-g", "-F", "999", "-q",
                     "-o", str(self.perf_data)])
            result = self.measure()
            physical_after = procstat.physical()
            mappings_after = procstat.mappings(vm.pid for vm in self.vms)
            self.stop_perf()
            result.update(
                workload=wl.name, budget=self.budget, side=self.side.name,
                params=params, guest_pages=wl.guest_pages,
                expected_saving=wl.expected_saving(),
                final_saving=self.saving(),
                memory_before=memory_before,
                memory_after=self.side.memory(self.vms),
                physical_before=physical_before,
                physical_after=physical_after,
                mappings_before=mappings_before,
                mappings_after=mappings_after,
                metadata=self.side.metadata(self.vms),
                cpu_parts_s={k: (v - self.parts0[k]) / 1e9
                             for k, v in self.cpu().items()},
                details=self.side.details(self.vms),
                timeline=self.timeline)
            self.side.quiesce(self.vms)
            # Over a region of merged pages only (not scattered ones).
            if self.cow_chunks and self.qtests and not wl.rewrite_rate and \
                    any(kind == "shared" for kind, _, _ in wl.regions()):
                result.update(self.cow_latency())
            log(f"{self.tag} done: saved {result['final_saving'] * PAGE / MIB:.1f}"
                f" MiB in {result['merge_s']:.1f} s, "
                f"{result['merge_cpu_s']:.2f} CPU-s")
            return result
        finally:
            self.stop_perf()
            for q in self.qtests:
                q.close()
            for vm in self.vms:
                vm.kill()
            for disk in self.disks:
                disk.unlink()
            self.side.teardown()
