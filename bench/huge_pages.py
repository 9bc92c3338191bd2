#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The guest's speed beside the memory saved: huge pages kept where
merging does not pay (docs/benchmarks.rst, "Huge pages and the guest's
speed").

    bench/huge_pages.py [--rounds N] [--seconds S] [--out DIR] [--no-docs]

Two KVM guests of 256 MiB (tests/guests/kvm-tlb.S, a boot sector, no
paging of their own: the only translation is KVM's, on the host's page
size) fill 128 MiB each: 64 MiB of cold memory alike in both, and 64
MiB of hot memory, 32 stretches of 2 MiB each of which holds 8 pages
alike in both and 504 of the guest's own.  The reader then reads its
hot memory at random, each read's address depending on the read
before, so that it runs at the speed of its TLB misses; the other guest
halts.  Each side in turn, with the guests' RAM on transparent huge
pages (THP madvise, as QEMU advises it): none (no deduplication), KSM
(ksmd at its defaults but a full scan each second, so that merging ends
within the run), nuksm at its defaults (huge-split 64) and nuksm with
huge-split=1 (splits for any duplicate, as KSM does).  For each: the
reader's reads per second before merging and after (median of N rounds
of S seconds), the memory saved, and the huge pages each QEMU keeps
(AnonHugePages).  Needs /dev/kvm; must run as root, alone on the host;
KSM's settings are restored.
"""

import argparse
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration"),
               str(ROOT / "scripts")]

import harness  # noqa: E402
import ksm  # noqa: E402
import procstat  # noqa: E402
import report  # noqa: E402
from harness import Vm, ctl_json, wait_until  # noqa: E402
from nuksm_side import BenchAgent  # noqa: E402
from test_kvm import assemble, patched_disk  # noqa: E402

MIB = 1 << 20
PAGE = 4096
GUEST_MIB = 256
GUEST_BYTE_AT = 509          # kvm-tlb.S: 0x80 reads | its own pages' salt
READS_AT = 3 * MIB           # kvm-tlb.S: reads done, in units of 2^14
COLD_PAGES = 32 * 512        # alike in both guests
HOT_DUPS = 32 * 8            # alike pages scattered in the hot stretches
SIDES = ("none", "ksm", "nuksm", "nuksm-split-1")
KSM_PAGES_PER_S = 100_000    # a full scan of both guests each second


def log(msg):
    print(f"huge-pages: {msg}", flush=True)


def reads_done(vm, workdir):
    """The reader's reads so far, in units of 2^14."""
    path = workdir / f"{vm.name}-reads.bin"
    vm.cmd("pmemsave", val=READS_AT, size=4, filename=str(path))
    return struct.unpack("<I", path.read_bytes())[0]


def speed(vm, workdir, rounds, seconds):
    """Thousands of reads per second, median of @rounds rounds."""
    rates = []
    for _ in range(rounds):
        before, t0 = reads_done(vm, workdir), time.monotonic()
        time.sleep(seconds)
        after, t1 = reads_done(vm, workdir), time.monotonic()
        rates.append((after - before) * (1 << 14) / (t1 - t0) / 1e3)
    return statistics.median(rates)


def huge_mib(vm):
    return procstat.smaps_rollup(vm.pid)["AnonHugePages"] / MIB


class Side:
    """Two guests and what deduplicates them: @name of SIDES."""

    def __init__(self, name, workdir, base, control):
        self.name, self.workdir, self.control = name, workdir, control
        self.agent = None
        objects = []
        if name.startswith("nuksm"):
            self.agent = BenchAgent(workdir)
            props = {"huge_split": 1} if name == "nuksm-split-1" else {}
            objects = ["-object", harness.nuksm_object(
                id="dedup0", agent=self.agent.sock, enabled="off",
                **props)]
        self.vms = []
        for name_, byte in (("reader", 0x81), ("other", 0x02)):
            debug = workdir / f"{name_}-debugcon.log"
            disk = patched_disk(base, workdir / f"{name_}.img",
                                GUEST_BYTE_AT, byte)
            vm = Vm(workdir, name_, [
                "-accel", "kvm", "-machine",
                f"q35,mem-merge={'on' if name == 'ksm' else 'off'}",
                "-m", f"{GUEST_MIB}M", "-nodefaults", "-display", "none",
                "-drive", f"file={disk},format=raw,if=virtio,snapshot=on",
                "-chardev", f"file,id=dbg,path={debug}",
                "-device", "isa-debugcon,iobase=0xe9,chardev=dbg",
                *objects]).start()
            self.vms.append(vm)
            wait_until(lambda: "F" in harness.read_log(debug), 120,
                       f"{name_} to fill its memory")

    def merge(self):
        """Start merging, and return once it is done: the pages saved."""
        if self.name == "none":
            return 0
        if self.name == "ksm":
            sleep_ms = 20
            self.control.set(run=1, sleep_millisecs=sleep_ms,
                             pages_to_scan=KSM_PAGES_PER_S * sleep_ms
                             // 1000)
            wait_until(lambda: ksm.counters()["pages_sharing"] >=
                       COLD_PAGES + HOT_DUPS, 300, "KSM to merge")
            return ksm.counters()["pages_sharing"]
        for vm in self.vms:
            vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
                   value=True)
        # Settled: the cold memory merged, and nothing more for a while.
        wait_until(lambda: ctl_json(self.agent.sock, "status")
                   ["pages_sharing"] >= COLD_PAGES, 300, "nuksm to merge")
        last = None
        while (now := ctl_json(self.agent.sock, "status")
               ["pages_sharing"]) != last:
            last = now
            time.sleep(5)
        return now

    def stop(self):
        for vm in self.vms:
            vm.kill()
        if self.agent:
            self.agent.stop()
        self.control.reset()


def run_side(name, workdir, base, control, rounds, seconds):
    side = Side(name, workdir, base, control)
    try:
        reader = side.vms[0]
        before = speed(reader, workdir, rounds, seconds)
        huge_before = [huge_mib(vm) for vm in side.vms]
        saved = side.merge()
        after = speed(reader, workdir, rounds, seconds)
        result = {
            "side": name, "reads_before_k_per_s": before,
            "reads_after_k_per_s": after, "speed_ratio": after / before,
            "saved_mib": saved * PAGE / MIB,
            "huge_before_mib": huge_before,
            "huge_after_mib": [huge_mib(vm) for vm in side.vms],
        }
        if side.agent:
            result["huge_pages"] = [vm.nuksm()["huge-pages"]
                                    for vm in side.vms]
        log(f"{name}: {before:.0f} -> {after:.0f} k reads/s "
            f"({100 * after / before:.1f}%), saved {result['saved_mib']:.1f}"
            f" MiB, huge pages {result['huge_after_mib']} MiB")
        return result
    finally:
        side.stop()


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed_ax, mem_ax) = plt.subplots(1, 2, figsize=(10, 4))
    names = [r["side"] for r in results]
    speed_ax.bar(names, [100 * r["speed_ratio"] for r in results],
                 color="tab:orange")
    speed_ax.set_ylabel("reads per second after merging, % of before")
    speed_ax.set_ylim(0, 110)
    width = 0.4
    xs = range(len(results))
    mem_ax.bar([x - width / 2 for x in xs],
               [r["saved_mib"] for r in results], width, label="saved")
    mem_ax.bar([x + width / 2 for x in xs],
               [r["huge_after_mib"][0] for r in results], width,
               label="reader's huge pages after")
    mem_ax.set_xticks(list(xs), names)
    mem_ax.set_ylabel("MiB")
    mem_ax.legend()
    fig.suptitle("A TLB-bound KVM guest: its speed and the memory saved")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def rst(meta, results, image, docs_dir):
    rows = [[r["side"], f"{r['reads_before_k_per_s']:,.0f}",
             f"{r['reads_after_k_per_s']:,.0f}",
             f"{100 * r['speed_ratio']:.1f}%", f"{r['saved_mib']:.1f}",
             f"{r['huge_after_mib'][0]:.0f}"] for r in results]
    lines = [f"``bench/huge_pages.py`` on commit ``{meta['commit']}``, "
             f"{meta['date']} ({meta['rounds']} rounds of "
             f"{meta['seconds']:g} s each way):", ""]
    lines += report.list_table(
        ["side", "k reads/s before", "after", "after/before",
         "saved (MiB)", "reader's huge pages after (MiB)"], rows)
    lines += ["", f".. image:: {os.path.relpath(image, docs_dir)}", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--side", choices=SIDES, action="append",
                        help="run only this side (may repeat)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "full")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0 or not ksm.available():
        sys.exit("huge-pages: must run as root, with KSM")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        sys.exit("huge-pages: /dev/kvm is missing or not usable: this "
                 "benchmark needs KVM")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    control = ksm.Ksm()
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="nuksm-huge-pages-") as d:
            base = assemble(Path(d), "kvm-tlb")
            for name in args.side or SIDES:
                side_dir = Path(d) / name
                side_dir.mkdir()
                results.append(run_side(name, side_dir, base, control,
                                        args.rounds, args.seconds))
    finally:
        control.restore()
    report.publish(args.out, "huge-pages", results, started, plot,
                   lambda meta, image, docs: rst(
                       {**meta, "rounds": args.rounds,
                        "seconds": args.seconds}, results, image, docs),
                   docs=not args.no_docs)


if __name__ == "__main__":
    main()
