"""The similarity of VMs (AdaptMD-S): nuksmd's content sketches against
the exact count of pages two real VMs share once merged.

Three qtest VMs of one merge domain hold, at 64 MiB, the same 16 MiB (a
and b) or its first 20% (c), each followed by contents of its own; a
fourth, in another merge domain, holds what a holds.  Once their pages
merged, `nuksmctl similarity` estimates, from samples of the candidates'
digests, how many pages of each VM the other holds: each estimate must be
within 4% of the VM's pages of the exact figure (the merged pages of one
that share a copy with the other), and the similarity within 3 points of
the exact one.  VMs of two domains make no pair.  The sketches exported
for fleets (`nuksmctl --json similarity --sketches`), compared by the
reference reader scripts/sketches.py, give exactly nuksmd's figures, and
a's twin in the other domain (which nuksmd never pairs) as alike as it
is.
"""

import random

import sketches
from harness import ctl, ctl_json, ctl_ok, wait_until, write_alike

SHARED = 16 << 20           # the content a and b hold alike
OWN = 16 << 20              # then each VM's own
PAGE = 4096


def fill(vm, shared, shared_bytes, own_seed):
    write_alike(vm, shared, shared_bytes, own_seed, SHARED + OWN)


def by_name(report):
    """The report's VMs by name, and its pairs by their VMs' names."""
    names = {v["id"]: v["name"] for v in report["vms"]}
    vms = {v["name"]: v for v in report["vms"]}
    pairs = {}
    for p in report["pairs"]:
        a, b = names[p["a"]], names[p["b"]]
        pairs[a, b] = p
        pairs[b, a] = {**p, "a": p["b"], "b": p["a"],
                       "sampled_a": p["sampled_b"], "alike_a": p["alike_b"],
                       "sampled_b": p["sampled_a"], "alike_b": p["alike_a"],
                       "merged_a": p["merged_b"], "merged_b": p["merged_a"]}
    return vms, pairs


def test_sketches_estimate_what_vms_share(start_agent, qtest_vm):
    agent = start_agent("--vm-domains=allow")
    shared = random.Random(1).randbytes(SHARED)
    vms = {name: qtest_vm(name, agent=agent.sock, domain=domain)
           for name, domain in (("a", "default"), ("b", "default"),
                                ("c", "default"), ("d", "blue"))}
    fill(vms["a"], shared, SHARED, 10)
    fill(vms["b"], shared, SHARED, 11)
    fill(vms["c"], shared, SHARED // 5, 12)
    fill(vms["d"], shared, SHARED, 10)       # a's twin, in another domain
    for name in "ab":
        vms[name].wait_nuksm(
            lambda i: i["merged-pages"] - i["zero-pages"] >= SHARED // PAGE,
            "the shared pages to merge", timeout=120)
    vms["c"].wait_nuksm(
        lambda i: i["merged-pages"] - i["zero-pages"] >= SHARED // 5 // PAGE,
        "the shared pages to merge", timeout=120)

    # Every page of every VM was offered once merging is done: its own
    # pages too, which nothing merges.
    def settled():
        vms_seen, pairs = by_name(ctl_json(agent.sock, "similarity"))
        return (len(vms_seen) == 4 and
                all(v["pages"] >= 0.9 * (SHARED + OWN) / PAGE
                    for v in vms_seen.values()) and
                pairs.get(("a", "b"), {}).get("merged_a", 0) >=
                SHARED // PAGE) and (vms_seen, pairs)
    seen, pairs = wait_until(settled, 60, "every page to be sketched")

    assert ("a", "d") not in pairs and ("b", "d") not in pairs
    assert set(pairs) == {("a", "b"), ("b", "a"), ("a", "c"), ("c", "a"),
                          ("b", "c"), ("c", "b")}
    for (x, y), p in pairs.items():
        pages = seen[x]["pages"]
        estimate = p["alike_a"] << p["shift"]
        exact = p["merged_a"]
        print(f"{x} ~ {y}: {estimate} of {x}'s ~{pages} pages alike "
              f"(sample 1/{1 << p['shift']}), {exact} merged with {y}: "
              f"error {(estimate - exact) / pages:+.2%} of its pages")
        assert abs(estimate - exact) <= 0.04 * pages
    for x, y in (("a", "b"), ("a", "c"), ("b", "c")):
        p = pairs[x, y]
        smaller = x if seen[x]["pages"] <= seen[y]["pages"] else y
        exact = pairs[smaller, y if smaller == x else x]["merged_a"] / \
            seen[smaller]["pages"]
        print(f"similarity {x} ~ {y}: {p['similarity']:.1%} estimated, "
              f"{exact:.1%} exact")
        assert abs(p["similarity"] - exact) <= 0.03
    assert pairs["a", "b"]["similarity"] >= 0.45
    assert pairs["a", "c"]["similarity"] <= 0.15

    text = ctl_ok(agent.sock, "similarity")
    assert "merge domain default:" in text and "merge domain blue:" in text
    assert "a ~ b:" in text

    export = ctl_json(agent.sock, "similarity", "--sketches")
    assert (export["format"], export["version"]) == ("nuksm-sketches", 1)
    assert export["seed"] == sketches.SEED
    exported = {vm["name"]: {**vm, "sample": dict(map(tuple, vm["sample"]))}
                for vm in export["vms"]}
    report = ctl_json(agent.sock, "similarity")
    names = {v["id"]: v["name"] for v in report["vms"]}
    for p in report["pairs"]:
        a, b = exported[names[p["a"]]], exported[names[p["b"]]]
        assert sketches.compare(a, b) == (
            p["similarity"], p["alike_a"] << p["shift"],
            p["alike_b"] << p["shift"]), (names[p["a"]], names[p["b"]])
    across, _, _ = sketches.compare(exported["a"], exported["d"])
    assert across >= 0.95, across

    misuse = ctl(agent.sock, "similarity", "--sketches")
    assert misuse.returncode == 2
    assert "--sketches goes with --json similarity" in misuse.stderr
