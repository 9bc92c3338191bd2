# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksm the way users run VMs: Debian's libvirtd starts the installed
QEMU (make install) as libvirt-qemu; `nuksmctl libvirt attach` puts the
nuksm object in the domain's XML; the installed libvirt hook tells the
installed agent which VM is which domain.  The suite starts virtlogd and
libvirtd itself when they are not running (no systemd in CI), and stops
those it started."""

import configparser
import grp
import json
import os
import pwd
import random
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

import harness
from harness import ctl_json, ctl_ok, wait_until

URI = "qemu:///system"
QEMU_USER = "libvirt-qemu"
QEMU_GROUP = "kvm"       # libvirt-qemu's group on Debian: the socket's
FILL_MIB = 64            # the guest fills 64 copies of 1 MiB
GUEST_MIB = 256          # its RAM, all below 4 GiB: one block from 0
DISK_MIB = 8             # and reads this much of a disk (I/O hints)
# Where libvirtd looks for hooks, and where the hook registers domains.
HOOK = Path("/etc/libvirt/hooks/qemu.d/nuksm")
KVM_DEV = "/dev/kvm"
REGISTRY = Path("/run/nuksm/libvirt")
# A hook of the suite's own, which libvirtd runs after the nuksm hook
# (qemu.d's scripts run in alphabetical order): it keeps what the nuksm
# hook registered for domain NAME by the time of operation OP in
# PROBED/NAME/OP and, while PROBED/ctl says "NUKSMCTL SOCKET", what
# `nuksmctl vms` said then in PROBED/NAME/OP.vms.
PROBE = HOOK.parent / "zz-nuksm-test-probe"
PROBED = Path("/run/nuksm-test-probe")
PROBE_SCRIPT = f"""#!/bin/sh
# nuksm's test suite (tests/integration/test_libvirt.py): what libvirt's
# nuksm hook registered for domain $1 when libvirtd ran operation $2.
cat >/dev/null
mkdir -p "{PROBED}/$1" || exit 0
for f in {REGISTRY}/*.conf; do
    if grep -qxF "name=$1" "$f" 2>/dev/null; then
        cp "$f" "{PROBED}/$1/$2"
    fi
done
if [ -f {PROBED}/ctl ] && read -r ctl sock < {PROBED}/ctl; then
    "$ctl" --socket "$sock" --json vms > "{PROBED}/$1/$2.vms" 2>&1
fi
exit 0
""".encode()


def virsh(*args, check=True):
    result = subprocess.run(["virsh", "-c", URI, *args], capture_output=True,
                            text=True, timeout=120)
    if check:
        assert result.returncode == 0, \
            f"virsh {' '.join(args)}: {result.stderr}"
    return result


def daemon_running(name):
    return subprocess.run(["pgrep", "-x", name],
                          capture_output=True).returncode == 0


def stop_daemon(name):
    subprocess.run(["pkill", "-x", name], timeout=30)
    wait_until(lambda: not daemon_running(name), 30, f"{name} to exit")


@pytest.fixture(scope="module")
def libvirtd(installed):
    """virtlogd and libvirtd running, with the hook make install wrote in
    libvirt's hooks directory (put back as it was at the end)."""
    missing = [p for p in ("libvirtd", "virtlogd", "virsh")
               if not shutil.which(p)]
    if missing:
        pytest.skip(f"libvirt is not installed ({', '.join(missing)} "
                    "missing): scripts/install-deps.sh installs "
                    "libvirt-daemon-system")
    try:
        pwd.getpwnam(QEMU_USER)
    except KeyError:
        pytest.skip(f"no {QEMU_USER} user: libvirt-daemon-system did not "
                    "set up Debian's QEMU user")
    kvm = kvm_as_on_debian()
    hook = (installed.parent / "libvirt-hooks/qemu.d/nuksm").read_bytes()
    saved = HOOK.read_bytes() if HOOK.exists() else None
    HOOK.parent.mkdir(parents=True, exist_ok=True)
    HOOK.write_bytes(hook)
    HOOK.chmod(0o755)
    probe_was = PROBE.read_bytes() if PROBE.exists() else None
    PROBE.write_bytes(PROBE_SCRIPT)
    PROBE.chmod(0o755)
    started = []
    try:
        # libvirtd reads its hooks when it starts.
        if (saved != hook or probe_was != PROBE_SCRIPT) and \
                daemon_running("libvirtd"):
            stop_daemon("libvirtd")
            subprocess.run(["libvirtd", "-d"], check=True, timeout=30)
        for name in ("virtlogd", "libvirtd"):
            if not daemon_running(name):
                subprocess.run([name, "-d"], check=True, timeout=30)
                started.append(name)
        wait_until(lambda: virsh("list", check=False).returncode == 0
                   or None, 30, "libvirtd to answer")
        yield
    finally:
        for name in reversed(started):
            stop_daemon(name)
        PROBE.unlink(missing_ok=True)
        shutil.rmtree(PROBED, ignore_errors=True)
        if saved is None:
            HOOK.unlink(missing_ok=True)
        else:
            HOOK.write_bytes(saved)
        if kvm:
            os.chown(KVM_DEV, -1, kvm.st_gid)
            os.chmod(KVM_DEV, stat.S_IMODE(kvm.st_mode))


def kvm_as_on_debian():
    """Give /dev/kvm the owner and mode Debian's udev rules give it
    (root:kvm 0660); returns its stat before, or None if left as it was.
    This machine has no udev: with a root-only /dev/kvm, libvirtd finds
    its cached capabilities of the QEMU invalid at every lookup (probed
    with KVM, which libvirt-qemu cannot open now) and probes again, some
    fourteen times, a minute, per domain start."""
    try:
        before = os.stat(KVM_DEV)
    except FileNotFoundError:
        return None
    gid = grp.getgrnam(QEMU_GROUP).gr_gid
    if before.st_gid == gid and stat.S_IMODE(before.st_mode) & 0o060:
        return None
    os.chown(KVM_DEV, -1, gid)
    os.chmod(KVM_DEV, 0o660)
    return before


@pytest.fixture
def guest_files():
    """The guest kernel and initramfs where libvirt-qemu can read them
    (libvirt may relabel them while a domain runs), and the disk image
    every domain reads (read-only, so that they all may open it)."""
    require = harness.GUEST / "vmlinuz"
    if not require.exists():
        pytest.fail(f"{require} is missing: run scripts/make-guest.sh",
                    pytrace=False)
    path = Path(tempfile.mkdtemp(prefix="nuksm-lv-"))
    os.chmod(path, 0o755)
    for name in ("vmlinuz", "initramfs.cpio.gz"):
        shutil.copy(harness.GUEST / name, path / name)
        os.chmod(path / name, 0o644)
    (path / "disk.img").write_bytes(
        random.Random(DISK_MIB).randbytes(DISK_MIB << 20))
    os.chmod(path / "disk.img", 0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def lv_agent(installed, start_agent, workdir):
    """The installed nuksmd, its socket reachable by QEMU_GROUP, as
    nuksmd.socket makes it; two logical NUMA nodes."""
    os.chmod(workdir, 0o755)
    agent = start_agent("--fake-numa", "2",
                        binary=installed / "sbin/nuksmd")
    os.chown(agent.sock, -1, grp.getgrnam(QEMU_GROUP).gr_gid)
    return agent


def domain_xml(name, emulator, files, serial):
    return f"""<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>{GUEST_MIB}</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>{files}/vmlinuz</kernel>
    <initrd>{files}/initramfs.cpio.gz</initrd>
    <cmdline>console=ttyS0 quiet panic=-1 nuksm.fill={FILL_MIB} \
nuksm.read=vda</cmdline>
  </os>
  <features><acpi/></features>
  <devices>
    <emulator>{emulator}</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='{files}/disk.img'/>
      <target dev='vda' bus='virtio'/>
      <readonly/>
    </disk>
    <serial type='file'><source path='{serial}'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>
"""


def nuksmctl_libvirt(installed, *args, check=True):
    result = subprocess.run([installed / "bin/nuksmctl", "libvirt", *args],
                            capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


class Domain:
    """A persistent libvirt domain (virsh define), undefined at the end."""

    def __init__(self, name, xml_path, serial):
        self.name, self.serial = name, serial
        virsh("define", str(xml_path))
        self.uuid = virsh("domuuid", name).stdout.strip()

    def start(self):
        virsh("start", self.name)

    def xml(self):
        return virsh("dumpxml", "--inactive", self.name).stdout

    def monitor(self, command, **arguments):
        msg = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        reply = json.loads(virsh("qemu-monitor-command", self.name,
                                 json.dumps(msg)).stdout)
        return reply["return"]

    def nuksm(self):
        return self.monitor("query-nuksm")[0]

    def pid(self):
        return int(Path(f"/run/libvirt/qemu/{self.name}.pid").read_text())

    def registration(self):
        """What the hook registered for this domain, or None."""
        return read_registration(REGISTRY / f"{self.uuid}.conf")

    def probed(self, operation):
        """What the hook had registered for this domain when libvirtd ran
        @operation (start, started...), or None."""
        return read_registration(PROBED / self.name / operation)

    def probed_vms(self, operation):
        """What `nuksmctl vms` said when libvirtd ran @operation."""
        return json.loads((PROBED / self.name /
                           f"{operation}.vms").read_text())["vms"]

    def domid(self):
        return int(virsh("domid", self.name).stdout.strip())

    def remove(self):
        virsh("destroy", self.name, check=False)
        virsh("undefine", self.name, check=False)


def read_registration(path):
    if not path.exists():
        return None
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(path.read_text())
    return dict(parser["vm"])


# libvirt's cgroup of a domain, from the top of a hierarchy: without
# systemd /machine[/P.partition...]/MACHINE.libvirt-qemu, with it
# /machine.slice[/machine-P.slice...]/machine-MACHINE.scope, '-' as
# "\x2d" (agent/server/libvirt.c reads them so).
LIBVIRT_CGROUP = re.compile(
    r"/machine(?:/[^/]+\.partition)*/(?P<plain>[^/]+)\.libvirt-qemu(?:/|$)"
    r"|/machine\.slice(?:/machine-[^/]+\.slice)*/machine-(?P<scope>[^/]+)"
    r"\.scope(?:/|$)")


def libvirt_machine(pid):
    """The machine name of the libvirt cgroup process @pid is in, as
    /proc/PID/cgroup shows it; None if it is in none."""
    machines = set()
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        match = LIBVIRT_CGROUP.match(line.split(":", 2)[2])
        if match:
            machines.add(match["plain"] or
                         match["scope"].replace("\\x2d", "-"))
    assert len(machines) <= 1, f"pid {pid} is in machines {machines}"
    return machines.pop() if machines else None


@pytest.fixture
def domains(installed, guest_files, workdir):
    """domains(name) -> a defined, not yet started Domain running the
    installed QEMU's real path (nuksmctl libvirt attach swaps in the
    nuksm-qemu-system-x86_64 link and detach swaps it back)."""
    made = []

    def define(name):
        serial = workdir / f"{name}.serial"
        xml = workdir / f"{name}.xml"
        xml.write_text(domain_xml(name, installed /
                                  "lib/nuksm/qemu/bin/qemu-system-x86_64",
                                  guest_files, serial))
        dom = Domain(name, xml, serial)
        made.append(dom)
        return dom

    yield define
    for dom in made:
        dom.remove()


def uid_of(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


# The 1 MiB the guest fills with (scripts/make-guest.sh): `seq 10000000
# 10200000 | head -c 1048576`, a page at a time.
FILL_UNIT = "".join(f"{n}\n" for n in range(10000000, 10200000)).encode()
FILL_PAGES = {FILL_UNIT[i:i + 4096] for i in range(0, 1 << 20, 4096)}


def fill_in_ram(dom, workdir):
    """{guest page: its content} of the guest's RAM pages that hold the
    fill, as its QEMU reads them (pmemsave): root reading the QEMU's
    memory would not resolve the faults its userfaultfd takes."""
    dumps = workdir / "dumps"
    dumps.mkdir(exist_ok=True)
    os.chmod(dumps, 0o777)          # QEMU runs as libvirt-qemu
    path = dumps / f"{dom.name}.ram"
    dom.monitor("pmemsave", val=0, size=GUEST_MIB << 20, filename=str(path))
    ram = path.read_bytes()
    path.unlink()
    return {at // 4096: ram[at:at + 4096] for at in range(0, len(ram), 4096)
            if ram[at:at + 4096] in FILL_PAGES}


def test_libvirt_domains_merge(libvirtd, lv_agent, domains, installed,
                               workdir):
    """Two libvirt domains attached with nuksmctl libvirt, booting the
    project's guest, merge through the installed agent; the hook tells
    the agent which VM is which domain; virsh qemu-monitor-command shows
    the savings; policy and priority changes reach both sides; the agent
    follows virsh vcpupin; an agent restart under the running domains
    loses nothing; a domain's registration goes when it stops; nuksmctl
    prune unmerges the domain left, its QEMU running as libvirt-qemu,
    every page intact, and nuksmctl run always lets it merge again."""
    agent = lv_agent
    doms = []
    for n, priority in (("a", 300), ("b", 100)):
        dom = domains(f"nuksm-it-{n}")
        nuksmctl_libvirt(installed, "attach", dom.name, "--agent",
                         str(agent.sock), "--domain", "tenant-a",
                         "--priority", str(priority), "--governor", "full",
                         "--max-cpu", "100")
        dom.start()
        doms.append(dom)
    for dom in doms:
        wait_until(lambda: harness.GUEST_READY in
                   harness.read_log(dom.serial), 120,
                   f"{dom.name} to boot and fill")
        assert uid_of(dom.pid()) == pwd.getpwnam(QEMU_USER).pw_uid
    fill_pages = FILL_MIB * 256
    for dom in doms:
        wait_until(lambda: dom.nuksm()["merged-pages"] >= fill_pages - 256,
                   120, f"{dom.name}'s fill to merge")
        info = dom.nuksm()
        assert info["state"] == "active", info
        assert info["domain"] == "tenant-a", info
        # Read sampling runs as libvirt-qemu too: merged pages probed
        # through the userfaultfd made from the agent's descriptor.
        reads = wait_until(lambda: (r := dom.nuksm()["hotness"]["reads"])
                           ["probes"] > 0 and r, 30,
                           f"{dom.name}'s merged pages to be probed")
        assert reads["source"] == "minor-faults" and "note" not in reads
        # The host's scan budget (nuksmd's default) gives it a part.
        share = info["budget"].pop("host-share")
        assert 0 < share["max-cpu"] <= share["budget"], share
        assert info["budget"] == {
            "governor": "full", "max-cpu": 100, "max-cpu-source": "property",
            "scan-rate": 0, "scan-rate-source": "governor", "rest-ms": 500}
    # Across the two domains, not only within each.
    wait_until(lambda: ctl_json(agent.sock, "status")["pages_sharing"] >=
               2 * (fill_pages - 256), 60, "the domains to share pages")
    # nuksmd read the new slots' content from the memory of the QEMUs
    # libvirt runs as libvirt-qemu: none came through their sockets.
    assert [(vm["uploads_sent"], vm["read_error"])
            for vm in ctl_json(agent.sock, "vms")["vms"]] == [(0, None)] * 2
    # The disk each guest read reached its scanner as I/O hints.
    for dom in doms:
        assert "nuksm-guest: read vda" in harness.read_log(dom.serial)
        hints = wait_until(lambda: (h := dom.nuksm()["io-hints"])
                           ["pages-served"] >= DISK_MIB * 256 and h, 60,
                           f"{dom.name}'s disk reads to be served as hints")
        assert hints["enabled"] and \
            hints["pages-hinted"] >= DISK_MIB * 256, hints

    # The hook registered each domain with its QEMU's pid, and the agent
    # knows each VM by it.
    for dom, priority in zip(doms, (300, 100)):
        assert dom.registration() == {
            "name": dom.name, "uuid": dom.uuid,
            "machine": f"qemu-{dom.domid()}-{dom.name}",
            "pid": str(dom.pid()), "domain": "tenant-a",
            "priority": str(priority), "max-cpu": "100"}
    assert sorted((vm["pid"], vm["libvirt"]["name"], vm["libvirt"]["uuid"])
                  for vm in ctl_json(agent.sock, "vms")["vms"]) == \
        sorted((dom.pid(), dom.name, dom.uuid) for dom in doms)

    ctl_ok(agent.sock, "policy", "fair")
    for dom in doms:
        wait_until(lambda: dom.nuksm()["policy"] == "fair", 10,
                   f"{dom.name} to learn the policy")
    # <nuksm:priority> is the operator's ceiling of the VM's priority.
    for asked, applied in ((200, 200), (700, 300)):
        doms[0].monitor("qom-set", path="/objects/nuksm0",
                        property="priority", value=asked)
        wait_until(lambda: sorted((vm["priority"], vm["priority_limit"])
                                  for vm in ctl_json(agent.sock, "vms")
                                  ["vms"]) == [(100, 100), (applied, 300)],
                   10, f"the agent to apply priority {applied}")

    # virsh vcpupin moves a domain's home: the agent follows it (its
    # logical node N has the CPUs c with c * 2 // CPUs == N).
    cpus = os.sysconf("SC_NPROCESSORS_CONF")
    for node in (1, 0):
        cpu = min(c for c in os.sched_getaffinity(0) if c * 2 // cpus == node)
        virsh("vcpupin", doms[0].name, "0", str(cpu))
        wait_until(lambda: [(h["host-node"], h["source"]) for h in
                            doms[0].nuksm()["home-nodes"]] ==
                   [(node, "pinned")], 15,
                   f"{doms[0].name}'s home to follow vcpupin to node {node}")

    # The guests live on: a write meanwhile may end a sharing (each
    # copy-on-write break costs at most one), nothing else may.
    def cow_breaks():
        return sum(dom.nuksm()["cow-breaks"] for dom in doms)

    cow_before = cow_breaks()
    sharing = ctl_json(agent.sock, "status")["pages_sharing"]
    agent.kill()
    agent.start()
    os.chown(agent.sock, -1, grp.getgrnam(QEMU_GROUP).gr_gid)

    def reconnected():
        """The new agent has both QEMUs, each known as its domain: the
        registrations outlive the agent.  (A domain's state may still
        read "active" before its QEMU has seen the old agent go.)"""
        return sorted((vm["pid"], (vm["libvirt"] or {}).get("name"))
                      for vm in ctl_json(agent.sock, "vms")["vms"]) == \
            sorted((dom.pid(), dom.name) for dom in doms) and \
            all(dom.nuksm()["state"] == "active" for dom in doms)

    def restored():
        status = ctl_json(agent.sock, "status")
        return status["orphan_pages"] == 0 and status["pages_sharing"] >= \
            sharing - (cow_breaks() - cow_before)

    def restart_problem(problem):
        """@problem, with what the agent and the domains held then."""
        states = {dom.name: {k: dom.nuksm().get(k)
                             for k in ("state", "agent-error")}
                  for dom in doms}
        return AssertionError(
            f"{problem}: pages_sharing was {sharing} before the restart, "
            f"{cow_breaks() - cow_before} copy-on-write breaks since; now "
            f"{ctl_json(agent.sock, 'status')}, VMs "
            f"{ctl_json(agent.sock, 'vms')['vms']}; domains {states}; "
            f"nuksmd's log:\n{agent.log_text()}")
    try:
        wait_until(reconnected, 30, "the domains to reconnect as themselves")
        wait_until(restored, 60, "the domains to restore their pages")
    except AssertionError as e:
        raise restart_problem(e) from None

    virsh("destroy", doms[1].name)
    assert doms[1].registration() is None
    assert doms[0].registration() is not None
    wait_until(lambda: [vm["libvirt"]["name"] for vm in
                        ctl_json(agent.sock, "vms")["vms"]] ==
               [doms[0].name], 30, f"{doms[1].name} to leave the agent")

    # nuksmctl prune: the QEMU that libvirt runs as libvirt-qemu unmerges
    # every page of the tenant (its fill is 64 copies of one MiB), each
    # page keeping its content; nuksmctl run always lets it merge again.
    dom = doms[0]
    wait_until(lambda: dom.nuksm()["merged-pages"] >= fill_pages - 256, 60,
               f"{dom.name}'s fill to merge within itself")
    before = fill_in_ram(dom, workdir)
    assert len(before) >= fill_pages
    out = ctl_ok(agent.sock, "prune", "tenant-a", "--rate", "64")
    assert out.rstrip().endswith("no page is merged any more"), out
    info = dom.nuksm()
    assert info["merged-pages"] - info["zero-pages"] == 0, info
    assert info["budget"]["host-share"]["reason"] == "held", info
    assert fill_in_ram(dom, workdir) == before
    assert ctl_json(agent.sock, "run", "always") == {"run": "always",
                                                     "held": False}
    wait_until(lambda: dom.nuksm()["merged-pages"] >= fill_pages - 256, 60,
               f"{dom.name}'s fill to merge again")
    assert fill_in_ram(dom, workdir) == before


def test_attach_detach_leave_the_rest(libvirtd, domains, installed):
    """attach sets the emulator, the object and the metadata; attach
    again replaces them, keeping one object; detach gives back the XML
    as it was; bad settings are refused, naming the allowed values."""
    dom = domains("nuksm-it-xml")
    before = dom.xml()
    nuksmctl_libvirt(installed, "attach", dom.name, "--domain", "tenant-a")
    nuksmctl_libvirt(installed, "attach", dom.name, "--domain", "tenant-b",
                     "--priority", "900", "--governor", "low")
    attached = dom.xml()
    assert attached.count("nuksm,id=nuksm0") == 1
    assert ("nuksm,id=nuksm0,agent=/run/nuksm/nuksmd.sock,domain=tenant-b,"
            "priority=900,governor=low") in attached
    assert "<nuksm:governor>low</nuksm:governor>" in attached
    assert f"<emulator>{installed}/bin/nuksm-qemu-system-x86_64" \
        "</emulator>" in attached
    assert "<nuksm:domain>tenant-b</nuksm:domain>" in attached
    assert "tenant-a" not in attached

    nuksmctl_libvirt(installed, "detach", dom.name)
    assert dom.xml() == before
    result = nuksmctl_libvirt(installed, "detach", dom.name, check=False)
    assert result.returncode == 1
    assert f"{dom.name} has no nuksm object" in result.stderr

    for args, message in (
            (["--priority", "0"], "--priority must be 1..1000, got 0"),
            (["--max-cpu", "101"], "--max-cpu must be 0.01..100"),
            (["--governor", "turbo"], "--governor must be one of full, "
                                      "medium, low, quiet, got 'turbo'"),
            (["--max-cpu", "0.001"], "--max-cpu must be 0.01..100"),
            (["--domain", "a b"], "--domain must be 1 to 63 characters"),
            (["--agent", "nuksmd.sock"], "--agent must be an absolute path")):
        result = nuksmctl_libvirt(installed, "attach", dom.name, *args,
                                  check=False)
        assert result.returncode == 1 and message in result.stderr, \
            result.stderr
    assert dom.xml() == before


def vm_of(sock, pid):
    """The agent's `vms` entry of the VM process @pid, or None."""
    return next((vm for vm in ctl_json(sock, "vms")["vms"]
                 if vm["pid"] == pid), None)


@pytest.fixture
def probe_agent(installed, lv_agent):
    """The libvirt test hook asks @lv_agent which VMs it has at each
    operation of a domain."""
    PROBED.mkdir(exist_ok=True)
    (PROBED / "ctl").write_text(f"{installed / 'bin/nuksmctl'} "
                                f"{lv_agent.sock}\n")
    yield lv_agent
    (PROBED / "ctl").unlink(missing_ok=True)


def test_registered_before_qemu_runs(libvirtd, probe_agent, domains,
                                     installed):
    """The hook registers a domain at libvirt's "start", before QEMU
    runs, by the machine name libvirt gives the cgroup it then puts QEMU
    in: its nuksm object connects to the agent before libvirt's
    "started", when the hook learns QEMU's pid, and the agent knows the
    VM's libvirt domain from the start."""
    agent = probe_agent
    # libvirt leaves '_' out of the machine name, and a '-' after '.'.
    dom = domains("nuksm-it-early_1.-x")
    nuksmctl_libvirt(installed, "attach", dom.name, "--agent",
                     str(agent.sock), "--domain", "tenant-a",
                     "--priority", "200")
    shutil.rmtree(PROBED / dom.name, ignore_errors=True)
    dom.start()
    pid = dom.pid()
    machine = libvirt_machine(pid)
    assert machine, f"QEMU (pid {pid}) is in no libvirt cgroup: " + \
        Path(f"/proc/{pid}/cgroup").read_text()
    assert machine == f"qemu-{dom.domid()}-nuksm-it-early1.x"
    registered = {"name": dom.name, "uuid": dom.uuid, "machine": machine,
                  "domain": "tenant-a", "priority": "200"}
    assert dom.probed("prepare") is None
    assert dom.probed("start") == registered
    assert dom.probed("started") == {**registered, "pid": str(pid)}
    assert dom.registration() == {**registered, "pid": str(pid)}
    # The VM was there, in its libvirt domain's merge domain, before
    # libvirt's "started" (when only the machine name told who it is).
    assert dom.probed_vms("start") == []
    assert [(vm["pid"], vm["domain"], vm["domain_source"])
            for vm in dom.probed_vms("started")] == \
        [(pid, "tenant-a", "libvirt")]

    virsh("destroy", dom.name)
    assert dom.registration() is None


def test_libvirt_domain_assigns_merge_domain(libvirtd, lv_agent, domains,
                                             installed):
    """A domain attached with --domain is in that merge domain, which the
    agent took from the hook's registration when the VM connected (source
    "libvirt"); QEMU shows it in query-nuksm."""
    dom = domains("nuksm-it-assign")
    nuksmctl_libvirt(installed, "attach", dom.name, "--agent",
                     str(lv_agent.sock), "--domain", "tenant-a")
    dom.start()
    pid = dom.pid()
    vm = wait_until(lambda: vm_of(lv_agent.sock, pid), 30,
                    f"{dom.name}'s QEMU to connect")
    assert vm["domain"] == "tenant-a", vm
    assert vm["domain_source"] == "libvirt", vm
    assert vm["libvirt"] == {"name": dom.name, "uuid": dom.uuid}, vm

    info = wait_until(lambda: (lambda i: i if i["state"] != "disconnected"
                               else None)(dom.nuksm()), 30,
                      f"{dom.name}'s nuksm object to connect")
    if "merge-domain" not in info:
        pytest.skip("this QEMU's query-nuksm has no merge-domain: the "
                    "agent's side passed")
    assert info["merge-domain"] == "tenant-a", info
    assert info.get("domain-source", "libvirt") == "libvirt", info


def test_plan_apply_moves_a_domain_through_libvirt(libvirtd, installed,
                                                   start_agent, workdir,
                                                   domains):
    """Two domains holding the same fill, pinned by virsh vcpupin to
    logical nodes 0 and 1 (--fake-numa 2): the plan moves b to a's node,
    and `nuksmctl plan --apply` does it through libvirt, live: virsh
    dumpxml shows b's vCPU and emulator pinned to node 0's CPUs and its
    <numatune> memory on node 0; the agent sees b's home follow and
    counts the move as done.

    What a one-node host cannot show: logical node 0's memory is the
    host's only node, so numatune moves no memory here (the NUMA lab
    checks a real move with move_pages)."""
    os.chmod(workdir, 0o755)
    agent = start_agent("--fake-numa", "2", "--colocate-pins", "move",
                        "--colocate-min-gain", "8",
                        "--colocate-vcpus-per-cpu", "0",
                        binary=installed / "sbin/nuksmd")
    os.chown(agent.sock, -1, grp.getgrnam(QEMU_GROUP).gr_gid)
    cpus = os.sysconf("SC_NPROCESSORS_CONF")
    allowed = sorted(os.sched_getaffinity(0))
    node_cpus = [[c for c in range(cpus) if c * 2 // cpus == n]
                 for n in (0, 1)]
    if not all(set(n) & set(allowed) for n in node_cpus):
        pytest.skip(f"NEEDS CPUS: a usable CPU on each logical node "
                    f"(allowed {allowed})")
    doms = {}
    for n, node in (("a", 0), ("b", 1)):
        dom = doms[n] = domains(f"nuksm-it-plan-{n}")
        nuksmctl_libvirt(installed, "attach", dom.name, "--agent",
                         str(agent.sock), "--governor", "full",
                         "--max-cpu", "100")
        dom.start()
        virsh("vcpupin", dom.name, "0", str(node_cpus[node][0]))
    for n, node in (("a", 0), ("b", 1)):
        dom = doms[n]
        wait_until(lambda: harness.GUEST_READY in
                   harness.read_log(dom.serial), 120,
                   f"{dom.name} to boot and fill")
        wait_until(lambda: [(h["host-node"], h["source"]) for h in
                            dom.nuksm()["home-nodes"]] == [(node, "pinned")],
                   15, f"{dom.name}'s home to be node {node}")

    def planned():
        moves = ctl_json(agent.sock, "plan")["moves"]
        return len(moves) == 1 and moves[0]["verdict"] == "planned" and \
            moves[0]
    move = wait_until(planned, 120, "the plan to move one domain")
    assert (move["name"], move["from"], move["to"]) == \
        (doms["b"].name, 1, 0), move

    result = subprocess.run([installed / "bin/nuksmctl", "--socket",
                             str(agent.sock), "plan", "--apply"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    cpulist = ",".join(map(str, node_cpus[0])) if len(node_cpus[0]) == 1 \
        else f"{node_cpus[0][0]}-{node_cpus[0][-1]}"
    for command in (f"virsh vcpupin {doms['b'].uuid} --vcpu 0 --cpulist "
                    f"{cpulist} --live",
                    f"virsh emulatorpin {doms['b'].uuid} --cpulist "
                    f"{cpulist} --live",
                    f"virsh numatune {doms['b'].uuid} --nodeset 0 --live"):
        assert f"$ {command}" in result.stdout, result.stdout

    live = virsh("dumpxml", doms["b"].name).stdout
    assert f"<vcpupin vcpu='0' cpuset='{cpulist}'/>" in live, live
    assert f"<emulatorpin cpuset='{cpulist}'/>" in live, live
    assert re.search(r"<numatune>\s*<memory mode='strict' nodeset='0'/>",
                     live), live
    wait_until(lambda: [(h["host-node"], h["source"]) for h in
                        doms["b"].nuksm()["home-nodes"]] == [(0, "pinned")],
               15, "b's home to follow to node 0")
    wait_until(lambda: not ctl_json(agent.sock, "plan")["moves"], 30,
               "the plan to have nothing left to move")
    vm = wait_until(lambda: vm_of(agent.sock, doms["b"].pid()), 10,
                    "b in the list")
    assert vm["moved_to"] == 0, vm


def run_hook(installed, stdin, *args):
    return subprocess.run([installed.parent / "libvirt-hooks/qemu.d/nuksm",
                           *args], input=stdin, capture_output=True,
                          text=True, timeout=30)


def test_hook_never_stops_a_domain(installed):
    """The hook exits 0 on anything: a domain's XML it cannot read, a
    nuksm domain whose QEMU has no pidfile; it registers nothing for a
    domain without nuksm, and does nothing at prepare."""
    uuid = "00000000-0000-4000-8000-00000000a001"
    plain = f"<domain><name>nuksm-it-plain</name><uuid>{uuid}</uuid>" \
            "</domain>"
    with_nuksm = plain.replace("</domain>", """<qemu:commandline
        xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
        <qemu:arg value='-object'/><qemu:arg value='nuksm,id=n0'/>
        </qemu:commandline></domain>""")
    registration = REGISTRY / f"{uuid}.conf"

    result = run_hook(installed, "<domain", "x", "started", "begin", "-")
    assert result.returncode == 0 and "nuksm hook: x started" in \
        result.stderr
    result = run_hook(installed, plain, "nuksm-it-plain", "started",
                      "begin", "-")
    assert result.returncode == 0 and result.stderr == ""
    assert not registration.exists()
    result = run_hook(installed, with_nuksm, "nuksm-it-plain", "prepare",
                      "begin", "-")
    assert result.returncode == 0 and result.stderr == ""
    assert not registration.exists()
    # No libvirt pidfile for it: said on stderr, start goes on.
    result = run_hook(installed, with_nuksm, "nuksm-it-plain", "started",
                      "begin", "-")
    assert result.returncode == 0
    assert "nuksm-it-plain.pid" in result.stderr
    assert not registration.exists()


def test_hook_registers_at_start(installed):
    """At "start" the hook registers a domain with nuksm by libvirt's
    machine name for it, without a pid; at "stopped" it removes it.
    Settings that are not one word are left out."""
    uuid = "00000000-0000-4000-8000-00000000a002"
    registration = REGISTRY / f"{uuid}.conf"
    long_name = "n" * 70

    def xml(name, domid, domain="tenant-a"):
        ident = f" id='{domid}'" if domid is not None else ""
        return f"""<domain type='kvm'{ident}><name>{name}</name>
            <uuid>{uuid}</uuid><metadata><nuksm:nuksm
            xmlns:nuksm='https://nuksm.org/xmlns/libvirt/1.0'>
            <nuksm:domain>{domain}</nuksm:domain>
            <nuksm:priority>300</nuksm:priority></nuksm:nuksm></metadata>
            </domain>"""

    try:
        for name, domid, machine in (
                ("web1", 3, "qemu-3-web1"),
                ("-web_1..x-", 12, "qemu-12-web1.x"),
                ("_.-", 4, "qemu-4"),
                ("wéb 1", 5, "qemu-5-wb1"),
                (long_name, 7, "qemu-7-" + "n" * 57)):
            result = run_hook(installed, xml(name, domid), name, "start",
                              "begin", "-")
            assert result.returncode == 0 and result.stderr == "", \
                result.stderr
            assert read_registration(registration) == {
                "name": name, "uuid": uuid, "machine": machine,
                "domain": "tenant-a", "priority": "300"}
            st = registration.stat()
            assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
            assert len(machine) <= 64

        # A setting that would add a line is left out, and said so.
        result = run_hook(installed, xml("web1", 3, "a\npid=1"), "web1",
                          "start", "begin", "-")
        assert result.returncode == 0 and "<nuksm:domain>" in result.stderr
        assert read_registration(registration) == {
            "name": "web1", "uuid": uuid, "machine": "qemu-3-web1",
            "priority": "300"}

        result = run_hook(installed, xml("web1", 3), "web1", "stopped",
                          "end", "-")
        assert result.returncode == 0 and not registration.exists()

        # No id, no machine name: said, and the domain starts.
        result = run_hook(installed, xml("web1", None), "web1", "start",
                          "begin", "-")
        assert result.returncode == 0 and "has no id" in result.stderr
        assert not registration.exists()
    finally:
        registration.unlink(missing_ok=True)
