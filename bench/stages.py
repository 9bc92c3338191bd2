# SPDX-License-Identifier: GPL-2.0-or-later
"""The cost model: where nuksm's CPU goes, stage by stage, from a perf
profile of a run, beside each stage's physical floor (bench/floors.c).

A sample of one of the threads whose CPU is nuksm's (bench/measure.py)
goes to the first stage whose rule matches a frame of its call chain,
innermost first: the stage of the code that was running, or of the
system call it was in.  A stage's CPU is its share of the samples times
the CPU those threads spent while merging (schedstat's, not perf's).

Stages, per merged page (one guest page no longer backed by memory of
its own):

    hash      XXH3 of guest pages (the scan's stability test, the agent's
              check of an upload)
    lookup    the agent's stable index, unstable table and placement
    upload    a page's content on its way into the store
    compare   memcmp of a guest page with its slot
    remap     mapping slots over guest pages, write protection, the
              faults and TLB flushes they cost
    scan      walking guest memory: the page map, dirty log, page flags
    messages  the socket: sending, receiving, (de)coding messages
    wake-ups  polling and waking: main loops, timers, futexes
    rest      everything else
"""

import re
import subprocess
from collections import Counter

STAGES = ("hash", "lookup", "upload", "compare", "remap", "scan",
          "messages", "wake-ups", "rest")

# System calls, by the kernel's entry point (__x64_sys_NAME, or
# __do_sys_NAME): their stage.
SYSCALLS = {
    "mremap": "remap", "mmap": "remap", "munmap": "remap",
    "mprotect": "remap", "madvise": "remap", "ioctl": "remap",
    "pwrite64": "upload", "fallocate": "upload",
    "process_vm_readv": "upload",
    "pread64": "scan", "preadv": "scan",
    "sendmsg": "messages", "recvmsg": "messages", "sendto": "messages",
    "recvfrom": "messages", "sendmmsg": "messages", "recvmmsg": "messages",
    "ppoll": "wake-ups", "poll": "wake-ups", "epoll_wait": "wake-ups",
    "epoll_pwait": "wake-ups", "futex": "wake-ups", "nanosleep": "wake-ups",
    "clock_nanosleep": "wake-ups", "read": "wake-ups",
    "write": "wake-ups", "timerfd_settime": "wake-ups",
}
SYSCALL = re.compile(r"^(?:__x64_sys|__do_sys|__se_sys|__ia32_sys)_(\w+)")

# Symbols of user space and the kernel's work outside system calls: their
# stage, by the first rule (a regular expression) that matches.
RULES = (
    ("hash", r"XXH3|XXH64|XXH_|nuksm_page_digest|nuksm_digest|"
             r"nuksm_sample|libxxhash"),
    ("compare", r"memcmp"),
    ("upload", r"upload|copies_write|store_write|peek_pages"),
    ("lookup", r"keymap_|unstable_|index_|policy_|^place|join_copy|"
               r"pair_unstable|handle_candidate"),
    ("remap", r"nuksm_remap|nuksm_commit|uffd|userfaultfd|mwriteprotect|"
              r"change_protection|flush_tlb|do_fault|filemap_map_pages|"
              r"shmem_fault|handle_mm_fault|do_wp_page|zap_pte|"
              r"unmap_page_range|mmap|mremap|munmap|mprotect|madvise|vma_|"
              r"^__GI___ioctl"),
    ("upload", r"^__libc_pwrite"),
    ("scan", r"pagemap|nuksm_scan|nuksm_pages|nuksm_regions|dirty|"
             r"walk_page_range|^__libc_pread"),
    ("messages", r"unix_|sock_|skb|nuksm_agent_|nuksm_outbox|transport_|"
                 r"dispatch_|outbox_|nuksm_msg_|^recv|^send|"
                 r"^__libc_(send|recv)"),
    ("wake-ups", r"poll|g_main_|aio_|qemu_mutex|futex|schedule|"
                 r"eventfd|timer|^__GI___libc_(write|read)|clock_gettime"),
)
RULES = tuple((stage, re.compile(pattern)) for stage, pattern in RULES)

# The agent maps no guest page: its own mappings are windows of the store
# that its uploads are read into (store_window_slot()), and the faults
# of a system call are that call's, not the rules' (which give faults to
# remap, as they are in QEMU).
AGENT_SYSCALLS = {**SYSCALLS, "mmap": "upload", "munmap": "upload",
                  "madvise": "upload"}


def stage_of(frames, agent=False):
    """The stage of a sample whose call chain, innermost first, has the
    frames @frames; @agent: a sample of nuksmd."""
    if agent:
        for sym in frames:
            m = SYSCALL.match(sym)
            if m:
                return AGENT_SYSCALLS.get(m.group(1), "rest")
    for sym in frames:
        m = SYSCALL.match(sym)
        if m:
            return SYSCALLS.get(m.group(1), "rest")
        for stage, rule in RULES:
            if rule.search(sym):
                return stage
    return "rest"


def samples(perf_data, tids):
    """(tid, weight, [frame, innermost first]) of each sample of threads @tids
    in @perf_data: a frame is its symbol, and its file in parentheses (a
    library without symbols, libxxhash's, is known by its file)."""
    out = subprocess.run(
        ["perf", "script", "-i", str(perf_data), "-F",
         "tid,period,ip,sym,dso", "--no-demangle"],
        capture_output=True, text=True, check=True).stdout
    weight, frames = None, []
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith("\t"):       # "TID PERIOD", then frames
            if weight is not None:
                yield tid, weight, frames
            tid, period = (int(x) for x in line.split()[:2])
            weight = period if tid in tids else None
            frames = []
        elif weight is not None:
            parts = line.split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else "")
    if weight is not None:
        yield tid, weight, frames


def breakdown(perf_data, tids, agent_tids=frozenset(),
              main_tids=frozenset()):
    """Where the samples of threads @tids went: "shares" {stage: share}
    of those outside QEMU's main loops (@main_tids), "main_shares" of
    those in them, "main_fraction" theirs of all, and "samples"; @agent_tids
    are nuksmd's."""
    weights, main_weights, count = Counter(), Counter(), 0
    for tid, weight, frames in samples(perf_data, tids):
        stage = stage_of(frames, tid in agent_tids)
        (main_weights if tid in main_tids else weights)[stage] += weight
        count += 1
    total = sum(weights.values()) or 1
    main_total = sum(main_weights.values())
    return {"shares": {s: weights[s] / total for s in STAGES},
            "main_shares": {s: main_weights[s] / (main_total or 1)
                            for s in STAGES},
            "main_fraction": main_total / ((total + main_total) or 1),
            "samples": count}


# What a merged page needs at the least of each floor (bench/floors.c),
# with two VMs: each VM's page hashed once and looked up once, one store
# page allocated and a copy written into it, each page compared with it
# and mapped over in a run, and three message entries for each page
# (candidate, merge, merged).  Nothing needs a wake-up per page, nor
# anything else.  Where the VMs hold their duplicates in orders of their
# own (shuffled), no slot order makes runs of both: one VM's pages can lie
# in line, the other's each cost a mapping of its own (SHUFFLED_REMAP).
FLOORS = {
    "hash": (("hash", 2),),
    "lookup": (("lookup", 2),),
    "upload": (("copy", 1), ("store_page", 1)),
    "compare": (("compare", 2),),
    "remap": (("remap_run", 2),),
    "scan": (),
    "messages": (("message", 6),),
    "wake-ups": (),
    "rest": (),
}


SHUFFLED_REMAP = (("remap_run", 1), ("remap_page", 1))


def floor_us(stage, floors, shuffled=False):
    """The physical floor of @stage per merged page, in us, from the
    floors measured (ns per operation)."""
    needs = SHUFFLED_REMAP if shuffled and stage == "remap" \
        else FLOORS[stage]
    # Results from before a floor was measured lack it.
    return sum(floors.get(name, 0.0) * times for name, times in needs) / 1e3


def cost_model(run, floors, main_loop_baseline_share=0.0):
    """[(stage, us per merged page, floor us)] of a profiled run.  QEMU's
    main loops count only for what they used beyond
    @main_loop_baseline_share of a core, what the KSM side's identical,
    idle main loops used (analyze.py)."""
    st = run["stages"]
    merged = st["merged_pages"]
    cpu_us = st["cpu_s"] * 1e6
    main_counted_us = st.get("main_fraction", 0.0) * cpu_us
    others_us = cpu_us - main_counted_us
    main_us = max(0.0, main_counted_us - main_loop_baseline_share *
                  st.get("merge_s", 0.0) * 1e6)
    main_shares = st.get("main_shares", {})
    shuffled = run["workload"].startswith("shuffled")
    return [(s, (st["shares"][s] * others_us +
                 main_shares.get(s, 0.0) * main_us) / merged,
             floor_us(s, floors, shuffled))
            for s in STAGES]
