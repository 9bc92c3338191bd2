# SPDX-License-Identifier: GPL-2.0-or-later
"""-object nuksm in qtest VMs, observed and steered over QMP."""

import os
import pwd
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from qemu.qmp import ExecuteError

import harness
from harness import (PAGE_SIZE, POLICY_NAMES, Qtest, ctl_json, ctl_ok,
                     wait_until)

VM_PAGES = 128 * 1024 * 1024 // PAGE_SIZE


def qmp_error(vm, command, **args):
    """The error text of a QMP command that must fail."""
    with pytest.raises(ExecuteError) as exc:
        vm.cmd(command, **args)
    return str(exc.value)


def test_disconnected_without_agent(workdir, qtest_vm):
    sock = workdir / "nobody.sock"
    vm = qtest_vm(agent=sock)
    info = vm.nuksm()
    assert info["state"] == "disconnected"
    assert info["agent"] == str(sock)
    assert info["agent-error"] == \
        f"cannot connect to {sock}: No such file or directory"
    assert "policy" not in info
    assert info["eligible-pages"] == VM_PAGES
    assert (info["domain"], info["priority"]) == ("default", 100)
    # What the agent decides is there only while connected.
    assert not {"merge-domain", "domain-source", "priority-limit",
                "colocation"} & info.keys()

    assert qmp_error(vm, "query-nuksm-agent") == \
        "no nuksm object is connected to its agent"
    assert qmp_error(vm, "query-nuksm-agent", id="dedup0").startswith(
        f"nuksm 'dedup0' is not connected to the agent at {sock}: ")
    assert qmp_error(vm, "nuksm-set-policy", policy="fair") == \
        "no nuksm object is connected to its agent"

    time.sleep(1.5)  # longer than the pause between passes
    assert vm.nuksm()["full-scans"] == 0, "scanned while disconnected"


def test_agent_start_connects_vm(workdir, start_agent, qtest_vm):
    vm = qtest_vm(agent=workdir / "nuksmd.sock")
    assert vm.nuksm()["state"] == "disconnected"

    agent = start_agent()
    event = vm.wait_event("NUKSM_AGENT_CONNECTED")
    assert event["data"] == {"id": "dedup0", "agent": str(agent.sock)}
    info = vm.nuksm()
    assert info["state"] == "active"
    assert info["policy"] == "global"
    assert "agent-error" not in info
    assert vm.cmd("query-nuksm-agent")["vms"] == 1
    assert [v["pid"] for v in ctl_json(agent.sock, "vms")["vms"]] == [vm.pid]


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGKILL unread"])
def test_agent_loss_and_reconnect(start_agent, qtest_vm, how):
    """However the agent goes, the VM says the agent closed the
    connection: also when it dies with the VM's messages unread, which
    the VM's socket reports as ECONNRESET, not end of file."""
    agent = start_agent()
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")

    if how == "SIGKILL unread":
        os.kill(agent.pid, signal.SIGSTOP)
        vm.cmd("qom-set", path="/objects/dedup0", property="priority",
               value=7)         # SET_PRIORITY, which the agent never reads
        vm.nuksm()              # a main loop turn later: it was sent
    if how.startswith("SIGKILL"):
        agent.kill()
        assert agent.sock.exists(), "a killed agent leaves its socket"
    else:
        agent.stop()
    event = vm.wait_event("NUKSM_AGENT_DISCONNECTED")
    assert event["data"] == {"id": "dedup0", "agent": str(agent.sock),
                             "reason": "agent closed the connection"}
    info = vm.nuksm()
    assert info["state"] == "disconnected"
    assert info["agent-error"].startswith("cannot connect to") or \
        info["agent-error"] == "agent closed the connection"
    assert "disconnected" in vm.hmp("info nuksm")

    agent = start_agent("--policy", "local")
    event = vm.wait_event("NUKSM_AGENT_CONNECTED")
    assert event["data"]["agent"] == str(agent.sock)
    info = vm.wait_state("active")
    assert info["policy"] == "local"
    assert "agent-error" not in info
    assert ctl_json(agent.sock, "status")["vms"] == 1


def test_stalled_agent_stalls_no_vm(agent, qtest_vm):
    """Requests to a stopped agent time out; the VM's main loop runs on."""
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")
    qtest = Qtest(vm.qtest_path)
    latencies = []
    done = threading.Event()

    def probe_main_loop():
        while not done.is_set():
            start = time.monotonic()
            qtest.command("readb 0x100000")
            latencies.append(time.monotonic() - start)
            time.sleep(0.05)

    os.kill(agent.pid, signal.SIGSTOP)
    try:
        ctl = subprocess.Popen([str(harness.NUKSMCTL), "--socket",
                                str(agent.sock), "status"],
                               stderr=subprocess.PIPE, text=True)
        prober = threading.Thread(target=probe_main_loop, daemon=True)
        prober.start()
        start = time.monotonic()
        error = qmp_error(vm, "query-nuksm-agent")
        elapsed = time.monotonic() - start
        ctl_err = ctl.communicate(timeout=30)[1]
    finally:
        done.set()
        os.kill(agent.pid, signal.SIGCONT)
    prober.join()
    qtest.close()

    assert error == "nuksm: the agent did not answer within 1000 ms"
    assert 0.9 < elapsed < 5
    assert len(latencies) > 20 and max(latencies) < 1
    assert ctl.returncode == 1
    assert "no reply from nuksmd within 5 s" in ctl_err
    assert vm.nuksm()["state"] == "active"
    assert vm.cmd("query-nuksm-agent")["vms"] == 1


def test_enabled_property(agent, qtest_vm):
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")

    vm.cmd("qom-set", path="/objects/dedup0", property="enabled", value=False)
    assert vm.cmd("qom-get", path="/objects/dedup0",
                  property="enabled") is False
    info = vm.nuksm()
    assert info["state"] == "disabled"
    assert qmp_error(vm, "nuksm-scan", id="dedup0") == \
        "nuksm 'dedup0' is disabled (property 'enabled' is off)"
    scans = info["full-scans"]
    time.sleep(1.5)  # longer than the pause between passes
    assert vm.nuksm()["full-scans"] == scans, "scanned while disabled"

    vm.cmd("qom-set", path="/objects/dedup0", property="enabled", value=True)
    assert vm.nuksm()["state"] == "active"
    vm.wait_nuksm(lambda i: i["full-scans"] > scans, "scanning to resume")


def test_disabled_at_startup(agent, qtest_vm):
    vm = qtest_vm(agent=agent.sock, enabled="off")
    assert vm.nuksm()["state"] == "disabled"
    vm.cmd("qom-set", path="/objects/dedup0", property="enabled", value=True)
    vm.wait_state("active")


def test_info_nuksm(agent, qtest_vm):
    vm = qtest_vm(agent=agent.sock, domain="blue", priority=42)
    vm.wait_state("active")
    lines = vm.hmp("info nuksm").splitlines()
    assert lines[0] == (f"dedup0: active, agent {agent.sock}, domain blue, "
                        f"priority 42, policy global")
    # The agent (by default) puts every VM in one domain, whatever it asks.
    assert lines[1] == "  merge domain default (shared), priority in " \
                       "force 42 (limit 1000)"
    assert lines[2] == "  governor medium: max-cpu 10% (governor), " \
                       "scan-rate 0 (governor), rests from 1000 ms"
    assert lines[3].startswith(f"  eligible {VM_PAGES} pages, scanned ")
    assert lines[4] == "  merged 0 (zero 0, local 0, remote 0), " \
                       "cow-breaks 0"
    assert re.fullmatch(r"  guest node 0: home node 0 \((running|pinned)\)",
                        lines[5]), lines[5]
    assert re.fullmatch(r"  hotness dirty-log, window 1000 ms, \d+ samples, "
                        r"\d+ pages written in the last", lines[6]), lines[6]
    assert re.fullmatch(r"  reads minor-faults: 256 samples a window, \d+ "
                        r"windows, 0 reads caught \(local 0, remote 0\), "
                        r"0 regions read", lines[7]), lines[7]
    assert lines[8] == "  io-hints on: 0 pages hinted, 0 dropped, " \
                       "0 served, 0 merged"
    assert re.fullmatch(r"  hashing adaptive, now \d+ bytes: \d+ pages "
                        r"sampled, \d+ hashed in full, \d+ misses",
                        lines[9]), lines[9]
    assert re.fullmatch(r"  regions \(distilling off\): 0 0 0 \d+ on levels "
                        r"bottom to top, 0 promotions, 0 demotions",
                        lines[10]), lines[10]
    limit = int(open("/proc/sys/vm/max_map_count").read())
    budget = limit - max(4096, limit // 10)
    assert re.fullmatch(rf"  mappings \d+, budget {budget} of "
                        rf"vm.max_map_count {limit}", lines[11]), lines[11]
    assert "  excluded pc.bios (256 KiB): rom" in lines


def test_hot_window_property(agent, qtest_vm):
    """hot-window: 0 turns sampling off; out-of-range values are refused
    naming the property and the range; sampling runs while active."""
    vm = qtest_vm(agent=agent.sock, hot_window=20)
    vm.wait_state("active")
    wait_until(lambda: vm.nuksm()["hotness"]["samples"] >= 3, 10,
               "three hotness samples")
    hot = vm.nuksm()["hotness"]
    assert hot["source"] == "dirty-log" and hot["window-ms"] == 20
    assert "error" not in hot
    # Reads are sampled in the same windows, by minor faults.
    assert hot["reads"]["source"] == "minor-faults", hot["reads"]
    wait_until(lambda: vm.nuksm()["hotness"]["reads"]["windows"] >= 3, 10,
               "three read sampling windows")
    for bad in (5, 600001):
        assert qmp_error(vm, "qom-set", path="/objects/dedup0",
                         property="hot-window", value=bad) == (
            f"nuksm: property 'hot-window' must be 0 (off) or between 10 "
            f"and 600000 ms, got {bad}")
    vm.cmd("qom-set", path="/objects/dedup0", property="hot-window", value=0)
    assert vm.nuksm()["hotness"]["source"] == "off"
    reads = vm.nuksm()["hotness"]["reads"]
    assert reads["source"] == "off", reads
    assert reads["note"] == "property hot-window is 0"


def test_read_samples_property(agent, qtest_vm):
    """read-samples: 0 turns read sampling off and says so; out-of-range
    values are refused naming the property and the range."""
    vm = qtest_vm(agent=agent.sock, read_samples=64)
    vm.wait_state("active")
    reads = vm.nuksm()["hotness"]["reads"]
    assert reads["source"] == "minor-faults" and reads["samples"] == 64
    assert "note" not in reads
    assert qmp_error(vm, "qom-set", path="/objects/dedup0",
                     property="read-samples", value=65537) == (
        "nuksm: property 'read-samples' must be between 0 and 65536, "
        "got 65537")
    vm.cmd("qom-set", path="/objects/dedup0", property="read-samples",
           value=0)
    reads = vm.nuksm()["hotness"]["reads"]
    assert reads["source"] == "off" and reads["samples"] == 0
    assert reads["note"] == "property read-samples is 0"


def test_info_nuksm_without_object(workdir, start_vm):
    vm = start_vm("bare", harness.qtest_args(workdir / "bare.qtest"))
    assert vm.hmp("info nuksm") == "No nuksm object\r\n"
    assert vm.cmd("query-nuksm") == []
    assert qmp_error(vm, "query-nuksm-agent") == "there is no nuksm object"


def test_set_policy_reaches_every_vm(start_agent, qtest_vm):
    agent = start_agent("--vm-set-policy")
    vm0 = qtest_vm("vm0", agent=agent.sock)
    vm1 = qtest_vm("vm1", agent=agent.sock)
    vm0.wait_state("active")
    vm1.wait_state("active")

    assert vm0.cmd("nuksm-set-policy", policy="fair") == {}
    assert vm0.nuksm()["policy"] == "fair"
    vm1.wait_nuksm(lambda i: i["policy"] == "fair", "policy fair")
    assert ctl_ok(agent.sock, "policy") == "fair\n"
    assert vm1.cmd("query-nuksm-agent")["policy"] == "fair"

    assert qmp_error(vm1, "nuksm-set-policy", policy="best") == \
        f"Parameter 'policy' does not accept value 'best' " \
        f"(allowed: {POLICY_NAMES})"
    assert qmp_error(vm1, "nuksm-set-policy", policy="local", id="nope") == \
        "no nuksm object with id 'nope'"
    assert ctl_ok(agent.sock, "policy") == "fair\n"


def test_set_policy_denied_by_default(agent, qtest_vm):
    """The policy is host-wide: without --vm-set-policy the agent takes
    it from no VM, and the error says what would allow it."""
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")
    error = qmp_error(vm, "nuksm-set-policy", policy="fair")
    assert error.startswith("nuksm 'dedup0': the agent refused: "), error
    assert "vm-set-policy" in error
    assert vm.cmd("query-nuksm-agent")["policy"] == "global"
    assert ctl_ok(agent.sock, "policy") == "global\n"
    info = vm.nuksm()
    assert (info["state"], info["policy"]) == ("active", "global")


def test_nuksm_scan_starts_a_pass(agent, qtest_vm):
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")
    vm.wait_nuksm(lambda i: i["full-scans"] >= 1, "the first pass")
    # Passes otherwise start a second apart: five kicks must beat that.
    start = time.monotonic()
    for _ in range(5):
        scans = vm.nuksm()["full-scans"]
        vm.cmd("nuksm-scan", id="dedup0")
        vm.wait_nuksm(lambda i: i["full-scans"] > scans, "the kicked pass")
    assert time.monotonic() - start < 3
    assert qmp_error(vm, "nuksm-scan", id="nope") == \
        "no nuksm object with id 'nope'"
    assert vm.cmd("nuksm-scan") == {}


def two_full_passes(vm):
    """query-nuksm after two passes that both began after this call."""
    passes = vm.nuksm()["full-scans"]
    vm.cmd("nuksm-scan")
    return vm.wait_nuksm(lambda i: i["full-scans"] >= passes + 2,
                         "two full passes")


def test_scanner_hashes_written_pages(agent, qtest_vm):
    """Pages the guest wrote are hashed; rewriting them makes them volatile.

    A qtest VM's RAM is untouched, so only what we write is resident."""
    vm = qtest_vm(agent=agent.sock)
    vm.wait_state("active")
    assert two_full_passes(vm)["pages-scanned"] == 0
    qtest = Qtest(vm.qtest_path)
    pages = 256
    base = 16 * 1024 * 1024
    try:
        qtest.memset(base, pages * PAGE_SIZE, 0x5A)
        info = two_full_passes(vm)
        assert info["pages-scanned"] >= 2 * pages
        assert info["pages-volatile"] == 0

        qtest.memset(base, pages * PAGE_SIZE, 0xA5)
        assert two_full_passes(vm)["pages-volatile"] == pages
    finally:
        qtest.close()


def test_priority_and_domain_in_agent(start_agent, qtest_vm):
    agent = start_agent("--vm-domains=allow")
    vm = qtest_vm(agent=agent.sock, domain="tenant-7.a", priority=1000)
    vm.wait_state("active")
    [entry] = ctl_json(agent.sock, "vms")["vms"]
    assert (entry["domain"], entry["priority"]) == ("tenant-7.a", 1000)
    info = vm.nuksm()
    assert (info["merge-domain"], info["domain-source"]) == \
        ("tenant-7.a", "request")
    assert qmp_error(vm, "qom-set", path="/objects/dedup0",
                     property="priority", value=1001) == \
        "nuksm: property 'priority' must be between 1 and 1000, got 1001"
    assert qmp_error(vm, "qom-set", path="/objects/dedup0",
                     property="domain", value="other") == \
        "nuksm 'dedup0': property 'domain' cannot be changed after the " \
        "object is created"


@pytest.mark.parametrize("agent_args,merge_domain,source", [
    ((), "default", "shared"),
    (("--vm-domains=allow",), "blue", "request"),
    (("--isolation=vm",), "vm:", "private"),
    (("--isolation=vm", "--vm-domains=allow"), "blue", "request"),
])
def test_merge_domain_in_query_nuksm(start_agent, qtest_vm, agent_args,
                                     merge_domain, source):
    """The agent decides the merge domain: query-nuksm shows its decision
    beside the request (the domain property), while connected."""
    agent = start_agent(*agent_args)
    vm = qtest_vm(agent=agent.sock, domain="blue", priority=42)
    info = vm.wait_state("active")
    if merge_domain.endswith(":"):  # the agent names private domains
        assert info["merge-domain"].startswith(merge_domain)
        assert len(info["merge-domain"]) > len(merge_domain)
    else:
        assert info["merge-domain"] == merge_domain
    assert info["domain-source"] == source
    assert info["priority-limit"] == 1000
    assert (info["domain"], info["priority"]) == ("blue", 42)
    [entry] = ctl_json(agent.sock, "vms")["vms"]
    assert entry["domain"] == info["merge-domain"]
    assert vm.cmd("query-nuksm-agent")["scope"] == "domain"

    agent.stop()
    vm.wait_event("NUKSM_AGENT_DISCONNECTED")
    assert not {"merge-domain", "domain-source", "priority-limit",
                "colocation"} & vm.nuksm().keys()


def test_private_domains_apart(start_agent, qtest_vm):
    """With --isolation=vm, two VMs asking for nothing are each in a
    domain of their own, and each sees its own domain's figures."""
    agent = start_agent("--isolation=vm")
    vms = [qtest_vm(name, agent=agent.sock) for name in ("vm0", "vm1")]
    domains = [vm.wait_state("active")["merge-domain"] for vm in vms]
    assert domains[0] != domains[1]
    for vm in vms:
        assert vm.nuksm()["domain-source"] == "private"
        reply = vm.cmd("query-nuksm-agent")
        assert (reply["scope"], reply["vms"]) == ("domain", 1)


def test_domain_request_refused(start_agent, qtest_vm):
    """With --vm-domains=refuse, a VM asking for a domain other than the
    one it gets is refused, and told which one that is."""
    agent = start_agent("--vm-domains=refuse")
    vm = qtest_vm(agent=agent.sock, domain="blue")
    info = vm.wait_nuksm(lambda i: i.get("agent-error", "").startswith(
        "agent refused the handshake: "), "the handshake refused")
    assert info["state"] == "disconnected"
    assert "'default'" in info["agent-error"]
    assert "merge-domain" not in info
    # Asking for nothing is asking for what the agent assigns.
    other = qtest_vm("vm1", agent=agent.sock)
    assert other.wait_state("active")["merge-domain"] == "default"


def test_priority_limit_of_a_rule(workdir, start_agent, qtest_vm):
    """A [domain NAME] rule of nuksmd.conf puts the VM's process in its
    domain and caps its priority: query-nuksm and HMP show both."""
    user = pwd.getpwuid(os.getuid()).pw_name
    config = workdir / "rules.conf"
    config.write_text(f"[nuksmd]\n\n[domain capped]\nusers={user}\n"
                      f"max-priority=10\n")
    agent = start_agent("--config", config)
    vm = qtest_vm(agent=agent.sock, priority=42)
    info = vm.wait_state("active")
    assert (info["merge-domain"], info["domain-source"]) == ("capped", "rule")
    assert (info["priority"], info["priority-limit"]) == (42, 10)
    assert vm.hmp("info nuksm").splitlines()[1] == \
        "  merge domain capped (rule), priority in force 10 (limit 10)"
    vm.cmd("qom-set", path="/objects/dedup0", property="priority", value=5)
    assert vm.nuksm()["priority"] == 5
    assert vm.hmp("info nuksm").splitlines()[1] == \
        "  merge domain capped (rule), priority in force 5 (limit 10)"


@pytest.mark.parametrize("props,message", [
    ("priority=0", "property 'priority' must be between 1 and 1000, got 0"),
    ("max-cpu=101", "property 'max-cpu' must be between 0.01 and 100 "
     "(percent of one core, fractions allowed), got 101"),
    ("domain=a/b", "property 'domain' must be 1 to 63 characters"),
    ("agent=/" + "x" * 120, "property 'agent' must be a unix socket path"),
    ("memdev=nope", "property 'memdev': no memory backend with id 'nope'"),
    ("huge-split=0", "property 'huge-split' must be from 1 (split a huge "
     "page for any duplicate) to 512 (only for a whole duplicate), got 0"),
])
def test_bad_object_properties(workdir, qemu_bin, props, message):
    result = harness.run_qemu(*harness.qtest_args(
        workdir / "q.qtest", f"nuksm,id=dedup0,{props}"))
    assert result.returncode == 1
    assert message in result.stderr


def test_exclusions(workdir, agent, qtest_vm):
    """Shared and file-backed RAM are excluded; memdev selects a backend."""
    extra = [
        "-object", "memory-backend-ram,id=main,size=128M",
        "-machine", "memory-backend=main",
        "-object", "memory-backend-memfd,id=shm,size=4M,share=on",
        "-object", f"memory-backend-file,id=file,size=4M,share=off,"
                   f"mem-path={workdir / 'file.ram'}",
        "-object", "memory-backend-ram,id=spare,size=8M",
    ]
    all_ram = qtest_vm("all", extra=extra, agent=agent.sock)
    reasons = {e["memdev"]: (e["reason"], e["size"])
               for e in all_ram.nuksm()["excluded"]}
    assert reasons["shm"] == ("shared", 4 << 20)
    assert reasons["file"] == ("file-backed", 4 << 20)
    assert "main" not in reasons and "spare" not in reasons
    assert all_ram.nuksm()["eligible-pages"] == (136 << 20) // PAGE_SIZE

    spare = qtest_vm("spare", extra=extra, agent=agent.sock, memdev="spare")
    reasons = {e["memdev"]: e["reason"] for e in spare.nuksm()["excluded"]}
    assert reasons["main"] == "not-selected"
    assert spare.nuksm()["eligible-pages"] == (8 << 20) // PAGE_SIZE


@pytest.fixture
def huge_pages():
    """Reserve 8 huge pages (16 MiB) for the test, then restore the
    host's setting.  Skips, saying why, where the host cannot."""
    knob = Path("/proc/sys/vm/nr_hugepages")
    try:
        saved = int(knob.read_text())
        knob.write_text(str(saved + 8))
    except OSError as e:
        pytest.skip(f"HOST CANNOT RESERVE HUGE PAGES ({e}): the hugetlbfs "
                    f"exclusion is not tested here")
    try:
        free = int(next(line.split()[1] for line in
                        open("/proc/meminfo") if
                        line.startswith("HugePages_Free:")))
        if free < 8:
            pytest.skip(f"HOST HAS ONLY {free} FREE HUGE PAGES: the "
                        f"hugetlbfs exclusion is not tested here")
        yield
    finally:
        knob.write_text(str(saved))


def test_hugetlbfs_is_excluded(agent, qtest_vm, huge_pages):
    vm = qtest_vm("huge", agent=agent.sock, extra=[
        "-object", "memory-backend-memfd,id=huge,size=16M,hugetlb=on,"
                   "hugetlbsize=2M,share=off",
        "-machine", "memory-backend=huge", "-m", "16M"])
    reasons = {e["memdev"]: (e["reason"], e["size"])
               for e in vm.nuksm()["excluded"]}
    assert reasons["huge"] == ("huge-pages", 16 << 20)
    assert vm.nuksm()["eligible-pages"] == 0


def acpi_tables_block(vm):
    """The ACPI tables' RAM block of @vm: its used bytes, its room, and
    the KiB of it resident and in huge pages."""
    for line in vm.hmp("info ramblock").splitlines():
        fields = line.split()
        if fields and fields[0].endswith("etc/acpi/tables"):
            # Block Name, PSize (two words), Offset, Used, Total, HVA, RO
            used, total, hva = (int(x, 16) for x in fields[4:7])
            break
    else:
        raise AssertionError("no ACPI tables block in 'info ramblock'")
    smaps = {}
    with open(f"/proc/{vm.pid}/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= hva < end
            elif inside:
                smaps[head.rstrip(":")] = line.split()[1]
    return used, total, int(smaps["Rss"]), int(smaps["AnonHugePages"])


def test_firmware_tables_keep_small_pages(workdir, qtest_vm):
    """QEMU advises all RAM to use huge pages and fills a ROM's whole
    room at each reset: the ACPI tables' 2 MiB block would be resident
    whole, as a huge page, which KSM breaks up for its zero pages and
    nuksm never merges.  With a nuksm object the block keeps small pages
    and only its used part resident, after a reset too."""
    vm = qtest_vm(agent=workdir / "nobody.sock")
    used, total, _, _ = acpi_tables_block(vm)
    assert used < total

    def trimmed():
        _, _, rss_kib, huge_kib = acpi_tables_block(vm)
        return rss_kib * 1024 <= used and huge_kib == 0

    wait_until(trimmed, 10, "the ACPI tables' room beyond their size to "
               "be given back")
    vm.cmd("system_reset")
    vm.wait_event("RESET")
    wait_until(trimmed, 10, "the ACPI tables' room to be given back after "
               "a reset")
