#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksm demo: one nuksmd, several small TCG guests, live statistics.

Starts a private nuksmd (socket in $BUILD/demo/), boots --vms guests from
$BUILD/guest (scripts/make-guest.sh) with -object nuksm, watches them over
QMP for --seconds, switches the agent's policy to "fair" half way, and
shuts everything down.  Exits non-zero if any step fails.

$BUILD defaults to build/.  Binaries come from $BUILD/bin, overridable with
NUKSM_QEMU, NUKSMD and NUKSMCTL; the guest directory with NUKSM_GUEST.
"""

import argparse
import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from qemu.qmp import (ConnectError, ExecInterruptedError, ExecuteError,
                      QMPClient, Runstate)

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("BUILD", ROOT / "build"))
QEMU = Path(os.environ.get("NUKSM_QEMU", BUILD / "bin/qemu-system-x86_64"))
NUKSMD = Path(os.environ.get("NUKSMD", BUILD / "bin/nuksmd"))
NUKSMCTL = Path(os.environ.get("NUKSMCTL", BUILD / "bin/nuksmctl"))
GUEST = Path(os.environ.get("NUKSM_GUEST", BUILD / "guest"))
DEMO = BUILD / "demo"

GUEST_MIB = 256
FILL_MIB = 64
READY = "nuksm-guest: ready"
BOOT_TIMEOUT = 120
ACTIVE_TIMEOUT = 15
TABLE_INTERVAL = 3
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PR_SET_PDEATHSIG = 1


class DemoError(Exception):
    pass


def die_with_parent():
    """Children get SIGKILL if the demo itself dies without cleaning up."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


async def spawn(*args, log):
    """A child in its own session: Ctrl-C reaches only the demo, which
    then shuts the children down in order."""
    with open(log, "wb") as out:
        return await asyncio.create_subprocess_exec(
            *map(str, args), stdin=asyncio.subprocess.DEVNULL, stdout=out,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent)


async def reap(proc, name, timeout=15):
    """Wait for @proc to exit, SIGKILL it if it lingers; its exit status."""
    try:
        return await asyncio.wait_for(proc.wait(), timeout)
    except asyncio.TimeoutError:
        print(f"{name} did not exit within {timeout} s, killing it")
        proc.kill()
        return await proc.wait()


def mib(pages):
    return pages * PAGE_SIZE / (1024 * 1024)


async def nuksmctl(sock, *args):
    proc = await asyncio.create_subprocess_exec(
        str(NUKSMCTL), "--socket", str(sock), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise DemoError(f"nuksmctl {' '.join(args)} failed: "
                        f"{err.decode().strip()}")
    return out.decode()


class Agent:
    def __init__(self):
        self.sock = DEMO / "nuksmd.sock"
        self.log = DEMO / "nuksmd.log"
        # The store holds merged pages: it must live in memory (tmpfs).
        self.state_dir = Path(f"/dev/shm/nuksm-demo-{os.getpid()}")
        self.proc = None

    async def start(self):
        self.proc = await spawn(NUKSMD, "--socket", self.sock,
                                "--state-dir", self.state_dir, log=self.log)
        deadline = time.monotonic() + 10
        while not self.sock.exists():
            if self.proc.returncode is not None or \
                    time.monotonic() > deadline:
                raise DemoError(f"nuksmd did not start, see {self.log}")
            await asyncio.sleep(0.05)
        print(f"nuksmd listening on {self.sock} (pid {self.proc.pid})")

    async def stop(self):
        if self.proc is None:
            return
        if self.proc.returncode is None:
            self.proc.terminate()
        rc = await reap(self.proc, "nuksmd")
        shutil.rmtree(self.state_dir, ignore_errors=True)
        if rc != 0:
            raise DemoError(f"nuksmd exited with {rc}, see {self.log}")


class Guest:
    def __init__(self, index, agent_sock):
        self.name = f"demo{index}"
        self.agent_sock = agent_sock
        self.qmp_path = DEMO / f"{self.name}.qmp"
        self.serial = DEMO / f"{self.name}.serial"
        self.log = DEMO / f"{self.name}.log"
        self.proc = None
        self.qmp = QMPClient(self.name)

    def command_line(self):
        return [
            QEMU, "-name", self.name, "-accel", "tcg", "-m", GUEST_MIB,
            "-nodefaults", "-display", "none", "-no-reboot",
            "-serial", f"file:{self.serial}",
            "-kernel", GUEST / "vmlinuz",
            "-initrd", GUEST / "initramfs.cpio.gz",
            "-append", f"console=ttyS0 quiet panic=-1 nuksm.fill={FILL_MIB}",
            "-object", f"nuksm,id=dedup0,agent={self.agent_sock}",
            "-qmp", f"unix:{self.qmp_path},server=on,wait=off",
        ]

    async def start(self):
        self.proc = await spawn(*self.command_line(), log=self.log)
        deadline = time.monotonic() + 30
        while True:
            self.check_alive()
            try:
                await self.qmp.connect(str(self.qmp_path))
                return
            except ConnectError:
                if time.monotonic() > deadline:
                    raise DemoError(f"no QMP from {self.name}, see "
                                    f"{self.log}") from None
                await asyncio.sleep(0.1)

    def check_alive(self):
        if self.proc.returncode is not None:
            raise DemoError(f"QEMU {self.name} exited with "
                            f"{self.proc.returncode}, see {self.log} and "
                            f"{self.serial}")

    def ready(self):
        self.check_alive()
        return self.serial.exists() and READY in self.serial.read_text(
            errors="replace")

    async def nuksm(self):
        [info] = await self.qmp.execute("query-nuksm")
        return info

    async def stop(self):
        """quit over QMP, or SIGTERM when QMP is not up."""
        if self.proc is None:
            return
        if self.qmp.runstate == Runstate.RUNNING:
            with contextlib.suppress(EOFError, ExecInterruptedError):
                await self.qmp.execute("quit")
                await self.qmp.disconnect()
        elif self.proc.returncode is None:
            self.proc.terminate()
        rc = await reap(self.proc, self.name)
        if rc != 0:
            raise DemoError(f"QEMU {self.name} exited with {rc}, see "
                            f"{self.log}")


async def wait_ready(guests):
    """Progress on one line on a terminal, a line per change otherwise."""
    tty = sys.stdout.isatty()
    start = time.monotonic()
    last = None
    while True:
        ready = [g.ready() for g in guests]
        states = ", ".join(f"{g.name} {'ready' if r else 'booting'}"
                           for g, r in zip(guests, ready))
        elapsed = time.monotonic() - start
        line = f"booting {len(guests)} guests: {states} ({elapsed:.0f} s)"
        if tty:
            print(f"\r{line}\033[K", end="", flush=True)
        elif states != last:
            print(line, flush=True)
        last = states
        if all(ready):
            print("\n" if tty else "", end="")
            return
        if elapsed > BOOT_TIMEOUT:
            raise DemoError(f"guests not ready within {BOOT_TIMEOUT} s, "
                            f"see {DEMO}/*.serial")
        await asyncio.sleep(0.5)


async def wait_active(guests):
    deadline = time.monotonic() + ACTIVE_TIMEOUT
    for guest in guests:
        while (info := await guest.nuksm())["state"] != "active":
            if time.monotonic() > deadline:
                raise DemoError(f"{guest.name} never became active: state "
                                f"{info['state']}, agent error: "
                                f"{info.get('agent-error', '-')}")
            await asyncio.sleep(0.2)
    print(f"all {len(guests)} guests are attached to nuksmd")


async def print_table(guests, elapsed):
    print(f"\n[{elapsed:3.0f} s] {'VM':8} {'state':12} {'policy':9} "
          f"{'eligible':>9} {'scanned':>9} {'passes':>6} {'merged':>7} "
          f"{'saved':>10}")
    for guest in guests:
        i = await guest.nuksm()
        print(f"{'':7} {guest.name:8} {i['state']:12} "
              f"{i.get('policy', '-'):9} {i['eligible-pages']:9} "
              f"{i['pages-scanned']:9} {i['full-scans']:6} "
              f"{i['merged-pages']:7} {mib(i['merged-pages']):6.1f} MiB")
    agent = await guests[0].qmp.execute("query-nuksm-agent")
    # A VM sees its own merge domain's figures (every guest is in
    # "default" here).
    print(f"{'':7} its domain: {agent['vms']} VMs, policy "
          f"{agent['policy']}, "
          f"pages_sharing {agent['pages-sharing']} "
          f"({mib(agent['pages-sharing']):.1f} MiB saved)")


async def switch_policy(sock, guests, policy):
    # The host's policy is the administrator's: VMs may set it over QMP
    # (nuksm-set-policy) only where nuksmd has vm-set-policy.
    print(f"\n$ nuksmctl policy {policy}")
    print(await nuksmctl(sock, "policy", policy), end="")
    deadline = time.monotonic() + 5
    for guest in guests:
        while (info := await guest.nuksm()).get("policy") != policy:
            if time.monotonic() > deadline:
                raise DemoError(f"{guest.name} still sees policy "
                                f"{info.get('policy')}")
            await asyncio.sleep(0.1)
        print(f"  {guest.name}: query-nuksm policy = {info['policy']}")


async def watch(guests, seconds, start):
    end = time.monotonic() + seconds
    while True:
        for guest in guests:
            guest.check_alive()
        await print_table(guests, time.monotonic() - start)
        left = end - time.monotonic()
        if left <= 0:
            return
        await asyncio.sleep(min(TABLE_INTERVAL, left))


async def run(args, stack):
    for path in (GUEST / "vmlinuz", GUEST / "initramfs.cpio.gz", QEMU,
                 NUKSMD, NUKSMCTL):
        if not path.is_file():
            raise DemoError(f"{path} is missing (run make)")
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(parents=True)

    agent = Agent()
    stack.push_async_callback(agent.stop)
    await agent.start()

    guests = [Guest(i, agent.sock) for i in range(args.vms)]
    for guest in guests:
        stack.push_async_callback(guest.stop)
        await guest.start()
    await wait_ready(guests)
    await wait_active(guests)

    print("\n$ nuksmctl status")
    print(await nuksmctl(agent.sock, "status"), end="")
    print("\n$ nuksmctl vms")
    print(await nuksmctl(agent.sock, "vms"), end="")

    start = time.monotonic()
    await watch(guests, args.seconds / 2, start)
    await switch_policy(agent.sock, guests, "fair")
    await watch(guests, args.seconds / 2, start)
    print("\nshutting down")


async def main(args):
    task = asyncio.current_task()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM,
                                                   task.cancel)
    async with contextlib.AsyncExitStack() as stack:
        await run(args, stack)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30,
                        help="how long to watch the guests (default 30)")
    parser.add_argument("--vms", type=int, default=2,
                        help="number of guests (default 2)")
    args = parser.parse_args()
    if args.seconds < 1 or args.vms < 1:
        parser.error("--seconds and --vms must be at least 1")
    return args


if __name__ == "__main__":
    options = parse_args()
    try:
        asyncio.run(main(options))
    except (DemoError, ExecuteError) as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        sys.exit(1)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\ndemo interrupted", file=sys.stderr)
        sys.exit(130)
    print("demo finished")
