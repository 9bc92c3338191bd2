#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""How soon a guest's huge pages come back once merging ends
(docs/benchmarks.rst, "Huge pages and the guest's speed").

    bench/huge_rebuild.py [--rounds N] [--wait S] [--out DIR] [--no-docs]

Two qtest VMs of 512 MiB fill 32 stretches of 2 MiB alike in both
while nothing merges, on transparent huge pages (THP madvise, as QEMU
advises guest RAM).  Each side merges them: KSM (ksmd at its defaults
but a full scan each second, so that merging ends soon) and nuksm at
its defaults; the stretches split.  Then the first VM writes content
of its own over them, and every sharing ends.  From the end of the
writes: how long until its huge pages are back (AnonHugePages, 90% of
the 64 MiB), and for nuksm until query-nuksm counts the stretches
rebuilt (90% and all); the writes take seconds over qtest, and a
stretch written first may be rebuilt before they end.  KSM leaves the
rebuild to khugepaged at its defaults; it is waited for at most --wait
seconds.  Each VM's content is checked after.  Must run as root, alone
on the host; KSM's settings are restored.
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration")]

import harness  # noqa: E402
import ksm  # noqa: E402
import report  # noqa: E402
from harness import (Qtest, Vm, ctl_json, read_big,  # noqa: E402
                     wait_until, write_big)
from nuksm_side import BenchAgent  # noqa: E402

MIB = 1 << 20
PAGE = 4096
HUGE = 2 * MIB
VM_MIB = 512
AT = 64 * MIB           # above the low RAM the firmware uses
STRETCHES = 32          # alike in both VMs, then written over in one
SIDES = ("ksm", "nuksm")
KSM_PAGES_PER_S = 100_000   # a full scan of both VMs each second
POLL_S = 0.1


def log(msg):
    print(f"huge-rebuild: {msg}", flush=True)


class Side:
    """Two VMs of one side, filled alike while nothing merges."""

    def __init__(self, name, workdir, control, alike):
        self.name, self.control = name, control
        self.agent = None
        objects = []
        if name == "nuksm":
            self.agent = BenchAgent(workdir)
            objects = [harness.nuksm_object(id="dedup0",
                                            agent=self.agent.sock,
                                            enabled="off")]
        merge = "on" if name == "ksm" else "off"
        self.vms = []
        for i in range(2):
            vm = Vm(workdir, f"vm{i}", [
                *harness.qtest_args(workdir / f"vm{i}.qtest", *objects,
                                    mem=f"{VM_MIB}M"),
                "-machine", f"mem-merge={merge}"]).start()
            self.vms.append(vm)
            q = Qtest(vm.qtest_path)
            write_big(q, AT, alike)
            q.close()

    def merge(self):
        """Merge the alike stretches, and return once they are."""
        pages = STRETCHES * 512
        if self.name == "ksm":
            sleep_ms = 20
            self.control.set(run=1, sleep_millisecs=sleep_ms,
                             pages_to_scan=KSM_PAGES_PER_S * sleep_ms
                             // 1000)
            wait_until(lambda: ksm.counters()["pages_sharing"] >= pages,
                       300, "KSM to merge")
            # Back to its defaults: what a user's host runs after.
            self.control.set(**ksm.DEFAULT)
            return
        for vm in self.vms:
            vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
                   value=True)
        wait_until(lambda: ctl_json(self.agent.sock, "status")
                   ["pages_sharing"] >= pages, 300, "nuksm to merge")

    def rebuilt(self):
        return self.vms[0].nuksm()["huge-pages"]["rebuilt"]

    def stop(self):
        for vm in self.vms:
            vm.kill()
        if self.agent:
            self.agent.stop()
        self.control.reset()


def run_round(name, workdir, control, wait_s, seed):
    rng = random.Random(seed)
    alike = rng.randbytes(STRETCHES * HUGE)
    own = rng.randbytes(STRETCHES * HUGE)
    side = Side(name, workdir, control, alike)
    try:
        before = harness.anon_huge_bytes(side.vms[0].pid)
        if before < STRETCHES * HUGE:
            sys.exit(f"huge-rebuild: the kernel gave the VM {before >> 20}"
                     f" MiB of huge pages, not {STRETCHES * 2}: no huge "
                     "pages to rebuild (memory too fragmented?)")
        side.merge()
        split = harness.anon_huge_bytes(side.vms[0].pid)
        q = Qtest(side.vms[0].qtest_path)
        start = time.monotonic()
        write_big(q, AT, own)
        t0 = time.monotonic()
        times, timeline = {}, []
        keys = ["huge_90_s"] + (["rebuilt_90_s", "rebuilt_all_s"]
                                if side.agent else [])
        while len(times) < len(keys) and time.monotonic() - t0 < wait_s:
            t = time.monotonic() - t0
            huge = harness.anon_huge_bytes(side.vms[0].pid)
            rebuilt = side.rebuilt() if side.agent else 0
            timeline.append([round(t, 2), huge / MIB])
            reached = {"huge_90_s": huge >= before - STRETCHES * HUGE // 10,
                       "rebuilt_90_s": rebuilt >= STRETCHES * 9 // 10,
                       "rebuilt_all_s": rebuilt >= STRETCHES}
            for key in keys:
                if key not in times and reached[key]:
                    times[key] = t
            time.sleep(POLL_S)
        assert read_big(q, AT, len(own)) == own, "vm0: content lost"
        q.close()
        q = Qtest(side.vms[1].qtest_path)
        assert read_big(q, AT, len(alike)) == alike, "vm1: content lost"
        q.close()
        result = {"side": name, "write_s": t0 - start,
                  "huge_before_mib": before / MIB,
                  "huge_merged_mib": split / MIB,
                  "huge_after_mib":
                      harness.anon_huge_bytes(side.vms[0].pid) / MIB,
                  "timeline": timeline, **{k: times.get(k) for k in keys}}
        log(f"{name}: huge pages {result['huge_before_mib']:.0f} -> "
            f"{result['huge_merged_mib']:.0f} MiB merged -> "
            f"{result['huge_after_mib']:.0f} MiB; {times}")
        return result
    finally:
        side.stop()


def summary(rounds):
    """Per side: the median of each time over its rounds (None: not
    reached within the wait in some round)."""
    out = []
    for name in SIDES:
        runs = [r for r in rounds if r["side"] == name]
        if not runs:
            continue
        row = {"side": name, "rounds": len(runs)}
        for key in ("huge_90_s", "rebuilt_90_s", "rebuilt_all_s"):
            values = [r.get(key, "n/a") for r in runs]
            if "n/a" in values:
                continue
            row[key] = (None if None in values
                        else statistics.median(values))
        row["write_s"] = statistics.median(r["write_s"] for r in runs)
        row["huge_after_mib"] = statistics.median(
            r["huge_after_mib"] for r in runs)
        out.append(row)
    return out


def seconds(value, wait_s):
    return f"> {wait_s:.0f}" if value is None else f"{value:.1f}"


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    colours = {"ksm": "tab:blue", "nuksm": "tab:orange"}
    labels = {"ksm": "KSM (khugepaged)", "nuksm": "nuksm"}
    for r in results["rounds"]:
        ts, mib = zip(*r["timeline"]) if r["timeline"] else ((), ())
        ax.step(ts, mib, where="post", color=colours[r["side"]],
                alpha=0.8, label=labels[r["side"]])
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))
    ax.legend(unique.values(), unique.keys())
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("seconds after the writes that ended every sharing")
    ax.set_ylabel("first VM's huge pages (MiB)")
    ax.set_title(f"{STRETCHES} stretches of 2 MiB written over: huge again")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def rst(meta, results, image, docs_dir):
    wait_s = results["wait_s"]
    rows = [[s["side"], str(s["rounds"]), f"{s['write_s']:.1f}",
             seconds(s.get("huge_90_s"), wait_s),
             seconds(s["rebuilt_90_s"], wait_s) if "rebuilt_90_s" in s
             else "—",
             seconds(s["rebuilt_all_s"], wait_s) if "rebuilt_all_s" in s
             else "—",
             f"{s['huge_after_mib']:.0f}"] for s in results["summary"]]
    lines = [f"``bench/huge_rebuild.py`` on commit ``{meta['commit']}``, "
             f"{meta['date']}: {STRETCHES} stretches of 2 MiB alike in two "
             f"qtest VMs of {VM_MIB} MiB, merged, then written over in the "
             "first; the time from the end of the writes (median of the "
             "rounds):", ""]
    lines += report.list_table(
        ["side", "rounds", "writes took (s)", "huge pages back, 90% (s)",
         "stretches rebuilt, 90% (s)", "all (s)",
         "huge pages at the end (MiB)"], rows)
    lines += ["", f".. image:: {os.path.relpath(image, docs_dir)}", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wait", type=float, default=120,
                        help="seconds to wait for the huge pages "
                        "(default 120)")
    parser.add_argument("--side", choices=SIDES, action="append",
                        help="run only this side (may repeat)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "full")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0 or not ksm.available():
        sys.exit("huge-rebuild: must run as root, with KSM")
    if not harness.thp_in_use():
        sys.exit("huge-rebuild: transparent huge pages are off here")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    control = ksm.Ksm()
    rounds = []
    try:
        for name in args.side or SIDES:
            for n in range(args.rounds):
                with tempfile.TemporaryDirectory(
                        prefix="nuksm-huge-rebuild-") as d:
                    rounds.append(run_round(name, Path(d), control,
                                            args.wait, seed=n))
    finally:
        control.restore()
    results = {"wait_s": args.wait, "rounds": rounds,
               "summary": summary(rounds)}
    report.publish(args.out, "huge-rebuild", results, started, plot,
                   lambda meta, image, docs: rst(meta, results, image,
                                                 docs),
                   docs=not args.no_docs)


if __name__ == "__main__":
    main()
