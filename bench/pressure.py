#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Merging by memory pressure: nuksm's run=pressure against kernel KSM
under a ksmtuned-style controller (docs/benchmarks.rst, "Merging by
memory pressure").

    bench/pressure.py [--phase S] [--interval S] [--out DIR] [--no-docs]

Four qtest VMs of 512 MiB, each holding 192 MiB alike in all of them and
64 MiB of its own, run in a memory cgroup of 1.6 GiB: filled, 27% of it
is left, memory to spare.  Then a process in the cgroup takes 320 MiB of
it for a phase (memory is short: less than 20% left), then exits (to
spare again) for another.  The thresholds are ksmtuned's, MOM's and
KubeVirt's: merging works while less than 20% of the memory is
available.  nuksm: nuksmd --run=pressure looking at the cgroup
(--pressure-cgroup), at its defaults otherwise (--pressure-available
20%, theirs, and --pressure-stall 10%, which they lack); nuksmd runs in the
cgroup too, so that its store, the merged copies, counts in the
memory the cgroup stands for, as it does on a host.  KSM: a controller after
ksmtuned (its defaults: a look every 60 s, --interval; below the
threshold run=1 and pages_to_scan up by 300 to at most 1250, else
run=0 and pages_to_scan down by 50 to at least 64; sleep_millisecs 10
per 16 GiB of the host's memory) writing the real /sys/kernel/mm/ksm.
Each side: the memory it saved while memory was short (integrated, in
MiB-seconds, and how soon 99% of it was saved), and the CPU it spent
while memory was to spare (ksmd, or nuksmd and the QEMUs' nuksm-*
threads).  nuksm's saving is read from its metrics file (nuksmd's
default: written every 15 s) while memory is to spare, and from
nuksmctl status each second while it is short: a status costs nuksmd
about 0.04% of a core a second, as much as all of its resting work,
while KSM's counters cost ksmd nothing to read.  Must run as root,
alone on the host; KSM's settings are restored.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration")]

import harness  # noqa: E402
import ksm  # noqa: E402
import report  # noqa: E402
from harness import Vm, ctl_json  # noqa: E402
from many_vms import fill, nuksm_threads_cpu_ns  # noqa: E402
from nuksm_side import BenchAgent  # noqa: E402
from workloads import MIB, PAGE  # noqa: E402

VMS = 4
VM_MIB = 512
ALIKE_MIB = 192
OWN_MIB = 64
CGROUP_MIB = 1640
HOG_MIB = 320
THRESHOLD_PERCENT = 20      # ksmtuned's KSM_THRES_COEF, MOM's, KubeVirt's
PHASE_S = 180
SAMPLE_S = 1.0
# ksmtuned's defaults
KSMTUNED_INTERVAL_S = 60
NPAGES_BOOST, NPAGES_DECAY = 300, -50
NPAGES_MIN, NPAGES_MAX = 64, 1250
SIDES = ("ksm", "nuksm")

HOG = """
import sys, time
with open(sys.argv[1] + "/cgroup.procs", "w") as f:
    f.write(str(__import__("os").getpid()))
hog = bytearray(int(sys.argv[2]) << 20)
for i in range(0, len(hog), 4096):
    hog[i] = 1
print("ready", flush=True)
time.sleep(3600)
"""


def log(msg):
    print(f"pressure: {msg}", flush=True)


class Cgroup:
    """A memory cgroup of @mib MiB: v2's memory.max, or v1's limit."""

    def __init__(self, mib):
        base = harness.cgroup_dir("memory")
        if base is None:
            sys.exit("pressure: no writable memory cgroup here")
        self.path = f"{base}/nuksm-bench-pressure-{os.getpid()}"
        self.base = base
        os.mkdir(self.path)
        v2 = os.path.exists(f"{self.path}/memory.max")
        self.limit_file = "memory.max" if v2 else "memory.limit_in_bytes"
        self.usage_file = "memory.current" if v2 else \
            "memory.usage_in_bytes"
        self.total = mib * MIB
        Path(self.path, self.limit_file).write_text(str(self.total))

    def add(self, pid):
        Path(self.path, "cgroup.procs").write_text(str(pid))

    def available_fraction(self):
        used = int(Path(self.path, self.usage_file).read_text())
        return max(0, self.total - used) / self.total

    def remove(self):
        for pid in Path(self.path, "cgroup.procs").read_text().split():
            try:
                Path(self.base, "cgroup.procs").write_text(pid)
            except ProcessLookupError:
                pass
        harness.wait_until(lambda: not Path(self.path, "cgroup.procs")
                           .read_text().strip(), 10, "the cgroup to empty")
        os.rmdir(self.path)


class Ksmtuned(threading.Thread):
    """ksmtuned's loop, on the cgroup's memory, every @interval s."""

    def __init__(self, cgroup, interval):
        super().__init__(daemon=True)
        self.cgroup = cgroup
        self.interval = interval
        self.npages = NPAGES_MIN
        total_kib = int(open("/proc/meminfo").readline().split()[1])
        self.sleep_ms = max(1, round(10 * 16 * (1 << 20) / total_kib))
        self.stop_event = threading.Event()
        self.runs = []

    def run(self):
        while not self.stop_event.is_set():
            short = self.cgroup.available_fraction() < \
                THRESHOLD_PERCENT / 100
            if short:
                self.npages = min(self.npages + NPAGES_BOOST, NPAGES_MAX)
            else:
                self.npages = max(self.npages + NPAGES_DECAY, NPAGES_MIN)
            ksm.write("pages_to_scan", self.npages)
            ksm.write("sleep_millisecs", self.sleep_ms)
            ksm.write("run", 1 if short else 0)
            self.runs.append((time.monotonic(), short, self.npages))
            self.stop_event.wait(self.interval)

    def stop(self):
        self.stop_event.set()
        self.join()


class Side:
    def __init__(self, name, workdir, control, cgroup, interval):
        self.name = name
        self.workdir = workdir
        self.control = control
        self.cgroup = cgroup
        self.interval = interval
        self.agent = None
        self.tuned = None
        self.vms = []

    def start(self):
        objects = []
        if self.name == "nuksm":
            self.metrics_dir = self.workdir / "metrics"
            self.metrics_dir.mkdir()
            self.agent = BenchAgent(
                self.workdir, "--metrics-dir", self.metrics_dir,
                "--log-level", "info", "--run", "pressure",
                "--pressure-cgroup", self.cgroup.path)
            # The cgroup stands for the host: the store is memory of it,
            # as on a host (charged to nuksmd, which writes it).
            self.cgroup.add(self.agent.pid)
            objects = [harness.nuksm_object(id="dedup0",
                                            agent=self.agent.sock)]
        for i in range(VMS):
            name = f"{self.name}{i}"
            args = harness.qtest_args(self.workdir / f"{name}.qtest",
                                      *objects, mem=f"{VM_MIB}M")
            merge = "off" if self.agent else "on"
            vm = Vm(self.workdir, name, [
                *args, "-name", f"{name},debug-threads=on",
                "-machine", f"mem-merge={merge}"]).start()
            self.cgroup.add(vm.pid)
            self.vms.append(vm)
        for i, vm in enumerate(self.vms):
            fill(vm, i, ALIKE_MIB, OWN_MIB)
        if self.name == "ksm":
            self.tuned = Ksmtuned(self.cgroup, self.interval)
            self.tuned.start()

    def saving(self, asking):
        """Pages saved now; nuksm's as of its last metrics unless
        @asking (which costs nuksmd a request)."""
        if not self.agent:
            return ksm.counters()["pages_sharing"]
        if asking:
            return ctl_json(self.agent.sock, "status")["pages_sharing"]
        return harness.agent_metric(self.metrics_dir,
                                    "nuksm_pages_sharing") or 0

    def cpu_ns(self):
        if self.agent:
            return harness.process_cpu_ns(self.agent.pid) + \
                nuksm_threads_cpu_ns(self.vms)
        return self.control.cpu_ns()

    def stop(self):
        if self.tuned:
            self.tuned.stop()
        for vm in self.vms:
            vm.kill()
        if self.agent:
            self.agent.stop()
        self.control.reset()


def phase(side, name, seconds, samples):
    """Sample @side for @seconds into @samples; returns the CPU seconds
    it took."""
    cpu0 = side.cpu_ns()
    t0 = time.monotonic()
    saved_mib_s = 0.0
    while (t := time.monotonic() - t0) < seconds:
        saved = side.saving(asking=name == "short")
        available = side.cgroup.available_fraction()
        samples.append((round(time.monotonic() - side.t0, 1), name,
                        saved * PAGE / MIB, round(100 * available, 1)))
        saved_mib_s += saved * PAGE / MIB * SAMPLE_S
        time.sleep(SAMPLE_S)
    cpu = (side.cpu_ns() - cpu0) / 1e9
    log(f"{side.name}: {name}: CPU {cpu:.3f} s in {seconds} s, saved "
        f"{saved_mib_s / seconds:.0f} MiB on average")
    return cpu


def run_side(name, workdir, control, phase_s, interval):
    cgroup = Cgroup(CGROUP_MIB)
    side = Side(name, workdir, control, cgroup, interval)
    hog = None
    samples = []
    try:
        side.start()
        side.t0 = time.monotonic()
        log(f"{name}: filled; {100 * cgroup.available_fraction():.0f}% of "
            "the cgroup available")
        spare_cpu = phase(side, "spare", phase_s, samples)
        hog = subprocess.Popen([sys.executable, "-c", HOG, cgroup.path,
                                str(HOG_MIB)], stdout=subprocess.PIPE,
                               text=True)
        assert hog.stdout.readline().strip() == "ready"
        short_cpu = phase(side, "short", phase_s, samples)
        hog.kill()
        hog.wait()
        hog = None
        again_cpu = phase(side, "spare again", phase_s, samples)
        return {"side": name, "samples": samples,
                "spare_cpu_share": spare_cpu / phase_s,
                "short_cpu_share": short_cpu / phase_s,
                "spare_again_cpu_share": again_cpu / phase_s}
    finally:
        if hog:
            hog.kill()
            hog.wait()
        side.stop()
        cgroup.remove()


def derive(result):
    """@result with what its samples say of the phase of memory short:
    the memory saved (mean and best), how soon 99% of the best was
    saved, and how long the cgroup stayed below the threshold."""
    short = [s for s in result["samples"] if s[1] == "short"]
    start, end = short[0][0], short[-1][0]
    best = max(s[2] for s in short)
    first = next((s[0] for s in short if s[2] >= 0.99 * best), None)
    spare = next((s[0] for s in short if s[3] >= THRESHOLD_PERCENT), end)
    return {**result,
            "short_saved_mib_mean": sum(s[2] for s in short) / len(short),
            "short_saved_mib_best": best,
            "to_99_s": None if first is None or not best else first - start,
            "short_of_memory_s": spare - start}


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"ksm": "tab:blue", "nuksm": "tab:orange"}
    labels = {"ksm": "KSM under a ksmtuned-style controller",
              "nuksm": "nuksm, run=pressure"}
    fig, (saved_ax, avail_ax) = plt.subplots(2, 1, figsize=(8, 6.5),
                                             sharex=True)
    for r in results:
        t = [s[0] for s in r["samples"]]
        saved_ax.plot(t, [s[2] for s in r["samples"]],
                      color=colours[r["side"]], label=labels[r["side"]])
        avail_ax.plot(t, [s[3] for s in r["samples"]],
                      color=colours[r["side"]], label=labels[r["side"]])
    avail_ax.axhline(THRESHOLD_PERCENT, color="grey", linewidth=0.8,
                     linestyle="--")
    saved_ax.set_ylabel("saved (MiB)")
    saved_ax.set_title("Memory to spare, short (a process takes "
                       f"{HOG_MIB} MiB), to spare again")
    saved_ax.legend(fontsize=8)
    avail_ax.set_ylabel("cgroup memory available (%)")
    avail_ax.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def rst(meta, results, image, docs_dir):
    rows = []
    for r in results:
        to_99 = r["to_99_s"]
        rows.append([r["side"],
                     f"{100 * r['spare_cpu_share']:.3f}%",
                     f"{100 * r['spare_again_cpu_share']:.3f}%",
                     f"{r['short_of_memory_s']:.0f}",
                     f"{r['short_saved_mib_mean']:.0f} / "
                     f"{r['short_saved_mib_best']:.0f}",
                     "—" if to_99 is None else f"{to_99:.0f}",
                     f"{100 * r['short_cpu_share']:.2f}%"])
    out = [f"``bench/pressure.py`` on ``{meta['commit']}``, {meta['date']}, "
           f"{meta['cpu']}: {VMS} VMs of {VM_MIB} MiB, {ALIKE_MIB} MiB "
           f"alike, in a memory cgroup of {CGROUP_MIB} MiB; phases of "
           f"{meta['phase_s']:.0f} s; the KSM side's controller looked "
           f"every {meta['interval_s']:.0f} s.", ""]
    out += report.list_table(["side", "CPU, memory to spare",
                              "CPU, to spare again",
                              "below the threshold (s)",
                              "saved in that phase, mean / most (MiB)",
                              "time to 99% of the most (s)",
                              "CPU in that phase"], rows)
    rel = os.path.relpath(image, docs_dir)
    out += ["", f".. image:: {rel}",
            "   :alt: pressure: memory saved and available over the three "
            "phases, KSM under a ksmtuned-style controller and nuksm"]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", type=float, default=PHASE_S,
                        help=f"seconds of each phase (default {PHASE_S})")
    parser.add_argument("--interval", type=float,
                        default=KSMTUNED_INTERVAL_S,
                        help="seconds between the KSM controller's looks "
                        f"(default ksmtuned's {KSMTUNED_INTERVAL_S})")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "full")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: redo the figures, the plot and "
                        "the docs from OUT/pressure.json")
    args = parser.parse_args()
    if args.report:
        saved = json.loads((args.out / "pressure.json").read_text())
        results = [derive(r) for r in saved["results"]]
        image = args.out / "pressure.png"
        plot(results, image)
        doc = ROOT / "docs/benchmarks.rst"
        meta = {**saved["meta"], "phase_s": args.phase,
                "interval_s": args.interval}
        report.update_docs(doc, "pressure",
                           rst(meta, results, image, doc.parent))
        return
    if os.geteuid() != 0 or not ksm.available():
        sys.exit("pressure: must run as root, with KSM")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    control = ksm.Ksm()
    results = []
    try:
        for name in SIDES:
            with tempfile.TemporaryDirectory(prefix="nuksm-pressure-") as d:
                results.append(run_side(name, Path(d), control, args.phase,
                                        args.interval))
    finally:
        control.restore()
    results = [derive(r) for r in results]
    report.publish(args.out, "pressure", results, started, plot,
                   lambda meta, image, docs: rst(
                       {**meta, "phase_s": args.phase,
                        "interval_s": args.interval}, results, image, docs),
                   docs=not args.no_docs)


if __name__ == "__main__":
    main()
