# SPDX-License-Identifier: GPL-2.0-or-later
"""The workloads: what guest memory holds and what happens to it.

qtest workloads (-accel qtest: no vCPU runs) fill guest RAM through the
qtest socket: a memset of the whole region, then an 8-byte tag at the
start of every page, so no two pages are alike unless meant to be
(random pages differ in their first bytes too, so comparisons cost the
same) and no page is zero.  Tags are the same in every VM for shared
regions, and include the VM's index for unique ones.  The low 1 MiB of
guest RAM (VGA window, BIOS shadow) is left alone.

The "real" workload boots the TCG test guest (build/guest), whose init
fills N MiB of page cache with the same content (nuksm.fill=N).  The
"xlh" workload boots it with a disk, its own copy of one image, which
each guest reads into its page cache when deduplication is switched on
(nuksm.read=vda nuksm.cue=1): XLH's experiment (§5).  "xlh-churn" does
it in guests whose memory is mostly taken by unique pages
(nuksm.room=N) and which read slowly (nuksm.rate=R): their page cache
keeps changing, as in XLH's kernel builds and web servers.
"""

import random
import threading
import time
from dataclasses import dataclass

import harness

MIB = 1 << 20
PAGE = harness.PAGE_SIZE
LOW_HOLE = MIB
BACKGROUND = 0x5a
# Seconds between samples while merging at a budget below full throttle.
SMALL_BUDGET_SAMPLE_S = 1.0
SHARED_TAG = 0x5348 << 48
UNIQUE_TAG = 0x554E << 48


@dataclass
class Workload:
    name: str
    title: str
    vms: int
    mem_mib: int
    # qtest: [(kind, MiB)] from LOW_HOLE on, kind "shared", "unique",
    # "scattered" (every other page shared, the others unique) or
    # "shuffled" (the same, each VM holding its shared pages in an order
    # of its own, as page cache holds the same files)
    layout: tuple = ()
    # tcg: MiB of identical page cache each guest fills
    fill_mib: int = 0
    # tcg: MiB of the disk image each guest reads from its own copy of
    # it, once deduplication is on
    disk_mib: int = 0
    # tcg, with a disk: MiB each guest leaves available, having filled the
    # rest with unique pages, and MiB a second it reads (0: all at once)
    room_mib: int = 0
    read_rate: int = 0
    # More nuksm runs beside the default one: (side name, {property:
    # value} of the nuksm object), e.g. with a part switched off
    variants: tuple = ()
    # "full": full throttle; "default": KSM's defaults, nuksm at the CPU
    # share KSM used; "paced": the same with KSM ten times as fast;
    # "idle": full throttle until merged, then each side's defaults for
    # the steady state.
    budgets: tuple = ("full",)
    # Fixed measurement length (s); else until 99% of the expected saving
    # (or, without one, until the saving stops growing).
    duration: float = 0
    # Guest pages rewritten per second (same content: copy-on-write only)
    rewrite_rate: int = 0
    timeout: float = 120
    # Seconds to settle, then to measure, the steady state (else the
    # run's defaults, bench/run.py)
    steady_s: float = 0
    # Seconds between samples while merging at full throttle; at a
    # smaller budget, at least SMALL_BUDGET_SAMPLE_S.  A sample asks
    # nuksmd over a new connection: on a long run at a small budget,
    # sampling every 0.1 s would be a good part of what nuksmd does (at
    # KSM's default share, 1.8 µs of nuksmd's CPU per merged page).
    sample_s: float = 0.1
    # Report the saving over time (integrated, time to 90%) against
    # KSM's: XLH's and UKSM's figures.
    over_time: bool = False
    # The budgets of one more nuksm run each, profiled (perf record)
    # while it merges: the cost model's stages (bench/stages.py).
    profile: tuple = ()

    @property
    def tcg(self):
        return self.fill_mib > 0 or self.disk_mib > 0

    @property
    def guest_pages(self):
        return self.vms * self.mem_mib * MIB // PAGE

    def regions(self):
        """(kind, first guest RAM offset, size) of each layout region."""
        addr = LOW_HOLE
        for kind, mib in self.layout:
            yield kind, addr, mib * MIB
            addr += mib * MIB

    @property
    def low_memory(self):
        """Bytes of guest RAM q35 maps below 4 GiB: 2 GiB once RAM is
        2.75 GiB or more, else all of it; the rest it maps from 4 GiB on
        (hw/i386/pc_q35.c)."""
        ram = self.mem_mib * MIB
        return 2 << 30 if ram >= 0xb0000000 else ram

    def guest_address(self, offset):
        """The guest physical address of guest RAM offset @offset."""
        low = self.low_memory
        return offset if offset < low else offset - low + (4 << 30)

    def segments(self, offset, size):
        """(guest address, first page counted from @offset, size) of the
        stretches of the @size bytes of guest RAM from @offset on that are
        contiguous in guest physical memory."""
        cuts = [offset, offset + size]
        if offset < self.low_memory < offset + size:
            cuts.insert(1, self.low_memory)
        for start, end in zip(cuts, cuts[1:]):
            yield (self.guest_address(start), (start - offset) // PAGE,
                   end - start)

    def expected_saving(self):
        """Pages an ideal deduplicator saves: every VM but one's copy of
        each shared page; None when the guest decides (tcg)."""
        if self.tcg:
            return None
        shared = sum(size if kind == "shared" else size // 2
                     for kind, _, size in self.regions()
                     if kind in ("shared", "scattered", "shuffled"))
        return (self.vms - 1) * shared // PAGE


def pipeline(qtest, lines):
    """Send qtest @lines without waiting for each reply (a reader thread
    takes them), about 400k commands per second here."""
    errors = []

    def read():
        for _ in range(len(lines)):
            reply = qtest.reader.readline()
            if not reply.startswith("OK"):
                errors.append(reply)
    reader = threading.Thread(target=read)
    reader.start()
    qtest.sock.sendall("".join(line + "\n" for line in lines).encode())
    reader.join()
    if errors:
        raise RuntimeError(f"qtest: {errors[0]}")


def shuffle_order(vm_index, pages):
    """The order VM @vm_index holds a shuffled region's @pages // 2
    shared pages in: its own, the same in every run."""
    order = list(range(pages // 2))
    random.Random(vm_index).shuffle(order)
    return order


def tag(kind, vm_index, page, order=None):
    """The tag of page @page of a region of @kind in VM @vm_index; for a
    shuffled region, @order is shuffle_order()'s."""
    if kind == "shared" or (kind == "scattered" and page % 2 == 0):
        return SHARED_TAG | page
    if kind == "shuffled" and page % 2 == 0:
        return SHARED_TAG | order[page // 2] * 2
    return UNIQUE_TAG | vm_index << 32 | page


def fill(workload, qtest, vm_index):
    for kind, offset, size in workload.regions():
        order = shuffle_order(vm_index, size // PAGE) \
            if kind == "shuffled" else None
        for addr, first, length in workload.segments(offset, size):
            qtest.memset(addr, length, BACKGROUND)
            pipeline(qtest, [f"writeq {addr + p * PAGE:#x} "
                             f"{tag(kind, vm_index, first + p, order):#x}"
                             for p in range(length // PAGE)])


class Rewriter:
    """Rewrites shared pages of one VM with what they hold, @rate pages a
    second in address order, round and round: the content stays a
    duplicate, but each write breaks its sharing (UKSM's COW-broken
    workload, §8.1.2)."""

    def __init__(self, workload, qtest):
        self.pages = [(workload.guest_address(offset + p * PAGE),
                       tag(kind, 0, p))
                      for kind, offset, size in workload.regions()
                      if kind == "shared" for p in range(size // PAGE)]
        self.rate = workload.rewrite_rate
        self.qtest = qtest
        self.stop_event = threading.Event()
        self.written = 0
        self.thread = threading.Thread(target=self._run)

    def start(self):
        self.thread.start()

    def _run(self):
        tick = 0.05
        per_tick = max(1, int(self.rate * tick))
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            batch = [self.pages[(self.written + i) % len(self.pages)]
                     for i in range(per_tick)]
            pipeline(self.qtest, [f"writeq {a:#x} {v:#x}" for a, v in batch])
            self.written += per_tick
            next_at += tick
            self.stop_event.wait(max(0.0, next_at - time.monotonic()))

    def stop(self):
        self.stop_event.set()
        self.thread.join()


# nuksm with its change test reading whole pages, as before adaptive
# partial hashing (nuksm-strength.c): that part's share.
FULL_HASH = ("nuksm-fullhash", {"hash-strength": 4096})
# nuksm without I/O hints (nuksm-hints.c): their share.
NO_HINTS = ("nuksm-nohints", {"io-hints": "off"})
# nuksm with region distilling (nuksm-regions.c), which is off by
# default: that part's share.
DISTILLING = ("nuksm-distill", {"distilling": "on"})


def uksm_workload(name, rewrite_rate=0, budget="paced", duration=180,
                  variants=(DISTILLING, FULL_HASH)):
    """UKSM's static (§8.1.1) or, with @rewrite_rate, COW-broken
    (§8.1.2) workload, scaled to this machine: 2 VMs x 1 GiB, mostly
    unique, a dense set of 255 MiB alike in both, rewritten with the same
    content at @rewrite_rate pages a second in one.  KSM at @budget, by
    default ten times its default speed (at its defaults it merges
    nothing in 3 minutes: two passes over 2 GiB take 210 s); nuksm at the
    CPU KSM used: at its defaults and as @variants say, by default with
    region distilling on and with partial hashing off (the I/O hints
    have no disk to hear from here); @duration seconds."""
    kind = f"{rewrite_rate} shared pages/s rewritten" if rewrite_rate \
        else "static"
    title = f"UKSM's {'dynamic' if rewrite_rate else 'static'}: 2 VMs x " \
        f"1 GiB, 255 MiB identical, {kind}"
    if budget != "paced":
        title += f", KSM's {budget} budget"
    return Workload(name, title, 2, 1024,
                    (("unique", 768), ("shared", 255)),
                    budgets=(budget,), duration=duration,
                    timeout=duration + 60, sample_s=1.0,
                    rewrite_rate=rewrite_rate, over_time=True,
                    variants=variants)


def xlh_workload(name, title, disk_mib, room_mib=0, read_rate=0):
    """XLH's experiment (§5): 2 TCG guests x 512 MiB, each reading
    @disk_mib MiB from its own copy of one disk image (with @room_mib and
    @read_rate, see Workload).  KSM at its defaults, nuksm at the CPU KSM
    used, with and without I/O hints; 3 minutes, the length of the short
    jobs XLH has in mind (§5.2)."""
    return Workload(name, title, 2, 512, disk_mib=disk_mib,
                    room_mib=room_mib, read_rate=read_rate,
                    budgets=("default",), duration=180, timeout=240,
                    sample_s=1.0, over_time=True, variants=(NO_HINTS,))


def suite(quick):
    """The workloads of `make bench` (@quick: of `make bench-quick`)."""
    if quick:
        return [
            Workload("static", "static: 2 VMs x 64 MiB, half identical",
                     2, 64, (("unique", 31), ("shared", 32)),
                     budgets=("full", "default"), timeout=60,
                     variants=(FULL_HASH,), profile=("full", "default")),
            Workload("many", "many VMs: 4 x 64 MiB sharing a 48 MiB image",
                     4, 64, (("shared", 48), ("unique", 15))),
            Workload("sparse", "sparse: 2 VMs x 128 MiB, no duplicates",
                     2, 128, (("unique", 127),), duration=8),
            Workload("cow", "copy-on-write heavy: 2 VMs x 64 MiB identical, "
                     "500 pages/s rewritten", 2, 64, (("shared", 63),),
                     duration=12, rewrite_rate=500, variants=(FULL_HASH,)),
            Workload("scattered", "scattered: 2 VMs x 128 MiB, every other "
                     "page identical", 2, 128, (("scattered", 127),),
                     timeout=60),
            shuffled_workload(2, 128),
        ]
    return [
        Workload("static", "static: 2 VMs x 1 GiB, half identical",
                 2, 1024, (("unique", 511), ("shared", 512)),
                 budgets=("full", "default"), timeout=480,
                 variants=(FULL_HASH,), profile=("full", "default")),
        Workload("many", "many VMs: 8 x 256 MiB sharing a 192 MiB image",
                 8, 256, (("shared", 192), ("unique", 63))),
        Workload("sparse", "sparse: 2 VMs x 1 GiB, no duplicates",
                 2, 1024, (("unique", 1023),), budgets=("full", "default"),
                 duration=20),
        Workload("cow", "copy-on-write heavy: 2 VMs x 256 MiB identical, "
                 "2000 pages/s rewritten", 2, 256, (("shared", 255),),
                 budgets=("full", "default"), duration=30,
                 rewrite_rate=2000, variants=(FULL_HASH,)),
        Workload("scattered", "scattered: 2 VMs x 1 GiB, every other page "
                 "identical", 2, 1024, (("scattered", 1023),), timeout=240),
        *(shuffled_workload(vms, 2048 // vms) for vms in SHUFFLED_SERIES_VMS),
        Workload("real", "real guests: 2 TCG guests x 256 MiB, 64 MiB of "
                 "identical page cache", 2, 256, fill_mib=64, timeout=150),
        xlh_workload("xlh", "XLH's experiment: 2 TCG guests x 512 MiB "
                     "read 384 MiB from their own disks", 384),
        # XLH's point, sharing that lives less long than KSM takes to
        # find it: the same guests with 64 MiB of room, reading 1 MiB a
        # second, so that a page cache page lives about a minute (in
        # XLH's kernel builds, 80% of the duplicates lived 30 s to 5
        # minutes, §2); the disk holds what they read in the run.
        xlh_workload("xlh-churn", "XLH's churn: 2 TCG guests x 512 MiB "
                     "with 64 MiB of room read 1 MiB/s from their own "
                     "disks", 192, room_mib=64, read_rate=1),
        uksm_workload("uksm-static"),
        uksm_workload("uksm-dynamic", 500),
        # UKSM's point, a budget too small to scan everything soon: KSM
        # at its defaults, for long enough that it merges.
        uksm_workload("uksm-lowcpu", budget="default", duration=420,
                      variants=(DISTILLING,)),
        uksm_workload("uksm-dynamic-lowcpu", 500, budget="default",
                      duration=420, variants=()),
        *(scale_workload(vms) for vms in SCALE_SERIES_VMS),
        *(idle_workload(gib) for gib in IDLE_SERIES_GIB),
    ]


# VMs of the shuffled series, 2 GiB of guest RAM in all.
SHUFFLED_SERIES_VMS = (2, 4, 8)


def shuffled_workload(vms, mib):
    """@vms VMs x @mib MiB, every other page a duplicate, each VM holding
    the duplicates in an order of its own: page cache of the same files
    read by long-running guests.  "shuffled" with 2 VMs, else
    "shuffled-N"; the 2-VM one is profiled for the cost model."""
    name = "shuffled" if vms == 2 else f"shuffled-{vms}"
    return Workload(name, f"shuffled: {vms} VMs x {mib} MiB, every other "
                    "page identical, in each VM's own order", vms, mib,
                    (("shuffled", mib - 1),), timeout=240,
                    profile=("full",) if vms == 2 else ())


# VMs of 1 GiB of the scale series; 2 of them are the static workload's.
SCALE_SERIES_VMS = (8, 16)


def scale_workload(vms):
    """@vms VMs x 1 GiB, half identical in all of them: static, on more
    of the host."""
    return Workload(f"scale-{vms}x1g", f"scale: {vms} VMs x 1 GiB, half "
                    "identical", vms, 1024, (("unique", 511), ("shared", 512)),
                    timeout=60 * vms)


# Guest RAM of the idle series, GiB in all (2 VMs): 2 is the idle goal's.
IDLE_SERIES_GIB = (1, 2, 4, 16)


def idle_workload(gib):
    """2 VMs, @gib GiB of guest RAM in all, half identical: merged at
    full throttle, then idle at each side's defaults.  nuksm's rests
    between idle passes grow to 16 s per 2 GiB of a VM (at least 16 s):
    the steady state settles for, then is measured over, twice the
    longest."""
    mib = gib * 1024 // 2
    longest_rest_s = max(16, 16 * mib / 2048)
    return Workload(f"idle-{gib}g", f"idle: 2 VMs x {mib} MiB, half "
                    "identical, at the defaults once merged", 2, mib,
                    (("unique", mib // 2 - 1), ("shared", mib // 2)),
                    budgets=("idle",), timeout=120 + 60 * gib,
                    steady_s=2 * longest_rest_s)
