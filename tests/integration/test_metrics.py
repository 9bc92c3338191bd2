# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksmd's Prometheus metrics (agent/server/metrics.h) the way Debian
hosts collect a daemon's: nuksmd writes nuksm.prom into node_exporter's
textfile directory; Debian's prometheus-node-exporter serves it, with
its ksmd collector beside it, and Debian's prometheus scrapes it.  The
figures must equal what nuksmctl status and query-nuksm say."""

import grp
import json
import os
import pty
import select
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import harness
from harness import NUKSMCTL, ctl_json, ctl_ok, merge_identical, wait_until

INTERVAL = 1                 # --metrics-interval of the tests' agents
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def need(tool, package):
    """The path of @tool, which Debian's @package gives (make deps)."""
    path = shutil.which(tool)
    if not path:
        pytest.fail(f"{tool} is missing: install Debian's {package} "
                    f"(make deps)", pytrace=False)
    return path


def unescape(value):
    return re.sub(r'\\(.)', lambda m: "\n" if m[1] == "n" else m[1], value)


def parse(text):
    """The samples of an exposition: {(name, ((label, value), ...)): value},
    labels sorted."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = tuple(sorted((k, unescape(v))
                              for k, v in LABEL.findall(match[2] or "")))
        samples[(match[1], labels)] = float(match[3])
    return samples


def value(samples, name, **labels):
    """The one sample of @name whose labels include @labels."""
    found = [v for (n, ls), v in samples.items()
             if n == name and set(labels.items()) <= set(ls)]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


def read_metrics(path):
    return parse(path.read_text()) if path.exists() else {}


@pytest.fixture
def metrics_dir(workdir):
    path = workdir / "textfile"
    path.mkdir()
    return path


@pytest.fixture
def reader_group():
    """The group that may read the metrics: Debian's prometheus."""
    try:
        return grp.getgrnam("prometheus")
    except KeyError:
        pytest.fail("no group prometheus: install Debian's "
                    "prometheus-node-exporter (make deps)", pytrace=False)


def test_metrics_file_says_what_nuksmctl_says(start_agent, qtest_vm,
                                              workdir, metrics_dir,
                                              reader_group):
    """The file is replaced atomically, readable by its owner and the
    prometheus group only, valid for promtool; its host, domain and VM
    figures equal nuksmctl's and query-nuksm's once merging settled; a
    name with quotes and a backslash is escaped; another user cannot read
    it; a VM's series go with it, and the file with the agent."""
    promtool = need("promtool", "prometheus")
    agent = start_agent("--metrics-dir", metrics_dir, "--metrics-interval",
                        str(INTERVAL), "--metrics-group", reader_group.gr_name,
                        "--fake-numa", "2")
    path = metrics_dir / "nuksm.prom"
    a = qtest_vm("web-a", agent=agent.sock)
    b = qtest_vm('odd "b\\', agent=agent.sock)
    pages = merge_identical([a, b], seed=34)

    def settled():
        status = ctl_json(agent.sock, "status")
        samples = read_metrics(path)
        return samples and value(samples, "nuksm_pages_sharing") == \
            status["pages_sharing"] >= pages and \
            value(samples, "nuksm_pages_shared") == status["pages_shared"] \
            and (samples, status)
    samples, status = wait_until(settled, 10 * INTERVAL,
                                 "the metrics to say what nuksmctl does")

    mode = path.stat()
    assert stat.S_IMODE(mode.st_mode) == 0o640, oct(mode.st_mode)
    assert mode.st_gid == reader_group.gr_gid
    # Another user, who could reach the directory, may not read it.
    workdir.chmod(0o755)
    metrics_dir.chmod(0o755)
    peek = subprocess.run(["runuser", "-u", "nobody", "--", "cat",
                           str(path)], capture_output=True, text=True,
                          timeout=30)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr, peek
    assert not list(metrics_dir.glob(".nuksm.prom.*")), "a temporary file"
    check = subprocess.run([promtool, "check", "metrics"],
                           input=path.read_text(), capture_output=True,
                           text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr

    store = status["store_pages"]
    for node, pages_on_node in enumerate(store):
        assert value(samples, "nuksm_node_store_pages",
                     node=str(node)) == pages_on_node
        assert value(samples, "nuksm_domain_store_pages",
                     merge_domain="default", node=str(node)) == pages_on_node
    # Hot pages read remotely are some of the merged pages remote.
    remote = sum(v for (n, ls), v in samples.items()
                 if n == "nuksm_vm_merged_pages" and ("copy", "remote") in ls)
    assert 0 <= sum(value(samples, "nuksm_node_remote_hot_pages",
                          node=str(node))
                    for node in range(len(store))) <= remote
    assert value(samples, "nuksm_domain_vms", merge_domain="default") == 2
    assert value(samples, "nuksm_domain_saved_bytes",
                 merge_domain="default") == status["pages_sharing"] * 4096
    assert value(samples, "nuksm_run") == 1
    assert value(samples, "nuksm_merge_across_nodes") == 1
    assert value(samples, "nuksm_scan_budget_ratio") == 0.2
    assert value(samples, "nuksm_agent_clients", role="vm") == 2
    assert value(samples, "nuksm_agent_condition",
                 condition="store-full") == 0
    assert value(samples, "nuksm_agent_info", policy="global") == 1
    assert 0 < value(samples, "nuksm_agent_heap_bytes") < \
        value(samples, "nuksm_agent_heap_max_bytes")
    started = value(samples, "nuksm_agent_start_time_seconds")
    assert time.time() - 600 < started <= time.time()

    vms = {vm["name"]: vm for vm in ctl_json(agent.sock, "vms")["vms"]}
    for vm in (a, b):
        entry = vms[vm.name]
        labels = {"vm": vm.name, "id": str(entry["id"]),
                  "merge_domain": "default", "libvirt_uuid": ""}

        def agrees():
            now = read_metrics(path)
            info = vm.nuksm()
            local = value(now, "nuksm_vm_merged_pages", copy="local",
                          **labels)
            remote = value(now, "nuksm_vm_merged_pages", copy="remote",
                           **labels)
            scanner = [value(now, f"nuksm_vm_{name}", **labels)
                       for name in ("eligible_pages", "zero_pages",
                                    "full_scans_total",
                                    "cow_breaks_total",
                                    "tracked_writes_total")]
            return (local, remote) == (info["merged-local"],
                                       info["merged-remote"]) and \
                scanner == [info["eligible-pages"], info["zero-pages"],
                            info["full-scans"], info["cow-breaks"],
                            info["tracked-writes"]] and now
        now = wait_until(agrees, 10 * INTERVAL,
                         f"{vm.name}'s merged pages to agree")
        assert value(now, "nuksm_vm_limited", reason="userfaultfd",
                     **labels) == 0
        assert value(now, "nuksm_vm_priority", **labels) == 100
        assert [value(now, "nuksm_vm_state", state=state, **labels)
                for state in ("active", "paused", "disabled", "limited")] \
            == [1, 0, 0, 0]
        budget = vm.nuksm()["budget"]
        assert value(now, "nuksm_vm_scanner_cpu_max_ratio", **labels) == \
            budget["max-cpu"] / 100
        assert value(now, "nuksm_vm_rest_seconds", **labels) == \
            budget["rest-ms"] / 1000
        # Its part of the host's scan budget, as the agent last told it.
        assert 0 < value(now, "nuksm_vm_scan_share_ratio", **labels) <= 0.2
        assert 0 < value(now, "nuksm_vm_scanner_cpu_seconds_total",
                         **labels) < 600
        assert value(now, "nuksm_vm_pages_scanned_total", **labels) > 0

    # A VM's series go with it (SIGKILL: teardown has nothing to quit).
    b.kill()
    wait_until(lambda: not [k for k in read_metrics(path)
                            if ("vm", b.name) in k[1]], 10 * INTERVAL,
               "the stopped VM's series to go")
    assert value(read_metrics(path), "nuksm_agent_clients", role="vm") == 1
    agent.stop()
    assert not path.exists(), "the stopped agent left its metrics"


def test_alert_rules_pass_promtool():
    promtool = need("promtool", "prometheus")
    rules = Path(__file__).resolve().parents[2] / "monitoring/nuksm.rules.yml"
    check = subprocess.run([promtool, "check", "rules", str(rules)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 6 rules found" in check.stdout, check.stdout


def test_bad_metrics_settings_are_refused_by_name(start_agent, workdir,
                                                  nuksmd_bin):
    for option, bad, allowed in (("--metrics-interval", "0", "1..3600"),
                                 ("--metrics-group", "no-such-group",
                                  "prometheus"),
                                 ("--metrics-dir", "", "must not be empty")):
        result = subprocess.run([str(nuksmd_bin), option, bad],
                                capture_output=True, text=True, timeout=10)
        assert result.returncode == 2, result
        assert option in result.stderr and allowed in result.stderr, \
            result.stderr


MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
RULE_NAMES = ["NuksmMergingLimited", "NuksmStoreFull", "NuksmAgentMemory",
              "NuksmAgentRestarted", "NuksmRemoteReads", "NuksmMetricsStale"]


def dashboard_exprs():
    """The PromQL of every panel of the Grafana dashboard, every host."""
    dashboard = json.loads((MONITORING / "nuksm-grafana.json").read_text())
    return [target["expr"].replace("$instance", ".*")
            for panel in dashboard["panels"] for target in panel["targets"]]


def rule_exprs():
    """The alert rules' expressions without their threshold."""
    text = (MONITORING / "nuksm.rules.yml").read_text()
    exprs = re.findall(r"expr: (?:>\n)?((?:.+\n)+?)\s+(?:for|labels):", text)
    assert len(exprs) == len(RULE_NAMES), exprs
    return [re.split(r" (?:==|>) [\d.]+\s*$", " ".join(e.split()))[0]
            for e in exprs]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url):
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


def promql(port, query):
    """The instant vector @query gives, as {labels: value}."""
    reply = http_json(f"http://127.0.0.1:{port}/api/v1/query?" +
                      urllib.parse.urlencode({"query": query}))
    assert reply["status"] == "success", reply
    return {tuple(sorted((k, v) for k, v in r["metric"].items()
                         if k not in ("instance", "job"))):
            float(r["value"][1]) for r in reply["data"]["result"]}


def test_prometheus_scrapes_the_metrics(start_agent, qtest_vm, metrics_dir,
                                        workdir):
    """Debian's node_exporter serves the file (its textfile collector)
    beside its ksmd collector, and Debian's prometheus scrapes it every
    second: PromQL gives nuksmctl's figures, within a scrape."""
    exporter = need("prometheus-node-exporter", "prometheus-node-exporter")
    prometheus = need("prometheus", "prometheus")
    agent = start_agent("--metrics-dir", metrics_dir, "--metrics-interval",
                        str(INTERVAL))
    vms = [qtest_vm(f"scraped{i}", agent=agent.sock) for i in range(2)]
    merge_identical(vms, seed=35)

    exporter_port, prometheus_port = free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(
            [exporter, f"--web.listen-address=127.0.0.1:{exporter_port}",
             "--collector.disable-defaults", "--collector.textfile",
             f"--collector.textfile.directory={metrics_dir}",
             "--collector.ksmd"],
            stdout=subprocess.DEVNULL, stderr=open(workdir / "exporter.log",
                                                   "w")))
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {MONITORING / 'nuksm.rules.yml'}\n"
            "scrape_configs:\n  - job_name: node\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{exporter_port}']\n")
        data = Path(tempfile.mkdtemp(prefix="nuksm-prom-", dir=workdir))
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={config}",
             f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / "prometheus.log", "w")))

        def scraped():
            status = ctl_json(agent.sock, "status")
            try:
                got = promql(prometheus_port, "nuksm_pages_sharing")
            except OSError:
                return False        # prometheus is not listening yet
            return got and list(got.values()) == [status["pages_sharing"]] \
                and status
        try:
            wait_until(scraped, 60, "prometheus to scrape nuksm's figures")
        except AssertionError as e:
            raise AssertionError(
                f"{e}; node_exporter: {(workdir / 'exporter.log').read_text()}"
                f"\nprometheus: {(workdir / 'prometheus.log').read_text()}")
        # Both sides of the comparison a KSM dashboard ports.
        ksm = promql(prometheus_port, "node_ksmd_pages_sharing")
        assert len(ksm) == 1, ksm
        per_vm = promql(prometheus_port,
                        'sum by (vm) (nuksm_vm_merged_pages)')
        merged = {vm["name"]: vm["merged_pages"]
                  for vm in ctl_json(agent.sock, "vms")["vms"]}
        assert per_vm == {(("vm", name),): pages
                          for name, pages in merged.items()}, per_vm

        # Every expression of the dashboard, and of the alert rules (their
        # left side: a rule that does not fire returns nothing), gives data.
        for expr in dashboard_exprs() + rule_exprs():
            wait_until(lambda: promql(prometheus_port, expr), 30,
                       f"data for {expr}")
        rules = http_json(f"http://127.0.0.1:{prometheus_port}/api/v1/rules")
        assert [r["name"] for g in rules["data"]["groups"]
                for r in g["rules"]] == [r for r in RULE_NAMES], rules
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def test_top_shows_the_same_figures_live(start_agent, qtest_vm):
    """nuksmctl top: --once prints a frame of the host, each merge domain
    and each VM with the figures nuksmctl vms has; on a terminal it
    redraws in place, a key sorts the VMs anew, q quits."""
    agent = start_agent()
    vms = [qtest_vm(name, agent=agent.sock) for name in ("top-b", "top-a")]
    pages = merge_identical(vms, seed=36)
    listed = {vm["name"]: vm for vm in ctl_json(agent.sock, "vms")["vms"]}

    frame = ctl_ok(agent.sock, "top", "--once", "--interval", "1",
                   "--sort", "name")
    assert "conditions: none; every 1 s, VMs by name" in frame, frame
    host = re.search(r"host: ([\d.]+) MiB saved \((\d+) pages\)", frame)
    assert host and int(host[2]) == ctl_json(agent.sock,
                                             "status")["pages_sharing"]
    lines = frame.splitlines()
    vm_header = next(i for i, line in enumerate(lines)
                     if line.startswith("ID "))
    rows = [line.split() for line in lines[vm_header + 1:] if line]
    assert [row[1] for row in rows] == ["top-a", "top-b"], frame
    for row in rows:
        assert int(row[0]) == listed[row[1]]["id"]
        assert float(row[3]) == round(listed[row[1]]["merged_pages"] *
                                      4096 / 2 ** 20, 1) >= pages / 256
    domain_row = lines[lines.index(next(line for line in lines
                                        if line.startswith("DOMAIN"))) + 1]
    assert domain_row.split()[:2] == ["default", "2"], frame

    bad = subprocess.run([str(NUKSMCTL), "--socket", str(agent.sock), "top",
                          "--sort", "size"], capture_output=True, text=True,
                         timeout=10)
    assert bad.returncode == 2 and "saved, remote, cpu, name" in bad.stderr

    # On a terminal: in place, sorted anew by a key, ended by q.
    leader, follower = pty.openpty()
    top = subprocess.Popen([str(NUKSMCTL), "--socket", str(agent.sock),
                            "top", "--interval", "1"], stdin=follower,
                           stdout=follower, stderr=follower)
    os.close(follower)
    seen = b""

    def screen_shows(text):
        nonlocal seen
        while select.select([leader], [], [], 0.2)[0]:
            seen += os.read(leader, 65536)
        return text in seen
    try:
        wait_until(lambda: screen_shows(b"VMs by saved") and
                   seen.count(b"\033[H\033[2J") >= 2, 15,
                   "two frames drawn in place")
        os.write(leader, b"n")
        wait_until(lambda: screen_shows(b"VMs by name"), 10,
                   "the VMs sorted by name")
        os.write(leader, b"q")
        assert top.wait(timeout=10) == 0
    finally:
        if top.poll() is None:
            top.kill()
        os.close(leader)


def test_a_vms_claims_never_wrap_host_totals(start_agent, metrics_dir):
    """A rogue VM's VM_STATS claims 2^64 - 2 full scans and as many
    volatile pages: the host's totals saturate, never falling below the
    honest VM's own (before, full scans read 2 where the honest VM alone
    had 4: a counter reset, and volatile pages 1.8e19 either way).  Its
    name's control characters (CR, ESC, BEL) reach the file as '?'."""
    agent = start_agent("--metrics-dir", str(metrics_dir),
                        "--metrics-interval", str(INTERVAL))
    honest = harness.VmClient(agent.sock, name="honest")
    rogue = harness.VmClient(agent.sock, name="rogue\r\x1b[2J\x07")
    try:
        def stats(full_scans, volatile):
            fields = [0] * len(harness.proto.VM_STATS.format[1:])
            fields[2], fields[5] = full_scans, volatile
            return harness.proto.VM_STATS.pack(*fields)

        honest.send(harness.pack(harness.proto.MSG_VM_STATS, 2,
                                 stats(4, 10)))
        rogue.send(harness.pack(harness.proto.MSG_VM_STATS, 2,
                                stats(2**64 - 2, 2**64 - 2)))
        honest.sync()
        rogue.sync()
        path = metrics_dir / "nuksm.prom"

        def written():
            samples = read_metrics(path)
            return (("nuksm_vm_full_scans_total", tuple(sorted(
                {"vm": "rogue??[2J?", "id": str(rogue.client_id),
                 "libvirt_uuid": "", "merge_domain": "default"}.items())))
                in samples and samples)
        samples = wait_until(written, 10, "the rogue's claims in the file")
        assert value(samples, "nuksm_vm_full_scans_total", vm="honest") == 4
        assert value(samples, "nuksm_full_scans_total") >= 2**64 - 2
        assert value(samples, "nuksm_pages_volatile") >= 2**64 - 2
        text = path.read_text()
        assert not any(c in text for c in "\r\x1b\x07"), \
            "control characters in nuksm.prom"
    finally:
        honest.close()
        rogue.close()
