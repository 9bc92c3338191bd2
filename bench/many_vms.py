#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A host of many small VMs, each side at its defaults
(docs/benchmarks.rst, "Many small VMs").

    bench/many_vms.py [--vms N ...] [--side SIDE ...] [--window S]
                      [--out DIR] [--keep] [--no-docs]

For each number of VMs (8, 24, 64 and 128 by default): that many qtest
VMs of 128 MiB, each holding 16 MiB alike in all of them and 16 MiB of
its own, are started and filled, then deduplicated from one moment on
by each side at its defaults: kernel KSM (pages_to_scan=100,
sleep_millisecs=20), KSM with its advisor (advisor_mode=scan-time, where
the kernel has it), and nuksm (nuksmd's and the object's defaults, the
host's scan budget among them); and, for the baseline, by nothing.
Each side: the time until 99% of what can be saved is saved, then, once
settled, the CPU of every thread of the QEMUs and of ksmd or nuksmd over
a window, against the same VMs with no deduplication; and nuksm's own
threads (nuksmd, and each QEMU's nuksm-* threads) alone, which the
QEMUs' idle main loops, whose cost varies from run to run, do not blur.
Then, for KSM and nuksm, what each adds measured on the same processes:
windows with it paused (KSM's run=0, the objects' enabled=off; what is
merged stays) and running, in the order running, paused, paused,
running, each change of state followed by a window to settle; what it
adds is its own threads while running, and how much more the QEMUs'
other threads (main loops, vCPUs) take while it runs.
With --keep, the numbers of VMs and sides not run now keep their
results from OUT/many-vms.json, each marked with the run it comes from.
Must run as root, alone on the host (KSM's settings are restored).
"""

import argparse
import concurrent.futures
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration")]

import harness  # noqa: E402
import ksm  # noqa: E402
import procstat  # noqa: E402
import report  # noqa: E402
from harness import Qtest, Vm, ctl_json  # noqa: E402
from nuksm_side import BenchAgent  # noqa: E402
from workloads import BACKGROUND, MIB, PAGE, pipeline, tag  # noqa: E402

SERIES_VMS = (8, 24, 64, 128)
VM_MIB = 128
ALIKE_MIB = 16
OWN_MIB = 16
AT = 64 * MIB           # above the low RAM the firmware uses
WINDOW_S = 60           # after 99%: each side settles, then is
                        # measured, this long each (--window)
SAMPLE_S = 1.0
# Windows of the paired measure, in the order taken (ABBA: a drift of
# the QEMUs' idle cost over the four windows weighs on both alike).
PAIRED = ("running", "paused", "paused", "running")
PAIRED_SIDES = ("ksm", "nuksm")
# Qtest connections filling VMs at once (QEMU decodes, we encode).
FILLERS = 4
SIDES = ("none", "ksm", "ksm-advisor", "nuksm")


def log(msg):
    print(f"many-vms: {msg}", flush=True)


def fill(vm, index, alike_mib=ALIKE_MIB, own_mib=OWN_MIB):
    """@alike_mib alike in every VM, then @own_mib of VM @index's own."""
    q = Qtest(vm.qtest_path)
    q.sock.settimeout(120)
    for kind, offset, mib in (("shared", 0, alike_mib),
                              ("unique", alike_mib, own_mib)):
        addr = AT + offset * MIB
        q.memset(addr, mib * MIB, BACKGROUND)
        pipeline(q, [f"writeq {addr + p * PAGE:#x} "
                     f"{tag(kind, index, p):#x}"
                     for p in range(mib * MIB // PAGE)])
    q.close()


def nuksm_threads_cpu_ns(vms):
    """The QEMUs' nuksm-* threads."""
    own = 0
    for vm in vms:
        for tid in procstat.threads(vm.pid):
            try:
                comm = Path(f"/proc/{vm.pid}/task/{tid}/comm") \
                    .read_text().strip()
            except FileNotFoundError:
                continue
            if comm.startswith("nuksm-"):
                own += procstat.thread_cpu_ns(vm.pid, tid)
    return own


def expected_saving(vms):
    """Pages the alike memory saves: all copies but one."""
    return (vms - 1) * ALIKE_MIB * MIB // PAGE


class Host:
    """The VMs of one side, and what deduplicates them."""

    def __init__(self, side, vms, workdir, control):
        self.side = side
        self.n = vms
        self.workdir = workdir
        self.control = control
        self.agent = None
        self.vms = []

    def start(self):
        if self.side == "nuksm":
            self.agent = BenchAgent(self.workdir, "--log-level", "warning")
        for i in range(self.n):
            name = f"{self.side}{i}"
            objects = []
            if self.agent:
                objects = [harness.nuksm_object(id="dedup0",
                                                agent=self.agent.sock,
                                                enabled="off")]
            args = harness.qtest_args(self.workdir / f"{name}.qtest",
                                      *objects, mem=f"{VM_MIB}M")
            merge = "off" if self.side == "nuksm" else "on"
            self.vms.append(Vm(self.workdir, name, [
                *args, "-name", f"{name},debug-threads=on",
                "-machine", f"mem-merge={merge}"]).start())
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(FILLERS) as pool:
            list(pool.map(fill, self.vms, range(self.n)))
        log(f"{self.side} x{self.n}: filled in "
            f"{time.monotonic() - start:.0f} s")

    def enable(self):
        if self.side == "nuksm":
            for vm in self.vms:
                vm.cmd("qom-set", path="/objects/dedup0",
                       property="enabled", value=True)
        elif self.side.startswith("ksm"):
            settings = dict(ksm.DEFAULT)
            if self.side == "ksm-advisor":
                settings.update(ksm.ADVISOR)
            self.control.set(**settings, run=1)

    def pause(self, paused):
        """Pause or resume deduplication; what is merged stays."""
        if self.side == "nuksm":
            for vm in self.vms:
                vm.cmd("qom-set", path="/objects/dedup0",
                       property="enabled", value=not paused)
        else:
            self.control.set(run=0 if paused else 1)

    def saving(self):
        if self.side == "nuksm":
            return ctl_json(self.agent.sock, "status")["pages_sharing"]
        if self.side.startswith("ksm"):
            return ksm.counters()["pages_sharing"]
        return 0

    def cpu_ns(self):
        """Every thread of the QEMUs, ksmd or nuksmd, and apart: the
        side's own threads (ksmd; nuksmd's and the QEMUs' nuksm-*), and
        the QEMUs' other threads."""
        qemu = sum(harness.process_cpu_ns(vm.pid) for vm in self.vms)
        agent = harness.process_cpu_ns(self.agent.pid) if self.agent else 0
        own = other = 0
        if self.agent:
            in_qemu = nuksm_threads_cpu_ns(self.vms)
            own = agent + in_qemu
            other = qemu - in_qemu
        elif self.side.startswith("ksm"):
            own = self.control.cpu_ns()
            other = qemu
        return {"all": qemu + (own if self.side.startswith("ksm") else
                               agent),
                "own": own, "agent": agent, "other": other}

    def stop(self):
        for vm in self.vms:
            vm.kill()
        if self.agent:
            self.agent.stop()
        if self.side.startswith("ksm"):
            self.control.reset()
            if self.side == "ksm-advisor":
                self.control.set(**{ksm.ADVISOR_MODE: "none"})


def window(host, seconds):
    """Each CPU figure of @host over @seconds, in cores."""
    start = host.cpu_ns()
    t0 = time.monotonic()
    time.sleep(seconds)
    end = host.cpu_ns()
    wall = time.monotonic() - t0
    return {k: (end[k] - start[k]) / 1e9 / wall for k in start}


def paired(host, window_s):
    """What @host's side adds to the same VMs, measured in windows of
    @window_s running and paused (PAIRED): its own threads while
    running, and the QEMUs' other threads, running less paused."""
    windows = {"running": [], "paused": []}
    state = "running"
    for next_state in PAIRED:
        if next_state != state:
            # Settled first: resumed, each side catches up on what it
            # missed (nuksm's 128 scanners took 4.2% of a core for 30 s).
            host.pause(next_state == "paused")
            time.sleep(window_s)
            state = next_state
        windows[state].append(window(host, window_s))

    def mean(state, key):
        return sum(w[key] for w in windows[state]) / len(windows[state])

    return {"windows": windows,
            "others_more": mean("running", "other") -
            mean("paused", "other"),
            "adds": mean("running", "own") + mean("running", "other") -
            mean("paused", "other")}


def run_side(side, vms, workdir, control, window_s):
    host = Host(side, vms, workdir, control)
    try:
        host.start()
        result = {"side": side, "vms": vms}
        target = 0.99 * expected_saving(vms)
        cpu0 = host.cpu_ns()
        t0 = time.monotonic()
        host.enable()
        timeout = 120 + 15 * vms
        saved = 0
        next_log = 0
        while side != "none" and saved < target:
            t = time.monotonic() - t0
            if t > timeout:
                log(f"{side} x{vms}: timed out at {t:.0f} s")
                break
            saved = host.saving()
            if t >= next_log:
                next_log += 30
                log(f"{side} x{vms}: t={t:.0f} s saved "
                    f"{saved * PAGE / MIB:.0f} of "
                    f"{expected_saving(vms) * PAGE / MIB:.0f} MiB")
            time.sleep(SAMPLE_S)
        if side != "none":
            result["merge_s"] = (time.monotonic() - t0
                                 if saved >= target else None)
            cpu1 = host.cpu_ns()
            result["merge_cpu_s"] = (cpu1["own"] - cpu0["own"]) / 1e9
            result["saved_pages"] = saved
        time.sleep(window_s)
        result["steady"] = window(host, window_s)
        log(f"{side} x{vms}: merged in {result.get('merge_s')} s; steady "
            f"{100 * result['steady']['all']:.2f}% of a core in all, own "
            f"{100 * result['steady']['own']:.3f}%")
        if side in PAIRED_SIDES:
            result["paired"] = paired(host, window_s / 2)
            log(f"{side} x{vms}: adds {100 * result['paired']['adds']:.3f}%"
                f" of a core to the same VMs (their other threads "
                f"{100 * result['paired']['others_more']:+.3f}%)")
        return result
    finally:
        host.stop()


def kept(path, running):
    """The results in @path for (numbers of VMs, side) not in @running,
    each marked with the commit and date of the run it comes from."""
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    mark = {k: old["meta"][k] for k in ("commit", "date")}
    return [{"run": mark, **r} for r in old["results"]
            if (r["vms"], r["side"]) not in running]


def derive(results):
    """Beyond the baseline: each side's steady CPU less the same VMs'
    without deduplication, in the same run (a kept result keeps its
    own)."""
    base = {r["vms"]: r["steady"]["all"] for r in results
            if r["side"] == "none" and "run" not in r}
    for r in results:
        if r["side"] != "none" and "run" not in r and r["vms"] in base:
            r["beyond_baseline"] = r["steady"]["all"] - base[r["vms"]]


def by_side(results, side):
    return sorted((r for r in results if r["side"] == side),
                  key=lambda r: r["vms"])


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"ksm": "tab:blue", "ksm-advisor": "tab:cyan",
               "nuksm": "tab:orange"}
    labels = {"ksm": "KSM, its defaults",
              "ksm-advisor": "KSM's advisor, its defaults",
              "nuksm": "nuksm, its defaults"}
    fig, (t_ax, cpu_ax) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for side in ("ksm", "ksm-advisor", "nuksm"):
        runs = by_side(results, side)
        if not runs:
            continue
        xs = [r["vms"] for r in runs]
        t_ax.plot(xs, [r["merge_s"] or float("nan") for r in runs], "o-",
                  color=colours[side], label=labels[side])
        cpu_ax.plot(xs, [100 * r["steady"]["own"] for r in runs], "o-",
                    color=colours[side],
                    label=f"{labels[side]}: ksmd or nuksm's threads")
        if side in PAIRED_SIDES:
            cpu_ax.plot(xs, [100 * r["paired"]["adds"] if "paired" in r
                             else float("nan") for r in runs], "s--",
                        color=colours[side],
                        label=f"{labels[side]}: what it adds to the same "
                        "VMs (paired)")
        cpu_ax.plot(xs, [100 * r.get("beyond_baseline", float("nan"))
                         for r in runs], "o:", color=colours[side],
                    label=f"{labels[side]}: every QEMU thread, beyond "
                    "no deduplication")
    t_ax.set_yscale("log")
    t_ax.set_ylabel("time to 99% saved (s)")
    t_ax.legend(fontsize=8)
    t_ax.set_title(f"Many VMs of {VM_MIB} MiB, {ALIKE_MIB} MiB alike: "
                   "each side at its defaults")
    cpu_ax.axhline(0.5, color="grey", linewidth=0.8, linestyle="--")
    # From KSM's advisor at 40% down to fractions of a percent, and below
    # zero where the idle QEMUs' own cost drifted.
    cpu_ax.set_yscale("symlog", linthresh=0.1)
    cpu_ax.set_ylabel("steady CPU (% of a core)")
    cpu_ax.set_xlabel("VMs")
    sizes = sorted({r["vms"] for r in results})
    cpu_ax.set_xscale("log", base=2)
    cpu_ax.set_xticks(sizes, [str(n) for n in sizes])
    cpu_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def rst(meta, results, image, docs_dir):
    rows = []
    for r in sorted((r for r in results if r["side"] != "none"),
                    key=lambda r: (r["vms"], SIDES.index(r["side"]))):
        merge = r.get("merge_s")
        rows.append([str(r["vms"]), r["side"],
                     "—" if merge is None else f"{merge:.1f}",
                     f"{100 * r['steady']['own']:.3f}%",
                     f"{100 * r['steady']['agent']:.3f}%"
                     if r["side"] == "nuksm" else "—",
                     f"{100 * r.get('beyond_baseline', 0):+.2f}%",
                     f"{100 * r['paired']['adds']:.3f}%"
                     if "paired" in r else "—"])
    out = [f"``bench/many_vms.py`` on ``{meta['commit']}``, "
           f"{meta['date']}, {meta['cpu']}: VMs of {VM_MIB} MiB, "
           f"{ALIKE_MIB} MiB alike in all and {OWN_MIB} MiB of their own; "
           "time until 99% of the saving, then CPU over "
           f"{meta['window_s']:.0f} s once settled as long: ksmd or "
           "nuksm's own "
           "threads (nuksmd and the QEMUs' nuksm-*), nuksmd alone, and "
           "every thread of the QEMUs with ksmd or nuksmd beyond the same "
           "VMs without deduplication (the QEMUs' idle main loops vary "
           "from run to run: a difference within their noise); and what "
           "each side adds to the same VMs, paired: its own threads "
           "while it runs, and how much more the QEMUs' other threads "
           f"take than while it is paused (windows of "
           f"{meta['window_s'] / 2:.0f} s running, paused, paused, "
           "running, each change of state followed by one to settle).",
           ""]
    earlier = {}
    for r in results:
        if "run" in r:
            earlier.setdefault((r["run"]["commit"], r["run"]["date"]),
                               []).append((r["vms"], SIDES.index(r["side"]),
                                           r["side"]))
    for (commit, date), rows in sorted(earlier.items()):
        names = ", ".join(f"{vms} {side}" for vms, _, side in sorted(rows)
                          if side != "none")
        out[0] += f" The rows {names} come from ``{commit}``, {date}."
    out += report.list_table(["VMs", "side", "time to 99% (s)",
                              "steady, own threads", "of which nuksmd",
                              "steady, all, beyond none",
                              "adds to the same VMs (paired)"], rows)
    rel = os.path.relpath(image, docs_dir)
    out += ["", f".. image:: {rel}",
            "   :alt: many-vms: time to 99% and steady CPU against the "
            "number of VMs, KSM, its advisor and nuksm"]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vms", type=int, action="append",
                        help="numbers of VMs (repeatable; default "
                        f"{', '.join(map(str, SERIES_VMS))})")
    parser.add_argument("--window", type=float, default=WINDOW_S,
                        help="seconds to settle, then to measure "
                        f"(default {WINDOW_S})")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "full")
    parser.add_argument("--keep", action="store_true",
                        help="keep OUT/many-vms.json's results for the "
                        "numbers of VMs and sides not run now")
    parser.add_argument("--side", choices=SIDES, action="append",
                        help="run only this side (repeatable; default "
                        "all)")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0 or not ksm.available():
        sys.exit("many-vms: must run as root, with KSM")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    control = ksm.Ksm()
    results = []
    sides = [s for s in args.side or SIDES
             if s != "ksm-advisor" or ksm.has_advisor()]
    try:
        for vms in args.vms or SERIES_VMS:
            for side in sides:
                with tempfile.TemporaryDirectory(prefix="nuksm-many-") as d:
                    results.append(run_side(side, vms, Path(d), control,
                                            args.window))
    finally:
        control.restore()
    if args.keep:
        results += kept(args.out / "many-vms.json",
                        {(r["vms"], r["side"]) for r in results})
    derive(results)
    report.publish(args.out, "many-vms", results, started, plot,
                   lambda meta, image, docs: rst(
                       {**meta, "window_s": args.window}, results, image,
                       docs),
                   docs=not args.no_docs)
    log(f"ran in {(time.monotonic() - started) / 60:.1f} min; results in "
        f"{args.out / 'many-vms.json'}")


if __name__ == "__main__":
    main()
