"""The co-location plan (AdaptMD-S) on real VMs, with --fake-numa 2.

Each qtest VM is pinned to a CPU of its node, which makes that node its
home, pinned by its operator.  VMs a and b hold the same 24 MiB (of 32
MiB written) on nodes 0 and 1; c holds contents of its own, on node 1.

- With --colocate-pins=move the plan may move pinned VMs: b (as much
  memory as a: the lower node wins the tie) goes to node 0, gaining what
  it holds alike with a; c stays.  With one vCPU per CPU allowed (the
  default), node 0 has no room for b's vCPU: refused.
- With the default, --colocate-pins=keep, a twin d of a pinned to node 1
  beside b draws the group there, and a, pinned to node 0, is refused.

`nuksmctl vms` shows each VM's twin and planned move from the agent's
periodic look, and the VM's own query-nuksm what the agent told it.
"""

import os
import random

from harness import ctl, ctl_json, ctl_ok, wait_until, write_alike
from test_placement import home, node_cpus, pin

COLOCATION_PERIOD_S = 10     # agent/numa/colocation.h
SIZE = 32 << 20
SHARED = 24 << 20
PAGE = 4096


def start_vms(qtest_vm, agent, layout, prefix=""):
    """Start a qtest VM for each (name, node, shared bytes, seed) of
    @layout on @agent, pinned to its node, and write its contents; wait
    until the shared pages merged.  Returns the VMs by name."""
    cpus = node_cpus()
    shared = random.Random(7).randbytes(SHARED)
    vms = {}
    for name, node, alike, seed in layout:
        vm = vms[name] = qtest_vm(prefix + name, agent=agent.sock)
        pin(vm.pid, cpus[node])
        wait_until(lambda: home(vm) == [(node, "pinned")], 10,
                   f"{vm.name}'s home to become node {node}")
        write_alike(vm, shared, alike, seed, SIZE)
    for name, _, alike, _ in layout:
        if alike:
            vms[name].wait_nuksm(
                lambda i: i["merged-pages"] - i["zero-pages"] >=
                SHARED // PAGE, "the shared pages to merge", timeout=120)
    return vms


def settled_plan(agent, groups, moves):
    """The plan once the sketches show @groups groups and @moves moves."""
    def planned():
        plan = ctl_json(agent.sock, "plan")
        return (plan["groups"] == groups and len(plan["moves"]) == moves
                and plan)
    return wait_until(planned, 30, f"a plan of {moves} moves")


LAYOUT = (("a", 0, SHARED, 1), ("b", 1, SHARED, 2), ("c", 1, 0, 3))


def test_plan_moves_the_twin_where_there_is_room(start_agent, qtest_vm):
    agent = start_agent("--fake-numa", "2", "--colocate-min-gain", "8",
                        "--colocate-pins", "move",
                        "--colocate-vcpus-per-cpu", "2")
    tight = start_agent("--fake-numa", "2", "--colocate-min-gain", "8",
                        "--colocate-pins", "move", name="tight")
    vms_of_agent = start_vms(qtest_vm, agent, LAYOUT)
    start_vms(qtest_vm, tight, LAYOUT, prefix="t")

    plan = settled_plan(agent, 1, 1)
    assert plan["vms"] == 3
    (move,) = plan["moves"]
    assert (move["name"], move["from"], move["to"], move["verdict"]) == \
        ("b", 1, 0, "planned"), move
    assert abs(move["gain_pages"] - SHARED // PAGE) <= 0.05 * SIZE // PAGE
    assert move["vcpus"] == 1 and move["pages"] >= SIZE // PAGE
    assert "b, node 1 -> node 0: planned" in ctl_ok(agent.sock, "plan")

    def listed():
        vms = {v["name"]: v for v in ctl_json(agent.sock, "vms")["vms"]}
        return all(vms[n]["twin"] for n in "ab") and vms
    vms = wait_until(listed, 2 * COLOCATION_PERIOD_S, "twins in the list")
    assert vms["b"]["twin"]["id"] == vms["a"]["id"]
    assert vms["a"]["twin"]["id"] == vms["b"]["id"]
    assert vms["b"]["twin"]["similarity"] >= 0.6, vms["b"]
    assert vms["b"]["plan"] == {"to": 0, "verdict": "planned"}
    assert vms["a"]["plan"] is None and vms["c"]["plan"] is None
    assert vms["c"]["twin"] is None or \
        vms["c"]["twin"]["similarity"] < 0.1, vms["c"]

    # Each VM is told (COLOCATION): query-nuksm and info nuksm show it.
    b = vms_of_agent["b"]
    co = wait_until(lambda: b.nuksm().get("colocation"), 10,
                    "b's query-nuksm to show its twin")
    assert (co["twin"], co["plan-node"], co["plan"]) == ("a", 0, "planned")
    assert abs(co["similarity"] - vms["b"]["twin"]["similarity"]) < 0.05
    assert "co-location: twin a" in b.hmp("info nuksm")
    assert "plan" not in vms_of_agent["a"].nuksm()["colocation"]

    (move,) = settled_plan(tight, 1, 1)["moves"]
    assert (move["name"], move["verdict"]) == ("tb", "no-room"), move
    assert "no node has room" in ctl_ok(tight.sock, "plan")

    # --apply carries out nothing it may not: b is no libvirt domain and
    # --colocate-apply is libvirt's (the default); tb has no room; a
    # VM the plan does not move is named as such.
    refused = ctl(agent.sock, "plan", "--apply")
    assert refused.returncode == 1, refused
    assert "b, node 1 -> node 0: not moved: client" in refused.stdout
    assert "not a libvirt domain" in refused.stdout, refused.stdout
    refused = ctl(tight.sock, "plan", "--apply", "tb", "ta")
    assert refused.returncode == 1, refused
    assert "tb, node 1 -> node 0: not moved: refused (no-room)" in \
        refused.stdout, refused.stdout
    assert "ta: the plan moves no such VM" in refused.stderr
    assert home(b) == [(1, "pinned")]


def test_plan_keeps_pinned_vms(start_agent, qtest_vm):
    agent = start_agent("--fake-numa", "2", "--colocate-min-gain", "8",
                        "--colocate-vcpus-per-cpu", "0")
    start_vms(qtest_vm, agent, (*LAYOUT, ("d", 1, SHARED, 4)))
    (move,) = settled_plan(agent, 1, 1)["moves"]
    assert (move["name"], move["from"], move["to"], move["verdict"]) == \
        ("a", 0, 1, "pinned"), move
    assert "its operator pinned it" in ctl_ok(agent.sock, "plan")


def allowed_cpus(pid):
    """The CPUs each thread of @pid may run on."""
    return {tid: frozenset(os.sched_getaffinity(int(tid)))
            for tid in os.listdir(f"/proc/{pid}/task")}


def test_apply_moves_a_plain_qemu(start_agent, qtest_vm):
    """nuksmctl plan --apply with --colocate-apply=all: nuksmd moves b's
    threads to node 0's CPUs (the memory stays: one real node here); b's
    home follows, its pins count as nuksm's, the plan empties and the
    scheme turns from colocate to global; under auto the copies b and a
    share end up on node 0, local to both."""
    agent = start_agent("--fake-numa", "2", "--colocate-min-gain", "8",
                        "--colocate-pins", "move",
                        "--colocate-vcpus-per-cpu", "2",
                        "--colocate-apply", "all", "--policy", "auto")
    vms = start_vms(qtest_vm, agent, LAYOUT)
    a, b, c = vms["a"], vms["b"], vms["c"]
    (move,) = settled_plan(agent, 1, 1)["moves"]
    assert (move["name"], move["to"]) == ("b", 0), move
    wait_until(lambda: (b.nuksm().get("colocation") or {}).get("scheme") ==
               "colocate", 2 * COLOCATION_PERIOD_S,
               "b to hear that the scheme plans a move")
    c_cpus = allowed_cpus(c.pid)

    out = ctl_ok(agent.sock, "plan", "--apply")
    assert "b, node 1 -> node 0: moved by nuksmd:" in out, out
    assert "its memory had no other node to leave" in out, out
    cpus = os.sysconf("SC_NPROCESSORS_CONF")
    node0 = {cpu for cpu in range(cpus) if cpu * 2 // cpus == 0}
    assert set(allowed_cpus(b.pid).values()) == {frozenset(node0)}
    assert allowed_cpus(c.pid) == c_cpus, "c moved too"
    wait_until(lambda: home(b) == [(0, "pinned")], 10,
               "b's home to follow its threads")

    settled_plan(agent, 1, 0)

    def told():
        vm = {v["name"]: v for v in ctl_json(agent.sock, "vms")["vms"]}["b"]
        co = b.nuksm().get("colocation") or {}
        return (vm["plan"] is None and vm["moved_to"] == 0 and
                vm["scheme"] == "global" and co.get("scheme") == "global"
                and "plan" not in co)
    wait_until(told, 3 * COLOCATION_PERIOD_S,
               "the list and b to show the move done, the scheme global")
    assert "moved 0" in ctl_ok(agent.sock, "vms")
    assert "scheme global" in b.hmp("info nuksm")
    # Nothing left to carry out.
    again = ctl(agent.sock, "plan", "--apply", "b")
    assert again.returncode == 1 and "moves no such VM" in again.stderr

    # auto re-places what a and b share onto node 0, where both now are.
    wait_until(lambda: all(
        (i := vm.nuksm())["merged-remote"] == 0 and
        i["merged-local"] >= SHARED // PAGE for vm in (a, b)), 60,
        "a's and b's merged pages to be local")
