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

    scripts/numa_tax.py --footprint PAGES QMP_SOCKET...

queries each VM's merged-local/merged-remote (query-nuksm) and prints
the model; tests import model().
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


async def query(path):
    from qemu.qmp import QMPClient

    qmp = QMPClient("numa-tax")
    await qmp.connect(path)
    try:
        infos = await qmp.execute("query-nuksm")
    finally:
        await qmp.disconnect()
    return (sum(i["merged-local"] for i in infos),
            sum(i["merged-remote"] for i in infos))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--footprint", type=int, required=True,
                        help="pages each VM touches")
    parser.add_argument("qmp", nargs="+", help="QMP unix socket of a VM")
    args = parser.parse_args()
    localities = [asyncio.run(query(path)) for path in args.qmp]
    json.dump(model(localities, args.footprint), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
