# SPDX-License-Identifier: GPL-2.0-or-later
"""Domain quotas: one merge domain cannot take the others' share of the
store (agent/merge/quotas.h).

A domain at its store-max makes no new copy and its VMs alone are told
(query-nuksm's limit domain-quota); other domains merge on; merging
resumes by itself once the domain holds less than 90% of its quota.
"""

import random
import subprocess

import harness
from harness import (COND_DOMAIN_QUOTA, MSG_MERGE, MSG_UPLOAD_REQ, Qtest,
                     VmClient, digest, status, wait_until, write_big)

PAGE = harness.NUKSM_PAGE_SIZE
MIB = 1 << 20
QUOTA_PAGES = MIB // PAGE          # store-max=1 (MiB) of domain greedy
RESUME_PERCENT = 90                # mirrors agent/merge/quotas.h


content = harness.page_content


def start_quota_agent(start_agent, workdir, *extra):
    """An agent where domain greedy may hold 1 MiB of copies and VMs
    choose their domain (vm-domains=allow)."""
    config = workdir / "quotas.conf"
    config.write_text("[nuksmd]\nvm-domains=allow\n\n"
                      "[domain greedy]\nstore-max=1\n")
    return start_agent("--config", config, *extra)


def told_nothing(client):
    client.info()
    return client.condition.bits == 0


def pair_up(a, b, pages, seed):
    """@a and @b offer @pages pages of the same contents: b uploads what
    it is asked to.  Returns the refs each was sent a MERGE for."""
    data = [content(seed + i) for i in range(pages)]
    a.candidates((i, digest(d)) for i, d in enumerate(data))
    a.info()
    b.candidates((i, digest(d)) for i, d in enumerate(data))
    requests = b.take(MSG_UPLOAD_REQ)
    b.upload(requests, [data[r.page] for r in requests])
    merged = []
    for client in (b, a):
        refs = client.take(MSG_MERGE)
        client.merged(refs)
        client.info()
        merged.append(refs)
    return merged


def test_a_domain_at_its_store_quota_holds_back_itself_alone(start_agent,
                                                             workdir):
    """Domain greedy offers three times its quota: it gets its quota of
    copies, its VMs are told why, the agent and domain honest are not,
    honest merges everything, and greedy resumes once its copies go."""
    agent = start_quota_agent(start_agent, workdir)
    a, b = VmClient(agent.sock, "greedy"), VmClient(agent.sock, "greedy")
    merged_b, merged_a = pair_up(a, b, 3 * QUOTA_PAGES, seed=1000)
    assert len(merged_a) == len(merged_b) == QUOTA_PAGES
    for client in (a, b):
        assert client.condition.bits == COND_DOMAIN_QUOTA
        assert "store quota" in client.condition.reason
        assert "'greedy'" in client.condition.reason
    st = status(agent)
    assert st["conditions"] == []
    assert sum(st["store_pages"]) == QUOTA_PAGES
    entries = {e["pid"]: e for e in harness.ctl_json(agent.sock, "vms")["vms"]}
    assert {e["limit"] for e in entries.values()} == {"domain-quota"}
    assert agent.log_text().count("holds its store quota") == 1

    # Another domain is not held back, and is told of nothing.
    c, d = VmClient(agent.sock, "honest"), VmClient(agent.sock, "honest")
    honest_d, honest_c = pair_up(c, d, 3 * QUOTA_PAGES, seed=50_000)
    assert len(honest_c) == len(honest_d) == 3 * QUOTA_PAGES
    assert c.condition.bits == d.condition.bits == 0

    # Greedy's guests write over a fifth of its merged pages: below 90%
    # of its quota, it is told that merging resumes.
    gone = QUOTA_PAGES * (100 - RESUME_PERCENT) // 100 + QUOTA_PAGES // 10
    pages = sorted(r.page for r in merged_a)[:gone]
    a.unmerged([r for r in merged_a if r.page in pages])
    b.unmerged([r for r in merged_b if r.page in pages])
    for client in (a, b):
        wait_until(lambda: told_nothing(client), 10,
                   "greedy's VMs to be told that merging resumes")
    assert "below its store quota" in agent.log_text()
    for client in (a, b, c, d):
        client.close()


def test_a_real_vm_shows_its_domains_quota(start_agent, workdir, qtest_vm):
    """Two QEMUs of domain greedy with 4 MiB alike are limited by
    domain-quota in query-nuksm, with an event, while two of domain honest
    merge all of theirs; once greedy's guests write other data over their
    merged pages, its VMs are active again."""
    agent = start_quota_agent(start_agent, workdir)
    greedy = [qtest_vm(f"greedy{i}", agent=agent.sock, domain="greedy")
              for i in range(2)]
    honest = [qtest_vm(f"honest{i}", agent=agent.sock, domain="honest")
              for i in range(2)]
    size, at = 4 * MIB, 64 * MIB
    for vms, seed in ((greedy, 1), (honest, 2)):
        data = random.Random(seed).randbytes(size)
        for vm in vms:
            vm.wait_state("active")
            q = Qtest(vm.qtest_path)
            write_big(q, at, data)
            q.close()
    for vm in greedy:
        vm.wait_limited("domain-quota", "store quota")
    for vm in honest:
        vm.wait_nuksm(lambda i: i["merged-pages"] - i["zero-pages"] >=
                      size // PAGE, "honest's pages to merge", timeout=60)
        assert vm.nuksm()["state"] == "active"
    assert status(agent)["conditions"] == []

    # Other data over greedy's pages: its copies go, and it resumes.
    for i, vm in enumerate(greedy):
        q = Qtest(vm.qtest_path)
        write_big(q, at, random.Random(100 + i).randbytes(size))
        q.close()
    for vm in greedy:
        vm.wait_state("active")
        event = vm.wait_event("NUKSM_MERGING_RESUMED", timeout=60)
        assert event["data"]["limit"] == "domain-quota"


def test_a_domain_flooding_the_unstable_table_evicts_only_its_own(
        start_agent, workdir):
    """Domain greedy offers more unique pages than the whole unstable table
    holds (1 Mi entries with --memory-max 64): it keeps at most its half
    and evicts only its own entries, so that every page domain honest
    offered before the flood still finds its partner after it."""
    agent = start_quota_agent(start_agent, workdir, "--memory-max", "64")
    table_max = 64 * MIB // 4 // 16
    honest = [content(70_000 + i) for i in range(1000)]
    first = VmClient(agent.sock, "honest")
    first.candidates((i, digest(d)) for i, d in enumerate(honest))
    first.info()

    greedy = VmClient(agent.sock, "greedy")
    flood, step = table_max * 3 // 2, 1 << 17
    for start in range(0, flood, step):
        greedy.candidates((p, 1 << 40 | p) for p in range(start, start + step))
        greedy.sync()     # reads its RETRYs, as QEMU does
    # Past its half, each new entry took the place of one of its own, or
    # was sent back.
    assert len(greedy.retried) >= flood - table_max // 2
    first.sync()
    assert first.retried == []    # 690 of 1000 were, with no quota

    second = VmClient(agent.sock, "honest")
    second.candidates((i, digest(d)) for i, d in enumerate(honest))
    requests = second.take(MSG_UPLOAD_REQ)
    assert len(requests) == len(honest)
    for client in (first, second, greedy):
        client.close()


def flood_without_reading(clients, requests=200_000):
    """Each of @clients sends GET_POLICY in turn and reads no reply, until
    the agent hangs up on all of them or @requests were sent each."""
    request = harness.pack(harness.MSG_GET_POLICY, 2)
    live = list(clients)
    for _ in range(requests):
        for client in list(live):
            try:
                client.send(request)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                live.remove(client)
        if not live:
            return


def test_a_domains_vms_not_reading_hold_at_most_its_queue_quota(
        start_agent, workdir):
    """Two VMs of domain greedy (queue-max=1) that never read their
    replies are disconnected once they hold 1 MiB of them together, while
    a VM of another domain is answered throughout."""
    config = workdir / "queues.conf"
    config.write_text("[nuksmd]\nvm-domains=allow\n\n"
                      "[domain greedy]\nqueue-max=1\n")
    agent = start_agent("--config", config)
    honest = VmClient(agent.sock, "honest")
    hogs = [VmClient(agent.sock, "greedy", timeout=0.5) for _ in range(2)]
    flood_without_reading(hogs)
    wait_until(lambda: agent.log_text().count(
        "merge domain's VMs do not read their messages") >= 1, 10,
        "a greedy VM to be disconnected at its domain's quota")
    assert "quota of 1 MiB, queue-max" in agent.log_text()
    honest.info()
    assert honest.condition.bits == 0
    for client in (honest, *hogs):
        client.close()


def test_a_quota_that_grows_with_the_store_ends_the_limit(start_agent,
                                                          small_tmpfs):
    """A domain at its store-max of 50% of a 1 MiB tmpfs: once the tmpfs
    is grown, its VMs are told that merging resumes, with no copy freed
    and nothing new offered."""
    agent = start_agent(args=["--socket", small_tmpfs.parent / "nuksmd.sock",
                              "--state-dir", small_tmpfs / "state"],
                        state_dir=False)
    a, b = VmClient(agent.sock), VmClient(agent.sock)
    merged_b, merged_a = pair_up(a, b, QUOTA_PAGES, seed=3000)
    assert 0 < len(merged_a) <= QUOTA_PAGES // 2
    for client in (a, b):
        assert client.condition.bits == COND_DOMAIN_QUOTA
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)],
                   check=True)
    for client in (a, b):
        wait_until(lambda: told_nothing(client), 15,
                   "the domain's limit to end as its quota grew")
    assert "below its store quota" in agent.log_text()
    for client in (a, b):
        client.close()
