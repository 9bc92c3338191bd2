# SPDX-License-Identifier: GPL-2.0-or-later
"""Tenants kept apart (docs/security.rst, "Threat model"): the agent, not
the VM, decides each VM's merge domain; a VM holds only its own domain's
store; host-wide operations need an administrator; a client cannot stop
a domain's merging by claiming contents it never uploads, nor list other
tenants' VMs.

Raw clients play VMs and management tools.  Clients that must be other
processes, or other users, run in forked children (in_process) that stay
connected until the test is done with them.
"""

import collections
import contextlib
import grp
import os
import pickle
import pwd
import random
import subprocess
import traceback

import pytest
import xxhash

import harness
from harness import (APPLY_MOVE, DEFAULT_DOMAIN, ERR_DENIED, HELLO_ACK, INFO_DOMAIN,
                     INFO_HOST, INFO_NONE, MSG_APPLIED, MSG_APPLY_MOVE,
                     MSG_GET_INFO, MSG_GET_PLAN,
                     MSG_GET_SIMILARITY, MSG_HELLO, MSG_HELLO_ACK, MSG_PLAN,
                     MSG_SIMILARITY,
                     MSG_INFO, MSG_MERGE, MSG_POLICY,
                     MSG_SET_POLICY, MSG_SET_PRIORITY, MSG_UPLOAD_REQ,
                     MSG_VMS, NUKSM_PAGE_SIZE, POLICIES, POLICY, PRIORITY,
                     VM_ENTRY, VMS, RawClient, VmClient,
                     ctl_json, ctl_ok, cstr, hello, info_scope, pack,
                     parse_info, run_nuksmd, store_path, store_paths,
                     wait_until)

NOBODY = "nobody"
NOGROUP = "nogroup"        # Debian's base-passwd has both


def content(seed):
    return random.Random(seed).randbytes(NUKSM_PAGE_SIZE)


def digest(data):
    return xxhash.xxh3_64_intdigest(data)


@contextlib.contextmanager
def in_process(fn, user=None):
    """Run @fn in a forked child, as @user (a name) if given, and yield
    what it returned; the child, and the connections @fn opened, live
    until the with-block ends.  @fn returns (result, keep): @keep are the
    objects (clients) it must not lose."""
    result_r, result_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        keep = None
        os.close(result_r)
        os.close(done_w)
        try:
            if user:
                entry = pwd.getpwnam(user)
                os.setgroups([])
                os.setgid(grp.getgrnam(NOGROUP).gr_gid)
                os.setuid(entry.pw_uid)
            result, keep = fn()
            outcome = (True, result)
        except BaseException:
            outcome = (False, traceback.format_exc())
        with os.fdopen(result_w, "wb") as out:
            pickle.dump(outcome, out)
        os.read(done_r, 1)
        del keep
        os._exit(0)
    os.close(result_w)
    os.close(done_r)
    try:
        with os.fdopen(result_r, "rb") as inp:
            ok, result = pickle.load(inp)
        assert ok, f"the child process failed:\n{result}"
        yield result
    finally:
        os.close(done_w)
        os.waitpid(pid, 0)


def control(sock):
    """A control client past its HELLO, and its HELLO_ACK's admin flag."""
    client = RawClient(sock)
    reply = client.request(MSG_HELLO, 1, hello())
    assert reply.type == MSG_HELLO_ACK, reply.error()
    return client, bool(HELLO_ACK.unpack(reply.payload)[8])


def set_policy(client, name, seq=2):
    reply = client.request(MSG_SET_POLICY, seq,
                           POLICY.pack(POLICIES.index(name)))
    if reply.type == MSG_POLICY:
        return None
    code, message = reply.error()
    assert code == ERR_DENIED, message
    return message


def list_vms(client, seq=50):
    """The VM entries of LIST_VMS as dicts of the fields tests use."""
    reply = harness.list_vms(client, seq)
    assert reply.type == MSG_VMS
    count, total = VMS.unpack_from(reply.payload)
    entries = []
    for i in range(count):
        e = VM_ENTRY.unpack_from(reply.payload, VMS.size + i * VM_ENTRY.size)
        entries.append({"id": e[0], "pid": e[1], "uid": e[2],
                        "priority": e[3], "domain": cstr(e[4]),
                        "requested": cstr(e[7]), "source": e[8],
                        "limit": e[9], "merged": e[10]})
    return entries


def admin_only_denied(client, request, reply_type, seq=70, payload=b""):
    """The ERROR text @request gets, or None if it got its @reply_type."""
    reply = client.request(request, seq, payload)
    if reply.type == reply_type:
        return None
    code, message = reply.error()
    assert code == ERR_DENIED, message
    return message


def get_info(client, seq=60):
    reply = client.request(MSG_GET_INFO, seq)
    assert reply.type == MSG_INFO, f"got type {reply.type}"
    return parse_info(reply), info_scope(reply)


def open_to(workdir, agent_args=()):
    """Let nobody reach the agent's socket (in @workdir, group nogroup)."""
    os.chmod(workdir, 0o755)
    return ("--socket-group", NOGROUP, *agent_args)


# ------------------------------------------------ who is in which domain

def test_domain_is_the_agents_not_the_vms(agent, nuksmctl_bin):
    """By default (one tenant) every VM is in "default", whatever its
    QEMU asks for; what it asked for and where its domain came from are
    shown."""
    vm = VmClient(agent.sock, domain="blue")
    try:
        assert (vm.domain, vm.domain_source) == (DEFAULT_DOMAIN, "shared")
        (entry,) = ctl_json(agent.sock, "vms")["vms"]
        assert (entry["domain"], entry["domain_source"],
                entry["requested_domain"]) == ("default", "shared", "blue")
        assert "VM joined domain 'default' (shared; it asked for 'blue')" \
            in agent.log_text()
    finally:
        vm.close()


def test_refuse_mode_names_the_assigned_domain(start_agent):
    agent = start_agent("--vm-domains", "refuse")
    client = RawClient(agent.sock)
    client.send(pack(MSG_HELLO, 1, hello(role=1, priority=100,
                                         domain=b"blue")))
    (msg,) = client.messages_until_eof()
    code, message = msg.error()
    assert code == ERR_DENIED
    assert "domain 'blue' refused: this VM's domain is 'default' (from " \
        "shared)" in message and "vm-domains=refuse" in message
    # Asking for nothing, or for what it gets, is fine.
    VmClient(agent.sock).close()


def test_allow_mode_honours_requests(start_agent):
    agent = start_agent("--vm-domains=allow")
    vm = VmClient(agent.sock, domain="blue")
    assert (vm.domain, vm.domain_source) == ("blue", "request")
    vm.close()


def same_content_merges(agent, make_remote):
    """Whether a VM of this process and one made by @make_remote in
    another process share a page of the same content."""
    data = content(1)
    local = VmClient(agent.sock)

    def remote():
        vm = make_remote()
        vm.candidates([(5, digest(data))])
        vm.info()
        return vm.domain, vm
    with in_process(remote) as remote_domain:
        local.candidates([(5, digest(data))])
        asked = local.take(MSG_UPLOAD_REQ)
        local.close()
    return remote_domain, local.domain, bool(asked)


def test_isolation_vm_gives_each_vm_its_own_domain(start_agent):
    agent = start_agent("--isolation", "vm")
    remote_domain, local_domain, merged = same_content_merges(
        agent, lambda: VmClient(agent.sock, domain="default"))
    assert remote_domain.startswith("vm:")
    assert local_domain == f"vm:{os.getpid()}." + \
        open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[19]
    assert remote_domain != local_domain
    assert not merged, "VMs of two processes shared a page under " \
        "isolation=vm"


def test_isolation_shared_merges_across_processes(agent):
    """The control for the test above: with isolation=shared the same
    two processes do share the page."""
    remote_domain, local_domain, merged = same_content_merges(
        agent, lambda: VmClient(agent.sock, domain="other"))
    assert remote_domain == local_domain == DEFAULT_DOMAIN
    assert merged


def test_rules_assign_domains_and_cap_priorities(start_agent, workdir):
    """[domain NAME] groups put VMs in domains by user (here root's) and
    cap their priority, which SET_PRIORITY cannot raise past the cap."""
    config = workdir / "nuksmd.conf"
    config.write_text("[nuksmd]\nisolation=vm\n\n"
                      "[domain tenant-a]\nusers=root\nmax-priority=50\n\n"
                      "[domain spare]\ngroups=nogroup\n"
                      "cgroups=/machine.slice/machine-qemu\\x2d*.scope*; "
                      "/machine/qemu-*\n")
    agent = start_agent("--config", config)
    vm = VmClient(agent.sock, domain="blue")
    assert (vm.domain, vm.domain_source) == ("tenant-a", "rule")
    assert (vm.priority, vm.priority_limit) == (50, 50)
    vm._send(MSG_SET_PRIORITY, PRIORITY.pack(1000))
    vm.info()
    (entry,) = list_vms(vm)
    assert (entry["priority"], entry["limit"]) == (50, 50)
    vm._send(MSG_SET_PRIORITY, PRIORITY.pack(7))
    vm.info()
    assert list_vms(vm)[0]["priority"] == 7
    vm.close()


@pytest.mark.parametrize("text, error", [
    ("[domain a/b]\nusers=root\n", "'a/b' is not a domain name"),
    ("[domain x]\nusers=no-such-user-here\n",
     "[domain x] users: no user 'no-such-user-here'"),
    ("[domain x]\ncolour=red\n",
     "unknown key 'colour' in [domain x] (allowed: users, groups, "
     "cgroups, libvirt-names, max-priority, store-max, unstable-max, "
     "queue-max, cpu-max)"),
    ("[domain x]\nmax-priority=0\n", "invalid priority '0' (allowed: "
     "1..1000)"),
    ("[domain x]\nstore-max=150%\n", "[domain x] store-max: invalid quota "
     "'150%' (allowed: 1%..100% of the host's, or 1..1048576 MiB)"),
    ("[domain x]\nunstable-max=lots\n", "[domain x] unstable-max: invalid "
     "quota 'lots' (allowed: 1%..100% of the host's, or 1..1048576 MiB)"),
    ("[domain x]\ncpu-max=4096\n", "[domain x] cpu-max: invalid CPU quota "
     "'4096' (allowed: 1%..100% of a core)"),
    ("[nuksmd]\ndomain-cpu-max=0%\n", "domain-cpu-max: invalid CPU quota "
     "'0%' (allowed: 1%..100% of a core)"),
    ("[tenants]\n", "unknown group [tenants] (allowed: [nuksmd], "
     "[domain NAME])"),
])
def test_bad_rules_are_refused_by_name(workdir, nuksmd_bin, text, error):
    config = workdir / "bad.conf"
    config.write_text("[nuksmd]\n" + text)
    result = run_nuksmd("--socket", workdir / "b.sock", "--config", config)
    assert result.returncode == 2
    assert error in result.stderr, result.stderr


@pytest.mark.parametrize("option, value, allowed", [
    ("--isolation", "tenant", "allowed: shared, vm"),
    ("--vm-domains", "maybe", "allowed: ignore, refuse, allow"),
    ("--domain-store-max", "0", "allowed: 1%..100% of the host's, or "
     "1..1048576 MiB"),
])
def test_bad_modes_are_refused_by_name(workdir, nuksmd_bin, option, value,
                                       allowed):
    result = run_nuksmd("--socket", workdir / "m.sock", option, value)
    assert result.returncode == 2
    assert option in result.stderr and allowed in result.stderr


# ------------------------------------------------------------ one store each

def data_pages(fd):
    """Every page of the file @fd that holds data, by offset."""
    pages = {}
    size = os.fstat(fd).st_size
    pos = 0
    while pos < size:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, pos, os.SEEK_HOLE)
        while pos < end:
            pages[pos] = os.pread(fd, NUKSM_PAGE_SIZE, pos)
            pos += NUKSM_PAGE_SIZE
    return pages


def test_a_domain_cannot_read_another_domains_pages(start_agent):
    """A client of domain A, holding every descriptor the agent gave it,
    reads the whole of them: no page merged in domain B is there, though
    B's VMs read it through theirs."""
    agent = start_agent("--vm-domains=allow", "--fake-numa", "2")
    secret_b, page_a = content(77), content(78)
    a1, a2 = VmClient(agent.sock, domain="a"), VmClient(agent.sock, domain="a")
    b1, b2 = VmClient(agent.sock, domain="b"), VmClient(agent.sock, domain="b")
    for (x, y), data in (((a1, a2), page_a), ((b1, b2), secret_b)):
        x.candidates([(1, digest(data))])
        x.info()
        y.candidates([(1, digest(data))])
        (req,) = y.take(MSG_UPLOAD_REQ)
        y.upload([req], [data])
        assert y.take(MSG_MERGE) and x.take(MSG_MERGE)
    b_ref = req
    assert b1.read_slot(b_ref.node, b_ref.slot) == secret_b

    # Everything a1 was given: the STORE descriptors (and /dev/userfaultfd,
    # which is no file of the store).
    seen = {}
    for node, fd in a1.stores.items():
        st = os.fstat(fd)
        path = store_path(agent.state_dir, "a", node)
        assert (st.st_dev, st.st_ino) == (path.stat().st_dev,
                                          path.stat().st_ino)
        seen.update({(node, off): data
                     for off, data in data_pages(fd).items()})
    assert page_a in seen.values(), "the test cannot see its own domain"
    assert secret_b not in seen.values()
    # B's page is in the store, in B's files only.
    owners = [p.name for p in store_paths(agent.state_dir)
              if secret_b in data_pages_of(p).values()]
    assert owners == [store_path(agent.state_dir, "b", b_ref.node).name]
    for vm in (a1, a2, b1, b2):
        vm.close()


def data_pages_of(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return data_pages(fd)
    finally:
        os.close(fd)


def test_a_domains_files_go_with_its_last_page(start_agent):
    agent = start_agent("--vm-domains=allow")

    def vm_of_c():
        vm = VmClient(agent.sock, domain="c")
        return None, vm
    with in_process(vm_of_c):
        assert store_path(agent.state_dir, "c").exists()
    VmClient(agent.sock).info()  # the agent saw the child go
    wait_until(lambda: not store_path(agent.state_dir, "c").exists(), 10,
               "domain c's files to be removed")


# ---------------------------------------------------------------- roles

def test_vms_may_not_set_the_host_policy_unless_allowed(agent, start_agent):
    vm = VmClient(agent.sock)
    denied = set_policy(vm, "local", seq=90)
    assert "does not let VMs set the host-wide policy (vm-set-policy=false)" \
        in denied
    vm.close()
    assert ctl_json(agent.sock, "policy")["policy"] == "global"

    allowing = start_agent("--vm-set-policy", name="allowing")
    vm = VmClient(allowing.sock)
    assert set_policy(vm, "local", seq=90) is None
    vm.close()
    assert ctl_json(allowing.sock, "policy")["policy"] == "local"


def test_only_administrators_change_the_host(start_agent, workdir):
    """root and members of admin-group administer; another user's
    control client may read the policy, sees its own VMs and no host
    counters, and may neither set the policy nor see the similarity of
    VMs or the co-location plan, which name every tenant's."""
    agent = start_agent(*open_to(workdir))
    root_vm = VmClient(agent.sock)

    def as_nobody():
        client, admin = control(agent.sock)
        denied = set_policy(client, "fair")
        info, scope = get_info(client)
        vms = list_vms(client)
        similarity = admin_only_denied(client, MSG_GET_SIMILARITY,
                                       MSG_SIMILARITY)
        plan = admin_only_denied(client, MSG_GET_PLAN, MSG_PLAN, seq=71)
        apply = admin_only_denied(client, MSG_APPLY_MOVE, MSG_APPLIED,
                                  seq=72, payload=APPLY_MOVE.pack(1, 0))
        return (admin, denied, info, scope, vms, similarity, plan,
                apply), client
    with in_process(as_nobody, user=NOBODY) as (admin, denied, info, scope,
                                                 vms, similarity, plan,
                                                 apply):
        assert not admin
        assert "needs an administrator" in denied
        assert "administrators only" in similarity
        assert "administrators only" in plan
        assert "administrators only" in apply
        assert scope == INFO_NONE
        assert (info.vms, info.pages_shared, info.store_pages) == (0, 0, [0])
        assert vms == []        # root's VM is not its own
    root, admin = control(agent.sock)
    assert admin
    assert get_info(root)[1] == INFO_HOST
    assert len(list_vms(root)) == 1
    assert admin_only_denied(root, MSG_GET_SIMILARITY, MSG_SIMILARITY) is None
    assert admin_only_denied(root, MSG_GET_PLAN, MSG_PLAN, seq=71) is None
    assert set_policy(root, "fair") is None
    root_vm.close()

    group_agent = start_agent(*open_to(workdir, ("--admin-group", NOGROUP)),
                              name="grouped")

    def as_admin_member():
        client, admin = control(group_agent.sock)
        return (admin, set_policy(client, "local")), client
    with in_process(as_admin_member, user=NOBODY) as (admin, denied):
        assert admin and denied is None
    assert ctl_json(group_agent.sock, "policy")["policy"] == "local"


def test_nuksmctl_as_another_user_says_what_it_needs(start_agent, workdir,
                                                    installed):
    """The installed nuksmctl, which nobody can run wherever the checkout
    is, run as nobody: nuksmctl top shows nobody root's VM either."""
    agent = start_agent(*open_to(workdir))
    root_vm = VmClient(agent.sock, name="root-vm")
    nuksmctl = installed / "bin/nuksmctl"

    def run():
        policy = subprocess.run([str(nuksmctl), "--socket", str(agent.sock),
                                 "policy", "local"], capture_output=True,
                                text=True, timeout=30)
        status = subprocess.run([str(nuksmctl), "--socket", str(agent.sock),
                                 "status"], capture_output=True, text=True,
                                timeout=30)
        top = subprocess.run([str(nuksmctl), "--socket", str(agent.sock),
                              "top", "--once", "--interval", "1"],
                             capture_output=True, text=True, timeout=30)
        return (policy.returncode, policy.stderr, status.returncode,
                status.stdout, top.returncode, top.stdout), None
    with in_process(run, user=NOBODY) as (rc, err, status_rc, status,
                                          top_rc, top):
        assert rc != 0 and "needs an administrator" in err
        assert status_rc == 0
        assert "counters are for administrators" in status
        assert top_rc == 0 and "its counters are for administrators" in top
        assert "root-vm" not in top and "\nID " in top, top
    assert "root-vm" in ctl_ok(agent.sock, "top", "--once", "--interval",
                               "1")
    root_vm.close()


def test_a_vm_sees_its_own_domain_and_process_only(start_agent):
    agent = start_agent("--vm-domains=allow")
    data = content(5)
    a, b = VmClient(agent.sock, domain="a"), VmClient(agent.sock, domain="a")
    a.candidates([(1, digest(data))])
    a.info()
    b.candidates([(2, digest(data))])
    (req,) = b.take(MSG_UPLOAD_REQ)
    b.upload([req], [data])
    b.merged(b.take(MSG_MERGE))     # b's upload handled: a has its MERGE
    a.merged(a.take(MSG_MERGE))
    b.info()

    def other_tenant():
        vm = VmClient(agent.sock, domain="b")
        info, scope = get_info(vm, seq=70)
        return (info, scope, list_vms(vm, seq=71), os.getpid()), vm
    with in_process(other_tenant) as (info, scope, vms, pid):
        # Its INFO counts its own domain, where nothing merged.
        assert scope == INFO_DOMAIN
        assert (info.vms, info.pages_shared, info.pages_sharing,
                info.store_pages) == (1, 0, 0, [0])
        # Its LIST_VMS shows its own process's VMs, not domain a's.
        assert [e["pid"] for e in vms] == [pid]
    info, scope = get_info(a)
    assert scope == INFO_DOMAIN
    assert (info.vms, info.pages_shared, info.pages_sharing) == (2, 1, 1)
    a.close()
    b.close()


def test_a_qemus_control_connection_lists_its_own_domain_only(start_agent,
                                                              workdir):
    """Under libvirt every QEMU has one user.  A control connection of
    that user, as a compromised QEMU opens one, lists the VMs of that user
    in the domain its own process is in, and no other tenant's (issue 30:
    it listed every VM of the user, with domain, pid and name)."""
    def vm_of(sock, name):
        def run():
            vm = VmClient(sock, name=name)
            return (os.getpid(), vm.domain), vm
        return run

    def vm_that_lists(sock, name):
        def run():
            vm = VmClient(sock, name=name)
            client, _ = control(sock)
            return (os.getpid(), vm.domain, list_vms(client)), (vm, client)
        return run

    def lister(sock):
        client, _ = control(sock)
        return list_vms(client), client

    for isolation in ("vm", "shared"):
        agent = start_agent(*open_to(workdir, (f"--isolation={isolation}",)),
                            name=isolation)
        with in_process(vm_of(agent.sock, "a"), user=NOBODY) as \
                (pid_a, domain_a), \
                in_process(vm_that_lists(agent.sock, "b"), user=NOBODY) as \
                (pid_b, domain_b, seen_by_b), \
                in_process(lambda: lister(agent.sock), user=NOBODY) as \
                seen_by_other:
            root, _ = control(agent.sock)
            assert sorted(e["pid"] for e in list_vms(root)) == \
                sorted([pid_a, pid_b])
            if isolation == "vm":
                # Each VM is a tenant: b's QEMU sees itself alone, another
                # process of the user nobody's VM.
                assert domain_a != domain_b
                assert [(e["pid"], e["domain"]) for e in seen_by_b] == \
                    [(pid_b, domain_b)]
                assert seen_by_other == []
            else:
                # One tenant, as the operator said: the user's VMs.
                assert domain_a == domain_b == DEFAULT_DOMAIN
                assert sorted(e["pid"] for e in seen_by_b) == \
                    sorted(e["pid"] for e in seen_by_other) == \
                    sorted([pid_a, pid_b])
            root.close()


# -------------------------------------------------- no squatting, no oracle

SQUATTED = 512


def collect(clients, msg_type, count, what):
    """{client: SlotRefs of @msg_type} once they add up to @count each."""
    got = {c: [] for c in clients}

    def enough():
        for c in clients:
            got[c] += c.take(msg_type)
        return all(len(refs) >= count for refs in got.values())
    wait_until(enough, 30, what)
    return got


def test_a_squatter_cannot_stop_a_domains_merging(agent):
    """A client claims SQUATTED contents and never uploads them (the probe
    of issue 12 kept 0 of 512 pages from merging for 20 s).  When their
    time is up a waiting VM uploads them instead, and for a while its
    partners upload in its place: every page merges, and nobody honest
    is disconnected."""
    datas = [content(1000 + i) for i in range(SQUATTED)]
    pages = [(i, digest(d)) for i, d in enumerate(datas)]
    honest, other = VmClient(agent.sock), VmClient(agent.sock)
    squatter = VmClient(agent.sock, name="squatter")
    honest.candidates(pages)
    honest.info()
    # The squatter's pages pair with the honest ones: it is asked first.
    squatter.candidates(pages)
    squatted = squatter.take(MSG_UPLOAD_REQ)
    assert len(squatted) == SQUATTED
    other.candidates(pages)        # joins the slots being uploaded
    assert other.info().pages_shared == 0

    # When the squatter's time is up, a waiting VM is asked instead.
    (asked,) = collect([honest], MSG_UPLOAD_REQ, SQUATTED,
                       "the squatted uploads to go to a waiting VM").values()
    assert sorted(r.page for r in asked) == list(range(SQUATTED))
    honest.upload(asked, [datas[r.page] for r in asked])
    merges = collect([honest, other], MSG_MERGE, SQUATTED,
                     "every squatted page to merge")
    for client, refs in merges.items():
        client.merged(refs)
    other.info()
    info = honest.info()
    assert (info.pages_shared, info.pages_sharing) == (SQUATTED, SQUATTED)
    assert "squatter'): did not upload in 5 s (time 1): other VMs upload " \
        "in its place for 60 s" in agent.log_text()

    # Its upload, coming late, is ignored rather than a violation.
    squatter.upload(squatted[:1], [datas[squatted[0].page]])
    squatter.info()

    # For a while its partner is asked to upload in its place.
    fresh = content(5000)
    honest.candidates([(SQUATTED, digest(fresh))])
    honest.info()
    squatter.candidates([(SQUATTED, digest(fresh))])
    assert squatter.take(MSG_UPLOAD_REQ) == []
    (req,) = honest.take(MSG_UPLOAD_REQ)
    assert req.page == SQUATTED
    for client in (honest, other, squatter):
        client.close()


def test_a_slow_uploader_loses_nothing(agent):
    """An upload that comes after its time merges the pages all the same
    (the waiting VM uploaded them): nothing is lost or disconnected."""
    data = content(9)
    a, b = VmClient(agent.sock), VmClient(agent.sock)
    a.candidates([(1, digest(data))])
    a.info()
    b.candidates([(1, digest(data))])
    (late,) = b.take(MSG_UPLOAD_REQ)
    (req,) = collect([a], MSG_UPLOAD_REQ, 1, "the upload to go to a")[a]
    b.upload([late], [data])       # too late: ignored
    a.upload([req], [data])
    (merge,) = a.take(MSG_MERGE)
    a.merged([merge])
    assert b.info().pages_shared == 1 and a.info().pages_shared == 1
    a.close()
    b.close()


def test_rules_assign_by_cgroup(start_agent, workdir, new_cgroup):
    """A [domain NAME] group's cgroups= glob puts a VM whose process is
    in a matching cgroup (as the kernel says, not the VM) in NAME."""
    cgroup = new_cgroup("cpu")
    config = workdir / "nuksmd.conf"
    config.write_text("[nuksmd]\nisolation=vm\n\n[domain batch]\n"
                      f"cgroups=*/{os.path.basename(cgroup)}\n")
    agent = start_agent("--config", config)

    def in_cgroup():
        with open(f"{cgroup}/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
        vm = VmClient(agent.sock)
        return (vm.domain, vm.domain_source), vm
    with in_process(in_cgroup) as (domain, source):
        assert (domain, source) == ("batch", "rule")
    outside = VmClient(agent.sock)
    assert outside.domain_source == "private"
    outside.close()


GUESSES = 16


def test_no_oracle_across_domains(start_agent):
    """The probe of issue 12: a client asks about 16 contents another VM
    merged and 16 it did not.  From the same domain the right guesses are
    answered with MERGE, which a member of a domain may learn (it can
    read its domain's store anyway: docs/security.rst).  From another
    domain no guess is answered: no MERGE, no UPLOAD_REQ, nothing."""
    agent = start_agent("--isolation", "vm", "--vm-domains", "allow")
    right = [content(3000 + i) for i in range(GUESSES)]
    wrong = [content(4000 + i) for i in range(GUESSES)]
    a1, a2 = VmClient(agent.sock, domain="a"), VmClient(agent.sock, domain="a")
    a1.candidates([(i, digest(d)) for i, d in enumerate(right)])
    a1.info()
    a2.candidates([(i, digest(d)) for i, d in enumerate(right)])
    requests = a2.take(MSG_UPLOAD_REQ)
    a2.upload(requests, [right[r.page] for r in requests])
    a2.merged(a2.take(MSG_MERGE))
    a1.merged(a1.take(MSG_MERGE))

    def probe(domain):
        prober = VmClient(agent.sock, domain=domain)
        guesses = right + wrong
        prober.candidates([(100 + i, digest(d))
                           for i, d in enumerate(guesses)])
        messages, _ = prober.sync()
        answered = collections.Counter()
        for m in messages:
            answered[m.type] += len(m.slot_refs())
        prober.close()
        return answered
    assert probe("b") == {}
    assert probe("a") == {MSG_MERGE: GUESSES}
    a1.close()
    a2.close()


def test_a_vm_alone_in_its_domain_merges_after_a_missed_upload(start_agent):
    """A VM that missed an upload (a page it could no longer read, say)
    and has nobody to upload in its place still merges its own pages:
    missing an upload costs it its turn, not its merging."""
    agent = start_agent("--isolation", "vm")
    data, more = content(21), content(22)
    vm = VmClient(agent.sock)
    vm.candidates([(1, digest(data)), (2, digest(data))])
    (missed,) = vm.take(MSG_UPLOAD_REQ)
    # Its time passes: its other page of the content is asked instead.
    (req,) = collect([vm], MSG_UPLOAD_REQ, 1,
                     "the upload to go to the VM's other page")[vm]
    assert req.page != missed.page and req.slot == missed.slot
    vm.upload([req], [data])
    assert [m.page for m in vm.take(MSG_MERGE)] == [req.page]
    # Distrusted now, yet alone: it is asked, and merges.
    vm.candidates([(3, digest(more)), (4, digest(more))])
    (req,) = vm.take(MSG_UPLOAD_REQ)
    vm.upload([req], [more])
    assert len(vm.take(MSG_MERGE)) == 2
    vm.close()
