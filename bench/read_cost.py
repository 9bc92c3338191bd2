#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""What read sampling costs a guest that only reads merged pages
(docs/benchmarks.rst, "Placement by reads").

    bench/read_cost.py [--out DIR] [--rounds N] [--seconds S] [--no-docs]

Two KVM guests (tests/guests/kvm-reader.S, a boot sector) fill 10 MiB
with the same distinct pages, which merge; one then reads the first word
of each of those pages, sweep after sweep, counting its sweeps, the
other reads none of them.  With the guests running on, read
sampling is turned off (read-samples=0) and on (the default, 256) in
turn, N rounds of S seconds each; the figure is the guest's sweeps per
second with sampling on over those with it off, median of the rounds,
beside the minor faults caught and the CPU time of QEMU's nuksm-faults
thread.  The default hot-window (1000 ms).  Needs /dev/kvm; must run
alone on the host.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration"),
               str(ROOT / "scripts")]

import harness  # noqa: E402
import report  # noqa: E402
from harness import Agent, Vm, wait_until  # noqa: E402
from test_kvm import (READER_REGIONS, REGION_PAGES, assemble,  # noqa: E402
                      reader_disk, sweeps)

DEFAULT_SAMPLES = 256


def thread_cpu_s(pid, name):
    """CPU seconds of @pid's threads called @name."""
    ticks = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            if comm == name:
                fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text() \
                    .rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
        except FileNotFoundError:
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def measure(vm, workdir, samples, seconds):
    """Sweeps per second over @seconds with read-samples=@samples."""
    vm.cmd("qom-set", path="/objects/dedup0", property="read-samples",
           value=samples)
    time.sleep(1)       # the window under the old setting ends
    reads = vm.nuksm()["hotness"]["reads"]["reads"]
    cpu = thread_cpu_s(vm.pid, "nuksm-faults")
    swept, began = sweeps(vm, workdir), time.monotonic()
    time.sleep(seconds)
    rate = (sweeps(vm, workdir) - swept) / (time.monotonic() - began)
    return {"samples": samples, "sweeps_per_s": rate,
            "reads": vm.nuksm()["hotness"]["reads"]["reads"] - reads,
            "faults_thread_cpu_s": thread_cpu_s(vm.pid, "nuksm-faults") -
            cpu}


def run(workdir, rounds, seconds):
    base = assemble(workdir, "kvm-reader")
    state_dir = Path(tempfile.mkdtemp(prefix="nuksm-read-cost-",
                                      dir="/dev/shm"))
    sock = workdir / "nuksmd.sock"
    agent = Agent(sock, workdir / "nuksmd.log",
                  ["--socket", sock, "--state-dir", state_dir,
                   "--log-level", "warning"]).start()
    vms = []
    try:
        for name, mask in (("reader", 0x1f), ("idle", 0)):
            debug = workdir / f"{name}-debugcon.log"
            disk = reader_disk(base, workdir, mask)
            vms.append(Vm(workdir, name, [
                "-accel", "kvm", "-machine", "q35", "-m", "64M",
                "-nodefaults", "-display", "none",
                "-drive", f"file={disk},format=raw,if=virtio,snapshot=on",
                "-chardev", f"file,id=dbg,path={debug}",
                "-device", "isa-debugcon,iobase=0xe9,chardev=dbg",
                "-object", harness.nuksm_object(id="dedup0", agent=sock)]))
            vms[-1].start()
            wait_until(lambda: "F" in harness.read_log(debug), 120,
                       f"{name} to fill its regions")
        pages = READER_REGIONS * REGION_PAGES
        for vm in vms:
            vm.wait_nuksm(lambda i: i["merged-pages"] - i["zero-pages"] >=
                          pages, "the regions to merge", timeout=120)
        vm = vms[0]
        runs = []
        for r in range(rounds):
            for samples in (0, DEFAULT_SAMPLES):
                runs.append(measure(vm, workdir, samples, seconds))
                print(f"read-cost: round {r + 1}/{rounds}, read-samples="
                      f"{samples}: {runs[-1]['sweeps_per_s']:,.0f} sweeps/s, "
                      f"{runs[-1]['reads']} reads caught", flush=True)
        return runs
    finally:
        for vm in vms:
            vm.stop()
        agent.stop()
        shutil.rmtree(state_dir, ignore_errors=True)


def summary(runs, seconds):
    off = [r["sweeps_per_s"] for r in runs if r["samples"] == 0]
    on = [r for r in runs if r["samples"] == DEFAULT_SAMPLES]
    return {"off_sweeps_per_s": statistics.median(off),
            "on_sweeps_per_s": statistics.median(r["sweeps_per_s"]
                                                 for r in on),
            "ratio": statistics.median(r["sweeps_per_s"] for r in on) /
            statistics.median(off),
            "reads_per_s": statistics.median(r["reads"] for r in on) /
            seconds,
            "faults_thread_cpu_pct": 100 * statistics.median(
                r["faults_thread_cpu_s"] for r in on) / seconds}


def rst(meta, s):
    return (f"Read sampling's cost to a KVM guest that only reads merged "
            f"pages (``bench/read_cost.py``; commit ``{meta['commit']}``, "
            f"{meta['date']}, {meta['rounds']} rounds of "
            f"{meta['seconds']} s each way): "
            f"{s['on_sweeps_per_s']:,.0f} sweeps/s with read-samples=256 "
            f"against {s['off_sweeps_per_s']:,.0f} with it 0, "
            f"**{100 * s['ratio']:.1f}%** (goal: at least 99%); "
            f"{s['reads_per_s']:.1f} reads caught per second; QEMU's "
            f"nuksm-faults thread {s['faults_thread_cpu_pct']:.3f}% of a "
            f"core.\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path,
                        default=HERE / "results" / "placement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        sys.exit("read-cost: /dev/kvm is missing or not usable: this "
                 "benchmark needs KVM")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nuksm-read-cost-") as tmp:
        runs = run(Path(tmp), args.rounds, args.seconds)
    s = summary(runs, args.seconds)
    meta = {**report.machine(" ".join(sys.argv),
                             datetime.datetime.now().isoformat()),
            "rounds": args.rounds, "seconds": args.seconds}
    (args.out / "read_cost.json").write_text(
        json.dumps({"meta": meta, "summary": s, "runs": runs}, indent=1))
    print(f"read-cost: with sampling {100 * s['ratio']:.1f}% of the sweep "
          f"rate without", flush=True)
    if not args.no_docs:
        report.update_docs(ROOT / "docs/benchmarks.rst", "read-cost",
                           rst(meta, s))


if __name__ == "__main__":
    main()
