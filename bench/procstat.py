# SPDX-License-Identifier: GPL-2.0-or-later
"""What the kernel says about a process: CPU time and memory.

CPU times come from /proc/PID/task/TID/schedstat (nanoseconds on the CPU),
the same source for ksmd, nuksmd and QEMU's threads, so both sides of a
benchmark are measured alike.
"""

import os

KIB = 1024


def thread_cpu_ns(pid, tid):
    """Nanoseconds thread @tid of @pid spent on a CPU; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return 0


def threads(pid):
    """{tid: comm} of the live threads of @pid."""
    result = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return result
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                result[int(tid)] = f.read().strip()
        except FileNotFoundError:
            pass
    return result


def main_threads_cpu_ns(pids):
    """CPU time of the main threads of processes @pids (QEMU's main
    loops)."""
    return sum(thread_cpu_ns(pid, pid) for pid in pids)


def threads_named(pid, comm):
    return [tid for tid, name in threads(pid).items() if name == comm]


def smaps_rollup(pid):
    """The fields of /proc/PID/smaps_rollup, in bytes."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * KIB
    return fields


def guest_ram_ranges(vm):
    """The host addresses of every RAM block of @vm (``info ramblock``:
    guest RAM, and the ROMs and firmware QEMU loads), (start, end) each,
    at their whole size, where they stay while the VM runs."""
    ranges = []
    for line in vm.hmp("info ramblock").splitlines():
        # Name, page size ("4 KiB"), offset, used, total, host address,
        # rw or ro: the numbers are those in hex.
        numbers = [f for f in line.split() if f.startswith("0x")]
        if len(numbers) == 4:
            _, _, total, start = (int(n, 16) for n in numbers)
            ranges.append((start, start + total))
    assert ranges, "no RAM block in 'info ramblock'"
    return ranges


def anon_outside(pid, ranges):
    """Bytes of anonymous memory @pid has outside @ranges (its RAM
    blocks): QEMU's own heap and thread stacks, and nuksm's metadata."""
    total = 0
    inside = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = any(s <= start and end <= e for s, e in ranges)
            elif head == "Anonymous:" and not inside:
                total += int(line.split()[1]) * KIB
    return total


# What deduplication changes on the host, physically: guest RAM and the
# agent (AnonPages), the store (Shmem), KSM's rmap items and stable nodes
# and the kernel's mappings (SUnreclaim), page tables.  Page cache and
# reclaimable slab are left out: the host's other work moves them.
PHYSICAL = ("AnonPages", "Shmem", "SUnreclaim", "PageTables")


def mappings(pids):
    """The mappings (VMAs) processes @pids hold together."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/maps", "rb") as f:
            total += sum(1 for _ in f)
    return total


def meminfo():
    """/proc/meminfo, in bytes."""
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            parts = value.split()
            fields[name] = int(parts[0]) * (KIB if parts[1:] == ["kB"]
                                             else 1)
    return fields


def physical():
    """The host's memory that deduplication changes ({PHYSICAL field:
    bytes} and their "total")."""
    info = meminfo()
    fields = {name: info[name] for name in PHYSICAL}
    fields["total"] = sum(fields.values())
    return fields
