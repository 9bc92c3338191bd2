#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A VM migrating to a host that holds half of its content
(docs/benchmarks.rst, "Migration").

    bench/migration.py [--rounds N] [--scenario S] [--side S]
                       [--bandwidth MIB] [--out DIR] [--no-docs]

On one host, a destination agent and a VM x on it stand for the
destination host: x holds 256 MiB of content C.  A qtest VM y of 1 GiB
holds C and 256 MiB of its own, and migrates over a unix socket into a
new QEMU, at the bandwidth libvirt sets by default (unlimited; QEMU's
own default is 128 MiB/s: --bandwidth 128), one side at a time:

- stock: a QEMU without nuksm, as QEMU loads any VM;
- after: nuksm with landing=off, which merges once the migration is done
  (nuksm before landing);
- landing: nuksm at its defaults, whose pages land on copies as they
  arrive;
- digests: both hosts run nuksm, with migration capability
  nuksm-digests: a source agent and a VM z on it stand for the source
  host, where y's copy of C merged with z's, and y's merged pages go as
  digests; only what the destination lacks follows in full.

Two scenarios: C seen (x offered its pages moments before) and C
forgotten (the agent forgot x's pages, which paired with none, and holds
only a filter of them: --forget-after 5, then 15 s of waiting).  What
the destination host spends (x's and the new QEMU's anonymous memory,
and the agent's store) is sampled every 20 ms from before the migration
until 30 s after it: its peak rise, and how long after the migration
completed the rise fell to y's own content and a tenth of C (the
saving back).  Bytes on the wire and the migration's total time are the
source's (query-migrate).  Every page is checked after, by content.
Must run as root, alone on the host.
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration")]

import harness  # noqa: E402
import report  # noqa: E402
from harness import Qtest, Vm, read_big, wait_until, write_big  # noqa: E402
from nuksm_side import BenchAgent  # noqa: E402

MIB = 1 << 20
PAGE = 4096
SHARED_MIB = 256        # C: in x and y
OWN_MIB = 256           # y's own
SHARED_AT = 64 * MIB    # above the low RAM the firmware uses
OWN_AT = SHARED_AT + SHARED_MIB * MIB
Y_MIB = 1024
X_MIB = 512
SIDES = ("stock", "after", "landing", "digests")
SCENARIOS = ("seen", "forgotten")
FORGET_AFTER_S = 5      # the forgotten scenario's --forget-after
SAMPLE_S = 0.02
TAIL_S = 30             # sampled after the migration completed
GOAL_RISE_MIB = OWN_MIB + SHARED_MIB / 10


def log(msg):
    print(f"migration: {msg}", flush=True)


def rss_anon_mib(pid):
    """Anonymous memory of process @pid (its counter: cheap to read)."""
    return harness.proc_kib_field(pid, "status", "RssAnon") / MIB


def store_mib(agent):
    return sum(os.stat(p).st_blocks * 512
               for p in harness.store_paths(agent.state_dir)) / MIB


class Sampler:
    """What the destination host spends, every SAMPLE_S, in a thread."""

    def __init__(self, agent, pids):
        self.agent, self.pids = agent, list(pids)
        self.samples = []       # (monotonic time, [MiB of each pid, store])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def parts(self):
        return [rss_anon_mib(p) for p in self.pids] + [store_mib(self.agent)]

    def spent(self):
        return sum(self.parts())

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.parts()))
            time.sleep(SAMPLE_S)

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join()


def pseudo_random(rng, mib):
    """@mib MiB from @rng (randbytes() takes at most 256 MiB at once)."""
    return b"".join(rng.randbytes(MIB) for _ in range(mib))


def merged_source(workdir, shared, own, vms):
    """y on a source agent of its own, its copy of @shared merged with
    z's; the agent, which the caller stops."""
    source = workdir / "source"
    source.mkdir()
    agent = BenchAgent(source, "--scan-budget", "0")
    objects = {}
    for name in ("z", "y"):
        objects[name] = Vm(source, name, harness.qtest_args(
            source / f"{name}.qtest", harness.nuksm_object(
                id="dedup0", agent=agent.sock, max_cpu=100),
            mem=f"{Y_MIB if name == 'y' else X_MIB}M")).start()
        vms.append(objects[name])
        q = Qtest(objects[name].qtest_path)
        write_big(q, SHARED_AT, shared)
        if name == "y":
            write_big(q, OWN_AT, own)
        q.close()
    pages = len(shared) // PAGE
    objects["y"].wait_nuksm(lambda i: i["merged-pages"] >= pages,
                            "y's copy of C to merge with z's", timeout=300)
    return agent, objects["y"]


def run_round(scenario, side, workdir, seed, bandwidth):
    rng = random.Random(seed)
    shared = pseudo_random(rng, SHARED_MIB)
    own = pseudo_random(rng, OWN_MIB)
    args = ["--forget-after", str(FORGET_AFTER_S)] \
        if scenario == "forgotten" else []
    agent = BenchAgent(workdir, *args)
    source_agent = None
    vms = []
    try:
        # The source first: merging y's copy takes longer than the agent
        # remembers x's pages seen (--forget-after), which C seen needs.
        if side == "digests":
            source_agent, y = merged_source(workdir, shared, own, vms)
        x = Vm(workdir, "x", harness.qtest_args(
            workdir / "x.qtest", harness.nuksm_object(id="dedup0",
                                                      agent=agent.sock),
            mem=f"{X_MIB}M")).start()
        vms.append(x)
        q = Qtest(x.qtest_path)
        write_big(q, SHARED_AT, shared)
        q.close()
        scans = x.nuksm()["full-scans"]
        x.wait_nuksm(lambda i: i["full-scans"] >= scans + 3,
                     "three full scans of x", timeout=120)
        if side != "digests":
            y = Vm(workdir, "y", harness.qtest_args(
                workdir / "y.qtest", mem=f"{Y_MIB}M")).start()
            vms.append(y)
            q = Qtest(y.qtest_path)
            write_big(q, SHARED_AT, shared)
            write_big(q, OWN_AT, own)
            q.close()
        objects = []
        if side != "stock":
            objects = [harness.nuksm_object(
                id="dedup0", agent=agent.sock,
                landing="off" if side == "after" else "on")]
        d = Vm(workdir, "dest", [*harness.qtest_args(
            workdir / "dest.qtest", *objects, mem=f"{Y_MIB}M"),
            "-incoming", "defer"]).start()
        vms.append(d)
        if objects:
            d.wait_state("paused")
        if scenario == "forgotten":
            # Forgotten between one and two ages after x's last offers.
            time.sleep(3 * FORGET_AFTER_S)

        sampler = Sampler(agent, [x.pid, d.pid])
        before = sampler.parts()
        sampler.start()
        sock = workdir / "mig.sock"
        if side == "digests":
            for vm in (y, d):
                vm.cmd("migrate-set-capabilities", capabilities=[
                    {"capability": c, "state": True}
                    for c in ("return-path", "nuksm-digests")])
        d.cmd("migrate-incoming", uri=f"unix:{sock}")
        y.cmd("migrate-set-parameters",
              **{"max-bandwidth": bandwidth * MIB})
        y.cmd("migrate", uri=f"unix:{sock}")
        wait_until(lambda: y.cmd("query-migrate")["status"] == "completed",
                   300, "the migration to complete")
        done = time.monotonic()
        wait_until(lambda: d.cmd("query-migrate").get("status") ==
                   "completed", 60, "the incoming migration to complete")
        time.sleep(TAIL_S)
        sampler.stop()
        mig = y.cmd("query-migrate")

        q = Qtest(d.qtest_path)
        assert read_big(q, SHARED_AT, len(shared)) == shared, "C lost"
        assert read_big(q, OWN_AT, len(own)) == own, "y's own lost"
        q.close()
        # The rise of x, of the destination and of the store, and in all.
        parts = [(round(t - done, 3),
                  [round(m - b, 1) for m, b in zip(ms, before)])
                 for t, ms in sampler.samples]
        timeline = [(t, round(sum(p), 1)) for t, p in parts]
        back = next((t for t, rise in timeline
                     if t >= 0 and rise <= GOAL_RISE_MIB), None)
        land = d.nuksm()["landing"] if objects else None
        sent = y.nuksm()["digests"] if side == "digests" else None
        result = {
            "scenario": scenario, "side": side, "digests": sent,
            "peak_rise_mib": max(rise for _, rise in timeline),
            "end_rise_mib": timeline[-1][1],
            "wire_mib": mig["ram"]["transferred"] / MIB,
            "total_s": mig["total-time"] / 1000,
            "back_s": back, "landing": land, "timeline": timeline,
            "parts": parts}
        log(f"{scenario} {side}: x, destination, store "
            f"{parts[-1][1]} MiB at the end")
        log(f"{scenario} {side}: peak +{result['peak_rise_mib']:.0f} MiB, "
            f"end +{result['end_rise_mib']:.0f} MiB, wire "
            f"{result['wire_mib']:.0f} MiB, {result['total_s']:.2f} s, "
            f"saving back {back} s after; {land}; {sent}")
        return result
    finally:
        for vm in vms:
            vm.kill()
        agent.stop()
        if source_agent:
            source_agent.stop()


def summary(rounds):
    """Per scenario and side, the median of each figure over its rounds
    (back_s None if the saving was not back in some round)."""
    out = []
    for scenario in SCENARIOS:
        for side in SIDES:
            runs = [r for r in rounds
                    if r["scenario"] == scenario and r["side"] == side]
            if not runs:
                continue
            row = {"scenario": scenario, "side": side, "rounds": len(runs)}
            for key in ("peak_rise_mib", "end_rise_mib", "wire_mib",
                        "total_s"):
                row[key] = statistics.median(r[key] for r in runs)
            backs = [r["back_s"] for r in runs]
            row["back_s"] = None if None in backs else \
                statistics.median(backs)
            if runs[0]["landing"]:
                row["landed"] = statistics.median(
                    r["landing"]["landed"] + r["landing"]["digests-landed"]
                    for r in runs)
            out.append(row)
    return out


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [s for s in SCENARIOS
                 if any(r["scenario"] == s for r in results["rounds"])]
    fig, axes = plt.subplots(1, len(scenarios), figsize=(6 * len(scenarios),
                                                         3.8), squeeze=False)
    colours = {"stock": "tab:gray", "after": "tab:blue",
               "landing": "tab:orange", "digests": "tab:red"}
    labels = {"stock": "stock QEMU", "after": "nuksm, landing=off",
              "landing": "nuksm, landing",
              "digests": "nuksm at both ends, nuksm-digests"}
    for ax, scenario in zip(axes[0], scenarios):
        seen = set()
        for r in results["rounds"]:
            if r["scenario"] != scenario:
                continue
            ts, rise = zip(*r["timeline"])
            ax.plot(ts, rise, color=colours[r["side"]], alpha=0.8,
                    label=None if r["side"] in seen else labels[r["side"]])
            seen.add(r["side"])
        ax.axhline(GOAL_RISE_MIB, color="tab:green", ls="--", lw=1,
                   label="y's own + 10% of C")
        ax.axvline(0, color="black", lw=0.5)
        ax.set_title(f"C {scenario} at the destination")
        ax.set_xlabel("seconds from the migration's completion")
        ax.set_ylabel("destination host's memory rise (MiB)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def seconds(value):
    return f"> {TAIL_S}" if value is None else f"{value:.1f}"


def bandwidth_words(mib):
    if not mib:
        return "unlimited bandwidth (libvirt's default)"
    return f"{mib} MiB/s" + (" (QEMU's default)" if mib == 128 else "")


def rst(meta, results, image, docs_dir):
    rows = [[s["scenario"], s["side"], str(s["rounds"]),
             f"{s['peak_rise_mib']:.0f}", f"{s['end_rise_mib']:.0f}",
             f"{s['wire_mib']:.0f}", f"{s['total_s']:.2f}",
             seconds(s["back_s"]),
             f"{s['landed']:.0f}" if "landed" in s else "—"]
            for s in results["summary"]]
    lines = [f"``bench/migration.py`` on commit ``{meta['commit']}``, "
             f"{meta['date']}: a qtest VM of {Y_MIB} MiB holding "
             f"{SHARED_MIB} MiB of content C and {OWN_MIB} MiB of its own "
             "migrates over a unix socket, at "
             f"{bandwidth_words(results['bandwidth_mib'])}, to a QEMU "
             "beside a VM that holds C (median of the rounds; the rise is "
             "the destination host's memory, both QEMUs' anonymous memory "
             "and the store; the "
             f"saving is back once the rise is at most {GOAL_RISE_MIB:.0f} "
             "MiB):", ""]
    lines += report.list_table(
        ["C at the destination", "side", "rounds", "peak rise (MiB)",
         f"rise {TAIL_S} s after (MiB)", "on the wire (MiB)",
         "migration (s)", "saving back after (s)", "pages landed"], rows)
    lines += ["", f".. image:: {os.path.relpath(image, docs_dir)}", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scenario", choices=SCENARIOS, action="append",
                        help="run only this scenario (may repeat)")
    parser.add_argument("--side", choices=SIDES, action="append",
                        help="run only this side (may repeat)")
    parser.add_argument("--bandwidth", type=int, default=0,
                        help="the source's max-bandwidth, MiB/s (0: "
                        "unlimited, libvirt's default)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "full")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("migration: must run as root")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rounds = []
    for scenario in args.scenario or SCENARIOS:
        for side in args.side or SIDES:
            for n in range(args.rounds):
                with tempfile.TemporaryDirectory(
                        prefix="nuksm-migration-") as d:
                    rounds.append(run_round(scenario, side, Path(d),
                                            seed=n,
                                            bandwidth=args.bandwidth))
    results = {"goal_rise_mib": GOAL_RISE_MIB,
               "bandwidth_mib": args.bandwidth, "rounds": rounds,
               "summary": summary(rounds)}
    report.publish(args.out, "migration", results, started, plot,
                   lambda meta, image, docs: rst(meta, results, image,
                                                 docs),
                   docs=not args.no_docs)


if __name__ == "__main__":
    main()
