# SPDX-License-Identifier: GPL-2.0-or-later
"""The merge engine end to end: real nuksmd, real QEMUs (-accel qtest).

Guest memory is written and read back through the qtest protocol, so
every check is on what the guest would see.
"""

import contextlib
import os
import random
import re
import signal
import struct
import time

import pytest
import xxhash
from qemu.qmp import ExecuteError

import harness
from harness import (Qtest, b64read, b64write, ctl_json, read_big, wait_until,
                     write_big)

# The merge path at the VMs' own max-cpu: no host scan budget.
pytestmark = pytest.mark.full_throttle

PAGE = 4096
MIB = 1 << 20


def pseudo_random(seed, size):
    return random.Random(seed).randbytes(size)


def anon_rss(pid):
    """Anonymous memory of a process, bytes (smaps_rollup)."""
    return harness.proc_kib_field(pid, "smaps_rollup", "Anonymous")


def store_bytes(state_dir):
    """Memory the agent's store files really use (allocated blocks)."""
    return sum(os.stat(p).st_blocks * 512
               for p in harness.store_paths(state_dir))


def nuksm(vm):
    return vm.nuksm()


def sharing(vm):
    """The agent's pages-sharing, asked through @vm."""
    return vm.cmd("query-nuksm-agent")["pages-sharing"]


def wait_states(vms, state):
    for vm in vms:
        vm.wait_state(state)


def merged_non_zero(vm):
    info = nuksm(vm)
    return info["merged-pages"] - info["zero-pages"]


def pages_reading_store(pid):
    """Pages of process @pid's private mappings of store files that read
    the store: resident from the file, or not faulted in yet (pagemap).
    Every other page of such a mapping is the process's own."""
    reading = 0
    fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                parts = line.split()
                if len(parts) < 6 or parts[1][3] != "p" or \
                        not os.path.basename(parts[5]).startswith("store-"):
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                n = (end - start) // PAGE
                entries = struct.unpack(f"{n}Q", os.pread(
                    fd, n * 8, start // PAGE * 8))
                reading += sum(1 for e in entries
                               if not e >> 62 & 1 and
                               (not e >> 63 & 1 or e >> 61 & 1))
    finally:
        os.close(fd)
    return reading


# Layout of each test guest: shared pages, then unique pages.
SHARED_AT = 64 * MIB
UNIQUE_AT = 192 * MIB


def make_pair(agent, qtest_vm, extra=()):
    """Two 512 MiB VMs on @agent, created disabled: tests fill their
    memory, then enable() them to scan at full speed."""
    vms = [qtest_vm(name, extra=["-m", "512M", *extra], agent=agent.sock,
                    max_cpu=100, enabled="off")
           for name in ("vm0", "vm1")]
    for vm in vms:
        vm.wait_state("disabled")
    return agent, vms


@pytest.fixture
def pair(agent, qtest_vm):
    return make_pair(agent, qtest_vm)


def fill(vms, content, at=SHARED_AT):
    """Write @content into every VM; returns their qtest connections."""
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    for q in qtests:
        write_big(q, at, content)
    return qtests


def enable(vms):
    for vm in vms:
        vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
               value=True)
        vm.wait_state("active")


def test_acceptance_two_vms(pair):
    """64 MiB identical + 64 MiB unique per VM: the identical pages merge,
    the unique ones do not, RSS moves into the store, content is exact."""
    agent, vms = pair
    shared = pseudo_random(1, 64 * MIB)
    unique = [pseudo_random(100 + i, 64 * MIB) for i in range(2)]
    shared_pages = len(shared) // PAGE
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    rss_before = []
    for i, (vm, q) in enumerate(zip(vms, qtests)):
        write_big(q, SHARED_AT, shared)
        write_big(q, UNIQUE_AT, unique[i])
        rss_before.append(anon_rss(vm.pid))
    store_before = store_bytes(agent.state_dir)
    enable(vms)

    wait_until(lambda: all(merged_non_zero(vm) >= 0.99 * shared_pages
                           for vm in vms), 120,
               "99% of the identical pages to merge in both VMs")
    time.sleep(2)  # a few more passes: nothing else may merge

    for vm in vms:
        # Each shared page is merged; no unique page is (a unique page
        # could only merge by matching another one).
        assert shared_pages * 0.99 <= merged_non_zero(vm) <= shared_pages
    info = vms[0].cmd("query-nuksm-agent")
    assert shared_pages * 0.99 <= info["pages-shared"] <= shared_pages
    # Two VMs map each shared page: one copy saved per page.
    assert shared_pages * 0.99 <= info["pages-sharing"] <= shared_pages

    for i, vm in enumerate(vms):
        dropped = rss_before[i] - anon_rss(vm.pid)
        assert dropped >= 60 * MIB, f"{vm.name} anonymous RSS dropped " \
                                    f"only {dropped / MIB:.1f} MiB"
    grown = store_bytes(agent.state_dir) - store_before
    assert 60 * MIB <= grown <= 68 * MIB, f"store grew {grown / MIB:.1f} MiB"

    # nuksmd read every new slot's content from a QEMU's memory: none
    # came through the socket.
    listing = ctl_json(agent.sock, "vms")["vms"]
    assert [(vm["uploads_sent"], vm["read_error"]) for vm in listing] == \
        [(0, None)] * 2
    assert sum(vm["uploads_read"] for vm in listing) >= \
        info["pages-shared"]

    for i, q in enumerate(qtests):
        assert read_big(q, SHARED_AT, len(shared)) == shared
        assert read_big(q, UNIQUE_AT, len(unique[i])) == unique[i]
        q.close()


def test_forgotten_pages_merge_with_a_late_twin(start_agent, qtest_vm,
                                                workdir):
    """Pages that pair with no other for --forget-after are forgotten:
    nuksmd keeps no entry for them, only a filter of their contents.  A
    VM that writes the same content later has it wanted (WANTED): the
    first VM offers its pages again at once, and both merge."""
    metrics = workdir / "textfile"
    metrics.mkdir()
    agent = start_agent("--forget-after", "2", "--metrics-dir", str(metrics),
                        "--metrics-interval", "1")

    def metric(name):
        return harness.agent_metric(metrics, name)

    content = pseudo_random(7, 8 * MIB)
    pages = len(content) // PAGE
    vm0 = qtest_vm("vm0", extra=["-m", "256M"], agent=agent.sock,
                   max_cpu=100)
    q0 = Qtest(vm0.qtest_path)
    write_big(q0, SHARED_AT, content)
    wait_until(lambda: (metric("nuksm_pages_forgotten") or 0) >= pages and
               metric("nuksm_pages_unshared") == 0, 60,
               "vm0's pages to be offered, then forgotten")
    assert merged_non_zero(vm0) == 0

    vm1 = qtest_vm("vm1", extra=["-m", "256M"], agent=agent.sock,
                   max_cpu=100)
    q1 = Qtest(vm1.qtest_path)
    write_big(q1, SHARED_AT, content)
    wait_until(lambda: all(merged_non_zero(vm) >= 0.99 * pages
                           for vm in (vm0, vm1)), 120,
               "the late twin's pages to merge with the forgotten ones")
    assert metric("nuksm_contents_wanted_total") >= 0.99 * pages
    for q in (q0, q1):
        assert read_big(q, SHARED_AT, len(content)) == content
        q.close()


def test_hotplugged_ram_merges(agent, qtest_vm):
    """RAM plugged in while the VMs run (a pc-dimm, as virsh
    attach-device adds one) merges too, and nuksmd reads its pages where
    the TOPOLOGY that QEMU sends again says they lie."""
    vms = [qtest_vm(name, extra=["-m", "128M,slots=2,maxmem=1G"],
                    agent=agent.sock, max_cpu=100, enabled="off")
           for name in ("vm0", "vm1")]
    content = pseudo_random(7, 16 * MIB)
    for vm in vms:
        vm.wait_state("disabled")
        vm.cmd("object-add", **{"qom-type": "memory-backend-ram",
                                "id": "plugged", "size": 64 * MIB})
        vm.cmd("device_add", driver="pc-dimm", id="dimm0", memdev="plugged")
        (dimm,) = vm.cmd("query-memory-devices")
        q = Qtest(vm.qtest_path)
        write_big(q, dimm["data"]["addr"], content)
        q.close()
    enable(vms)

    pages = len(content) // PAGE
    wait_until(lambda: all(merged_non_zero(vm) >= pages for vm in vms), 60,
               "the plugged RAM's duplicates to merge in both VMs")
    listing = ctl_json(agent.sock, "vms")["vms"]
    assert [vm["uploads_sent"] for vm in listing] == [0, 0]
    assert sum(vm["uploads_read"] for vm in listing) >= pages


def test_write_isolation(pair):
    """A write to a merged page shows in that VM only, and breaks its
    sharing (cow-breaks), never the other VM's content."""
    agent, vms = pair
    content = pseudo_random(7, 4 * MIB)
    pages = len(content) // PAGE
    qtests = fill(vms, content)
    enable(vms)
    wait_until(lambda: all(merged_non_zero(vm) >= pages for vm in vms), 60,
               "the pages to merge")

    victim = SHARED_AT + 10 * PAGE
    qtests[0].command(f"writeq {victim:#x} 0x1122334455667788")
    expected0 = bytearray(content)
    expected0[10 * PAGE:10 * PAGE + 8] = (0x1122334455667788).to_bytes(
        8, "little")
    assert b64read(qtests[0], SHARED_AT, len(content)) == bytes(expected0)
    assert b64read(qtests[1], SHARED_AT, len(content)) == content

    wait_until(lambda: nuksm(vms[0])["cow-breaks"] >= 1, 30,
               "the copy-on-write break to be noticed")
    wait_until(lambda: sharing(vms[0]) == pages - 1,
               30, "the agent to drop the broken reference")

    # Written back, the page is a duplicate again and merges again: the
    # copy now lives inside the store mapping, which nuksm re-registered
    # for write protection when it mapped the store there.
    original = int.from_bytes(content[10 * PAGE:10 * PAGE + 8], "little")
    qtests[0].command(f"writeq {victim:#x} {original:#x}")
    wait_until(lambda: sharing(vms[0]) == pages, 30, "the page to merge again")
    for q in qtests:
        assert b64read(q, SHARED_AT, len(content)) == content
        q.close()

    # Pages mapped from the store need their object as long as the VM
    # runs (a discard of them must go through it): it cannot be deleted.
    with pytest.raises(ExecuteError, match="in use"):
        vms[0].cmd("object-del", id="dedup0")


def scattered(seed, vm_index, size):
    """@size bytes whose even pages are the same in every VM and odd pages
    are VM @vm_index's own: merging them maps windows whose odd pages
    are copies (nuksm_remap_merge_window())."""
    content = bytearray(pseudo_random(seed, size))
    unique = pseudo_random(f"{seed} {vm_index}", size)
    for p in range(1, size // PAGE, 2):
        content[p * PAGE:(p + 1) * PAGE] = unique[p * PAGE:(p + 1) * PAGE]
    return bytes(content)


@pytest.mark.parametrize("layout", ["contiguous", "scattered"])
def test_no_lost_write(pair, layout):
    """Writers hit pages while they are being merged and after: every page
    ends with exactly what was last written.  x-commit-delay-us widens the
    protected window so that writes do land inside it.  Scattered, every
    other page is copied into the windows that merge the others, and
    writes land on those copies too."""
    agent, vms = pair
    vms[0].cmd("qom-set", path="/objects/dedup0",
               property="x-commit-delay-us", value=2000)
    size = 16 * MIB
    if layout == "contiguous":
        originals = [pseudo_random(3, size)] * len(vms)
    else:
        originals = [scattered(3, i, size) for i in range(len(vms))]
    content = bytearray(originals[0])
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    for q, original in zip(qtests, originals):
        write_big(q, SHARED_AT, original)
    # Most writes put back what was there, or land while the merge is in
    # progress.
    writer = harness.Rewriter(qtests[0], SHARED_AT, content, seed=5,
                              same=0.95)
    enable(vms)
    most_merged = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = nuksm(vms[0])
            most_merged = max(most_merged,
                              info["merged-pages"] - info["zero-pages"])
            if most_merged >= 1000 and info["cow-breaks"] >= 1000:
                break
            time.sleep(0.2)
    finally:
        writer.stop()
    assert most_merged >= 1000, "too few merges happened while writing"
    assert nuksm(vms[0])["cow-breaks"] >= 1000, "too few writes hit merges"
    assert read_big(qtests[0], SHARED_AT, size) == bytes(content)
    assert read_big(qtests[1], SHARED_AT, size) == originals[1], \
        "vm1 saw vm0's writes"
    for vm in vms:
        harness.wait_store_mappings_registered(vm.pid)
    for q in qtests:
        q.close()


def test_window_copies_survive_freed_slots(pair):
    """The pages a window copies lie over slots of other contents: the
    agent's slot lines interleave scattered duplicates of neighbouring
    stretches.  When those slots are freed, punched out of the store and
    reused for new contents, the copies keep their content.  So do the
    pages between that read as zero (in the third 2 MiB here), which
    windows leave out: the kernel would zap a zero page mapped in a
    window with the slot under it, and the page would read the slot's
    next content.  The VMs keep their zero pages (zero-pages=off), as
    they would have them before their second look."""
    agent, vms = pair
    for vm in vms:
        vm.cmd("qom-set", path="/objects/dedup0", property="zero-pages",
               value=False)
    size = 8 * MIB
    originals = []
    for i in range(len(vms)):
        content = bytearray(scattered(21, i, size))
        for p in range(size // PAGE // 2 + 1, size // PAGE * 3 // 4, 2):
            content[p * PAGE:(p + 1) * PAGE] = bytes(PAGE)
        originals.append(bytes(content))
    qtests = [Qtest(vm.qtest_path) for vm in vms]
    for q, original in zip(qtests, originals):
        write_big(q, SHARED_AT, original)
    enable(vms)
    pages = size // PAGE // 2
    wait_until(lambda: all(merged_non_zero(vm) >= pages for vm in vms), 60,
               "the scattered duplicates to merge")
    stored = store_bytes(agent.state_dir)

    # Every VM writes new duplicates over those of the second half: the
    # agent frees their slots and punches them out, under the copies of
    # the neighbouring stretch's window, and the new contents merge.
    half = size // 2
    fresh = pseudo_random(22, half)
    for q in qtests:
        for p in range(0, half // PAGE, 2):
            b64write(q, SHARED_AT + half + p * PAGE,
                     fresh[p * PAGE:(p + 1) * PAGE])
    expected = [bytearray(original) for original in originals]
    for content in expected:
        for p in range(0, half // PAGE, 2):
            at = half + p * PAGE
            content[at:at + PAGE] = fresh[p * PAGE:(p + 1) * PAGE]
    wait_until(lambda: all(nuksm(vm)["cow-breaks"] >= pages // 2
                           for vm in vms), 60, "the writes to unmerge")
    wait_until(lambda: all(merged_non_zero(vm) >= pages for vm in vms), 60,
               "the new duplicates to merge")
    assert store_bytes(agent.state_dir) <= stored
    for q, content in zip(qtests, expected):
        got = read_big(q, SHARED_AT, size)
        for p in range(size // PAGE):
            assert got[p * PAGE:(p + 1) * PAGE] == \
                content[p * PAGE:(p + 1) * PAGE], f"page {p} differs"
    # No page but a merged one reads a slot, and every page can be
    # write-protected again.
    for vm in vms:
        assert pages_reading_store(vm.pid) == nuksm(vm)["merged-pages"]
        harness.wait_store_mappings_registered(vm.pid)
    for q in qtests:
        q.close()


def merged_pair(pair, mib=16):
    """Fill @mib MiB of identical content into both VMs and merge it."""
    agent, vms = pair
    content = pseudo_random(11, mib * MIB)
    pages = len(content) // PAGE
    qtests = fill(vms, content)
    enable(vms)
    wait_until(lambda: sharing(vms[0]) >= pages, 60, "the pages to merge")
    return content, pages, qtests


def test_stray_store_page_is_freed(pair):
    """Pages in free slots of the store, as a process filling a slot
    after it was punched out leaves them, are nobody's: the agent finds
    them (every 30 s), among the slots in use (the first hole of the
    file) and far beyond, takes them as orphans and, since no process
    maps them, frees them.  The merged pages keep their content."""
    agent, vms = pair
    content, pages, qtests = merged_pair(pair, mib=4)
    before = store_bytes(agent.state_dir)
    path = harness.store_paths(agent.state_dir)[0]
    fd = os.open(path, os.O_RDWR)
    try:
        first_hole = os.lseek(fd, 0, os.SEEK_HOLE)
        for at in (first_hole, 100000 * PAGE):
            os.pwrite(fd, pseudo_random(12, PAGE), at)
    finally:
        os.close(fd)
    assert store_bytes(agent.state_dir) == before + 2 * PAGE
    wait_until(lambda: store_bytes(agent.state_dir) == before, 90,
               "the stray pages to be freed")
    assert "found 2 store pages in free slots" in agent.log_text()
    assert harness.ctl_json(agent.sock, "status")["orphan_pages"] == 0
    for q in qtests:
        assert read_big(q, SHARED_AT, len(content)) == content
        q.close()


def test_agent_crash_and_restart(pair):
    """SIGKILL the agent in the middle of merging: guests keep their
    memory; a new agent on the same state directory gets every reference
    back from RESTORE, and merging completes.  Scanning 4096 pages a
    second stretches the merge over seconds, so that the kill lands in
    it."""
    agent, vms = pair
    content = pseudo_random(17, 64 * MIB)
    pages = len(content) // PAGE
    qtests = fill(vms, content)
    for vm in vms:
        vm.cmd("qom-set", path="/objects/dedup0", property="scan-rate",
               value=4096)
    enable(vms)
    wait_until(lambda: sharing(vms[0]) >= 500, 60, "merging to start")
    agent.kill()
    wait_states(vms, "disconnected")
    merged_at_kill = [merged_non_zero(vm) for vm in vms]
    assert min(merged_at_kill) < pages, "the kill came after the merge"
    for q in qtests:
        assert read_big(q, SHARED_AT, len(content)) == content

    agent.start()
    wait_states(vms, "active")
    wait_until(lambda: sharing(vms[0]) == pages,
               60, "merging to complete after the restart")
    assert vms[0].cmd("query-nuksm-agent")["pages-shared"] == pages
    for vm in vms:
        assert merged_non_zero(vm) == pages
    for q in qtests:
        assert read_big(q, SHARED_AT, len(content)) == content
        q.close()


def test_agent_restart_restores_references(pair):
    """Merged pages are never nominated again, so nothing but RESTORE can
    bring pages-sharing back after an agent restart."""
    agent, vms = pair
    content, pages, qtests = merged_pair(pair)
    agent.kill()
    wait_states(vms, "disconnected")
    agent.start()
    wait_states(vms, "active")
    wait_until(lambda: sharing(vms[0]) == pages,
               10, "pages-sharing to recover from RESTORE")
    assert vms[0].cmd("query-nuksm-agent")["pages-shared"] == pages
    for q in qtests:
        assert read_big(q, SHARED_AT, len(content)) == content
        q.close()


@contextlib.contextmanager
def stopped(*vms):
    """@vms' processes stopped (SIGSTOP) for the duration."""
    for vm in vms:
        os.kill(vm.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for vm in vms:
            os.kill(vm.pid, signal.SIGCONT)


def agent_status(agent):
    return harness.ctl_json(agent.sock, "status")


def merge_elsewhere(agent, pages, seed):
    """Two raw clients merge @pages new pages: the agent allocates (and
    would reuse) slots.  Returns the clients, to be closed."""
    data = [pseudo_random(seed + i, PAGE) for i in range(pages)]
    digests = [xxhash.xxh3_64_intdigest(d) for d in data]
    a, b = (harness.VmClient(agent.sock) for _ in range(2))
    a.candidates(zip(range(pages), digests))
    a.info()
    b.candidates(zip(range(pages), digests))
    requests = b.take(harness.MSG_UPLOAD_REQ)
    b.upload(requests, [data[r.page] for r in requests])
    for client in (b, a):
        refs = client.take(harness.MSG_MERGE)
        assert len(refs) == pages
        client.merged(refs)
        client.info()
    return a, b


def test_stopped_vm_keeps_its_pages_across_agent_restarts(start_agent,
                                                          qtest_vm):
    """The only VM mapping merged pages is stopped while the agent
    restarts, for longer than the restore grace: the new agent sees the
    mappings and keeps the pages however long it stays stopped, then the
    VM restores them."""
    agent = start_agent("--restore-grace", "1")
    pair_ = make_pair(agent, qtest_vm)
    content, pages, qtests = merged_pair(pair_, mib=4)
    vm0, vm1 = pair_[1]
    vm1.kill()
    wait_until(lambda: agent_status(agent)["pages_sharing"] == 0, 10,
               "vm1's references to go")
    assert agent_status(agent)["pages_shared"] == pages

    with stopped(vm0):
        agent.kill()
        agent.start()
        wait_until(lambda: "keeping %d orphan store pages" % pages
                   in agent.log_text(), 20,
                   "the new agent to look at who maps its orphans")
        assert agent_status(agent)["orphan_pages"] == pages
        # Other VMs merge meanwhile: freed slots would be reused now.
        clients = merge_elsewhere(agent, pages, seed=500)
        assert agent_status(agent)["pages_shared"] == pages

    vm0.wait_state("active")
    wait_until(lambda: agent_status(agent)["orphan_pages"] == 0, 20,
               "vm0 to restore its pages")
    assert agent_status(agent)["pages_shared"] == 2 * pages
    assert merged_non_zero(vm0) == pages
    assert read_big(qtests[0], SHARED_AT, len(content)) == content
    for c in clients:
        c.close()
    for q in qtests:
        q.close()


def test_vm_stopped_between_compare_and_map_keeps_its_pages(start_agent,
                                                            qtest_vm):
    """Both VMs compared a run of pages with their slots and are stopped
    before they map them, while the agent restarts: QEMU maps the slots
    before it compares, so the new agent sees them mapped and frees none
    of them; once resumed, the VMs map and restore them, and every page
    reads back."""
    agent = start_agent("--restore-grace", "1")
    vms = make_pair(agent, qtest_vm,
                    extra=["-trace", "nuksm_remap_compared"])[1]
    content = pseudo_random(13, MIB)
    pages = len(content) // PAGE
    for vm in vms:
        # The window in which the test stops them, in every commit run.
        vm.cmd("qom-set", path="/objects/dedup0",
               property="x-commit-delay-us", value=1000000)
    qtests = fill(vms, content)
    enable(vms)
    compared = re.compile(r"nuksm_remap_compared \S+: (\d+) pages, \1 equal")
    runs = [wait_until(lambda: compared.search(vm.log_text()), 30,
                       f"{vm.name} to compare a run with its slots")
            for vm in vms]

    with stopped(*vms):
        agent.kill()
        agent.start()
        wait_until(lambda: "orphan store page" in agent.log_text(), 20,
                   "the new agent to look at who maps its orphans")
        assert agent_status(agent)["orphan_pages"] >= \
            max(int(r.group(1)) for r in runs)
        clients = merge_elsewhere(agent, pages, seed=700)

    for vm in vms:
        vm.cmd("qom-set", path="/objects/dedup0",
               property="x-commit-delay-us", value=0)
    wait_states(vms, "active")
    wait_until(lambda: agent_status(agent)["orphan_pages"] == 0 and
               sharing(vms[0]) >= pages, 60, "the VMs to merge every page")
    for q in qtests:
        assert read_big(q, SHARED_AT, len(content)) == content
        q.close()
    for c in clients:
        c.close()


def vm_client_ids(agent, vms):
    """pid -> client id of each of @vms connected to @agent."""
    pids = {vm.pid for vm in vms}
    return {vm["pid"]: vm["id"]
            for vm in harness.ctl_json(agent.sock, "vms")["vms"]
            if vm["pid"] in pids}


def first_data_slot(agent):
    fd = os.open(harness.store_path(agent.state_dir), os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_DATA) // PAGE
    finally:
        os.close(fd)


def test_rogue_restore_after_restart_takes_nothing(start_agent, qtest_vm):
    """A client first to connect after an agent restart RESTOREs a merged
    page with a made-up generation: it is refused, the VMs restore every
    page without being disconnected, and nothing is freed under them."""
    agent = start_agent("--restore-grace", "2")
    pair_ = make_pair(agent, qtest_vm)
    content, pages, qtests = merged_pair(pair_, mib=4)
    vms = pair_[1]

    with stopped(*vms):
        agent.kill()
        agent.start()
        rogue = harness.VmClient(agent.sock, name="rogue")
        fake = harness.SlotRef(page=1, node=0, slot=first_data_slot(agent),
                               gen=12345)
        rogue.restore([fake])
        assert rogue.take(harness.MSG_REFUSED) == [fake]

    wait_states(vms, "active")
    wait_until(lambda: sharing(vms[0]) == pages, 20,
               "the VMs to restore every page")
    ids = vm_client_ids(agent, vms)
    assert len(ids) == 2
    # Every page is a slot again: the reaper has nothing to free.
    assert agent_status(agent)["orphan_pages"] == 0
    clients = merge_elsewhere(agent, pages, seed=900)
    for q in qtests:
        assert read_big(q, SHARED_AT, len(content)) == content
    assert sharing(vms[0]) == 2 * pages
    # Connected once since the restart, never thrown out.
    assert vm_client_ids(agent, vms) == ids
    for c in [rogue, *clients]:
        c.close()
    for q in qtests:
        q.close()


def test_refused_pages_merge_anew(start_agent, qtest_vm):
    """After a restart that lost the slot records (as a store from an
    older agent would have none), every RESTORE entry is refused: the VMs
    keep their memory, merge it anew into new slots, and the old ones are
    freed once nothing reads them."""
    agent = start_agent("--restore-grace", "1")
    pair_ = make_pair(agent, qtest_vm)
    content, pages, qtests = merged_pair(pair_, mib=2)
    vms = pair_[1]

    with stopped(*vms):
        agent.kill()
        for records in agent.state_dir.glob("slots-node*"):
            records.write_bytes(b"")
        agent.start()
    wait_until(lambda: "refused" in agent.log_text(), 20,
               "the RESTORE entries to be refused")
    wait_until(lambda: sharing(vms[0]) == pages and
               agent_status(agent)["orphan_pages"] == 0, 60,
               "the pages to merge anew and the old slots to go")
    assert agent_status(agent)["pages_shared"] == pages
    for vm in vms:
        assert vm.nuksm()["state"] == "active"
        assert merged_non_zero(vm) == pages
    for q in qtests:
        assert read_big(q, SHARED_AT, len(content)) == content
        q.close()


def test_qemu_crash_frees_slots(pair):
    """A QEMU that dies drops its references; slots nobody maps are
    punched out of the store."""
    agent, vms = pair
    content, pages, qtests = merged_pair(pair)
    assert store_bytes(agent.state_dir) >= pages * PAGE
    for q in qtests:
        q.close()

    vms[1].kill()
    wait_until(lambda: sharing(vms[0]) == 0, 10, "vm1's references to go")
    assert vms[0].cmd("query-nuksm-agent")["pages-shared"] == pages

    vms[0].kill()
    wait_until(lambda: harness.ctl_json(agent.sock, "status")
               ["pages_shared"] == 0, 10, "every slot to be freed")
    assert harness.ctl_json(agent.sock, "status")["vms"] == 0
    wait_until(lambda: store_bytes(agent.state_dir) < 1 * MIB, 10,
               "the store to be punched out")


def test_migration_of_merged_memory(pair, start_vm, workdir):
    """Migrating a VM whose pages are merged (to a file and back) restores
    identical memory."""
    agent, vms = pair
    content, pages, qtests = merged_pair(pair)
    for q in qtests:
        q.close()
    path = workdir / "vm0.migration"
    vms[0].cmd("migrate", uri=f"file:{path}")
    wait_until(lambda: vms[0].cmd("query-migrate")["status"] == "completed",
               60, "the migration to complete")

    dest = start_vm("dest", [*harness.qtest_args(
        workdir / "dest.qtest",
        harness.nuksm_object(id="dedup0", agent=agent.sock), mem="512M"),
        "-incoming", f"file:{path}"])
    wait_until(lambda: dest.cmd("query-status")["status"] == "paused"
               or dest.cmd("query-status")["status"] == "postmigrate"
               or dest.cmd("query-migrate").get("status") == "completed",
               60, "the incoming migration to complete")
    q = Qtest(dest.qtest_path)
    assert read_big(q, SHARED_AT, len(content)) == content
    q.close()


def test_rogue_client_does_not_disturb_merging(pair):
    """A client in the VMs' domain that lies about merges, and one that
    sends garbage, are thrown out while the real VMs merge on."""
    agent, vms = pair
    content = pseudo_random(13, 16 * MIB)
    pages = len(content) // PAGE
    qtests = fill(vms, content)
    enable(vms)

    liar = harness.VmClient(agent.sock, name="liar")
    liar.merged([harness.SlotRef(page=5, node=0, slot=0, gen=1, status=0)])
    error = liar.messages_until_eof()[-1].error()
    assert error[0] == harness.ERR_BAD_MESSAGE
    liar.close()
    garbage = harness.RawClient(agent.sock)
    garbage.send(b"\xff" * 100)
    assert garbage.messages_until_eof()[-1].error()[0] == \
        harness.ERR_BAD_MESSAGE
    garbage.close()

    wait_until(lambda: sharing(vms[0]) >= pages, 60, "the real VMs to merge")
    for vm in vms:
        assert nuksm(vm)["state"] == "active"
    for q in qtests:
        assert read_big(q, SHARED_AT, len(content)) == content
        q.close()


def test_background_snapshot_of_merged_memory(pair, start_vm, workdir):
    """A background snapshot (which write-protects guest RAM with its own
    userfaultfd) runs while nuksm steps aside, and restores identical
    memory.  The capability can only be switched on while nuksm holds no
    userfaultfd, hence the enabled=off around it (docs/operations.rst)."""
    agent, vms = pair
    content, pages, qtests = merged_pair(pair)
    for q in qtests:
        q.close()
    vm = vms[0]

    def set_enabled(value):
        vm.cmd("qom-set", path="/objects/dedup0", property="enabled",
               value=value)

    set_enabled(False)
    vm.cmd("migrate-set-capabilities", capabilities=[
        {"capability": "background-snapshot", "state": True}])
    set_enabled(True)
    vm.wait_state("active")
    path = workdir / "vm0.snapshot"
    vm.cmd("migrate", uri=f"file:{path}")
    wait_until(lambda: vm.cmd("query-migrate")["status"] == "completed", 60,
               "the background snapshot to complete")
    vm.wait_state("active")
    assert merged_non_zero(vm) == pages

    dest = start_vm("dest", [*harness.qtest_args(
        workdir / "dest.qtest", mem="512M"), "-incoming", f"file:{path}"])
    wait_until(lambda: dest.cmd("query-migrate").get("status") ==
               "completed", 60, "the snapshot to load")
    q = Qtest(dest.qtest_path)
    assert read_big(q, SHARED_AT, len(content)) == content
    q.close()


def fill_unit_pages():
    """The distinct pages of the test guest's nuksm.fill content
    (scripts/make-guest.sh: seq 10000000 10200000 | head -c 1MiB)."""
    unit = "".join(f"{i}\n" for i in range(10000000, 10200001))
    unit = unit.encode()[:MIB]
    return {unit[off:off + PAGE] for off in range(0, MIB, PAGE)}


def count_pages_in(path, wanted):
    with open(path, "rb") as f:
        data = f.read()
    return sum(data[off:off + PAGE] in wanted
               for off in range(0, len(data), PAGE))


def test_balloon_discard_never_exposes_the_store(agent, start_vm, workdir):
    """Guests free 64 MiB of identical content, nuksm merges those free
    pages, then a balloon takes them: QEMU discards them through nuksm,
    which maps fresh anonymous memory.  The discarded pages read zero,
    not the store's content (MADV_DONTNEED alone would expose it)."""
    vms = []
    for name in ("g0", "g1"):
        args = [str(a) + " nuksm.free=1" if str(a).startswith("console=")
                else a for a in harness.guest_args(
                    workdir / f"{name}.serial", 64, harness.nuksm_object(
                        id="dedup0", agent=agent.sock, max_cpu=100))]
        vm = start_vm(name, [*args, "-device", "virtio-balloon-pci"])
        vm.wait_serial("nuksm-guest: freed 64 MiB", timeout=90)
        vms.append(vm)
    wait_until(lambda: all(merged_non_zero(vm) >= 15000 for vm in vms), 120,
               "the freed content to merge")

    fill = fill_unit_pages()
    before = workdir / "before.mem"
    vms[0].cmd("pmemsave", val=0, size=256 * MIB, filename=str(before))
    fill_before = count_pages_in(before, fill)
    merged_before = merged_non_zero(vms[0])
    sharing_before = sharing(vms[0])
    assert fill_before >= 15000

    vms[0].cmd("balloon", value=96 * MIB)
    wait_until(lambda: vms[0].cmd("query-balloon")["actual"] <= 96 * MIB,
               90, "the balloon to inflate")
    wait_until(lambda: merged_non_zero(vms[0]) <= merged_before - 4000, 30,
               "nuksm to see the discards")
    after = workdir / "after.mem"
    vms[0].cmd("pmemsave", val=0, size=256 * MIB, filename=str(after))
    fill_after = count_pages_in(after, fill)
    gone = merged_before - merged_non_zero(vms[0])
    # The merged pages the balloon took, nearly all of them fill pages,
    # read as something other than the store's content now (zero, until
    # the guest writes them).
    assert fill_before - fill_after >= 0.8 * min(gone, fill_before), \
        f"{fill_before - fill_after} fill pages gone from guest memory, " \
        f"but {gone} merged pages were discarded"
    wait_until(lambda: sharing(vms[0]) < sharing_before,
               30, "the agent to drop the references")


@contextlib.contextmanager
def cpu_throttled(cgroup, pid, percent):
    """@pid limited to @percent of one CPU in the cpu cgroup @cgroup until
    the block ends."""
    period = 100000
    if os.path.exists(f"{cgroup}/cpu.max"):
        limits = {"cpu.max": f"{period * percent // 100} {period}"}
    else:
        limits = {"cpu.cfs_period_us": str(period),
                  "cpu.cfs_quota_us": str(period * percent // 100)}
    for name, value in limits.items():
        with open(f"{cgroup}/{name}", "w") as f:
            f.write(value)
    with open(f"{cgroup}/cgroup.procs", "w") as f:
        f.write(str(pid))
    try:
        yield
    finally:
        with open(f"{os.path.dirname(cgroup)}/cgroup.procs", "w") as f:
            f.write(str(pid))


def test_upload_lets_rcu_grace_periods_pass(new_cgroup, start_agent,
                                            qtest_vm):
    """While a slow agent keeps QEMU's scanner waiting for the socket in
    the middle of an upload, the main loop can wait for an RCU grace
    period (drain_call_rcu() after a failed device_add) and go on: the
    scanner waits outside the RCU read lock.  Holding it there, as it
    once did, hung QEMU for good: the main loop, which drains the queue,
    waited for the reader, and the reader for the queue."""
    cgroup = new_cgroup("cpu")
    agent = start_agent()
    vm = qtest_vm(agent=agent.sock, max_cpu=100)
    vm.wait_state("active")
    # 16 MiB of distinct pages, twice, offered while the agent is
    # stopped: it then asks for 4096 uploads at once.
    content = random.Random(11).randbytes(16 << 20)
    q = Qtest(vm.qtest_path)
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        write_big(q, 64 << 20, content)
        write_big(q, 96 << 20, content)
        passes = vm.nuksm()["full-scans"]
        vm.wait_nuksm(lambda i: i["full-scans"] >= passes + 3,
                      "the pages to be offered")
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    with cpu_throttled(cgroup, agent.pid, 1):
        wait_until(lambda: harness.ctl_json(agent.sock, "status")
                   ["store_pages"][0] > 0, 120, "uploads to start")
        reply = vm.qmp.cmd_raw("device_add",
                               {"driver": "nuksm-no-such-device"})
        assert "nuksm-no-such-device" in reply["error"]["desc"], reply
    vm.wait_nuksm(lambda i: i["merged-pages"] - i["zero-pages"] >= 2 * 4096,
                  "the pages to merge", timeout=120)
    assert read_big(q, 64 << 20, 16 << 20) == content
    assert read_big(q, 96 << 20, 16 << 20) == content
    q.close()
