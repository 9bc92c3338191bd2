# SPDX-License-Identifier: GPL-2.0-or-later
"""Kernel KSM (/sys/kernel/mm/ksm): settings, counters, ksmd's CPU.

KSM is global to the host.  Ksm() saves every setting it may change and
puts them back on restore(), which also runs at interpreter exit and on
SIGINT, SIGTERM and SIGHUP: a benchmark never leaves KSM changed behind
(only SIGKILL can; then compare with the values logged at start).
"""

import atexit
import os
import signal
import sys

import procstat

KSM = "/sys/kernel/mm/ksm"
SLAB = "/sys/kernel/slab"
# What a benchmark changes; each is restored.
SETTINGS = ("run", "pages_to_scan", "sleep_millisecs")
# KSM's advisor (Linux 6.8): it sets pages_to_scan itself, to scan all
# mergeable memory in advisor_target_scan_time (200 s) at up to
# advisor_max_cpu (70%) of a core; "scan-time" turns it on.
ADVISOR_MODE = "advisor_mode"
ADVISOR = {ADVISOR_MODE: "scan-time"}
COUNTERS = ("pages_shared", "pages_sharing", "pages_unshared",
            "pages_volatile", "full_scans", "ksm_zero_pages",
            "stable_node_dups", "stable_node_chains")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# KSM's own defaults (mm/ksm.c), ten times their speed (the middle of
# the three KSM speeds UKSM's paper compares with, §8.1.1) and its full
# throttle.
DEFAULT = {"pages_to_scan": 100, "sleep_millisecs": 20}
PACED = {"pages_to_scan": 1000, "sleep_millisecs": 20}
FULL = {"pages_to_scan": 10000, "sleep_millisecs": 0}
# Budgets at which nuksm gets the CPU share KSM was measured to use.
AT_KSM_SHARE = {"default": DEFAULT, "paced": PACED}


def read(name):
    """A number, or the choice in brackets of a choice
    ("[none] scan-time")."""
    with open(f"{KSM}/{name}") as f:
        text = f.read()
    if "[" in text:
        return text[text.index("[") + 1:text.index("]")]
    return int(text.split()[0])


def has_advisor():
    return os.path.exists(f"{KSM}/{ADVISOR_MODE}")


def write(name, value):
    with open(f"{KSM}/{name}", "w") as f:
        f.write(str(value))


def available():
    return os.access(f"{KSM}/run", os.W_OK)


def counters():
    return {name: read(name) for name in COUNTERS
            if os.path.exists(f"{KSM}/{name}")}


def ksmd_pid():
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "ksmd":
                        return int(pid)
            except FileNotFoundError:
                pass
    raise RuntimeError("no ksmd thread (kernel without CONFIG_KSM?)")


def ksm_stat(pid):
    """/proc/PID/ksm_stat as a dict of ints (yes/no as 1/0)."""
    stat = {}
    with open(f"/proc/{pid}/ksm_stat") as f:
        for line in f:
            key, value = line.replace(":", " ").split()[:2]
            stat[key] = {"yes": 1, "no": 0}.get(value, None)
            if stat[key] is None:
                stat[key] = int(value)
    return stat


def mergeable_pids():
    """Processes with KSM-mergeable memory (other benchmarks' or tests'
    QEMUs would share ksmd and its counters with us)."""
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if ksm_stat(pid).get("ksm_mergeable"):
                    pids.append(int(pid))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
    return pids


def slab_object_size(cache):
    """Bytes one object of @cache takes in its slab (slab_size includes
    alignment and metadata; the cache may be merged with others)."""
    with open(f"{SLAB}/{cache}/slab_size") as f:
        return int(f.read())


def metadata_bytes(pids, saving):
    """KSM's metadata for @pids, whose merged pages save @saving pages:
    their rmap_items (one per scanned page, as the kernel counts them in
    ksm_stat), the stable nodes of their KSM pages (one per KSM page:
    the pages they map to KSM pages minus those saved; pages shared with
    other processes make this an upper bound) and their mm_slots, each at
    its slab object size."""
    stats = [ksm_stat(pid) for pid in pids]
    rmap_items = sum(s["ksm_rmap_items"] for s in stats)
    stable_nodes = sum(s["ksm_merging_pages"] for s in stats) - saving
    return {"rmap_items": rmap_items,
            "stable_nodes": stable_nodes,
            "bytes": rmap_items * slab_object_size("ksm_rmap_item") +
            stable_nodes * slab_object_size("ksm_stable_node") +
            len(pids) * slab_object_size("ksm_mm_slot")}


class Ksm:
    """KSM's settings, saved now and restored on restore() or exit."""

    def __init__(self):
        self.settings = SETTINGS + ((ADVISOR_MODE,) if has_advisor() else ())
        self.saved = {name: read(name) for name in self.settings}
        # Nothing merged and not running: ours to clean up entirely.
        self.clean = self.saved["run"] == 0 and read("pages_shared") == 0
        print(f"bench: KSM settings at start: {self.saved}", flush=True)
        self.pid = ksmd_pid()
        self._restored = False
        atexit.register(self.restore)
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        self.restore()
        sys.exit(128 + signum)

    def set(self, **settings):
        # run last, so ksmd never runs with half the new settings; the
        # advisor after pages_to_scan, which it then sets itself.
        for name in sorted(settings, key=lambda n: (n == "run",
                                                    n == ADVISOR_MODE)):
            write(name, settings[name])

    def cpu_ns(self):
        return procstat.thread_cpu_ns(self.pid, self.pid)

    def reset(self):
        """Stop ksmd and, if KSM held no merged page when we started,
        unmerge everything it merged since (run=2 does it synchronously
        and frees every rmap_item), so the next run starts from scratch."""
        write("run", 2 if self.clean else 0)
        write("run", 0)

    def restore(self):
        if self._restored:
            return
        self._restored = True
        # A signal now (timeout(1) sends two) must not cut the restore
        # short: it is handled once the settings are back.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            # run first: nothing scans with the benchmark's settings.
            self.reset()
            # The advisor before pages_to_scan, which it would change.
            for name in sorted(self.settings, key=lambda n: (
                    n == "run", n != ADVISOR_MODE)):
                write(name, self.saved[name])
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        print(f"bench: KSM settings restored: {self.saved}", flush=True)
