/*
 * nuksmd request handling.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "apply.h"
#include "budget.h"
#include "colocation.h"
#include "conditions.h"
#include "detached.h"
#include "dispatch.h"
#include "home.h"
#include "identity.h"
#include "ledger.h"
#include "libvirt.h"
#include "log.h"
#include "merge.h"
#include "nuksm-config.h"
#include "reads.h"
#include "recovery.h"
#include "relocate.h"
#include "similarity.h"
#include "transport.h"

/* Handler of one request type; @payload passed nuksm_msg_check(). */
typedef void (*RequestHandler)(NuksmAgent *agent, NuksmClient *client,
                               uint32_t seq, const void *payload);

/*
 * Decide what @client is from what the kernel and root say of its
 * process: its merge domain (@assigned), for a VM with its priority
 * limit; for a control client, the domain its process would be in as a
 * VM, whose VMs it may list (may_list()), and whether it administers.
 * False after refusing it.
 */
static bool judge_client(NuksmAgent *agent, NuksmClient *client,
                         uint32_t seq, const NuksmMsgHello *hello,
                         Assignment *assigned)
{
    ClientIdentity who;
    g_autofree char *error = NULL;
    bool ok = identity_read(&who, client->pid, client->pidfd, client->uid,
                            client->gid, &error);

    if (ok) {
        bool vm = hello->role == NUKSM_ROLE_VM;
        PeerIdentity peer;

        identity_read_vm(&who, agent->libvirt_dir);
        identity_peer(&who, &peer);
        /* A control client asks for no domain: it is never refused. */
        assign_domain(agent->assign, &peer,
                      vm ? hello->domain : NUKSM_DEFAULT_DOMAIN, assigned);
        error = g_steal_pointer(&assigned->refusal);
        ok = !error;
        if (!vm) {
            client->admin = identity_is_admin(&who, agent->admin_gid);
        }
    }
    identity_clear(&who);
    if (!ok) {
        transport_reject(client, seq, NUKSM_ERR_DENIED, "%s", error);
    }
    return ok;
}

static void handle_hello(NuksmAgent *agent, NuksmClient *client,
                         uint32_t seq, const void *payload)
{
    const NuksmMsgHello *hello = payload;
    NuksmMsgHelloAck ack = {
        .version = NUKSM_PROTO_VERSION,
        .policy = agent->placement.policy,
        .nr_nodes = agent->nr_nodes,
    };
    Assignment assigned = { 0 };  /* a VM's, from judge_client() */

    if (hello->role == NUKSM_ROLE_CONTROL &&
        clients_count_role_of_uid(&agent->clients, NUKSM_ROLE_CONTROL,
                                  client->uid) >= CLIENT_CONTROLS_PER_UID) {
        transport_reject(client, seq, NUKSM_ERR_HANDSHAKE,
                         "too many control connections of uid %u (limit %u)",
                         (unsigned)client->uid, CLIENT_CONTROLS_PER_UID);
        return;
    }
    if (hello->role == NUKSM_ROLE_VM &&
        clients_count_role_of_pid(&agent->clients, NUKSM_ROLE_VM,
                                  client->pid) >= CLIENT_VMS_PER_PID) {
        transport_reject(client, seq, NUKSM_ERR_HANDSHAKE,
                         "too many VM connections of pid %ld (limit %u)",
                         (long)client->pid, CLIENT_VMS_PER_PID);
        return;
    }
    if (!judge_client(agent, client, seq, hello, &assigned)) {
        return;
    }
    clients_set_hello(client, agent->clients.next_id++, hello, &assigned);
    ack.client_id = client->id;
    nuksm_strfield_set(ack.agent_version, sizeof(ack.agent_version),
                       NUKSM_VERSION);

    if (client->role != NUKSM_ROLE_VM) {
        log_info("%s: control client%s", client->label,
                 client->admin ? ", administrator" : "");
        ack.admin = client->admin;
        transport_send(client, NUKSM_MSG_HELLO_ACK, seq, &ack, sizeof(ack));
        return;
    }

    /* Names come from the client: escape them before they reach logs. */
    g_autofree char *requested = g_strescape(client->requested_domain, NULL);
    g_autofree char *object = g_strescape(client->object_id, NULL);

    if (!domains_get(&agent->domains, client->domain, &client->domain_id)) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "nuksmd cannot open the store of domain '%s' (see "
                         "its log)", client->domain);
        return;
    }
    log_info("%s: VM joined domain '%s' (%s; it asked for '%s'), object "
             "'%s', priority %u (limit %u)", client->label, client->domain,
             nuksm_domain_source_name(client->domain_source), requested,
             object, client->priority, client->priority_limit);
    ack.domain_source = client->domain_source;
    ack.priority = client->priority;
    ack.priority_limit = client->priority_limit;
    memcpy(ack.domain, client->domain, sizeof(ack.domain));
    if (transport_send_fd(client, NUKSM_MSG_HELLO_ACK, seq, &ack,
                          sizeof(ack), agent->userfaultfd)) {
        /* Takes over the domain reference. */
        merge_client_join(agent, client);
    } else {
        domains_put(&agent->domains, client->domain_id);
    }
}

static void send_policy(NuksmAgent *agent, NuksmClient *client, uint32_t seq)
{
    NuksmMsgPolicy msg = { .policy = agent->placement.policy };

    transport_send(client, NUKSM_MSG_POLICY, seq, &msg, sizeof(msg));
}

/* Why control client @client may not change host-wide settings, or NULL. */
static const char *admin_denied(const NuksmClient *client)
{
    return client->admin ? NULL :
           "changing host-wide settings needs an administrator: root, "
           "nuksmd's user or a member of its admin-group";
}

/* Why @client may not change host-wide settings, or NULL if it may. */
static const char *host_wide_denied(NuksmAgent *agent,
                                    const NuksmClient *client)
{
    if (client->role == NUKSM_ROLE_VM) {
        return agent->vm_set_policy ? NULL :
               "this nuksmd does not let VMs set the host-wide policy "
               "(vm-set-policy=false); ask the host's administrator";
    }
    return admin_denied(client);
}

static void handle_set_policy(NuksmAgent *agent, NuksmClient *client,
                              uint32_t seq, const void *payload)
{
    const NuksmMsgPolicy *req = payload;
    NuksmPolicyId old = agent->placement.policy;
    const char *denied = host_wide_denied(agent, client);

    if (denied) {
        g_autofree char *text = g_strdup_printf("SET_POLICY: %s", denied);

        log_info("%s: SET_POLICY %s refused: %s", client->label,
                 nuksm_policy_name(req->policy), denied);
        transport_deny(client, seq, text);
        return;
    }
    agent->placement.policy = req->policy;
    send_policy(agent, client, seq);
    if (agent->placement.policy == old) {
        log_debug("%s: policy %s unchanged", client->label,
                  nuksm_policy_name(old));
        return;
    }

    log_info("policy: %s -> %s (set by %s)", nuksm_policy_name(old),
             nuksm_policy_name(agent->placement.policy), client->label);
    /* Seq 0 marks an unsolicited change for every other VM. */
    for (GList *l = agent->clients.list.head; l; l = l->next) {
        NuksmClient *other = l->data;

        if (other != client && clients_is_vm(other)) {
            send_policy(agent, other, 0);
        }
    }
    relocate_request(agent, "the policy changed");
}

static void handle_get_policy(NuksmAgent *agent, NuksmClient *client,
                              uint32_t seq, const void *payload)
{
    send_policy(agent, client, seq);
}

static void handle_set_priority(NuksmAgent *agent, NuksmClient *client,
                                uint32_t seq, const void *payload)
{
    const NuksmMsgPriority *req = payload;

    if (client->role != NUKSM_ROLE_VM) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "SET_PRIORITY from a control client, only VMs have "
                         "a priority");
        return;
    }
    log_info("%s: priority %u -> %u (asked %u, limit %u)", client->label,
             client->priority, MIN(req->priority, client->priority_limit),
             req->priority, client->priority_limit);
    client->priority = MIN(req->priority, client->priority_limit);
}

static void handle_vm_limit(NuksmAgent *agent, NuksmClient *client,
                            uint32_t seq, const void *payload)
{
    const NuksmMsgVmLimit *limit = payload;

    if (limit->limit != client->limit.limit) {
        if (limit->limit) {
            log_warning("%s: merging limited by %s: %s", client->label,
                        nuksm_vm_limit_name(limit->limit), limit->reason);
        } else {
            log_info("%s: merging no longer limited by %s", client->label,
                     nuksm_vm_limit_name(client->limit.limit));
        }
    }
    client->limit = *limit;
}

/*
 * What @client may see of the host's counters: an administrator all of
 * them, a VM its own domain's, others none (INFO's scope).
 */
static NuksmInfoScopeId info_scope(const NuksmClient *client)
{
    if (client->role == NUKSM_ROLE_VM) {
        return NUKSM_INFO_DOMAIN;
    }
    return client->admin ? NUKSM_INFO_HOST : NUKSM_INFO_NONE;
}

static void handle_get_info(NuksmAgent *agent, NuksmClient *client,
                            uint32_t seq, const void *payload)
{
    NuksmMsgInfo info = {
        .policy = agent->placement.policy,
        .nr_nodes = agent->nr_nodes,
        .scope = info_scope(client),
    };

    nuksm_strfield_set(info.agent_version, sizeof(info.agent_version),
                       NUKSM_VERSION);
    /*
     * Conditions hold back every VM's merging: each must see them, and
     * its own domain's quota.
     */
    if (client->role == NUKSM_ROLE_VM) {
        info.conditions = conditions_of_vm(agent, client,
                                           info.condition_reason,
                                           sizeof(info.condition_reason));
    } else {
        info.conditions = agent->conditions.held;
        conditions_describe(agent, info.condition_reason,
                            sizeof(info.condition_reason));
    }
    budget_info(agent, &info);
    if (info.scope == NUKSM_INFO_HOST) {
        info.vms = clients_count_vms(&agent->clients);
        info.vms_reading = clients_count_vms_reading(&agent->clients, -1);
        for (uint32_t n = 0; n < agent->nr_nodes; n++) {
            const SlotTable *t = &agent->ledger.slots[n];

            info.pages_shared += t->shared;
            info.pages_sharing += t->sharing;
            info.store_pages[n] = t->nr_used;
        }
        info.pages_moved = agent->relocator.moved;
        info.moves_pending = relocate_pending(agent);
        info.orphan_pages = agent->orphans.pages;
    } else if (info.scope == NUKSM_INFO_DOMAIN) {
        const DomainStats *stats = domains_stats(&agent->domains,
                                                 client->domain_id);

        info.vms = stats->vms;
        info.vms_reading = clients_count_vms_reading(&agent->clients,
                                                     client->domain_id);
        info.pages_shared = stats->pages_shared;
        info.pages_sharing = stats->pages_sharing;
        info.pages_moved = stats->pages_moved;
        info.moves_pending = stats->moves_pending;
        memcpy(info.store_pages, stats->store_pages,
               agent->nr_nodes * sizeof(info.store_pages[0]));
    }
    transport_send(client, NUKSM_MSG_INFO, seq, &info, sizeof(info));
}

/*
 * A request that changes when merging works: from an administrator's
 * control client only.  Returns the reason it is refused, or NULL.
 */
static const char *run_denied(const NuksmClient *client)
{
    return client->role == NUKSM_ROLE_VM ?
           "a VM cannot say when the host merges" : admin_denied(client);
}

static void handle_set_run(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload)
{
    const NuksmMsgSetRun *req = payload;
    const char *denied = run_denied(client);

    if (denied) {
        g_autofree char *text = g_strdup_printf("SET_RUN: %s", denied);

        log_info("%s: SET_RUN %s refused: %s", client->label,
                 nuksm_run_name(req->run), denied);
        transport_deny(client, seq, text);
        return;
    }
    budget_set_run(agent, req->run, client->label);
    handle_get_info(agent, client, seq, NULL);
}

static void handle_prune(NuksmAgent *agent, NuksmClient *client,
                         uint32_t seq, const void *payload)
{
    NuksmMsgPrune reply = *(const NuksmMsgPrune *)payload;
    const char *denied = run_denied(client);

    if (denied) {
        g_autofree char *text = g_strdup_printf("PRUNE: %s", denied);

        log_info("%s: PRUNE refused: %s", client->label, denied);
        transport_deny(client, seq, text);
        return;
    }
    reply.vms = budget_prune(agent, reply.domain, reply.rate, client->label);
    transport_send(client, NUKSM_MSG_PRUNE, seq, &reply, sizeof(reply));
}

/*
 * Whether @client may see @vm in LIST_VMS: an administrator sees every
 * VM, a VM its own process's.  Another control client sees the VMs of
 * its own user in the merge domain its own process would be in as a VM
 * (judge_client()): under libvirt every QEMU has one user, and one QEMU
 * that opens a control connection must not list other tenants' VMs.
 */
static bool may_list(const NuksmClient *client, const NuksmClient *vm)
{
    if (client->role == NUKSM_ROLE_VM) {
        return vm->pid == client->pid;
    }
    return client->admin || (vm->uid == client->uid &&
                             g_str_equal(vm->domain, client->domain));
}

static void handle_list_vms(NuksmAgent *agent, NuksmClient *client,
                            uint32_t seq, const void *payload)
{
    const NuksmMsgListVms *req = payload;
    /* In order of id (clients_list_vms()), which is how a caller pages. */
    g_autoptr(GPtrArray) vms = clients_list_vms(&agent->clients);
    g_autoptr(GHashTable) libvirt = NULL;
    guint first = 0;
    uint32_t count;
    uint32_t len;
    g_autofree NuksmMsgVms *msg = NULL;
    NuksmVmEntry *entries;

    for (guint i = vms->len; i-- > 0;) {
        if (!may_list(client, g_ptr_array_index(vms, i))) {
            g_ptr_array_remove_index(vms, i);
        }
    }
    while (first < vms->len &&
           ((const NuksmClient *)g_ptr_array_index(vms, first))->id <
           req->from_id) {
        first++;
    }
    count = MIN(vms->len - first, NUKSM_VMS_MAX_ENTRIES);
    len = sizeof(NuksmMsgVms) + count * sizeof(NuksmVmEntry);
    msg = g_malloc0(len);
    entries = (NuksmVmEntry *)(msg + 1);
    msg->count = count;
    msg->total = vms->len;
    libvirt = count ? libvirt_registry_read(agent->libvirt_dir) : NULL;
    for (uint32_t i = 0; i < count; i++) {
        const NuksmClient *vm = g_ptr_array_index(vms, first + i);
        const LibvirtDomain *dom =
            g_hash_table_lookup(libvirt, GINT_TO_POINTER(vm->pid));
        NuksmVmEntry *e = &entries[i];
        g_autofree char *quota = NULL;

        e->client_id = vm->id;
        e->pid = vm->pid;
        e->uid = vm->uid;
        e->priority = vm->priority;
        e->priority_limit = vm->priority_limit;
        memcpy(e->domain, vm->domain, sizeof(e->domain));
        memcpy(e->requested_domain, vm->requested_domain,
               sizeof(e->requested_domain));
        e->domain_source = vm->domain_source;
        memcpy(e->vm_name, vm->vm_name, sizeof(e->vm_name));
        memcpy(e->object_id, vm->object_id, sizeof(e->object_id));
        e->merged_pages = vm->merged_pages;
        e->agent_cpu_ns = vm->cpu.used_ns;
        e->throttled_ns = vm->cpu.throttled_ns;
        e->uploads_read = vm->uploads.read;
        e->uploads_sent = vm->uploads.sent;
        e->read_errno = vm->uploads.read_errno;
        e->reads_local = vm->reads.local;
        e->reads_remote = vm->reads.remote;
        e->read_window_ms = vm->reads.window_ms;
        e->read_hot_regions = vm->reads.hot_regions;
        e->twin_id = vm->colocation.twin_id;
        e->twin_pm = vm->colocation.twin_pm;
        e->plan_to = vm->colocation.plan_to;
        e->plan_verdict = vm->colocation.plan_verdict;
        e->scheme = vm->colocation.scheme;
        e->applied_to = vm->colocated_to;
        e->scanner = vm->scanner;
        budget_told(vm, &e->share);
        if (vm->cpu.paused_at) {
            e->throttled_ns += (g_get_monotonic_time() -
                                vm->cpu.paused_at) * 1000;
        }
        ledger_locality(vm, &e->merged_local, &e->merged_remote);
        if (vm->home.topology) {
            e->nr_gnodes = vm->home.topology->nr_gnodes;
            memcpy(e->home, vm->home.node, e->nr_gnodes);
        }
        e->limit = vm->limit.limit;
        memcpy(e->limit_reason, vm->limit.reason, sizeof(e->limit_reason));
        quota = e->limit ? NULL : domains_limits_text(&agent->domains,
                                                      vm->domain_id);
        if (quota) {
            e->limit = NUKSM_VM_LIMIT_DOMAIN_QUOTA;
            nuksm_strfield_set(e->limit_reason, sizeof(e->limit_reason),
                               quota);
        }
        if (dom) {
            memcpy(e->libvirt_name, dom->name, sizeof(e->libvirt_name));
            memcpy(e->libvirt_uuid, dom->uuid, sizeof(e->libvirt_uuid));
        }
    }
    transport_send(client, NUKSM_MSG_VMS, seq, msg, len);
}

/* What the VM's scanner counts, for the metrics (metrics.h). */
static void handle_vm_stats(NuksmAgent *agent, NuksmClient *client,
                            uint32_t seq, const void *payload)
{
    const NuksmMsgVmStats *stats = payload;
    bool share_changes = stats->max_cpu_pm != client->scanner.max_cpu_pm ||
                         stats->state != client->scanner.state;
    bool signs = stats->hints_received != client->scanner.hints_received ||
                 stats->cow_breaks != client->scanner.cow_breaks ||
                 stats->tracked_writes != client->scanner.tracked_writes;

    client->scanner = *stats;
    /* Its part of the scan budget follows its own budget and state. */
    if (share_changes) {
        budget_changed(agent);
    } else if (signs) {
        budget_signed(agent, client);
    }
}

/* Requests clients may send; NULL for the types only nuksmd sends. */
static const RequestHandler handlers[NUKSM_MSG__MAX] = {
    [NUKSM_MSG_HELLO]        = handle_hello,
    [NUKSM_MSG_SET_POLICY]   = handle_set_policy,
    [NUKSM_MSG_GET_POLICY]   = handle_get_policy,
    [NUKSM_MSG_SET_PRIORITY] = handle_set_priority,
    [NUKSM_MSG_GET_INFO]     = handle_get_info,
    [NUKSM_MSG_LIST_VMS]     = handle_list_vms,
    [NUKSM_MSG_CANDIDATES]   = merge_handle_candidates,
    [NUKSM_MSG_UPLOAD]       = uploads_handle_upload,
    [NUKSM_MSG_MERGED]       = merge_handle_merged,
    [NUKSM_MSG_UNMERGED]     = merge_handle_unmerged,
    [NUKSM_MSG_RESTORE]      = recovery_handle_restore,
    [NUKSM_MSG_TOPOLOGY]     = home_handle_topology,
    [NUKSM_MSG_MOVED]        = relocate_handle_moved,
    [NUKSM_MSG_VM_LIMIT]     = handle_vm_limit,
    [NUKSM_MSG_READS]        = reads_handle_reads,
    [NUKSM_MSG_GET_SIMILARITY] = similarity_handle_get,
    [NUKSM_MSG_GET_PLAN]     = colocation_handle_get_plan,
    [NUKSM_MSG_APPLY_MOVE]   = apply_handle_apply_move,
    [NUKSM_MSG_VM_STATS]     = handle_vm_stats,
    [NUKSM_MSG_GET_SKETCH]   = similarity_handle_get_sketch,
    [NUKSM_MSG_SET_RUN]      = handle_set_run,
    [NUKSM_MSG_PRUNE]        = handle_prune,
};

/* Requests of the merge engine, which only VMs take part in. */
static bool vm_only(uint16_t type)
{
    return type == NUKSM_MSG_CANDIDATES || type == NUKSM_MSG_UPLOAD ||
           type == NUKSM_MSG_MERGED || type == NUKSM_MSG_UNMERGED ||
           type == NUKSM_MSG_RESTORE || type == NUKSM_MSG_TOPOLOGY ||
           type == NUKSM_MSG_MOVED || type == NUKSM_MSG_VM_LIMIT ||
           type == NUKSM_MSG_READS || type == NUKSM_MSG_VM_STATS;
}

/*
 * Messages that show a reconnected VM merging again, so that the pages
 * it took back and did not restore are no longer mapped.  Not TOPOLOGY,
 * VM_LIMIT, READS or VM_STATS: QEMU sends them as it connects or as it
 * samples, maybe before its RESTOREs, and they say nothing of which
 * slots its pages map.
 */
static bool ends_restore(uint16_t type)
{
    return type == NUKSM_MSG_CANDIDATES || type == NUKSM_MSG_UPLOAD ||
           type == NUKSM_MSG_MERGED || type == NUKSM_MSG_UNMERGED ||
           type == NUKSM_MSG_MOVED;
}

/*
 * The protocol version of a HELLO from any version of the protocol: only
 * the header and the leading version field are assumed, since another
 * version's HELLO may have another size.
 */
static bool peek_hello_version(const void *buf, size_t size,
                               uint32_t *version)
{
    NuksmMsgHeader hdr;

    if (size < sizeof(hdr) + sizeof(*version)) {
        return false;
    }
    memcpy(&hdr, buf, sizeof(hdr));
    if (hdr.magic != NUKSM_PROTO_MAGIC || hdr.type != NUKSM_MSG_HELLO) {
        return false;
    }
    memcpy(version, nuksm_msg_payload(buf), sizeof(*version));
    return true;
}

void dispatch_charge(NuksmClient *client, uint64_t ns)
{
    if (client->dead) {
        return;
    }
    client->cpu.charge_ns += ns;
    if (client->cpu.charge_ns >= NUKSM_CHARGE_MIN_NS) {
        NuksmMsgCharge msg = { .cpu_ns = client->cpu.charge_ns };

        transport_send(client, NUKSM_MSG_CHARGE, 0, &msg, sizeof(msg));
        client->cpu.charge_ns = 0;
    }
}

bool dispatch_message(NuksmAgent *agent, NuksmClient *client,
                      const void *buf, size_t size)
{
    NuksmMsgHeader hdr = { .seq = 0 };
    uint32_t seq = 0;
    const char *problem;
    const char *name;
    uint32_t version;

    /* ERROR replies echo the seq of anything that looks like a header. */
    if (size >= sizeof(hdr)) {
        memcpy(&hdr, buf, sizeof(hdr));
        if (hdr.magic == NUKSM_PROTO_MAGIC) {
            seq = hdr.seq;
        }
    }
    if (size > NUKSM_MSG_MAX) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "malformed message: %zu-byte datagram exceeds the "
                         "%u-byte limit", size, NUKSM_MSG_MAX);
        return false;
    }
    if (!client->hello_done && peek_hello_version(buf, size, &version) &&
        version != NUKSM_PROTO_VERSION) {
        transport_reject(client, seq, NUKSM_ERR_VERSION,
                         "protocol version mismatch: nuksmd speaks %u, "
                         "client speaks %u", NUKSM_PROTO_VERSION, version);
        return false;
    }
    problem = nuksm_msg_check(buf, size);
    if (problem) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "malformed message: %s", problem);
        return false;
    }

    name = nuksm_msg_type_name(hdr.type);
    log_debug("%s: received %s seq %u", client->label, name, seq);
    if (!handlers[hdr.type]) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "unexpected %s: only nuksmd sends it", name);
        return false;
    }
    if (!client->hello_done && hdr.type != NUKSM_MSG_HELLO) {
        transport_reject(client, seq, NUKSM_ERR_HANDSHAKE,
                         "%s before HELLO", name);
        return false;
    }
    if (client->hello_done && hdr.type == NUKSM_MSG_HELLO) {
        transport_reject(client, seq, NUKSM_ERR_HANDSHAKE,
                         "second HELLO");
        return false;
    }
    if (client->role != NUKSM_ROLE_VM && vm_only(hdr.type)) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "%s from a control client: only VMs merge pages",
                         name);
        return false;
    }
    if (client->parked_pages && ends_restore(hdr.type)) {
        detached_restore_end(agent, client);
    }
    handlers[hdr.type](agent, client, seq, nuksm_msg_payload(buf));
    return vm_only(hdr.type);
}
