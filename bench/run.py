#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Benchmarks of nuksm side by side with kernel KSM (docs/benchmarks.rst).

    bench/run.py [--quick] [--workload NAME ...] [--budget NAME ...]
                 [--out DIR] [--add] [--no-docs] [--perf] [--report]

Each workload runs at each of its budgets on KSM first (at its default
budget, with its advisor too, where the kernel has one), then on nuksm
(whose CPU share at KSM's default budget is the one plain KSM just used),
on this machine, in this run.  Writes OUT/results.json and one PNG per
workload, and replaces the run's results block in docs/benchmarks.rst.
With --add, the workloads run now are added to OUT/results.json instead,
replacing their own earlier pairs only: a full run in parts, each part
named with its machine, commit and time.
Must run as root (KSM's settings are global; they are restored).
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration")]

import analyze  # noqa: E402
import harness  # noqa: E402
import ksm  # noqa: E402
import plot  # noqa: E402
import report  # noqa: E402
import sysctl  # noqa: E402
from ksm_side import KsmSide  # noqa: E402
from measure import Run, log  # noqa: E402
from nuksm_side import NuksmSide  # noqa: E402
from workloads import suite  # noqa: E402


# The nuksm side of a workload's profiled run (stages.py).
PROFILED = "nuksm-profiled"
FLOORS = harness.BUILD / "meson/bench-floors"


def floors():
    """The physical floors of the merge path here (bench/floors.c), ns
    per operation."""
    return json.loads(subprocess.run([str(FLOORS)], capture_output=True,
                                     text=True, check=True).stdout)


def check_prerequisites(workloads):
    if os.geteuid() != 0:
        sys.exit("bench: must run as root (kernel KSM's settings)")
    if not ksm.available():
        sys.exit("bench: /sys/kernel/mm/ksm/run is not writable: no KSM")
    needed = [harness.QEMU, harness.NUKSMD, FLOORS]
    if any(w.tcg for w in workloads):
        needed += [harness.GUEST / "vmlinuz",
                   harness.GUEST / "initramfs.cpio.gz"]
    missing = [str(p) for p in needed if not Path(p).is_file()]
    if missing:
        sys.exit(f"bench: missing {', '.join(missing)}: run make (and "
                 "make guest)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, fewer workloads (about 8 minutes)")
    parser.add_argument("--workload", action="append", metavar="NAME",
                        help="run only this workload (repeatable)")
    parser.add_argument("--budget", action="append", metavar="NAME",
                        help="run only this budget of the workloads "
                        "(full, default, paced or idle; repeatable)")
    parser.add_argument("--out", type=Path,
                        help="results directory (default bench/results/"
                        "quick or bench/results/full)")
    parser.add_argument("--add", action="store_true",
                        help="add this run's pairs to OUT/results.json, "
                        "replacing those of the same workload and budget "
                        "and keeping the others (a run in parts)")
    parser.add_argument("--no-docs", action="store_true",
                        help="leave docs/benchmarks.rst alone")
    parser.add_argument("--perf", action="store_true",
                        help="profile nuksm's runs: perf record -a -g into "
                        "OUT/perf-WORKLOAD-BUDGET-SIDE.data")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: redo the plots and docs from "
                        "OUT/results.json")
    args = parser.parse_args()
    mode = "quick" if args.quick else "full"
    out = args.out or HERE / "results" / mode
    workloads = suite(args.quick)
    # Of the whole suite: a run in parts holds pairs of workloads not run now.
    order = [f"{w.name}/{b}" for w in workloads for b in w.budgets]
    titles = {w.name: w.title for w in workloads}
    if args.workload:
        unknown = set(args.workload) - {w.name for w in workloads}
        if unknown:
            sys.exit(f"bench: unknown workload {', '.join(unknown)} "
                     f"(have: {', '.join(w.name for w in workloads)})")
        workloads = [w for w in workloads if w.name in args.workload]
    if args.report:
        with open(out / "results.json") as f:
            results = json.load(f)
        publish(results["meta"], results["runs"], titles, out, mode,
                not args.no_docs)
        return
    check_prerequisites(workloads)
    out.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    command = "make bench-quick" if args.quick else "make bench"
    if args.workload or args.out:
        command = "bench/run.py " + " ".join(sys.argv[1:])
    meta = report.machine(command, datetime.datetime.now().isoformat())
    meta["floors"] = floors()
    log(f"floors, ns per operation: {meta['floors']}")
    control = ksm.Ksm()
    meta["ksm_settings_at_start"] = control.saved
    host = sysctl.InstalledSysctl()
    meta["sysctl"] = host.applied
    # Steady state (seconds to settle, seconds measured: nuksm's rests
    # grow 1, 2, 4, 8 to 16 s while nothing changes), COW-break chunks,
    # longest wait for other KSM-mergeable processes to go before each
    # KSM run (seconds).
    idle, cow_chunks, wait_s = (((16, 16), 4, 10) if args.quick else
                                ((32, 48), 16, 30))
    workdir = Path(tempfile.mkdtemp(prefix="nb-"))
    pairs = []
    try:
        for wl in workloads:
            for budget in wl.budgets:
                if args.budget and budget not in args.budget:
                    continue
                ksm_run = Run(wl, budget, KsmSide(control, wait_s), workdir,
                              idle, cow_chunks).run()
                kernel_runs = [ksm_run]
                if budget == "default" and ksm.has_advisor():
                    kernel_runs.append(Run(
                        wl, budget, KsmSide(control, wait_s, advisor=True),
                        workdir, idle, cow_chunks).run())
                nuksm_runs = [
                    Run(wl, budget, NuksmSide(*variant), workdir, idle,
                        cow_chunks, args.perf and
                        out / f"perf-{wl.name}-{budget}-{variant[0]}.data"
                        ).run(ksm_share=ksm_run["merge_cpu_share"])
                    for variant in [("nuksm",), *wl.variants]]
                if budget in wl.profile:
                    nuksm_runs.append(Run(
                        wl, budget, NuksmSide(PROFILED), workdir, idle,
                        cow_chunks,
                        out / f"perf-{wl.name}-{budget}-{PROFILED}.data",
                        profile=True).run(
                            ksm_share=ksm_run["merge_cpu_share"]))
                pairs.append([*kernel_runs, *nuksm_runs])
    finally:
        control.restore()
        host.restore()
        shutil.rmtree(workdir, ignore_errors=True)
    meta["elapsed_s"] = time.monotonic() - started
    log(f"ran in {meta['elapsed_s'] / 60:.1f} min")
    if args.add:
        meta, pairs = add_to(out / "results.json", meta, pairs, order)

    publish(meta, pairs, titles, out, mode, not args.no_docs)
    log(f"results in {out}")


def add_to(path, meta, pairs, order):
    """The run in @path with @pairs (run now, described by @meta) added:
    they replace the pairs of the same workload and budget, the others
    stay, in the suite's @order.  The meta is this part's, with the list
    of parts the pairs come from and the floors of the part that ran the
    profiled pairs (the cost model's)."""
    try:
        with open(path) as f:
            earlier = json.load(f)
    except FileNotFoundError:
        return meta, pairs
    name = report.pair_name
    now = {name(p) for p in pairs}
    kept = [p for p in earlier["runs"] if name(p) not in now]
    runs = sorted(kept + pairs, key=lambda p: order.index(name(p))
                  if name(p) in order else len(order))
    parts = []
    for p in (earlier["meta"].get("parts") or
              [report.part(earlier["meta"], earlier["runs"])]):
        p["pairs"] = [k for k in p["pairs"] if k not in now]
        if p["pairs"]:
            parts.append(p)
    parts.append(report.part(meta, pairs))
    profiled_now = any(r["side"] == PROFILED for p in pairs for r in p)
    merged = {**meta, "parts": parts,
              "floors": (meta["floors"] if profiled_now else
                         earlier["meta"].get("floors"))}
    return merged, runs


def publish(meta, pairs, titles, out, mode, docs):
    """Derive the figures, write results.json, the plots and (@docs) the
    results block of docs/benchmarks.rst; print the summary."""
    analyze.analyze(pairs)
    goals = analyze.goals(pairs)
    with open(out / "results.json", "w") as f:
        json.dump({"meta": meta, "goals": goals, "runs": pairs}, f,
                  indent=1)
    images = plot.plot_all(pairs, titles, out)
    if docs:
        report.update_docs(ROOT / "docs/benchmarks.rst", mode,
                           report.rst_block(meta, pairs, goals, images,
                                            ROOT / "docs"))
    print(report.console(pairs, goals, meta.get("floors")), flush=True)


if __name__ == "__main__":
    main()
