#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Placement by reads: where merged copies live under each policy,
counted in the reads that read sampling catches (docs/benchmarks.rst,
"Placement by reads").

    bench/placement.py [--out DIR] [--no-docs] [--policy NAME ...]
                       [--workload NAME ...]

Each workload runs under each policy on a fresh nuksmd with --fake-numa 2
and qtest VMs whose threads are pinned to a CPU of their logical node
(the host's CPUs split in two), so that half of them have node 0 as
their home and half node 1:

five-pages  nuKSM's example (thesis §4.1) at scale: two VMs hold five
            regions P0..P4 of identical content; VM a keeps reading P0,
            VM b P1, both P2 and P3, nobody P4.  VM a has priority 300,
            b 100 (only priority weighs them).
mirrored    AdaptMD's mirrored deployment (§IV-A) with readers: the same
            two applications run on both nodes (VMs a0 and b0 on node 0,
            a1 and b1 on node 1); each VM holds its application's data
            and a base image all four share, and keeps reading its
            application's data; nobody reads the base image.  Every VM
            has priority 100.

Under each policy: fill, merge (under local, which merges only within a
node, until two full passes merge nothing more), set the read window (hot-window: 1000
ms, or twice a round of all the readers if longer, so that a region
read in every round stays hot), let the readers read for SETTLE_S (the
agent re-places copies by who reads them), then measure for MEASURE_S:
per VM the reads of merged pages that sampling caught, local and remote,
the slowdown of those accesses and the fairness over the VMs (nuKSM
§5.2, scripts/numa_tax.py), and the memory saved.  ksm-order is kernel
KSM's placement (the copy where its scan found it last).  Must run alone
on the host: the readers' pace depends on the CPU they get.
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests/integration"),
                str(ROOT / "scripts")]

import harness  # noqa: E402
import numa_tax  # noqa: E402
import report  # noqa: E402
from harness import Agent, Qtest, Vm, wait_until  # noqa: E402

PAGE = 4096
MIB = 1 << 20
NODES = 2
REGION = 4 * MIB
POLICIES = ("ksm-order", "global", "local", "fair", "priority", "adaptive")
SETTLE_S = 30
MEASURE_S = 30
# nuKSM's own figures (thesis Table 5.2): fairness of two VMs' runtimes.
NUKSM_PAPER = {"ksm": "0.70–0.85", "nuksm": "0.94–0.99"}


def five_pages():
    """(VMs, their regions: address -> content seed, what each reads)."""
    at = [64 * MIB + i * REGION for i in range(5)]
    regions = {a: 100 + i for i, a in enumerate(at)}
    return [("a", 0, 300, regions, (at[0], at[2], at[3])),
            ("b", 1, 100, regions, (at[1], at[2], at[3]))]


def mirrored():
    base, data = 64 * MIB, 64 * MIB + REGION
    vms = []
    for app in ("a", "b"):
        for node in range(NODES):
            regions = {base: 200, data: 300 + ord(app)}
            vms.append((f"{app}{node}", node, 100, regions, (data,)))
    return vms


def mirrored_apps():
    """mirrored, with each application's data twice the base image: two
    VMs of one application are alike (100%), two of different ones
    below AdaptMD's 40% (a third), so that co-location groups VMs by
    application."""
    base, data = 64 * MIB, 64 * MIB + REGION
    vms = []
    for app in ("a", "b"):
        for node in range(NODES):
            regions = {base: 200, data: 300 + ord(app),
                       data + REGION: 400 + ord(app)}
            vms.append((f"{app}{node}", node, 100, regions,
                        (data, data + REGION)))
    return vms


WORKLOADS = {"five-pages": five_pages, "mirrored": mirrored,
             "mirrored-apps": mirrored_apps}


def node_cpu(node):
    """A CPU of logical node @node as nuksmd --fake-numa splits them."""
    cpus = os.sysconf("SC_NPROCESSORS_CONF")
    mine = [c for c in sorted(os.sched_getaffinity(0))
            if c * NODES // cpus == node]
    if not mine:
        sys.exit(f"placement: no usable CPU of logical node {node}")
    return mine[0]


def pin(pid, cpu):
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except ProcessLookupError:
            pass


def merged(vm):
    info = vm.nuksm()
    return info["merged-local"] + info["merged-remote"]


def run_policy(workdir, workload, policy, colocate=None, agent_args=()):
    """One workload under one policy; returns its figures.  With
    @colocate, a policy to merge under once merging settled: the
    co-location plan is carried out first (nuksmctl plan --apply), its
    re-placement waited for, then the policy set."""
    state_dir = Path(tempfile.mkdtemp(prefix="nuksm-placement-",
                                      dir="/dev/shm"))
    sock = workdir / "nuksmd.sock"
    agent = Agent(sock, workdir / "nuksmd.log",
                  ["--socket", sock, "--state-dir", state_dir,
                   "--fake-numa", NODES, "--policy", policy,
                   "--log-level", "warning", *agent_args]).start()
    plan = WORKLOADS[workload]()
    moved = []
    vms = []
    try:
        for name, node, priority, regions, reads in plan:
            vm = Vm(workdir, name, harness.qtest_args(
                workdir / f"{name}.qtest", harness.nuksm_object(
                    id="dedup0", agent=sock, enabled="off", max_cpu=100,
                    priority=priority), mem="256M")).start()
            vms.append(vm)
            vm.wait_state("disabled")
            pin(vm.pid, node_cpu(node))
        for vm, (name, node, _, regions, reads) in zip(vms, plan):
            wait_until(lambda: vm.nuksm()["home-nodes"][0]["host-node"] ==
                       node, 10, f"{name}'s home to become node {node}")
            q = Qtest(vm.qtest_path)
            for at, seed in regions.items():
                harness.write_big(q, at, region_content(seed))
            q.close()
        for vm in vms:
            vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
                   value=True)
        wait_merged(vms, plan, policy)
        if colocate:
            moved = apply_plan(agent, vms, plan, colocate)
        window_ms = set_read_window(vms, plan)
        stop = threading.Event()
        threads = [threading.Thread(target=read_forever,
                                    args=(vm, reads, stop))
                   for vm, (*_, reads) in zip(vms, plan)]
        for t in threads:
            t.start()
        try:
            time.sleep(SETTLE_S)
            before = [vm.nuksm() for vm in vms]
            time.sleep(MEASURE_S)
            after = [vm.nuksm() for vm in vms]
        finally:
            stop.set()
            for t in threads:
                t.join()
        sharing = harness.status(agent)["pages_sharing"]
        result = {**figures(plan, before, after, sharing),
                  "read_window_ms": window_ms, "moved": moved}
        for vm, info in zip(result["vms"], after):
            vm["merged-remote"] = info["merged-remote"]
            vm["home"] = info["home-nodes"][0]["host-node"]
        return result
    finally:
        for vm in vms:
            vm.stop()
        agent.stop()
        shutil.rmtree(state_dir, ignore_errors=True)


def apply_plan(agent, vms, plan, then):
    """Carry out the co-location plan, wait until every VM's home is
    where it went and re-placement is done, then set policy @then and
    wait for its merging.  The names of the VMs moved."""
    planned = wait_until(
        lambda: [m for m in harness.ctl_json(agent.sock, "plan")["moves"]
                 if m["verdict"] == "planned"], 120, "a planned move")
    harness.ctl_ok(agent.sock, "plan", "--apply")
    for move in planned:
        vm = next(v for v in vms if v.name == move["name"])
        wait_until(lambda: vm.nuksm()["home-nodes"][0]["host-node"] ==
                   move["to"], 30, f"{vm.name}'s home to follow its move")
    harness.ctl_ok(agent.sock, "policy", then)
    wait_until(lambda: harness.status(agent)["moves_pending"] == 0, 300,
               "re-placement after the move")
    wait_merged(vms, plan, then)
    return sorted(m["name"] for m in planned)


def wait_merged(vms, plan, policy):
    """Until every VM merged all its regions; under local, which merges
    only within a node, until two more full passes of every VM merged
    nothing more."""
    if policy != "local":
        expected = {vm.name: len(regions) * REGION // PAGE
                    for vm, (_, _, _, regions, _) in zip(vms, plan)}
        wait_until(lambda: all(merged(vm) >= expected[vm.name]
                               for vm in vms), 300, "the regions to merge")
        return
    last = {}

    def settled():
        now = {vm.name: (vm.nuksm()["full-scans"], merged(vm)) for vm in vms}
        done = last and all(now[n][0] >= last[n][0] + 2 and
                            now[n][1] == last[n][1] for n in now)
        if not last or any(now[n][1] != last[n][1] for n in now):
            last.update(now)
        return done
    wait_until(settled, 300, "merging within nodes to settle")


def region_content(seed):
    """REGION bytes of distinct pages, the same for the same @seed."""
    return random.Random(seed).randbytes(REGION)


def set_read_window(vms, plan):
    """The default hot-window (1000 ms), or, if longer, twice the time
    the readers take for a round each one after the other (they share
    this process and the host's CPUs): a probed page of a region its VM
    keeps reading is then read in every window, and the region stays
    hot.  Returns it."""
    began = time.monotonic()
    for vm, (*_, reads) in zip(vms, plan):
        q = Qtest(vm.qtest_path)
        for at in reads:
            harness.read_big(q, at, REGION)
        q.close()
    window_ms = max(1000, int(2000 * (time.monotonic() - began)))
    for vm in vms:
        vm.cmd("qom-set", path="/objects/dedup0", property="hot-window",
               value=window_ms)
    return window_ms


def read_forever(vm, regions, stop):
    """Read @regions of @vm, in turn, until @stop."""
    q = Qtest(vm.qtest_path)
    try:
        while not stop.is_set():
            for at in regions:
                harness.read_big(q, at, REGION)
    finally:
        q.close()


def figures(plan, before, after, sharing):
    reads = [(a["reads-local"] - b["reads-local"],
              a["reads-remote"] - b["reads-remote"])
             for b, a in zip(before, after)]
    model = numa_tax.reads_model(reads)
    for vm, (name, node, priority, _, _) in zip(model["vms"], plan):
        vm["name"], vm["home"], vm["priority"] = name, node, priority
    return {"vms": model["vms"], "fairness": model["fairness"],
            "saved_mib": sharing * PAGE / MIB}


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4),
                             squeeze=False)
    for ax, (workload, by_policy) in zip(axes[0], results.items()):
        policies = list(by_policy)
        names = [vm["name"] for vm in by_policy[policies[0]]["vms"]]
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            shares = [100 * next(v["remote-share"]
                                 for v in by_policy[p]["vms"]
                                 if v["name"] == name) for p in policies]
            ax.bar([i + k * width for i in range(len(policies))], shares,
                   width, label=f"VM {name}")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(policies))])
        ax.set_xticklabels(policies, rotation=20)
        ax.set_ylabel("remote share of sampled reads (%)")
        ax.set_ylim(0, 100)
        twin = ax.twinx()
        twin.plot([i + 0.4 - width / 2 for i in range(len(policies))],
                  [by_policy[p]["fairness"] for p in policies], "ko-",
                  label="fairness")
        twin.set_ylim(0, 1.05)
        twin.set_ylabel("fairness (min/max slowdown)")
        ax.set_title(workload)
        ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rst(meta, results, image, docs_dir):
    out = [f"Machine: {meta['cpu']}, {meta['cores']} cores; kernel "
           f"{meta['kernel']}; commit ``{meta['commit']}``; {meta['date']}; "
           f"{meta['elapsed_s'] / 60:.1f} min.  nuKSM's own fairness "
           f"(thesis Table 5.2, runtimes of real applications): KSM "
           f"{NUKSM_PAPER['ksm']}, nuKSM {NUKSM_PAPER['nuksm']}.", ""]
    for workload, by_policy in results.items():
        rows = []
        for policy, r in by_policy.items():
            for vm in r["vms"]:
                rows.append([policy, f"{vm['name']} (node {vm['home']}, "
                             f"priority {vm['priority']})",
                             f"{vm['reads-local']:,}",
                             f"{vm['reads-remote']:,}",
                             f"{100 * vm['remote-share']:.0f}%",
                             f"{vm['slowdown']:.3f}",
                             f"{r['fairness']:.3f}",
                             f"{r['saved_mib']:.0f}"])
        out += [f"``{workload}``:", ""]
        out += report.list_table(["policy", "VM (home, priority)",
                                  "reads local",
                                  "reads remote", "remote share",
                                  "slowdown", "fairness", "saved MiB"],
                                 rows)
        out.append("")
    out += [f".. image:: {os.path.relpath(image, docs_dir)}",
            "   :alt: remote share of sampled reads per VM and fairness, "
            "by policy"]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path,
                        default=HERE / "results" / "placement")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--policy", action="append", choices=POLICIES)
    parser.add_argument("--workload", action="append",
                        choices=["five-pages", "mirrored"])
    args = parser.parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="nuksm-placement-") as tmp:
        for workload in args.workload or ("five-pages", "mirrored"):
            results[workload] = {}
            for policy in args.policy or POLICIES:
                print(f"placement: {workload} under {policy}", flush=True)
                results[workload][policy] = run_policy(Path(tmp), workload,
                                                       policy)
                print(f"placement: {workload} under {policy}: fairness "
                      f"{results[workload][policy]['fairness']}",
                      flush=True)
    report.publish(args.out, "placement", results, started, plot,
                   lambda meta, image, docs_dir:
                   rst(meta, results, image, docs_dir),
                   docs=not args.no_docs)

if __name__ == "__main__":
    main()
