#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""AdaptMD's Experiment 1 with its S and its adaptive scheme: saving
and NUMA tax of global, local, adaptive (AdaptMD-H), S and auto on the
mirrored deployment (docs/benchmarks.rst, "Co-location and the adaptive
scheme").

    bench/scheme.py [--out DIR] [--no-docs] [--run NAME ...]

The workload is bench/placement.py's mirrored-apps: two applications,
each on both logical nodes of --fake-numa 2 (VMs a0 and b0 on node 0, a1
and b1 on node 1); each VM holds its application's data (8 MiB) and a
base image all four share (4 MiB), and keeps reading its data.  Runs:

global    merge across nodes, copies where the match completed
local     merge within a node only (KSM's merge_across_nodes=0)
adaptive  AdaptMD-H: hot pages within their node, cold ones across
S         AdaptMD-S: merge within nodes, carry out the co-location plan
          (nuksmctl plan --apply: a1 to node 0, b0 to node 1), then
          merge globally, as AdaptMD does after its migration
auto      nuksm's adaptive scheme: policy auto throughout, the same plan
          carried out once merging settled; merged pages follow

Each run then measures, as bench/placement.py does, the reads of merged
pages that sampling catches, local and remote, the modelled slowdown
and fairness (scripts/numa_tax.py), and the memory saved; and counts
each VM's merged pages whose copy is remote.  Must run alone on the host.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration")]

import placement  # noqa: E402
import report  # noqa: E402

WORKLOAD = "mirrored-apps"
# nuksmd lets the plan move the bench's pinned VMs, three vCPUs to a
# logical node's CPU (two VMs stay, one comes), and a move that gains
# 4 MiB (the data is 8 MiB).
COLOCATE = ("--colocate-apply", "all", "--colocate-pins", "move",
            "--colocate-vcpus-per-cpu", "3", "--colocate-min-gain", "4")
RUNS = {
    "global": ("global", None),
    "local": ("local", None),
    "adaptive": ("adaptive", None),
    "S": ("local", "global"),
    "auto": ("auto", "auto"),
}
# AdaptMD's own figures (Experiment 1, 8 nodes): S saves 96% of global's.
ADAPTMD_S_SAVING = 0.96


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(results)
    fig, (save, tax) = plt.subplots(1, 2, figsize=(11, 4))
    save.bar(runs, [results[r]["saved_mib"] for r in runs], color="tab:green")
    save.set_ylabel("memory saved (MiB)")
    save.set_title("saving")
    names = [vm["name"] for vm in results[runs[0]]["vms"]]
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        tax.bar([i + k * width for i in range(len(runs))],
                [100 * next(v["remote-share"] for v in results[r]["vms"]
                            if v["name"] == name) for r in runs],
                width, label=f"VM {name}")
    tax.set_xticks([i + 0.4 - width / 2 for i in range(len(runs))])
    tax.set_xticklabels(runs)
    tax.set_ylabel("remote share of sampled reads (%)")
    tax.set_ylim(0, 100)
    tax.set_title("NUMA tax")
    tax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rst(meta, results, image, docs_dir):
    glob = results.get("global", {}).get("saved_mib")
    rows = []
    for run, r in results.items():
        reads_local = sum(vm["reads-local"] for vm in r["vms"])
        reads_remote = sum(vm["reads-remote"] for vm in r["vms"])
        rows.append([
            run, f"{r['saved_mib']:.1f}",
            f"{100 * r['saved_mib'] / glob:.0f}%" if glob else "-",
            f"{sum(vm['merged-remote'] for vm in r['vms']):,}",
            f"{reads_local:,}", f"{reads_remote:,}",
            f"{100 * reads_remote / max(1, reads_local + reads_remote):.0f}%",
            f"{max(vm['slowdown'] for vm in r['vms']):.3f}",
            f"{r['fairness']:.3f}", ", ".join(r["moved"]) or "-"])
    out = [f"Machine: {meta['cpu']}, {meta['cores']} cores; kernel "
           f"{meta['kernel']}; commit ``{meta['commit']}``; {meta['date']}; "
           f"{meta['elapsed_s'] / 60:.1f} min.  AdaptMD-S's own saving "
           f"(Experiment 1, 8 nodes): {100 * ADAPTMD_S_SAVING:.0f}% of "
           f"global's.", ""]
    out += report.list_table(
        ["run", "saved MiB", "of global's", "merged pages remote",
         "reads local", "reads remote", "remote share",
         "worst slowdown", "fairness", "VMs moved"], rows)
    out += ["", f".. image:: {os.path.relpath(image, docs_dir)}",
            "   :alt: memory saved, and remote share of sampled reads per "
            "VM, by run"]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path,
                        default=HERE / "results" / "placement")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--run", action="append", choices=list(RUNS))
    args = parser.parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="nuksm-scheme-") as tmp:
        for run in args.run or RUNS:
            policy, colocate = RUNS[run]
            print(f"scheme: {run}", flush=True)
            results[run] = placement.run_policy(
                Path(tmp), WORKLOAD, policy, colocate,
                COLOCATE if colocate else ())
            print(f"scheme: {run}: saved {results[run]['saved_mib']:.1f} "
                  f"MiB, fairness {results[run]['fairness']:.3f}, moved "
                  f"{results[run]['moved']}", flush=True)
    report.publish(args.out, "scheme", results, started, plot,
                   lambda meta, image, docs_dir:
                   rst(meta, results, image, docs_dir),
                   docs=not args.no_docs)

if __name__ == "__main__":
    main()
