/*
 * nuksmd client registry.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "clients.h"
#include "transport.h"

/* Put @client in the ring of its process's connections. */
static void join_process(const ClientRegistry *reg, NuksmClient *client)
{
    NuksmClient *sibling = client;

    client->pid_next = client->pid_prev = client;
    for (GList *l = reg->list.head; l; l = l->next) {
        if (((NuksmClient *)l->data)->pid == client->pid) {
            sibling = l->data;
            break;
        }
    }
    client->pid_prev = sibling;
    client->pid_next = sibling->pid_next;
    sibling->pid_next->pid_prev = client;
    sibling->pid_next = client;
}

static void leave_process(NuksmClient *client)
{
    client->pid_prev->pid_next = client->pid_next;
    client->pid_next->pid_prev = client->pid_prev;
}

NuksmClient *clients_add(ClientRegistry *reg, struct NuksmAgent *agent,
                         int fd, pid_t pid, int pidfd, uid_t uid, gid_t gid)
{
    NuksmClient *client = g_new0(NuksmClient, 1);

    client->agent = agent;
    client->fd = fd;
    client->pid = pid;
    client->pidfd = pidfd;
    client->uid = uid;
    client->gid = gid;
    client->label = g_strdup_printf("client pid %ld", (long)pid);
    join_process(reg, client);
    g_queue_push_tail(&reg->list, client);
    return client;
}

bool pidfd_process_alive(int pidfd)
{
    struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

    /* A pidfd polls readable once its process has exited. */
    return pidfd >= 0 && poll(&pfd, 1, 0) == 0;
}

void clients_remove(ClientRegistry *reg, NuksmClient *client)
{
    g_queue_remove(&reg->list, client);
    leave_process(client);
    if (client->watch) {
        g_source_remove(client->watch);
    }
    if (client->exit_watch) {
        g_source_remove(client->exit_watch);
    }
    if (client->hello_timer) {
        g_source_remove(client->hello_timer);
    }
    transport_clear_queue(client);
    transport_close(client->fd);
    if (client->pidfd >= 0) {
        close(client->pidfd);
    }
    g_free(client->label);
    g_free(client);
}

void clients_set_hello(NuksmClient *client, uint32_t id,
                       const NuksmMsgHello *hello,
                       const Assignment *assigned)
{
    client->hello_done = true;
    client->id = id;
    client->role = hello->role;
    memcpy(client->domain, assigned->domain, sizeof(client->domain));
    if (hello->role == NUKSM_ROLE_VM) {
        client->priority_limit = assigned->priority_limit;
        client->priority = MIN(hello->priority, assigned->priority_limit);
        memcpy(client->requested_domain, hello->domain,
               sizeof(client->requested_domain));
        client->domain_source = assigned->source;
    }
    memcpy(client->vm_name, hello->vm_name, sizeof(client->vm_name));
    memcpy(client->object_id, hello->object_id, sizeof(client->object_id));

    g_free(client->label);
    if (client->role == NUKSM_ROLE_VM && client->vm_name[0]) {
        /* Names come from the client: escape them before they reach logs. */
        g_autofree char *name = g_strescape(client->vm_name, NULL);

        client->label = g_strdup_printf("client %u (pid %ld, vm '%s')",
                                        id, (long)client->pid, name);
    } else {
        client->label = g_strdup_printf("client %u (pid %ld)",
                                        id, (long)client->pid);
    }
}

unsigned clients_count(const ClientRegistry *reg)
{
    return reg->list.length;
}

static bool awaits_hello(const NuksmClient *c, bool any_uid, uid_t uid)
{
    return !c->dead && !c->hello_done && (any_uid || c->uid == uid);
}

unsigned clients_count_handshakes(const ClientRegistry *reg, uid_t uid)
{
    unsigned n = 0;

    for (GList *l = reg->list.head; l; l = l->next) {
        n += awaits_hello(l->data, false, uid);
    }
    return n;
}

NuksmClient *clients_handshake_to_drop(const ClientRegistry *reg,
                                       bool any_uid, uid_t uid)
{
    g_autoptr(GHashTable) per_pid = g_hash_table_new(NULL, NULL);
    NuksmClient *oldest = NULL;
    guint most = 0;

    for (GList *l = reg->list.head; l; l = l->next) {
        const NuksmClient *c = l->data;
        gpointer key = GINT_TO_POINTER(c->pid);

        if (awaits_hello(c, any_uid, uid)) {
            guint n = GPOINTER_TO_UINT(g_hash_table_lookup(per_pid, key));

            g_hash_table_insert(per_pid, key, GUINT_TO_POINTER(n + 1));
            most = MAX(most, n + 1);
        }
    }
    /* In connection order: the first of a process found is its oldest. */
    for (GList *l = reg->list.head; l && !oldest; l = l->next) {
        NuksmClient *c = l->data;

        if (awaits_hello(c, any_uid, uid) &&
            GPOINTER_TO_UINT(g_hash_table_lookup(
                per_pid, GINT_TO_POINTER(c->pid))) == most) {
            oldest = c;
        }
    }
    return oldest;
}

/* Live clients that completed HELLO in @role, and match @match. */
static unsigned count_role(const ClientRegistry *reg, NuksmClientRole role,
                           bool (*match)(const NuksmClient *, long),
                           long value)
{
    unsigned n = 0;

    for (GList *l = reg->list.head; l; l = l->next) {
        const NuksmClient *c = l->data;

        n += !c->dead && c->hello_done && c->role == role &&
             match(c, value);
    }
    return n;
}

static bool has_uid(const NuksmClient *c, long uid)
{
    return c->uid == (uid_t)uid;
}

static bool has_pid(const NuksmClient *c, long pid)
{
    return c->pid == (pid_t)pid;
}

unsigned clients_count_role_of_uid(const ClientRegistry *reg,
                                   NuksmClientRole role, uid_t uid)
{
    return count_role(reg, role, has_uid, uid);
}

unsigned clients_count_role_of_pid(const ClientRegistry *reg,
                                   NuksmClientRole role, pid_t pid)
{
    return count_role(reg, role, has_pid, pid);
}

bool clients_is_vm(const NuksmClient *client)
{
    return !client->dead && client->hello_done &&
           client->role == NUKSM_ROLE_VM;
}

unsigned clients_count_vms(const ClientRegistry *reg)
{
    unsigned n = 0;

    for (GList *l = reg->list.head; l; l = l->next) {
        n += clients_is_vm(l->data);
    }
    return n;
}

unsigned clients_count_vms_reading(const ClientRegistry *reg, int domain_id)
{
    unsigned n = 0;

    for (GList *l = reg->list.head; l; l = l->next) {
        const NuksmClient *c = l->data;

        n += clients_is_vm(c) && c->reads.window_ms &&
             (domain_id < 0 || c->domain_id == domain_id);
    }
    return n;
}

static gint compare_ids(gconstpointer a, gconstpointer b)
{
    const NuksmClient *ca = *(NuksmClient *const *)a;
    const NuksmClient *cb = *(NuksmClient *const *)b;

    return ca->id < cb->id ? -1 : ca->id > cb->id;
}

NuksmClient *clients_find(const ClientRegistry *reg, uint32_t id)
{
    for (GList *l = reg->list.head; l; l = l->next) {
        NuksmClient *client = l->data;

        if (client->hello_done && client->id == id) {
            return client;
        }
    }
    return NULL;
}

GPtrArray *clients_list_vms(const ClientRegistry *reg)
{
    GPtrArray *vms = g_ptr_array_new();

    for (GList *l = reg->list.head; l; l = l->next) {
        if (clients_is_vm(l->data)) {
            g_ptr_array_add(vms, l->data);
        }
    }
    g_ptr_array_sort(vms, compare_ids);
    return vms;
}

/* The range of @client's TOPOLOGY that holds its RAM page @page, or NULL. */
static const NuksmPageRange *range_of_page(const NuksmClient *client,
                                           uint64_t page)
{
    const NuksmMsgTopology *t = client->home.topology;

    for (uint32_t r = 0; t && r < t->nr_ranges; r++) {
        if (page - t->ranges[r].first < t->ranges[r].count) {
            return &t->ranges[r];
        }
    }
    return NULL;
}

bool client_page_address(const NuksmClient *client, uint64_t page,
                         uint64_t *addr)
{
    const NuksmPageRange *range = range_of_page(client, page);

    if (!range || !range->host) {
        return false;
    }
    *addr = range->host + (page - range->first) * NUKSM_PAGE_SIZE;
    return true;
}

uint32_t client_home_of_page(const NuksmClient *client, uint64_t page)
{
    const NuksmPageRange *range = range_of_page(client, page);

    return range ? client->home.node[range->gnode] : client_home(client, 0);
}

uint8_t client_read_idle(const NuksmClient *client, uint64_t page)
{
    const KeyMapEntry *e = keymap_lookup(&client->reads.regions,
                                         page / NUKSM_READ_REGION_PAGES, 0);

    return e ? e->tag : NUKSM_IDLE_NEVER;
}
