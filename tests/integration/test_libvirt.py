# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksm the way users run VMs: Debian's libvirtd starts the installed
QEMU (make install) as libvirt-qemu, with the nuksm object in
<qemu:commandline>, attached to the installed agent.  The suite starts
virtlogd and libvirtd itself when they are not running (no systemd in
CI), and stops those it started."""

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from xml.sax.saxutils import quoteattr

import pytest

import harness
from harness import ctl_json, ctl_ok, wait_until

URI = "qemu:///system"
QEMU_USER = "libvirt-qemu"
QEMU_GROUP = "kvm"       # libvirt-qemu's group on Debian: the socket's
FILL_MIB = 64            # the guest fills 64 copies of 1 MiB


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


@pytest.fixture(scope="module")
def libvirtd():
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
    started = []
    for name in ("virtlogd", "libvirtd"):
        if not daemon_running(name):
            subprocess.run([name, "-d"], check=True, timeout=30)
            started.append(name)
    wait_until(lambda: virsh("list", check=False).returncode == 0
               or None, 30, "libvirtd to answer")
    yield
    for name in reversed(started):
        subprocess.run(["pkill", "-x", name], timeout=30)
        wait_until(lambda: not daemon_running(name), 30, f"{name} to exit")


@pytest.fixture
def guest_files():
    """The guest kernel and initramfs where libvirt-qemu can read them
    (libvirt may relabel them while a domain runs)."""
    require = harness.GUEST / "vmlinuz"
    if not require.exists():
        pytest.fail(f"{require} is missing: run scripts/make-guest.sh",
                    pytrace=False)
    path = Path(tempfile.mkdtemp(prefix="nuksm-lv-"))
    os.chmod(path, 0o755)
    for name in ("vmlinuz", "initramfs.cpio.gz"):
        shutil.copy(harness.GUEST / name, path / name)
        os.chmod(path / name, 0o644)
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


def domain_xml(name, emulator, files, serial, nuksm):
    return f"""<domain type='qemu'
        xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>{files}/vmlinuz</kernel>
    <initrd>{files}/initramfs.cpio.gz</initrd>
    <cmdline>console=ttyS0 quiet panic=-1 nuksm.fill={FILL_MIB}</cmdline>
  </os>
  <features><acpi/></features>
  <devices>
    <emulator>{emulator}</emulator>
    <serial type='file'><source path='{serial}'/></serial>
    <memballoon model='none'/>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-object'/>
    <qemu:arg value={quoteattr(nuksm)}/>
  </qemu:commandline>
</domain>
"""


class Domain:
    """A transient libvirt domain (virsh create), destroyed at the end."""

    def __init__(self, name, xml_path, serial):
        self.name, self.serial = name, serial
        virsh("create", str(xml_path))

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

    def destroy(self):
        virsh("destroy", self.name, check=False)


@pytest.fixture
def domains(installed, guest_files, workdir, qemu_bin):
    """domains(name, agent, **nuksm_props) -> a running Domain."""
    made = []

    def create(name, agent, **props):
        serial = workdir / f"{name}.serial"
        nuksm = harness.nuksm_object(id="dedup0", agent=agent.sock,
                                     max_cpu=100, **props)
        xml = workdir / f"{name}.xml"
        xml.write_text(domain_xml(name, installed /
                                  "bin/nuksm-qemu-system-x86_64",
                                  guest_files, serial, nuksm))
        dom = Domain(name, xml, serial)
        made.append(dom)
        return dom

    yield create
    for dom in made:
        dom.destroy()


def uid_of(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_libvirt_domains_merge(libvirtd, lv_agent, domains):
    """Two libvirt domains booting the project's guest merge through the
    installed agent; virsh qemu-monitor-command shows it; policy and
    priority changes reach both sides; the agent follows virsh vcpupin;
    an agent restart under the running domains loses nothing."""
    agent = lv_agent
    doms = [domains(f"nuksm-it-{n}", agent) for n in ("a", "b")]
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
    # Across the two domains, not only within each.
    wait_until(lambda: ctl_json(agent.sock, "status")["pages_sharing"] >=
               2 * (fill_pages - 256), 60, "the domains to share pages")

    ctl_ok(agent.sock, "policy", "fair")
    for dom in doms:
        wait_until(lambda: dom.nuksm()["policy"] == "fair", 10,
                   f"{dom.name} to learn the policy")
    doms[0].monitor("qom-set", path="/objects/dedup0", property="priority",
                    value=700)
    wait_until(lambda: {vm["priority"] for vm in
                        ctl_json(agent.sock, "vms")["vms"]} == {700, 100},
               10, "the agent to learn the priority")

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

    sharing = ctl_json(agent.sock, "status")["pages_sharing"]
    agent.kill()
    agent.start()
    os.chown(agent.sock, -1, grp.getgrnam(QEMU_GROUP).gr_gid)
    for dom in doms:
        wait_until(lambda: dom.nuksm()["state"] == "active", 30,
                   f"{dom.name} to reconnect")
    wait_until(lambda: ctl_json(agent.sock, "status")["orphan_pages"] == 0
               and ctl_json(agent.sock, "status")["pages_sharing"] >=
               sharing, 60, "the domains to restore their pages")
