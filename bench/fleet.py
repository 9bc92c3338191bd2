#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Sketch-guided placement on a fleet: what placing VMs by their nuksm
content sketches saves against placing them at random (docs/benchmarks.rst,
"Placing a fleet by sketches").

    bench/fleet.py [--hosts N] [--per-host N] [--seeds N] [--out DIR]
                   [--no-docs]

A trace-driven simulation, no VM runs.  The trace is synthetic, drawn
from a seed, as Memory Buddies (VEE 2009) describes fleets: each VM runs
one of 4 OS families in one of 2 releases (a family's releases hold 70%
of their 12,000 base pages alike) and one of 6 applications (6,000 data
pages each); a VM holds 50-90% of its image's base pages and 40-100% of
its application's data, the rest of its 16,384 pages its own.  VMs
arrive in a random order and go, one after the other, to a host with
room (--per-host VMs each):

random   any host with room, uniformly;
sketch   the host whose VMs hold most of the new VM's pages, as their
         sketches estimate it (scripts/sketches.py, the reference reader
         of `nuksmctl --json similarity --sketches`): the new VM's
         sketch against the union of the host's, Memory Buddies' way
         with Bloom filters; ties to the emptier host;
exact    the same greedy with the exact page contents: how much the
         sketch's estimate loses.

The saving is, summed over the hosts, each host's pages less its
distinct contents (what deduplication within a host saves); the VMs the
same memory then holds, against random placement, is Memory Buddies'
measure.
"""

import argparse
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration"),
                str(ROOT / "scripts")]

import report  # noqa: E402
import sketches  # noqa: E402

VM_PAGES = 16384
FAMILIES, RELEASES, APPS = 4, 2, 6
BASE_PAGES, RELEASE_ALIKE, APP_PAGES = 12000, 0.7, 6000
POLICIES = ("random", "sketch", "exact")
# Memory Buddies' own figure: 17% more VMs on the same hosts.
PAPER = "Memory Buddies: 17% more VMs packed, with Bloom-filter fingerprints"


def trace(rnd, count):
    """@count VMs: each a list of content ids, one per page."""
    ids = iter(range(1, 1 << 62))
    bases = {}
    for f in range(FAMILIES):
        common = [next(ids) for _ in range(int(BASE_PAGES * RELEASE_ALIKE))]
        for r in range(RELEASES):
            own = [next(ids) for _ in range(BASE_PAGES - len(common))]
            bases[f, r] = common + own
    apps = [[next(ids) for _ in range(APP_PAGES)] for _ in range(APPS)]
    vms = []
    for _ in range(count):
        base = bases[rnd.randrange(FAMILIES), rnd.randrange(RELEASES)]
        app = apps[rnd.randrange(APPS)]
        pages = rnd.sample(base, int(len(base) * rnd.uniform(0.5, 0.9)))
        pages += rnd.sample(app, int(len(app) * rnd.uniform(0.4, 1.0)))
        pages += [next(ids) for _ in range(VM_PAGES - len(pages))]
        vms.append(pages)
    return vms


def digest(content):
    """A content's 64-bit digest, as XXH3 would spread it."""
    return sketches.mix64(content * 0x9e3779b97f4a7c15 & sketches.MASK64)


def saving(hosts, vms):
    """Pages deduplication within each host saves, summed."""
    return sum(sum(len(vms[v]) for v in h) -
               len(set().union(*(vms[v] for v in h))) if h else 0
               for h in hosts)


def union_sketch(members, sk):
    """The sketch of a host: the union of its VMs' samples, at the
    largest shift among them."""
    shift = max(sk[v]["shift"] for v in members)
    sample = {}
    for v in members:
        for fp, n in sk[v]["sample"].items():
            if sketches.in_sample(fp, shift):
                sample[fp] = sample.get(fp, 0) + n
    return {"shift": shift, "sample": sample}


def alike_with(v, members, vms, sk, how):
    """Pages of VM @v whose content a VM of @members holds."""
    if not members:
        return 0
    if how == "exact":
        held = set().union(*(vms[u] for u in members))
        return sum(c in held for c in vms[v])
    _, alike, _ = sketches.compare(sk[v], union_sketch(members, sk))
    return alike


def place(vms, sk, order, hosts_n, per_host, policy, rnd):
    hosts = [[] for _ in range(hosts_n)]
    for v in order:
        room = [h for h in range(hosts_n) if len(hosts[h]) < per_host]
        if policy == "random":
            target = rnd.choice(room)
        else:
            target = max(room, key=lambda h: (
                alike_with(v, hosts[h], vms, sk, policy), -len(hosts[h]),
                -h))
        hosts[target].append(v)
    return hosts


def run(seed, hosts_n, per_host):
    rnd = random.Random(seed)
    vms = trace(rnd, hosts_n * per_host)
    sk = [sketches.sketch_of(map(digest, pages)) for pages in vms]
    vms = [set(pages) for pages in vms]
    order = list(range(len(vms)))
    rnd.shuffle(order)
    out = {}
    for policy in POLICIES:
        hosts = place(vms, sk, order, hosts_n, per_host, policy,
                      random.Random(seed))
        out[policy] = saving(hosts, vms) / (len(vms) * VM_PAGES)
        print(f"fleet: seed {seed}, {policy}: saves {out[policy]:.1%} of "
              f"the fleet's memory", flush=True)
    return out


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    means = [100 * sum(r[p] for r in results) / len(results)
             for p in POLICIES]
    ax.bar(POLICIES, means, color=["grey", "tab:blue", "tab:green"])
    for i, p in enumerate(POLICIES):
        ax.plot([i] * len(results), [100 * r[p] for r in results], "k.")
    ax.set_ylabel("memory saved by dedup within hosts (%)")
    ax.set_title("placing a fleet: random, by sketches, exact")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rst(meta, args, results, image, docs_dir):
    mean = {p: sum(r[p] for r in results) / len(results) for p in POLICIES}
    # The VMs the same memory holds, against random placement.
    rows = [[p, f"{100 * mean[p]:.1f}%",
             f"{100 * min(r[p] for r in results):.1f}–"
             f"{100 * max(r[p] for r in results):.1f}%",
             f"{(1 - mean['random']) / (1 - mean[p]) - 1:+.0%}"]
            for p in POLICIES]
    out = [f"Synthetic trace, {args.hosts} hosts of {args.per_host} VMs of "
           f"{VM_PAGES} pages, {args.seeds} seeds; commit "
           f"``{meta['commit']}``; {meta['date']}; "
           f"{meta['elapsed_s'] / 60:.1f} min.  {PAPER}.", ""]
    out += report.list_table(["placement", "saved (mean)", "range",
                              "VMs in the same memory"], rows)
    out += ["", f".. image:: {os.path.relpath(image, docs_dir)}",
            "   :alt: memory saved by random, sketch-guided and exact "
            "placement"]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--per-host", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path,
                        default=HERE / "results" / "fleet")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    results = [run(seed, args.hosts, args.per_host)
               for seed in range(1, args.seeds + 1)]
    report.publish(args.out, "fleet", results, started, plot,
                   lambda meta, image, docs_dir:
                   rst(meta, args, results, image, docs_dir),
                   docs=not args.no_docs)

if __name__ == "__main__":
    main()
