#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""NUMA-tax model: what the placement of merged pages costs each VM.

A memory-bound VM touching its F pages uniformly pays the local latency
on pages whose copy is on its home node and the remote latency on the
others (AdaptMD Table I: 82 and 132 ns).  Its private pages are local.
Its modelled slowdown against a run without deduplication is

    slowdown = (L * (F - remote) + R * remote) / (L * F)

and the thesis' fairness metric (nuKSM §5.2) is min/max slowdown over
the VMs: 1 is fair, lower means some VM pays others' NUMA tax.

That model counts pages, as if every page were touched alike.  The
accesses themselves are what read sampling catches (docs/placement.rst):
each VM's reads of merged pages, local and remote.  Their slowdown is

    slowdown = (L * local + R * remote) / (L * (local + remote))

the slowdown of the VM's accesses to merged pages, with its fairness in
the same way.

    scripts/numa_tax.py [--footprint PAGES] QMP_SOCKET...

queries each VM's merged-local/merged-remote and reads-local/
reads-remote (query-nuksm) and prints both models (the page model only
with --footprint); tests import model() and reads_model().
"""

import argparse
import asyncio
import json
import sys

LOCAL_NS = 82
REMOTE_NS = 132


def model(localities, footprint, local_ns=LOCAL_NS, remote_ns=REMOTE_NS):
    """@localities: (merged local, merged remote) pages per VM;
    @footprint: pages each VM touches.  Returns a JSON-able report."""
    vms = []
    for local, remote in localities:
        if remote > footprint:
            raise ValueError(f"{remote} remote pages exceed the footprint "
                             f"of {footprint}")
        latency = (local_ns * (footprint - remote) +
                   remote_ns * remote) / footprint
        vms.append({"merged-local": local, "merged-remote": remote,
                    "latency-ns": round(latency, 2),
                    "slowdown": round(latency / local_ns, 4)})
    slowdowns = [vm["slowdown"] for vm in vms]
    return {"local-ns": local_ns, "remote-ns": remote_ns,
            "footprint-pages": footprint, "vms": vms,
            "fairness": round(min(slowdowns) / max(slowdowns), 4)}


def reads_model(reads, local_ns=LOCAL_NS, remote_ns=REMOTE_NS):
    """@reads: (local, remote) sampled reads of merged pages per VM.
    Returns a JSON-able report; a VM with no read caught has slowdown 1."""
    vms = []
    for local, remote in reads:
        total = local + remote
        latency = (local_ns * local + remote_ns * remote) / total \
            if total else local_ns
        vms.append({"reads-local": local, "reads-remote": remote,
                    "remote-share": round(remote / total, 4) if total else 0,
                    "latency-ns": round(latency, 2),
                    "slowdown": round(latency / local_ns, 4)})
    slowdowns = [vm["slowdown"] for vm in vms]
    return {"local-ns": local_ns, "remote-ns": remote_ns, "vms": vms,
            "fairness": round(min(slowdowns) / max(slowdowns), 4)}


async def query(path):
    from qemu.qmp import QMPClient

    qmp = QMPClient("numa-tax")
    await qmp.connect(path)
    try:
        infos = await qmp.execute("query-nuksm")
    finally:
        await qmp.disconnect()
    return ((sum(i["merged-local"] for i in infos),
             sum(i["merged-remote"] for i in infos)),
            (sum(i["reads-local"] for i in infos),
             sum(i["reads-remote"] for i in infos)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--footprint", type=int,
                        help="pages each VM touches (the page model)")
    parser.add_argument("qmp", nargs="+", help="QMP unix socket of a VM")
    args = parser.parse_args()
    figures = [asyncio.run(query(path)) for path in args.qmp]
    report = {"reads": reads_model([reads for _, reads in figures])}
    if args.footprint:
        report["pages"] = model([pages for pages, _ in figures],
                                args.footprint)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
