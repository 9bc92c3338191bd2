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
import signal
import threading
import time

import harness
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


def spawn_with_pid(pid, argv):
    """Start @argv (as root) with pid @pid, which must be free: the
    kernel's next pid is set through ns_last_pid, as pid wrap-around
    would hand it out, and the process spawned at once.  None if other
    processes of this busy host kept taking the pid first."""
    last = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY)
    try:
        for _ in range(1000):
            os.pwrite(last, str(pid - 1).encode(), 0)
            spawned = os.posix_spawnp(argv[0], argv, os.environ)
            if spawned == pid:
                return spawned
            os.kill(spawned, signal.SIGKILL)
            os.waitpid(spawned, 0)
    finally:
        os.close(last)
    return None


def test_apply_never_acts_on_a_reused_pid(start_agent):
    """A compromised QEMU's user gets its own move planned (everything
    the plan weighs is the VM's claim), forks a child that keeps the
    connection, and exits; its pid goes to a root process.  nuksmd
    disconnects the VM as its process exits, and plan --apply with
    --colocate-apply=all moves nothing: the root process keeps its CPUs.
    Before, nuksmd kept the VM and pinned the root process to node 1."""
    agent = start_agent("--fake-numa", "2", "--colocate-apply", "all",
                        "--colocate-min-gain", "1",
                        "--colocate-vcpus-per-cpu", "0")
    pages = 2048
    rnd = random.Random(11)
    content = [(page, rnd.getrandbits(63) | 1) for page in range(pages)]
    # x claims a memory backend bound to node 1: its operator's pin.
    x = harness.VmClient(agent.sock, name="x")
    x.topology([(1 << 1, harness.proto.MEMPOLICY_BIND)], [],
               [(0, pages, 0)])
    x.candidates(content)
    x.sync()
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()

    def rogue():
        # y claims nothing: its home is node 0, and the plan moves it.
        y = harness.VmClient(agent.sock, name="y")
        y.topology([(0, 0)], [], [(0, pages, 0)])
        y.candidates(content)
        y.sync()
        os.write(ready_w, b"r")
        os.read(go_r, 1)
        holder = os.fork()
        if holder == 0:
            time.sleep(600)         # holds y's connection (killed)
            os._exit(0)
        os.write(ready_w, b"%d\n" % holder)

    rogue_pid = harness.fork_child(rogue)
    holder = sleeper = None
    try:
        assert os.read(ready_r, 1) == b"r"
        (move,) = settled_plan(agent, 1, 1)["moves"]
        assert (move["name"], move["from"], move["to"], move["verdict"]) == \
            ("y", 0, 1, "planned"), move
        os.write(go_w, b"g")
        holder = int(os.read(ready_r, 32))
        _, status = os.waitpid(rogue_pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        wait_until(lambda: "y" not in
                   {v["name"] for v in ctl_json(agent.sock, "vms")["vms"]},
                   10, "nuksmd to disconnect y once its process exited")
        assert "its process exited, disconnecting" in agent.log_text()
        sleeper = spawn_with_pid(rogue_pid, ["sleep", "600"])
        assert sleeper, f"pid {rogue_pid} could not be reused"
        cpus = os.sched_getaffinity(sleeper)

        out = ctl(agent.sock, "plan", "--apply")
        assert "moved by nuksmd" not in out.stdout, out.stdout
        assert os.sched_getaffinity(sleeper) == cpus
    finally:
        for pid in (holder, sleeper):
            if pid:
                os.kill(pid, signal.SIGKILL)
        if sleeper:
            os.waitpid(sleeper, 0)
        x.close()


def red_plan(agent):
    """The plan's moves of red's VMs: (name, from, to, verdict)."""
    return sorted((m["name"], m["from"], m["to"], m["verdict"])
                  for m in ctl_json(agent.sock, "plan")["moves"]
                  if m["name"].startswith("r"))


def test_a_domains_claims_leave_other_domains_plans_alone(start_agent):
    """Red's r2 (node 0) is planned to join its twin r1 on node 1.  Blue's
    b2 then takes on blue's b1's content, claiming 8 vCPUs and b1 100000
    pages, so that blue's group is the larger and its move to node 1
    would take all that node's vCPU slots: red's plan stays as it was,
    each domain planned within its share of each node's room.  Before,
    blue's move went first, r2 had no room and r1 was planned to node 0."""
    agent = start_agent("--fake-numa", "2", "--vm-domains", "allow",
                        "--colocate-min-gain", "1", "--colocate-pins", "move",
                        "--colocate-vcpus-per-cpu", "8")
    cpu0 = node_cpus()[0]
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(9)]
    for t in threads:
        t.start()
    tids = [t.native_id for t in threads]
    for tid in tids:
        os.sched_setaffinity(tid, {cpu0})   # vCPUs of node 0
    rnd = random.Random(13)

    def content(n=2048):
        return [(page, rnd.getrandbits(63) | 1) for page in range(n)]

    red, blue, own = content(), content(), content()
    bound = [(1 << 1, harness.proto.MEMPOLICY_BIND)]    # node 1
    clients = []

    def vm(name, domain, gnodes, vcpus, pages, offers):
        c = harness.VmClient(agent.sock, domain=domain, name=name)
        c.topology(gnodes, [(tid, 0) for tid in vcpus], [(0, pages, 0)])
        c.candidates(offers)
        c.sync()
        clients.append(c)
        return c

    try:
        vm("r1", "red", bound, [], 8192, red)
        vm("r2", "red", [(0, 0)], tids[:1], 4096, red)
        vm("b1", "blue", bound, [], 100000, blue)
        b2 = vm("b2", "blue", [(0, 0)], tids[1:], 4096, own)
        settled_plan(agent, 1, 1)
        before = red_plan(agent)
        assert before == [("r2", 0, 1, "planned")], before

        b2.candidates(blue)
        b2.sync()
        plan = settled_plan(agent, 2, 2)
        blue_moves = [m for m in plan["moves"] if m["name"] == "b2"]
        assert blue_moves and blue_moves[0]["to"] == 1, plan
        assert red_plan(agent) == before
    finally:
        for c in clients:
            c.close()
        stop.set()
        for t in threads:
            t.join()
