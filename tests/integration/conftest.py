# SPDX-License-Identifier: GPL-2.0-or-later
"""Fixtures: a temp dir, nuksmd agents, qtest VMs and TCG test guests."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import harness
from harness import Agent, Vm

# Tools the tests use too (numa_tax).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "qemu: needs the nuksm QEMU build (set on every test "
        "that uses the qemu_bin fixture, directly or through another)")
    config.addinivalue_line(
        "markers", "allocator: measures how glibc's allocator holds and "
        "gives back memory (ASan replaces that allocator, so make "
        "check-sanitize leaves these out; make check-integration runs them)")
    config.addinivalue_line(
        "markers", "full_throttle: the module's agents take no scan budget "
        "(--scan-budget=0) unless a test gives one: it tests the merge "
        "path at the VMs' own max-cpu, not the host's budget "
        "(test_budget.py does)")


def pytest_collection_modifyitems(items):
    # `-m "not qemu"` selects the tests that need nothing but nuksmd and
    # nuksmctl (make check-sanitize runs those against sanitized builds).
    for item in items:
        if "qemu_bin" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.qemu)


@pytest.fixture(autouse=True)
def sanitizer_reports(request, monkeypatch):
    """With $NUKSM_SANITIZER_LOGS set (make check-sanitize), the programs
    a test starts write their ASan, LeakSanitizer and UBSan reports to a
    directory of the test's own there, and any report fails the test.

    Autouse fixtures are set up first and torn down last, so this check
    comes after start_agent's teardown has stopped every nuksmd and
    LeakSanitizer has checked its exit.
    """
    logs = os.environ.get("NUKSM_SANITIZER_LOGS")
    if not logs:
        yield
        return
    test_dir = Path(logs) / re.sub(r"[^\w.-]+", "_", request.node.nodeid)
    shutil.rmtree(test_dir, ignore_errors=True)
    test_dir.mkdir(parents=True)
    # The last log_path in the options wins.
    for var, name in (("ASAN_OPTIONS", "asan"), ("UBSAN_OPTIONS", "ubsan")):
        options = os.environ.get(var, "")
        monkeypatch.setenv(var, f"{options}:log_path={test_dir / name}")
    yield
    reports = sorted(p for p in test_dir.iterdir() if p.is_file())
    if reports:
        text = "\n".join(f"==> {p}:\n{p.read_text(errors='replace')}"
                         for p in reports)
        pytest.fail(f"sanitizer report(s) from the programs this test "
                    f"ran:\n{text}", pytrace=False)


def require_file(path, hint):
    if not Path(path).is_file():
        pytest.fail(f"{path} is missing: {hint}", pytrace=False)


@pytest.fixture(scope="session")
def installed():
    """make install into a PREFIX of its own, which unprivileged users
    (QEMU as nobody or libvirt-qemu) can reach; the PREFIX.  The host's
    AppArmor rules and libvirt hooks are left alone: they are in
    PREFIX/../apparmor.d and PREFIX/../libvirt-hooks."""
    root = Path(tempfile.mkdtemp(prefix="nuksm-install-"))
    os.chmod(root, 0o755)
    harness.install(root / "usr", apparmor_dir=root / "apparmor.d",
                    hooks_dir=root / "libvirt-hooks")
    yield root / "usr"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def new_cgroup():
    """new_cgroup(controller) -> the path of a fresh cgroup of @controller
    (cgroup v2, else v1's hierarchy of it), removed at teardown once what
    is left in it went back to the root.  Skips, saying so, where none
    can be made.  Ask for it before the processes that go in it, so that
    they have quit when it is removed."""
    made = []

    def make(controller):
        base = harness.cgroup_dir(controller)
        if base is None or os.geteuid() != 0:
            pytest.skip(f"no writable {controller} cgroup controller here "
                        f"(needs root and cgroup v2 with {controller} "
                        f"enabled, or v1's {controller} hierarchy)")
        path = f"{base}/nuksm-test-{os.getpid()}-{controller}"
        os.mkdir(path)
        made.append((base, path))
        return path

    yield make
    for base, path in reversed(made):
        with open(f"{path}/cgroup.procs") as f:
            left = f.read().split()
        for pid in left:
            # A process that just ended (or a zombie) cannot move.
            with contextlib.suppress(ProcessLookupError):
                with open(f"{base}/cgroup.procs", "w") as f:
                    f.write(pid)
        harness.wait_until(
            lambda: not open(f"{path}/cgroup.procs").read().strip(), 10,
            f"the test {path} to empty")
        os.rmdir(path)


@pytest.fixture
def workdir():
    # Short, so that socket paths stay far below sun_path's 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="nuksm-it-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shm_dir():
    """A temp dir on tmpfs, where nuksmd's store must live."""
    path = Path(tempfile.mkdtemp(prefix="nuksm-it-", dir="/dev/shm"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nuksmd_bin():
    require_file(harness.NUKSMD, "build it (make) or set NUKSMD")
    return harness.NUKSMD


@pytest.fixture
def nuksmctl_bin():
    require_file(harness.NUKSMCTL, "build it (make) or set NUKSMCTL")
    return harness.NUKSMCTL


@pytest.fixture
def qemu_bin():
    require_file(harness.QEMU, "build it (make) or set NUKSM_QEMU")
    return harness.QEMU


@pytest.fixture
def start_agent(request, workdir, shm_dir, nuksmd_bin, nuksmctl_bin):
    """start_agent(*extra_args, name=, args=, state_dir=, user=, binary=)
    -> an Agent.

    @user runs it as that user; @binary replaces the nuksmd the tests run
    (an installed one, say).  By default nuksmd listens on workdir/NAME.sock; @args replaces the
    whole command line.  Its store is in shm_dir/NAME unless @state_dir
    is false, so an agent started again under the same name finds its
    predecessor's store.  Agents still running at teardown are stopped
    with SIGTERM and must exit 0 and remove their socket.  In a module
    marked full_throttle, it takes no scan budget unless given one.
    """
    agents = []
    full_throttle = request.node.get_closest_marker("full_throttle")

    def start(*extra_args, name="nuksmd", args=None, state_dir=True,
              user=None, binary=None):
        sock = workdir / f"{name}.sock"
        if args is None:
            if full_throttle and "--scan-budget" not in extra_args:
                extra_args = ("--scan-budget", "0", *extra_args)
            args = ["--socket", sock, *extra_args]
        if state_dir:
            state_dir = shm_dir / name
            args = [*args, "--state-dir", state_dir]
        else:
            state_dir = None
        agent = Agent(sock, workdir / f"{name}.log", args, state_dir, user,
                      binary)
        agents.append(agent)
        return agent.start()

    yield start
    errors = []
    for agent in agents:
        if not agent.running:
            continue
        try:
            agent.stop()
        except Exception as e:  # report every agent, then fail
            errors.append(f"{agent.sock}: {e!r}")
        finally:
            if agent.running:
                agent.kill()
    assert not errors, "\n".join(errors)


@pytest.fixture
def agent(start_agent):
    return start_agent()


@pytest.fixture
def start_vm(workdir, qemu_bin):
    """start_vm(name, args, user=, binary=) -> a running Vm, as @user and
    from the QEMU @binary if given; quit (exit 0) at teardown."""
    vms = []

    def start(name, args, user=None, binary=None):
        vm = Vm(workdir, name, args, user, binary)
        vms.append(vm)
        return vm.start()

    yield start
    errors = []
    for vm in reversed(vms):
        if vm.qmp is None:  # start() failed and said why
            vm.kill()
            continue
        try:
            vm.stop()
        except Exception as e:  # report every VM, then fail
            errors.append(f"{vm.name}: {e!r}")
        finally:
            vm.kill()
    assert not errors, "\n".join(errors)


@pytest.fixture
def qtest_vm(start_vm, workdir):
    """qtest_vm(name, extra=[args], user=, binary=, **nuksm_props): q35,
    128M, one nuksm object (id dedup0 unless given), a qtest socket at
    vm.qtest_path; run as @user and from the QEMU @binary if given."""
    def start(name="vm0", extra=(), user=None, binary=None, **props):
        props.setdefault("id", "dedup0")
        args = harness.qtest_args(workdir / f"{name}.qtest",
                                  harness.nuksm_object(**props))
        return start_vm(name, [*args, *extra], user=user, binary=binary)
    return start


@pytest.fixture
def tcg_guest(start_vm, workdir):
    """tcg_guest(name, fill_mib, disk=None, disk_bus="virtio",
    **nuksm_props): booted to its ready line (having read @disk on
    @disk_bus, see harness.guest_args())."""
    require_file(harness.GUEST / "vmlinuz", "run scripts/make-guest.sh")
    require_file(harness.GUEST / "initramfs.cpio.gz",
                 "run scripts/make-guest.sh")

    def start(name="guest0", fill_mib=0, disk=None, disk_bus="virtio",
              **props):
        props.setdefault("id", "dedup0")
        serial = workdir / f"{name}.serial"
        vm = start_vm(name, harness.guest_args(
            serial, fill_mib, harness.nuksm_object(**props), disk=disk,
            disk_bus=disk_bus))
        vm.wait_serial(harness.GUEST_READY, timeout=90)
        return vm
    return start


@pytest.fixture
def small_tmpfs(workdir):
    """A 1 MiB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path = workdir / "small"
    path.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700",
                    "nuksm-test", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)
