# SPDX-License-Identifier: GPL-2.0-or-later
"""nuksmd's merge engine, driven by raw clients that play VMs.

A VM client names its pages by index and their content by XXH3-64 digest
(what QEMU's scanner computes), uploads content when asked, and answers
MERGE entries as QEMU would after mapping the slot.  The store files the
agent hands out are checked directly: read-only descriptors, the merged
content in the slot, and pages punched out once nobody maps them.

The agent keeps the references of a VM that disconnects while its
process lives on (it still maps them): clients that must be gone for
good play in a child process that exits (see in_child).
"""

import ctypes
import errno
import fcntl
import mmap
import os
import random
import stat
import threading

import pytest
import xxhash

import harness
from harness import (CANDIDATE_WANTED, ERR_BAD_MESSAGE, IDLE_NEVER,
                     MSG_CANDIDATES, MSG_GET_INFO,
                     MSG_HELLO, MSG_HOME, MSG_INFO, MSG_MERGE,
                     MSG_REFUSED, MSG_UPLOAD_REQ, MSG_VMS, NUKSM_PAGE_SIZE,
                     STATUS_CHANGED, STATUS_GONE, VM_ENTRY,
                     VM_LIMIT_USERFAULTFD, VMS, RawClient,
                     SlotRef, VmClient, hello, in_child, pack,
                     pack_candidates, pack_slot_refs, parse_info,
                     run_nuksmd, store_path, store_paths, wait_until)

STORE_SLOTS = 1 << 24
# Guest pages per slot line (agent/core/lines.h).
LINE_PAGES = 512
STORE_SIZE = STORE_SLOTS * NUKSM_PAGE_SIZE


def content(seed):
    """A page of pseudo-random bytes, the same for the same @seed."""
    return random.Random(seed).randbytes(NUKSM_PAGE_SIZE)


def digest(data):
    return xxhash.xxh3_64_intdigest(data)


@pytest.fixture
def vms(request):
    """vms(domain=, name=, target=) -> a VmClient of agent @target (the
    agent fixture by default), closed at teardown."""
    clients = []

    def connect(domain="default", name="vm", target=None):
        target = target or request.getfixturevalue("agent")
        client = VmClient(target.sock, domain=domain, name=name)
        clients.append(client)
        return client
    yield connect
    for client in clients:
        client.close()


@pytest.fixture
def agent(start_agent):
    """The merge engine's agent: raw clients play VMs of the domains they
    ask for (vm-domains=allow), as a lab's trusted QEMUs may."""
    return start_agent("--vm-domains=allow")


def store_file(agent, node=0, domain="default"):
    return store_path(agent.state_dir, domain, node)


def store_empty(agent):
    """No page left in the store: a domain's files go with its last."""
    return all(p.stat().st_blocks == 0 for p in store_paths(agent.state_dir))


def slot_has_data(agent, slot, node=0, domain="default"):
    """Whether the store file holds a page (not a hole) at @slot."""
    fd = os.open(store_file(agent, node, domain), os.O_RDONLY)
    try:
        return os.lseek(fd, slot * NUKSM_PAGE_SIZE,
                        os.SEEK_DATA) == slot * NUKSM_PAGE_SIZE
    except OSError as e:
        if e.errno == errno.ENXIO:  # no data at or after the offset
            return False
        raise
    finally:
        os.close(fd)


def merge(uploader, others, pages, data):
    """Merge pages[c] of every client c (uploader last) holding @data.

    The others nominate their pages first, then the uploader: it is asked
    to upload, and every client is sent a MERGE, which it answers MERGED.
    Returns {client: [SlotRef of its MERGE entries]}.

    The agent handles each client's messages in order, but not those of
    different clients: a client's sync (see VmClient.sync) makes sure its
    messages were handled before another client acts on them.
    """
    for client in others:
        client.candidates(zip(pages[client], map(digest, data)))
        client.info()  # nothing for it yet
    uploader.candidates(zip(pages[uploader], map(digest, data)))
    requests = uploader.take(MSG_UPLOAD_REQ)
    assert [r.page for r in requests] == list(pages[uploader])
    uploader.upload(requests, data)
    merges = {}
    # The uploader first: its sync shows the agent has handled the upload.
    for client in [uploader, *others]:
        merges[client] = client.take(MSG_MERGE)
        assert [r.page for r in merges[client]] == list(pages[client])
        client.merged(merges[client])
        client.info()  # the agent handled it, and has nothing to say
    return merges


def answer_merges(request, pages):
    """Each (client, page) of @pages was sent a MERGE of @request's slot
    for its page, and answers MERGED."""
    for client, page in pages:
        (m,) = client.take(MSG_MERGE)
        assert m == request._replace(page=page)
        client.merged([m])
        client.info()


def list_vms(client):
    """{client id: merged pages} from LIST_VMS."""
    reply = harness.list_vms(client, 77)
    assert reply.type == MSG_VMS
    count, _ = VMS.unpack_from(reply.payload)
    entries = [VM_ENTRY.unpack_from(reply.payload, VMS.size + i * VM_ENTRY.size)
               for i in range(count)]
    # client_id, then merged_pages after the domain fields
    return {e[0]: e[10] for e in entries}


def control_info(agent):
    """Info from a fresh control client (which merges nothing)."""
    client = RawClient(agent.sock)
    try:
        client.request(MSG_HELLO, 1, hello())
        reply = client.request(MSG_GET_INFO, 2)
        assert reply.type == MSG_INFO
        return parse_info(reply)
    finally:
        client.close()


def expect_kicked(client, text):
    """@client gets ERROR(BAD_MESSAGE) mentioning @text, then EOF."""
    messages = client.messages_until_eof()
    assert messages, "disconnected without an ERROR"
    code, message = messages[-1].error()
    assert code == ERR_BAD_MESSAGE
    assert text in message, message
    return message


# ------------------------------------------------------------ the store

def test_store_files_and_fds(start_agent, vms):
    agent = start_agent("--fake-numa", "2")
    vm = vms(target=agent)
    assert sorted(vm.stores) == [0, 1]
    assert vm.store_size == STORE_SIZE

    assert stat.S_IMODE(agent.state_dir.stat().st_mode) == 0o700
    for node, fd in vm.stores.items():
        path = store_file(agent, node)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.stat().st_size == STORE_SIZE
        assert path.stat().st_blocks == 0  # sparse, empty
        st = os.fstat(fd)
        assert (st.st_ino, st.st_dev) == (path.stat().st_ino,
                                          path.stat().st_dev)

        # Read-only: no write, no writable shared mapping.
        assert os.fstat(fd).st_size == STORE_SIZE
        with pytest.raises(OSError) as err:
            os.pwrite(fd, b"x", 0)
        assert err.value.errno in (errno.EBADF, errno.EPERM)
        with pytest.raises(PermissionError):
            mmap.mmap(fd, NUKSM_PAGE_SIZE, mmap.MAP_SHARED,
                      mmap.PROT_READ | mmap.PROT_WRITE)
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    assert vm.info().store_pages == [0, 0]


def test_state_dir_must_be_tmpfs(workdir, nuksmd_bin):
    if fs_type(workdir) == "tmpfs":
        pytest.skip(f"{workdir} is on tmpfs: no other filesystem to try")
    sock = workdir / "t.sock"
    result = run_nuksmd("--socket", sock, "--state-dir", workdir / "state")
    assert result.returncode == 1
    assert f"state directory {workdir / 'state'} is not on tmpfs" in \
        result.stderr
    assert not sock.exists()


def fs_type(path):
    """The type of the filesystem holding @path, from /proc/self/mounts."""
    best, kind = "", None
    real = os.path.realpath(path)
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            _, mount_point, fs_type = line.split()[:3]
            if (real == mount_point or
                    real.startswith(mount_point.rstrip("/") + "/")) and \
                    len(mount_point) >= len(best):
                best, kind = mount_point, fs_type
    return kind


@pytest.mark.parametrize("kind", ["group-writable", "symlink"])
def test_state_dir_must_be_private(workdir, shm_dir, nuksmd_bin, kind):
    state = shm_dir / "state"
    if kind == "symlink":
        (shm_dir / "real").mkdir(mode=0o700)
        state.symlink_to(shm_dir / "real")
    else:
        state.mkdir()
        state.chmod(0o770)
    result = run_nuksmd("--socket", workdir / "p.sock", "--state-dir", state)
    assert result.returncode == 1
    assert f"state directory {state} must be a directory (not a symlink) " \
        f"owned by uid {os.geteuid()} that only its owner can write" in \
        result.stderr
    assert not store_paths(state)


def test_state_dir_in_use(agent, start_agent, vms):
    other = run_nuksmd("--socket", agent.sock.with_name("other.sock"),
                       "--state-dir", agent.state_dir)
    assert other.returncode == 1
    assert f"state directory {agent.state_dir} is in use by another " \
        "nuksmd" in other.stderr
    assert not agent.sock.with_name("other.sock").exists()
    assert vms().info().vms == 1


def test_state_dir_from_config(workdir, shm_dir, start_agent, vms):
    state = shm_dir / "from-config"
    config = workdir / "nuksmd.conf"
    config.write_text(f"[nuksmd]\nstate-dir={state}\nrestore-grace=0\n")
    agent = start_agent(name="cfg", state_dir=False,
                        args=["--socket", workdir / "cfg.sock",
                              "--config", config])
    vms(target=agent)
    assert store_path(state).stat().st_size == STORE_SIZE


# ------------------------------------------------------------ merging

def test_two_vms_merge_one_page(agent, vms):
    a, b = vms(name="a"), vms(name="b")
    data = content(1)

    a.candidates([(10, digest(data))])
    assert a.info().store_pages == [0]
    b.candidates([(20, digest(data))])
    (request,) = b.take(MSG_UPLOAD_REQ)
    assert request.page == 20
    assert a.info().store_pages == [1]  # UPLOADING counts
    b.upload([request], [data])

    (merge_b,) = b.take(MSG_MERGE)
    (merge_a,) = a.take(MSG_MERGE)
    assert (merge_a.page, merge_b.page) == (10, 20)
    assert merge_a[1:] == merge_b[1:] == request[1:]  # node, slot, gen
    node, slot = request.node, request.slot

    # The slot holds the upload, readable through the read-only fd.
    assert a.read_slot(node, slot) == data
    assert slot_has_data(agent, slot, node)

    # Until the MERGED answers, nothing is shared.
    assert a.info()[1:3] == (0, 0)
    a.merged([merge_a])
    b.merged([merge_b])
    b.info()
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (1, 1)
    assert info.store_pages == [1]
    assert list_vms(a) == {a.client_id: 1, b.client_id: 1}

    # One page leaves: the slot stays for the other.
    a.unmerged([merge_a])
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (1, 0)
    assert list_vms(b) == {a.client_id: 0, b.client_id: 1}
    assert slot_has_data(agent, slot, node)

    # The last user unmerges: the page is punched.
    b.unmerged([merge_b])
    b.info()
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (0, 0)
    assert info.store_pages == [0]
    assert not slot_has_data(agent, slot, node)
    assert store_empty(agent)


def test_slot_reused_with_new_generation(agent, vms):
    a, b = vms(), vms()
    first = merge(b, [a], {a: [1], b: [2]}, [content(1)])
    a.unmerged(first[a])
    b.unmerged(first[b])
    b.info()
    assert a.info().store_pages == [0]

    # The same pages, in line with the same slot (agent/core/lines.h).
    second = merge(b, [a], {a: [1], b: [2]}, [content(2)])
    old, new = first[a][0], second[a][0]
    assert (new.node, new.slot) == (old.node, old.slot)
    assert new.gen == (old.gen + 1) % 2**32
    assert a.read_slot(new.node, new.slot) == content(2)


def test_consecutive_pages_get_consecutive_slots(agent, vms):
    """Within a 2 MiB stretch (a line: agent/core/lines.h)."""
    a, b = vms(), vms()
    data = [content(100 + i) for i in range(40)]
    merges = merge(b, [a], {a: range(1030, 1070), b: range(5000, 5040)},
                   data)
    slots = [r.slot for r in merges[b]]
    assert slots == list(range(slots[0], slots[0] + 40))
    assert [r.slot for r in merges[a]] == slots
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (40, 40)
    for r, page in zip(merges[a], data):
        assert a.read_slot(r.node, r.slot) == page


def test_scattered_pages_get_slots_in_line(agent, vms):
    """Every other page a duplicate, alike in both VMs: each page's slot
    is in line with its neighbours' (slot - page constant, so that QEMU
    maps the stretch as one window), in both VMs."""
    a, b = vms(), vms()
    pages = [1024 + 2 * i for i in range(40)] + \
            [1536 + 2 * i for i in range(40)]
    data = [content(300 + i) for i in range(len(pages))]
    merges = merge(b, [a], {a: pages, b: pages}, data)
    for vm in (a, b):
        offsets = [r.slot - page for r, page in zip(merges[vm], pages)]
        assert len(set(offsets[:40])) == 1, offsets
        assert len(set(offsets[40:])) == 1, offsets
    for r, page in zip(merges[a], data):
        assert a.read_slot(r.node, r.slot) == page


def test_shuffled_pages_get_slots_in_line_with_the_first_vm(agent, vms):
    """Duplicates in an order of each VM's own, offered by both VMs in
    turn as their scans go: the slots of each 2 MiB stretch (a line)
    follow the pages of the VM that joined first, whichever VM offered
    a content first; the other VM maps its pages out of line."""
    first, second = vms(), vms()
    # Every other page of 64 stretches, the same contents in both VMs.
    pages = [8192 + 2 * i for i in range(16384)]
    data = {page: content(10_000 + i) for i, page in enumerate(pages)}
    held = {first: data,
            second: dict(zip(random.Random(3).sample(pages, len(pages)),
                             data.values()))}
    chunk = 256
    merges = {first: [], second: []}

    def read(vm):
        """The UPLOAD_REQs sent to @vm so far; its MERGEs are kept."""
        messages, _ = vm.sync()
        assert {m.type for m in messages} <= {MSG_UPLOAD_REQ, MSG_MERGE}
        merges[vm] += [r for m in messages if m.type == MSG_MERGE
                       for r in m.slot_refs()]
        return [r for m in messages if m.type == MSG_UPLOAD_REQ
                for r in m.slot_refs()]

    def turn(vm, offered):
        """@vm offers @offered and, as QEMU does, the pages the agent
        sent back (RETRY: a conflict in the content table, which depends
        on its hash key, turned a page seen away), then uploads what it
        is asked.  Returns whether it was asked or offered anything."""
        offered = [*offered, *vm.retried]
        vm.retried.clear()
        if offered:
            vm.candidates((p, digest(held[vm][p])) for p in offered)
        requests = read(vm)
        vm.upload(requests, [held[vm][r.page] for r in requests])
        return bool(offered or requests)

    for k in range(0, len(pages), chunk):
        for vm in ((first, second) if k // chunk % 2 else (second, first)):
            turn(vm, pages[k:k + chunk])
    # Turns until neither VM offers or uploads: each sync shows that the
    # agent handled the client's uploads, and so sent the MERGEs they
    # made.
    while any([turn(vm, []) for vm in (first, second)]):
        pass
    for vm in (first, second):
        assert not read(vm) and not vm.retried
    for vm in (first, second):
        assert sorted(r.page for r in merges[vm]) == pages
        vm.merged(merges[vm])
        vm.info()
    offsets = {}
    for r in merges[first]:
        offsets.setdefault(r.page // LINE_PAGES, set()).add(r.slot - r.page)
    assert all(len(o) == 1 for o in offsets.values()), \
        f"the first VM's pages are out of line: {offsets}"
    assert len({r.slot - r.page for r in merges[second]}) > len(offsets)
    for r in merges[second]:
        assert second.read_slot(r.node, r.slot) == held[second][r.page]


def test_duplicates_within_one_vm(agent, vms):
    a = vms()
    data = content(7)
    a.candidates([(1, digest(data)), (2, digest(data))])
    (request,) = a.take(MSG_UPLOAD_REQ)
    assert request.page == 2
    a.upload([request], [data])
    merges = a.take(MSG_MERGE)
    assert sorted(r.page for r in merges) == [1, 2]
    a.merged(merges)
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (1, 1)

    # Known content merges at once, without an upload.
    a.candidates([(3, digest(data))])
    (merge3,) = a.take(MSG_MERGE)
    assert merge3[1:] == request[1:]
    a.merged([merge3])
    assert a.info()[1:3] == (1, 2)


def test_domains_never_share(agent, vms):
    red, blue = vms(domain="red"), vms(domain="blue")
    data = content(3)
    red.candidates([(1, digest(data))])
    blue.candidates([(1, digest(data))])
    assert blue.info().store_pages == [0]
    assert red.info().store_pages == [0]

    # A second red VM matches the red page, not the blue one.
    red2 = vms(domain="red")
    merges = merge(red2, [], {red2: [9]}, [data])
    assert red.take(MSG_MERGE) == [merges[red2][0]._replace(page=1)]
    # Each VM's INFO counts its own domain's pages only.
    assert red.info().store_pages == [1]
    assert blue.info().store_pages == [0]
    # The page is in red's store file, which blue was not given.
    slot = merges[red2][0].slot
    assert red.read_slot(0, slot) == data
    assert blue.read_slot(0, slot) == bytes(NUKSM_PAGE_SIZE)
    assert slot_has_data(agent, slot, domain="red")
    assert not slot_has_data(agent, slot, domain="blue")

    # A ready red slot is not offered to blue either.
    blue2 = vms(domain="blue")
    blue2.candidates([(2, digest(data))])
    assert blue2.take(MSG_UPLOAD_REQ)[0].slot != merges[red2][0].slot


def test_pages_join_a_slot_being_uploaded(agent, vms):
    a, b, c = vms(), vms(), vms()
    data = content(4)
    a.candidates([(1, digest(data))])
    a.info()
    b.candidates([(2, digest(data))])
    (request,) = b.take(MSG_UPLOAD_REQ)
    c.candidates([(3, digest(data))])
    assert c.info().store_pages == [1]  # c waits, no upload of its own

    b.upload([request], [data])
    answer_merges(request, [(b, 2), (a, 1), (c, 3)])
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (1, 2)


def test_changed_page_cancels_upload(agent, vms):
    a, b = vms(), vms()
    a.candidates([(1, digest(content(5)))])
    a.info()
    b.candidates([(2, digest(content(5)))])
    (request,) = b.take(MSG_UPLOAD_REQ)

    # b's page changed since its digest: the slot is dropped, no MERGE.
    b.upload([request], [content(6)])
    assert b.info().store_pages == [0]
    assert a.info().store_pages == [0]
    assert not slot_has_data(agent, request.slot)
    # Neither page stays on offer: both VMs are asked to offer it again.
    assert (a.retried, b.retried) == ([1], [2])

    # Nominated again, the pages merge.
    merge(b, [a], {a: [1], b: [2]}, [content(5)])
    assert a.info()[1:3] == (1, 1)


def slot_of_three(vms, data):
    """Three VMs offer a page holding @data, a's 1, b's 2 and c's 3: b is
    asked to upload it, a and c wait.  Returns a, b, c and b's request."""
    a, b, c = vms(), vms(), vms()
    a.candidates([(1, digest(data))])
    a.info()
    b.candidates([(2, digest(data))])
    (request,) = b.take(MSG_UPLOAD_REQ)
    c.candidates([(3, digest(data))])
    c.info()
    return a, b, c, request


def test_uploader_offering_new_content_hands_the_upload_on(agent, vms):
    """A page asked to upload that is offered again with another content
    changed (a guest reused it): it leaves the slot at once, the upload
    passes to a page that waits for it, the page's new content is on
    offer, and its upload of the old request, when it comes, is ignored."""
    a, b, c, old = slot_of_three(vms, content(20))

    b.candidates([(2, digest(content(21)))])
    b.info()  # no RETRY: its new content is on offer already
    (request,) = a.take(MSG_UPLOAD_REQ)
    assert request == old._replace(page=1)
    b.upload([old], [content(21)])  # late, and changed: ignored
    assert b.info().store_pages == [1]

    a.upload([request], [content(20)])
    answer_merges(request, [(a, 1), (c, 3)])
    assert b.take(MSG_MERGE) == []
    assert b.retried == []

    # b's new content merges with its first duplicate.
    d = vms()
    merge(d, [b], {b: [2], d: [4]}, [content(21)])
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (2, 2)


def test_changed_uploader_asked_again_before_its_late_upload(agent, vms):
    """An uploader's page changes twice, each time to a content another
    VM offered already, so that it is asked to upload again before its
    late uploads arrive: each late one is ignored, each slot it left is
    uploaded by the page that waited with it, and the last request is
    answered and merges."""
    a, b, c, first = slot_of_three(vms, content(24))
    d, e = vms(), vms()
    d.candidates([(4, digest(content(25)))])
    d.info()
    e.candidates([(5, digest(content(26)))])
    e.info()

    b.candidates([(2, digest(content(25)))])
    (second,) = b.take(MSG_UPLOAD_REQ)
    b.candidates([(2, digest(content(26)))])
    (third,) = b.take(MSG_UPLOAD_REQ)
    assert (second.page, third.page) == (2, 2)
    assert len({first.slot, second.slot, third.slot}) == 3
    b.upload([first], [content(26)])   # late: ignored
    b.upload([second], [content(26)])  # late: ignored
    b.upload([third], [content(26)])
    answer_merges(third, [(b, 2), (e, 5)])

    # The slots b left: a uploads the first, d the second.
    (request,) = a.take(MSG_UPLOAD_REQ)
    a.upload([request], [content(24)])
    answer_merges(request, [(a, 1), (c, 3)])
    (request,) = d.take(MSG_UPLOAD_REQ)
    assert request == second._replace(page=4)
    d.upload([request], [content(25)])
    answer_merges(request, [(d, 4)])
    info = b.info()
    assert (info.pages_shared, info.pages_sharing) == (3, 2)


def test_waiting_page_offering_new_content_leaves_the_slot(agent, vms):
    """A page waiting for a slot's upload that is offered again with
    another content leaves the slot: no MERGE for it, its new content is
    on offer, and the upload goes on for the others."""
    a, b, c, request = slot_of_three(vms, content(22))

    a.candidates([(1, digest(content(23)))])
    a.info()
    b.upload([request], [content(22)])
    answer_merges(request, [(b, 2), (c, 3)])
    assert a.take(MSG_MERGE) == []
    assert a.retried == []

    d = vms()
    merge(d, [a], {a: [1], d: [4]}, [content(23)])
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (2, 2)


def test_merge_outcomes_other_than_merged(agent, vms):
    a, b = vms(), vms()
    a.candidates([(1, digest(content(8)))])
    a.info()
    b.candidates([(2, digest(content(8)))])
    (request,) = b.take(MSG_UPLOAD_REQ)
    b.upload([request], [content(8)])
    (mb,), (ma,) = b.take(MSG_MERGE), a.take(MSG_MERGE)

    a.merged([ma], status=STATUS_CHANGED)
    assert a.info()[1:3] == (0, 0)
    b.merged([mb], status=STATUS_GONE)
    info = b.info()
    assert (info.pages_shared, info.store_pages) == (0, [0])
    assert not slot_has_data(agent, request.slot)


def test_uploader_leaving_cancels_upload(agent, vms):
    a, b = vms(), vms()
    a.candidates([(1, digest(content(9)))])
    a.info()
    b.candidates([(2, digest(content(9)))])
    b.take(MSG_UPLOAD_REQ)
    b.close()
    wait_until(lambda: a.info().store_pages == [0], 5,
               "the upload to be cancelled")
    assert a.retried == [1]

    # a's page is free to merge again, with a new partner.
    c = vms()
    merge(c, [a], {a: [1], c: [3]}, [content(9)])
    assert a.info()[1:3] == (1, 1)


class GuestRam:
    """@pages pages of this process's memory that a raw client reports as
    its RAM in TOPOLOGY (protocol 12): the agent may read pages to upload
    from there."""

    def __init__(self, pages):
        self.map = mmap.mmap(-1, pages * NUKSM_PAGE_SIZE)
        self.pages = pages
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.map))

    def forbid(self, first):
        """Pages from @first on cannot be read any more (PROT_NONE)."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int]
        assert libc.mprotect(self.address + first * NUKSM_PAGE_SIZE,
                             (self.pages - first) * NUKSM_PAGE_SIZE,
                             0) == 0  # PROT_NONE

    def __setitem__(self, page, data):
        self.map[page * NUKSM_PAGE_SIZE:(page + 1) * NUKSM_PAGE_SIZE] = data

    def report(self, client, first=0):
        """@client's pages from @first on lie here; HOME answers."""
        client.topology([(0, 0)], [], [(first, self.pages, 0, self.address)])
        assert [m.type for m in client.sync()[0]] == [MSG_HOME]


def uploads(client):
    """{client id: (uploads read, uploads sent, errno of reading)} from
    LIST_VMS of @client, which has no message pending."""
    reply = harness.list_vms(client, 78)
    return {e.client_id: (e.uploads_read, e.uploads_sent, e.read_errno)
            for e in harness.parse_vms(reply)}


def test_agent_reads_uploads_from_vm_memory(agent, vms):
    """A VM that says where its RAM lies is not asked to upload: the agent
    reads the page there, and both pages merge."""
    ram = GuestRam(8)
    a, b = vms(), vms()
    ram.report(b, first=100)
    data = [content(40), content(41)]
    ram[3], ram[5] = data
    a.candidates([(1, digest(data[0])), (2, digest(data[1]))])
    a.info()
    b.candidates([(103, digest(data[0])), (105, digest(data[1]))])
    merges = b.take(MSG_MERGE)  # no UPLOAD_REQ first
    assert [m.page for m in merges] == [103, 105]
    assert [b.read_slot(0, m.slot) for m in merges] == data
    b.merged(merges)
    b.info()
    a.merged(a.take(MSG_MERGE))
    assert a.info()[1:3] == (2, 2)
    assert uploads(a) == {a.client_id: (0, 0, 0), b.client_id: (2, 0, 0)}


def test_page_read_with_other_content_cancels_upload(agent, vms):
    """The content read is trusted as far as its digest, as an upload's."""
    ram = GuestRam(4)
    a, b = vms(), vms()
    ram.report(b)
    ram[2] = content(43)
    a.candidates([(1, digest(content(42)))])
    a.info()
    b.candidates([(2, digest(content(42)))])
    assert b.info().store_pages == [0]
    a.info()
    assert (a.retried, b.retried) == ([1], [2])

    # The page holds that content now: it is read, and both merge.
    ram[2] = content(42)
    a.candidates([(1, digest(content(42)))])
    a.info()
    b.candidates([(2, digest(content(42)))])
    (m,) = b.take(MSG_MERGE)
    assert b.read_slot(0, m.slot) == content(42)


def test_page_the_agent_cannot_read_is_asked_for(agent, vms):
    """A page the agent cannot read where TOPOLOGY says is asked of the
    VM, which uploads it; its other pages are still read."""
    ram = GuestRam(8)
    a, b = vms(), vms()
    ram.report(b)
    ram[1] = content(44)
    ram.forbid(4)
    a.candidates([(1, digest(content(44))), (6, digest(content(45)))])
    a.info()
    b.candidates([(1, digest(content(44))), (6, digest(content(45)))])
    messages, _ = b.sync()
    assert [m.type for m in messages] == [MSG_UPLOAD_REQ, MSG_MERGE]
    (request,) = messages[0].slot_refs()
    assert request.page == 6
    assert [r.page for r in messages[1].slot_refs()] == [1]
    b.upload([request], [content(45)])
    assert [m.page for m in b.take(MSG_MERGE)] == [6]
    assert uploads(vms())[b.client_id] == (1, 1, 0)


def test_vm_the_agent_may_not_read_uploads_itself(start_agent, vms,
                                                 workdir, shm_dir,
                                                 installed):
    """An agent without ptrace access to a VM (here: not root, the VM
    root's) asks it for every upload, and says why."""
    # Where an agent as nobody may create its socket and store, and run
    # from (the checkout may lie where nobody cannot reach).
    os.chmod(workdir, 0o1777)
    os.chmod(shm_dir, 0o1777)
    agent = start_agent("--vm-domains=allow", user="nobody",
                        binary=installed / "sbin/nuksmd")
    ram = GuestRam(4)
    a, b = vms(target=agent), vms(target=agent)
    ram.report(b)
    ram[1], ram[2] = content(46), content(47)
    offers = [(1, digest(content(46))), (2, digest(content(47)))]
    a.candidates(offers)
    a.info()
    b.candidates(offers)
    requests = b.take(MSG_UPLOAD_REQ)
    assert [r.page for r in requests] == [1, 2]
    b.upload(requests, [content(46), content(47)])
    assert [m.page for m in b.take(MSG_MERGE)] == [1, 2]
    assert uploads(vms(target=agent))[b.client_id] == (0, 2, errno.EPERM)
    assert "cannot read its memory" in agent.log_text()


def test_many_pages_in_batches(agent, vms):
    """More entries than one message holds, many uploads, and replies
    queued while the VMs do not read them."""
    a, b = vms(), vms()
    n = 3000
    data = [i.to_bytes(8, "little") * (NUKSM_PAGE_SIZE // 8)
            for i in range(n)]
    a.candidates(zip(range(n), map(digest, data)))
    assert a.info().store_pages == [0]
    b.candidates(zip(range(n), map(digest, data)))
    msgs, _ = b.sync()
    assert [m.type for m in msgs] == [MSG_UPLOAD_REQ] * 2  # 2729 + 271
    requests = [r for m in msgs for r in m.slot_refs()]
    assert sorted(r.page for r in requests) == list(range(n))
    # 200 messages, each making two MERGEs that b and a do not read yet.
    b.upload(requests, [data[r.page] for r in requests])
    b.merged(b.take(MSG_MERGE))
    b.info()
    merges = a.take(MSG_MERGE)
    assert len(merges) == n
    a.merged(merges)
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (n, n)


def test_pages_beyond_the_in_flight_bound_are_retried(agent, vms):
    """A process has at most 2**16 pages on their way to a slot, over
    all its VM connections; the agent sends back the candidates beyond,
    to be offered again.  Nothing is lost: every page is uploaded, waits,
    or is sent back."""
    # Both of this process: each new slot puts a page of each in flight.
    a, b = vms(), vms()
    cpu_before = harness.process_cpu_ns(agent.pid)
    bound, extra = 1 << 16, 100
    pages = list(range(bound + extra))
    digests = [digest(i.to_bytes(8, "little") * (NUKSM_PAGE_SIZE // 8))
               for i in pages]
    a.candidates(zip(pages, digests))
    assert a.info().store_pages == [0]
    b.candidates(zip(pages, digests))
    msgs, info = b.sync()
    assert {m.type for m in msgs} == {MSG_UPLOAD_REQ}
    uploaded = sorted(r.page for m in msgs for r in m.slot_refs())
    assert len(uploaded) == bound // 2 and info.store_pages == [bound // 2]
    assert b.retried == list(range(uploaded[-1] + 1, len(pages)))
    # While it grew, a's unstable table may have evicted a few of a's
    # pages (two-choice sets both full): those are sent back to a, and
    # b's partner of each waits in the table in its place.
    a.sync()
    assert len(a.retried) < extra
    assert sorted({*uploaded, *b.retried, *a.retried}) == pages
    # Their handling is charged to each VM, by the millisecond: never
    # more than the agent spent, and most of it.
    spent = harness.process_cpu_ns(agent.pid) - cpu_before
    assert a.charged_ns > 0 and b.charged_ns > 0
    assert a.charged_ns + b.charged_ns <= spent


# ------------------------------------------------------------ disconnection

def test_disconnected_vm_keeps_its_pages(agent, vms):
    """A VM whose process runs on still maps its merged pages."""
    a, b = vms(name="a"), vms(name="b")
    data = content(41)
    merges = merge(b, [a], {a: [1], b: [2]}, [data])
    ref, ref_b = merges[a][0], merges[b][0]
    assert a.info() == (2, 1, 1, [1], 0)

    b.close()
    wait_until(lambda: a.info().vms == 1, 5, "b's disconnection")
    assert a.info() == (1, 1, 1, [1], 0)  # b's reference stays, and counts
    assert slot_has_data(agent, ref.slot, ref.node)
    assert a.read_slot(ref.node, ref.slot) == data
    assert "process runs on, keeping its 1 merged page" in agent.log_text()

    # The same process reconnects and restores it: no double count.
    b = vms(name="b")
    assert "took back 1 merged page" in agent.log_text()
    assert b.info() == (2, 1, 1, [1], 0)
    b.restore([ref_b])
    assert b.info() == (2, 1, 1, [1], 0)
    assert list_vms(a) == {a.client_id: 1, b.client_id: 1}

    # Restored, it is b's again: merging on keeps it, unmerging drops it.
    b.candidates([(9, digest(content(49)))])  # no match: no reply
    assert b.info() == (2, 1, 1, [1], 0)
    b.unmerged([ref_b])
    assert b.info() == (2, 1, 0, [1], 0)
    a.unmerged([ref])
    assert a.info() == (2, 0, 0, [0], 0)
    assert not slot_has_data(agent, ref.slot, ref.node)


@pytest.mark.parametrize("first", ["topology", "vm-limit"])
def test_reconnected_vm_restores_after_what_it_sends_first(agent, vms,
                                                          first):
    """QEMU sends TOPOLOGY and VM_LIMIT as it connects, before its
    RESTOREs: they do not end the restore, so the pages it took back are
    not dropped while it maps them."""
    a, b = vms(name="a"), vms(name="b")
    data = content(44)
    merges = merge(b, [a], {a: [1], b: [2]}, [data])
    ref, ref_b = merges[a][0], merges[b][0]
    b.close()
    wait_until(lambda: a.info().vms == 1, 5, "b's disconnection")

    b = vms(name="b")
    if first == "topology":
        b.topology([(0, 0)], [(threading.get_native_id(), 0)],
                   [(0, 1 << 15, 0)])
        messages, _ = b.sync()
        assert [m.type for m in messages] == [MSG_HOME]
    else:
        b.vm_limit(VM_LIMIT_USERFAULTFD, "no userfaultfd")
    b.restore([ref_b])
    assert b.info() == (2, 1, 1, [1], 0)
    assert "parked page" not in agent.log_text()
    # a leaves: b's restored reference keeps the slot.
    a.unmerged([ref])
    assert b.info() == (2, 1, 0, [1], 0)
    assert b.read_slot(ref_b.node, ref_b.slot) == data


def test_unrestored_pages_dropped_at_first_merge_message(agent, vms):
    a, b = vms(name="a"), vms(name="b")
    merges = merge(b, [a], {a: [1, 2], b: [1, 2]}, [content(42), content(43)])
    kept = merges[b][0]
    b.close()
    wait_until(lambda: a.info().vms == 1, 5, "b's disconnection")

    # b comes back mapping only its first page (a write broke the other).
    b = vms(name="b")
    b.restore([kept])
    assert b.info() == (2, 2, 2, [2], 0)  # GET_INFO is no merge message
    b.candidates([(9, digest(content(49)))])  # no match: no reply
    assert b.info() == (2, 2, 1, [2], 0)
    assert "dropping 1 parked page it did not restore" in agent.log_text()
    assert list_vms(a) == {a.client_id: 2, b.client_id: 1}

    # Only a holds the second page now: it goes with a's reference.
    lost = merges[a][1]
    a.unmerged([lost])
    assert a.info() == (2, 1, 1, [1], 0)
    assert not slot_has_data(agent, lost.slot, lost.node)


def test_exited_process_drops_its_pages(agent, vms):
    data = content(44)

    def play():
        c1, c2 = vms(), vms()
        (ref,) = merge(c2, [c1], {c1: [1], c2: [2]}, [data])[c1]
        c1.close()
        c2.close()
        # Disconnected, the process still runs: the page stays.
        wait_until(lambda: control_info(agent).vms == 0, 5,
                   "the disconnections")
        assert control_info(agent) == (0, 1, 1, [1], 0)
        assert slot_has_data(agent, ref.slot, ref.node)
    in_child(play)

    wait_until(lambda: control_info(agent) == (0, 0, 0, [0], 0), 5,
               "the exited process's pages to be dropped")
    assert store_empty(agent)
    assert agent.log_text().count("exited: dropping the 1 parked page") == 2


def merge_unanswered_by(b, a, data):
    """a uploads @data (its page 1) and maps it; b's page 2 gets a MERGE
    that it leaves unanswered.  Returns (a's MERGE, b's MERGE)."""
    b.candidates([(2, digest(data))])
    b.info()
    a.candidates([(1, digest(data))])
    (request,) = a.take(MSG_UPLOAD_REQ)
    a.upload([request], [data])
    (ma,) = a.take(MSG_MERGE)
    a.merged([ma])
    a.info()
    (mb,) = b.take(MSG_MERGE)
    return ma, mb


def leave_unanswered(agent, a, b, ma, mb, data):
    """b disconnects, a unmerges: b's process may map the slot, which
    stays (counted in store_pages only) with its content."""
    b.close()
    wait_until(lambda: a.info().vms == 1, 5, "b's disconnection")
    assert "keeping its 0 merged pages and 1 unanswered MERGE" in \
        agent.log_text()
    assert a.info() == (1, 1, 0, [1], 0)
    a.unmerged([ma])
    assert a.info() == (1, 0, 0, [1], 0)
    assert slot_has_data(agent, mb.slot, mb.node)
    assert a.read_slot(mb.node, mb.slot) == data


@pytest.mark.parametrize("restored", [True, False])
def test_disconnected_vm_keeps_its_unanswered_merges(agent, vms, restored):
    """QEMU maps a slot before it sends MERGED: a MERGE unanswered when
    the connection ends may be mapped by the process running on."""
    data = content(45)
    a, b = vms(name="a"), vms(name="b")
    ma, mb = merge_unanswered_by(b, a, data)
    leave_unanswered(agent, a, b, ma, mb, data)

    b = vms(name="b")
    assert "took back 0 merged pages and 1 unanswered MERGE" in \
        agent.log_text()
    assert b.info() == (2, 0, 0, [1], 0)
    if not restored:
        # Its process did not map it after all: gone at b's first merge.
        b.candidates([(9, digest(content(49)))])  # no match: no reply
        assert b.info() == (2, 0, 0, [0], 0)
        assert "dropping 1 parked page it did not restore" in \
            agent.log_text()
        assert not slot_has_data(agent, mb.slot, mb.node)
        return

    # Confirmed by RESTORE: a reference of b's, counted once.
    b.restore([mb])
    assert b.info() == (2, 1, 0, [1], 0)
    assert list_vms(a) == {a.client_id: 0, b.client_id: 1}
    b.candidates([(9, digest(content(49)))])  # no match: no reply
    assert b.info() == (2, 1, 0, [1], 0)
    assert a.read_slot(mb.node, mb.slot) == data

    # A new sharer counts once more; b's reference drops like any other.
    a.candidates([(3, digest(data))])
    (m,) = a.take(MSG_MERGE)
    a.merged([m])
    assert a.info() == (2, 1, 1, [1], 0)
    b.unmerged([mb])
    assert b.info() == (2, 1, 0, [1], 0)
    a.unmerged([m])
    assert a.info() == (2, 0, 0, [0], 0)
    assert not slot_has_data(agent, mb.slot, mb.node)


def test_exited_process_drops_its_unanswered_merges(agent, vms):
    data = content(46)

    def play():
        a, b = vms(name="a"), vms(name="b")
        ma, mb = merge_unanswered_by(b, a, data)
        leave_unanswered(agent, a, b, ma, mb, data)
    in_child(play)

    wait_until(lambda: control_info(agent) == (0, 0, 0, [0], 0), 5,
               "the exited process's MERGE to be dropped")
    assert store_empty(agent)
    assert "exited: dropping the 1 parked page" in agent.log_text()


# ------------------------------------------------------------ misbehaving VMs

@pytest.fixture
def bystanders(vms):
    """Two VMs sharing a merged page, to outlive every rogue."""
    a, b = vms(name="bystander-a"), vms(name="bystander-b")
    merges = merge(b, [a], {a: [1], b: [1]}, [content(1000)])
    assert a.info()[1:3] == (1, 1)
    return a, b, merges[a][0]


# Each rogue misbehaves and returns (its client, text of the expected
# ERROR, clients it needed to get there).

def rogue_merged_unasked(agent, vms, bystander_ref):
    rogue = vms()
    rogue.merged([bystander_ref])  # somebody else's page
    return rogue, "which has no MERGE awaiting an answer", []


def rogue_merged_twice(agent, vms, bystander_ref):
    rogue, partner = vms(), vms()
    merges = merge(partner, [rogue], {rogue: [5], partner: [5]},
                   [content(2)])
    rogue.merged(merges[rogue])
    return rogue, "which has no MERGE awaiting an answer", [partner]


def rogue_merged_bad_gen(agent, vms, bystander_ref):
    rogue, partner = vms(), vms()
    rogue.candidates([(5, digest(content(2)))])
    rogue.info()
    partner.candidates([(6, digest(content(2)))])
    (request,) = partner.take(MSG_UPLOAD_REQ)
    partner.upload([request], [content(2)])
    partner.take(MSG_MERGE)
    (m,) = rogue.take(MSG_MERGE)
    rogue.merged([m._replace(gen=(m.gen + 1) % 2**32)])
    return rogue, "stale generation", [partner]


def rogue_upload_unasked(agent, vms, bystander_ref):
    rogue = vms()
    rogue.upload([bystander_ref], [content(666)])
    return rogue, "which it was not asked to upload", []


def rogue_upload_bad_gen(agent, vms, bystander_ref):
    rogue, partner = vms(), vms()
    partner.candidates([(5, digest(content(2)))])
    partner.info()
    rogue.candidates([(6, digest(content(2)))])
    (request,) = rogue.take(MSG_UPLOAD_REQ)
    rogue.upload([request._replace(gen=(request.gen - 1) % 2**32)],
                 [content(2)])
    return rogue, "stale generation", [partner]


def rogue_unmerged_unmapped(agent, vms, bystander_ref):
    rogue = vms()
    rogue.unmerged([bystander_ref])
    return rogue, "which does not map that slot", []


def rogue_node_out_of_range(agent, vms, bystander_ref):
    rogue = vms()
    rogue.unmerged([SlotRef(1, rogue.nr_nodes, 0, 0)])
    return rogue, f"node {rogue.nr_nodes} out of range", []


def rogue_slot_out_of_range(agent, vms, bystander_ref):
    rogue = vms()
    rogue.merged([SlotRef(1, 0, STORE_SLOTS, 0)])
    return rogue, f"slot {STORE_SLOTS} out of range", []


def rogue_page_out_of_range(agent, vms, bystander_ref):
    rogue = vms()
    rogue.candidates([(1 << 52, 123)])
    return rogue, "page 0x10000000000000 out of range", []


def rogue_sends_merge(agent, vms, bystander_ref):
    rogue = vms()
    rogue.send(pack(MSG_MERGE, 2, pack_slot_refs([bystander_ref])))
    return rogue, "unexpected MERGE: only nuksmd sends it", []


def rogue_reads_outside_topology(agent, vms, bystander_ref):
    rogue = vms()
    # Pages 0..0x7ff: read regions 0..3.
    rogue.topology([(0, 0)], [], [(0, 4 * harness.READ_REGION_PAGES, 0)])
    rogue.sync()
    rogue.reads([(3, 0), (4, 0)])
    return rogue, "READS: region 0x4 (pages 0x800..0x9ff) holds no RAM " \
        "its TOPOLOGY reported", []


def rogue_reads_before_topology(agent, vms, bystander_ref):
    rogue = vms()
    rogue.reads([(0, 0)])
    return rogue, "READS: region 0 (pages 0..0x1ff) holds no RAM its " \
        "TOPOLOGY reported", []


def rogue_reads_reserved(agent, vms, bystander_ref):
    rogue = vms()
    rogue.topology([(0, 0)], [], [(0, harness.READ_REGION_PAGES, 0)])
    rogue.sync()
    region = harness.READ_REGION.pack(0, 0)
    rogue.send(pack(harness.MSG_READS, 7, harness.READS.pack(1, 1000, 0, 0) +
                    region[:-1] + b"\x01"))
    return rogue, "reserved field set in READS", []


def rogue_control_client(agent, vms, bystander_ref):
    rogue = RawClient(agent.sock)
    rogue.request(MSG_HELLO, 1, hello())
    rogue.send(pack(MSG_CANDIDATES, 2, pack_candidates([(1, 2)])))
    return rogue, "CANDIDATES from a control client", []


ROGUES = {name[len("rogue_"):]: fn for name, fn in globals().items()
          if name.startswith("rogue_")}


@pytest.mark.parametrize("rogue", ROGUES)
def test_misbehaving_vm_is_disconnected(agent, vms, bystanders, rogue):
    a, b, ref = bystanders

    def play():
        client, text, _ = ROGUES[rogue](agent, vms, ref)
        expect_kicked(client, text)
        assert text in agent.log_text()
    in_child(play)

    # Whatever the rogue and its partners held is gone with their process;
    # the bystanders'
    # page is still merged, with its content.
    wait_until(lambda: a.info() == (2, 1, 1, [1], 0), 5,
               "only the bystanders' page to be left")
    assert a.read_slot(ref.node, ref.slot) == content(1000)

    # ... and they keep working.
    a.unmerged([ref])
    b.unmerged([ref])
    b.info()
    assert a.info() == (2, 0, 0, [0], 0)
    assert agent.running


# Each bad RESTORE returns (its client, the entries it sent, the text that
# says why the agent refused the last one).

def bad_restore_free_slot(vms, bystander_ref):
    client = vms()
    return client, [SlotRef(1, 0, 12345, 0)], "holds no merged page"


def bad_restore_bad_gen(vms, bystander_ref):
    client = vms()
    return client, [bystander_ref._replace(
        gen=(bystander_ref.gen + 1) % 2**32)], "has generation"


def bad_restore_other_domain(vms, bystander_ref):
    return vms(domain="elsewhere"), [bystander_ref], \
        "belongs to another merge domain"


def bad_restore_twice(vms, bystander_ref):
    # The first entry is a valid one: it is restored, the second refused.
    return vms(), [bystander_ref._replace(page=7)] * 2, "already has a slot"


def bad_restore_out_of_range(vms, bystander_ref):
    return vms(), [bystander_ref._replace(node=5)], "node 5 out of range"


BAD_RESTORES = {name[len("bad_restore_"):]: fn
                for name, fn in globals().items()
                if name.startswith("bad_restore_")}


@pytest.mark.parametrize("kind", BAD_RESTORES)
def test_bad_restore_entry_is_refused_alone(agent, vms, bystanders, kind):
    """A RESTORE entry the agent cannot verify comes back in REFUSED,
    alone: the VM stays connected and keeps what it restored."""
    a, b, ref = bystanders
    client, entries, why = BAD_RESTORES[kind](vms, ref)
    client.restore(entries)
    assert client.take(MSG_REFUSED) == entries[-1:]
    assert why in agent.log_text()
    restored = len(entries) - 1
    client.info()  # handled
    assert control_info(agent)[1:3] == (1, 1 + restored)

    # Still connected, and merging.
    c = vms(domain=client.domain)
    merge(c, [client], {client: [40], c: [40]}, [content(7)])
    assert control_info(agent)[1:3] == (2, 2 + restored)
    assert a.read_slot(ref.node, ref.slot) == content(1000)


# ---------------------------------------------------------- pages seen once

def test_forgotten_contents_are_wanted_by_fresh_candidates_only(
        start_agent, vms, workdir):
    """Two pages seen once are forgotten.  A candidate offered again on
    WANTED (marked) with one of their contents only pairs, it wants
    nothing: without that, the pages its fragment matches would want
    theirs, and so on without end.  A fresh candidate with the other
    content makes it wanted: every VM of the domain is sent its
    fragment, and the forgotten page, offered again, pairs with it."""
    metrics = workdir / "textfile"
    metrics.mkdir()
    target = start_agent("--forget-after", "1", "--metrics-dir", metrics,
                         "--metrics-interval", "1", "--vm-domains=allow")
    a, b = vms(target=target), vms(target=target)
    other = vms(domain="other", target=target)
    d1, d2 = 0x1234_5678_9abc_0042, 0x1234_5678_9abc_0043
    a.candidates([(5, d1), (6, d2)])
    wait_until(lambda: harness.agent_metric(
        metrics, "nuksm_pages_forgotten") == 2 and harness.agent_metric(
        metrics, "nuksm_pages_unshared") == 0, 30,
        "both pages to be forgotten")

    b.candidates([(7, d1, 0, IDLE_NEVER, CANDIDATE_WANTED), (8, d2)])
    wait_until(lambda: a.sync() and a.wanted, 10, "a WANTED for a")
    assert a.wanted == {harness.digest_fragment(d2)}
    b.sync()
    assert b.wanted == a.wanted
    assert not other.sync()[0] and not other.wanted

    # a's forgotten page, offered again, pairs with b's.
    a.candidates([(6, d2, 0, IDLE_NEVER, CANDIDATE_WANTED)])
    msgs = a.sync()[0] + b.sync()[0]
    assert [m.type for m in msgs] == [MSG_UPLOAD_REQ]
    wait_until(lambda: harness.agent_metric(
        metrics, "nuksm_contents_wanted_total") == 1, 10,
        "the metrics to count the one content wanted")


# ------------------------------------------------------------ agent restart

def restart_agent(agent, start_agent, clients, grace, found):
    """SIGKILL @agent, close its @clients, start another one with
    --restore-grace @grace and wait until it says it found @found ("2
    pages") in the store; returns it."""
    agent.kill()
    for client in clients:
        client.close()
    agent = start_agent("--restore-grace", str(grace))
    # The socket listens before the store is opened: wait for its word.
    wait_until(lambda: f"store holds {found} from a previous run" in
               agent.log_text(), 10, "the restarted agent to find its pages")
    return agent


def test_restart_restores_merged_pages(start_agent, vms):
    agent = start_agent("--restore-grace", "3")
    a, b = vms(target=agent), vms(target=agent)
    kept, lost = content(11), content(12)
    merges = merge(b, [a], {a: [1, 2], b: [1, 2]}, [kept, lost])
    assert a.info().store_pages == [2]
    kept_ref, lost_ref = merges[a]
    kept_ref_b = merges[b][0]
    assert slot_has_data(agent, lost_ref.slot)

    agent = restart_agent(agent, start_agent, [a, b], 3, "2 pages")

    # Both VMs come back and restore the page they still map, and only it.
    a, b = vms(target=agent), vms(target=agent)
    info = a.info()
    assert (info.pages_shared, info.store_pages) == (0, [2])
    a.restore([kept_ref])
    b.restore([kept_ref_b])
    b.info()
    info = a.info()
    assert (info.pages_shared, info.pages_sharing) == (1, 1)
    assert list_vms(a) == {a.client_id: 1, b.client_id: 1}

    # The restored slot is known content again: a newcomer merges at once.
    c = vms(target=agent)
    c.candidates([(3, digest(kept))])
    (m,) = c.take(MSG_MERGE)
    assert m == kept_ref._replace(page=3)
    c.merged([m])
    assert c.info()[1:3] == (1, 2)

    # Late restore with another generation is refused, alone.
    d = vms(target=agent)
    bad = kept_ref._replace(page=9, gen=(kept_ref.gen + 1) % 2**32)
    d.restore([bad])
    assert d.take(MSG_REFUSED) == [bad]

    # Nobody restored the other page: punched after the grace period.
    assert slot_has_data(agent, lost_ref.slot)
    wait_until(lambda: a.info().store_pages == [1], 10,
               "the unrestored page to be freed")
    assert not slot_has_data(agent, lost_ref.slot)
    assert slot_has_data(agent, kept_ref.slot)
    assert a.read_slot(kept_ref.node, kept_ref.slot) == kept
    assert "freed 1 orphan store page that no process reads" in \
        agent.log_text()

    # Too late for it now.
    e = vms(target=agent)
    e.restore([lost_ref._replace(page=9)])
    assert e.take(MSG_REFUSED) == [lost_ref._replace(page=9)]
    assert "holds no merged page" in agent.log_text()


def test_restored_slot_outlives_the_vms_that_restored_it(start_agent, vms):
    """After a restart, a slot's references are those restored so far: a
    VM stopped across the restart maps it too and restores it only once it
    runs.  When the VMs that restored it drop it, the slot must stay (an
    orphan again, freed only once no process maps it), for the late VM
    still reads it: punched, it would read zeros."""
    agent = start_agent("--restore-grace", "60")
    a, b = vms(target=agent), vms(target=agent)
    merges = merge(b, [a], {a: [1], b: [1]}, [content(41)])
    ref_a, ref_b = merges[a][0], merges[b][0]
    agent = restart_agent(agent, start_agent, [a, b], 60, "1 page")

    a = vms(target=agent)
    a.restore([ref_a])
    assert a.info().pages_shared == 1
    a.unmerged([ref_a])     # a's guest wrote its page
    info = a.info()
    assert (info.pages_shared, info.store_pages) == (0, [1])
    assert slot_has_data(agent, ref_a.slot)

    # The late VM runs again, and takes its page back.
    b = vms(target=agent)
    b.restore([ref_b])
    messages, info = b.sync()
    assert not messages, "b's RESTORE was refused"
    assert (info.pages_shared, info.store_pages) == (1, [1])
    assert b.read_slot(ref_b.node, ref_b.slot) == content(41)


def test_restart_without_restore_frees_everything(start_agent, vms):
    agent = start_agent()
    a, b = vms(target=agent), vms(target=agent)
    merge(b, [a], {a: [1, 2, 3], b: [1, 2, 3]},
          [content(21), content(22), content(23)])
    agent.kill()
    a.close()
    b.close()

    agent = start_agent("--restore-grace", "0")
    wait_until(lambda: store_empty(agent), 10,
               "the store to be emptied")
    assert vms(target=agent).info().store_pages == [0]


def test_clean_shutdown_keeps_store(start_agent, vms):
    """SIGTERM must not punch pages the VMs still map."""
    agent = start_agent()
    a, b = vms(target=agent), vms(target=agent)
    merges = merge(b, [a], {a: [1], b: [1]}, [content(31)])
    agent.stop()
    ref = merges[a][0]
    assert slot_has_data(agent, ref.slot)
    assert a.read_slot(ref.node, ref.slot) == content(31)


def test_vm_not_reading_is_disconnected(agent, vms):
    """Replies queue while a VM's socket is full, up to a bound."""
    a, b = vms(), vms()
    sent = 0
    try:
        while sent < 30000:  # 30000 INFO replies: 18 MB, over the bound
            b.send(pack(MSG_GET_INFO, 1))
            sent += 1
    except OSError:
        pass  # the agent hung up on b already
    b.messages_until_eof()
    assert "does not read its messages (" in agent.log_text()
    wait_until(lambda: a.info().vms == 1, 5, "b to be gone")
