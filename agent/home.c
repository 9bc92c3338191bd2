/*
 * nuksmd home nodes.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "home.h"
#include "log.h"
#include "transport.h"

/* The CPU thread @tid of @pid last ran on, or -1. */
static int last_cpu(pid_t pid, uint32_t tid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/task/%u/stat", pid,
                                            tid);
    g_autofree char *stat = NULL;
    const char *p;
    int field = 2;

    if (!g_file_get_contents(path, &stat, NULL, NULL)) {
        return -1;
    }
    /* The command name may hold anything, ')' too: skip to the last. */
    p = strrchr(stat, ')');
    while (p && field < 39) {
        p = strchr(p + 1, ' ');
        field++;
    }
    return p ? atoi(p + 1) : -1;
}

/* A node number of a node list, below 64; advances *@p past it. */
static bool parse_node(const char **p, uint32_t *node)
{
    const char *s = *p;
    uint32_t n = 0;

    if (!g_ascii_isdigit(*s)) {
        return false;
    }
    do {
        n = n * 10 + (*s++ - '0');
        if (n >= 64) {
            return false;
        }
    } while (g_ascii_isdigit(*s));
    *p = s;
    *node = n;
    return true;
}

bool home_parse_nodes(const char *list, uint64_t *nodes)
{
    const char *p = list;
    uint64_t set = 0;

    while (g_ascii_isspace(*p)) {
        p++;
    }
    while (*p && !g_ascii_isspace(*p)) {
        uint32_t first, last;

        if (!parse_node(&p, &first)) {
            return false;
        }
        last = first;
        if (*p == '-') {
            p++;
            if (!parse_node(&p, &last) || last < first) {
                return false;
            }
        }
        set |= (UINT64_MAX >> (63 - last)) & (UINT64_MAX << first);
        if (*p == ',') {
            p++;
            if (!g_ascii_isdigit(*p)) {
                return false;       /* "0,", "0,,1" */
            }
        } else if (*p && !g_ascii_isspace(*p)) {
            return false;
        }
    }
    while (g_ascii_isspace(*p)) {
        p++;
    }
    if (*p) {
        return false;
    }
    *nodes = set;
    return true;
}

int home_memory_node(uint64_t allowed, uint64_t placed)
{
    if (!allowed || (allowed & ~placed) || allowed == placed) {
        return -1;
    }
    return __builtin_ctzll(allowed);
}

/*
 * The nodes thread @tid of @pid may allocate memory on, its cpuset's mems
 * (Mems_allowed_list), into *@nodes: all 64 if the list does not parse,
 * so that the memory source does not apply.  False if there is nothing to
 * read (the thread ended, a kernel without cpusets).
 */
static bool mems_allowed(pid_t pid, uint32_t tid, uint64_t *nodes)
{
    static const char key[] = "\nMems_allowed_list:";
    g_autofree char *path = g_strdup_printf("/proc/%d/task/%u/status", pid,
                                            tid);
    g_autofree char *status = NULL;
    char *line, *end;

    if (!g_file_get_contents(path, &status, NULL, NULL) ||
        !(line = strstr(status, key))) {
        return false;
    }
    line += sizeof(key) - 1;
    end = strchr(line, '\n');
    if (end) {
        *end = '\0';
    }
    if (!home_parse_nodes(line, nodes)) {
        *nodes = UINT64_MAX;
    }
    return true;
}

typedef struct Votes {
    uint32_t vcpus;
    uint64_t allowed;                   /* nodes they may run on */
    uint64_t mems;                      /* nodes they may allocate on */
    uint32_t running[NUKSM_MAX_NODES];  /* vCPUs that ran last there */
} Votes;

/* Count the vCPUs of guest node @gnode, or all of them if it is -1. */
static void count_votes(NuksmAgent *agent, NuksmClient *client, int gnode,
                        Votes *v)
{
    const NuksmMsgTopology *t = client->topology;

    memset(v, 0, sizeof(*v));
    for (uint32_t i = 0; i < t->nr_vcpus; i++) {
        cpu_set_t cpus;
        uint64_t mems;
        int cpu;

        if (gnode >= 0 && t->vcpus[i].gnode != (uint32_t)gnode) {
            continue;
        }
        v->vcpus++;
        if (sched_getaffinity(t->vcpus[i].tid, sizeof(cpus), &cpus) == 0) {
            v->allowed |= topology_nodes_of(&agent->topology, &cpus);
        }
        /* Real memory nodes: nothing to go by for logical ones. */
        if (!agent->topology.fake &&
            mems_allowed(client->pid, t->vcpus[i].tid, &mems)) {
            v->mems |= mems;
        }
        cpu = last_cpu(client->pid, t->vcpus[i].tid);
        if (cpu >= 0) {
            v->running[topology_cpu_node(&agent->topology, cpu)]++;
        }
    }
}

static uint32_t lowest_node(uint64_t nodes)
{
    return __builtin_ctzll(nodes);
}

/* Home of guest node @g; updates the running streak. */
static uint32_t evaluate(NuksmAgent *agent, NuksmClient *client, uint32_t g,
                         NuksmHomeSourceId *source)
{
    const NuksmGuestNode *gn = &client->topology->gnodes[g];
    uint64_t all_nodes = agent->nr_nodes == 64 ? UINT64_MAX :
                         (1ull << agent->nr_nodes) - 1;
    uint64_t backend = gn->host_nodes & all_nodes;
    uint32_t best = 0;
    int memory;
    Votes v;

    count_votes(agent, client, g, &v);
    if (!v.vcpus) {
        count_votes(agent, client, -1, &v);
    }
    if (v.vcpus && v.allowed && !(v.allowed & (v.allowed - 1))) {
        *source = NUKSM_HOME_PINNED;
        return lowest_node(v.allowed);
    }
    if (backend && (gn->policy == NUKSM_MEMPOLICY_BIND ||
                    gn->policy == NUKSM_MEMPOLICY_PREFERRED)) {
        *source = NUKSM_HOME_BACKEND;
        return lowest_node(backend);
    }
    memory = home_memory_node(v.mems, all_nodes);
    if (memory >= 0) {
        *source = NUKSM_HOME_MEMORY;
        return memory;
    }
    for (uint32_t n = 1; n < agent->nr_nodes; n++) {
        if (v.running[n] > v.running[best]) {
            best = n;
        }
    }
    if (!v.running[best]) {
        *source = NUKSM_HOME_DEFAULT;
        return 0;
    }
    *source = NUKSM_HOME_RUNNING;
    if (client->home_source[g] == NUKSM_HOME_RUNNING &&
        client->home[g] != best &&
        ++client->home_streak[g] < HOME_RUNNING_STREAK) {
        return client->home[g];
    }
    client->home_streak[g] = 0;
    return best;
}

/* Why a home moved, for the log. */
static const char *source_reason(NuksmHomeSourceId source)
{
    switch (source) {
    case NUKSM_HOME_PINNED:
        return "vCPUs pinned";
    case NUKSM_HOME_BACKEND:
        return "memory backend";
    case NUKSM_HOME_MEMORY:
        return "memory nodes the vCPUs may use";
    case NUKSM_HOME_RUNNING:
        return "where the vCPUs run";
    default:
        return "nothing to go by";
    }
}

static void send_home(NuksmAgent *agent, NuksmClient *client)
{
    NuksmMsgHome msg = { .nr_gnodes = client->topology->nr_gnodes };

    memcpy(msg.home, client->home, msg.nr_gnodes);
    memcpy(msg.source, client->home_source, msg.nr_gnodes);
    transport_send(client, NUKSM_MSG_HOME, 0, &msg, sizeof(msg));
}

/* Re-evaluate @client's homes; tell it, and move pages, if one changed. */
static void update(NuksmAgent *agent, NuksmClient *client, bool first)
{
    bool changed = false, moved = false;

    for (uint32_t g = 0; g < client->topology->nr_gnodes; g++) {
        NuksmHomeSourceId source;
        uint32_t home = evaluate(agent, client, g, &source);

        if (first || home != client->home[g] ||
            source != client->home_source[g]) {
            if (!first && home != client->home[g]) {
                log_info("%s: guest node %u moves home from node %u to "
                         "node %u (%s)", client->label, g, client->home[g],
                         home, source_reason(source));
                moved = true;
            }
            client->home[g] = home;
            client->home_source[g] = source;
            changed = true;
        }
    }
    if (changed) {
        send_home(agent, client);
    }
    if (moved) {
        replace_request(agent, "a home node changed");
    }
}

static gboolean on_home_timer(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    GHashTableIter it;
    NuksmClient *client;

    g_hash_table_iter_init(&it, agent->vms);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&client)) {
        if (client->topology) {
            update(agent, client, false);
        }
    }
    return G_SOURCE_CONTINUE;
}

void home_start(NuksmAgent *agent)
{
    agent->home_timer = g_timeout_add(HOME_PERIOD_MS, on_home_timer, agent);
}

void home_stop(NuksmAgent *agent)
{
    g_clear_handle_id(&agent->home_timer, g_source_remove);
}

/* A vCPU thread id must name a thread of the VM's own process. */
static bool own_thread(pid_t pid, uint32_t tid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/task/%u", pid, tid);

    return access(path, F_OK) == 0;
}

void home_handle_topology(NuksmAgent *agent, NuksmClient *client,
                          uint32_t seq, const void *payload)
{
    const NuksmMsgTopology *t = payload;

    for (uint32_t i = 0; i < t->nr_vcpus; i++) {
        if (!own_thread(client->pid, t->vcpus[i].tid)) {
            transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                          "TOPOLOGY: vCPU thread %u is not a thread of "
                          "pid %d", t->vcpus[i].tid, client->pid);
            return;
        }
    }
    g_free(client->topology);
    client->topology = g_memdup2(t, sizeof(*t));
    log_info("%s: %u guest node%s, %u vCPU thread%s", client->label,
             t->nr_gnodes, t->nr_gnodes == 1 ? "" : "s", t->nr_vcpus,
             t->nr_vcpus == 1 ? "" : "s");
    update(agent, client, true);
}
