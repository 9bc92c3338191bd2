/*
 * nuksmd home nodes.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "budget.h"
#include "home.h"
#include "log.h"
#include "policy.h"
#include "relocate.h"
#include "transport.h"
#include "vcpus.h"

/*
 * What the vCPUs of guest node @gnode may do and did, or of all of them
 * if it is -1, from what was seen of each (@seen, in TOPOLOGY's order).
 */
static void count_vcpus(const NuksmMsgTopology *t, const VcpuSeen *seen,
                        int gnode, PolicyVcpus *v)
{
    memset(v, 0, sizeof(*v));
    for (uint32_t i = 0; i < t->nr_vcpus; i++) {
        if (gnode >= 0 && t->vcpus[i].gnode != (uint32_t)gnode) {
            continue;
        }
        v->count++;
        v->allowed |= seen[i].allowed;
        v->mems |= seen[i].mems;
        if (seen[i].node >= 0) {
            v->running[seen[i].node]++;
        }
    }
}

/* The home guest node @g of @client now has, by what @seen shows. */
static PolicyHome evaluate(NuksmAgent *agent, NuksmClient *client,
                           uint32_t g, const VcpuSeen *seen)
{
    const NuksmGuestNode *gn = &client->home.topology->gnodes[g];
    PolicyHomeView view = {
        .backend_nodes = gn->host_nodes,
        .backend_binds = gn->policy == NUKSM_MEMPOLICY_BIND ||
                         gn->policy == NUKSM_MEMPOLICY_PREFERRED,
        .nr_nodes = agent->nr_nodes,
    };
    PolicyHome home = {
        .node = client->home.node[g],
        .source = client->home.source[g],
        .streak = client->home.streak[g],
    };

    count_vcpus(client->home.topology, seen, g, &view.vcpus);
    if (!view.vcpus.count) {
        count_vcpus(client->home.topology, seen, -1, &view.vcpus);
    }
    policy_home(&view, &home);
    return home;
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
    NuksmMsgHome msg = { .nr_gnodes = client->home.topology->nr_gnodes };

    memcpy(msg.home, client->home.node, msg.nr_gnodes);
    memcpy(msg.source, client->home.source, msg.nr_gnodes);
    transport_send(client, NUKSM_MSG_HOME, 0, &msg, sizeof(msg));
}

/* Re-evaluate @client's homes; tell it, and move pages, if one changed. */
static void update(NuksmAgent *agent, NuksmClient *client, bool first)
{
    const NuksmMsgTopology *t = client->home.topology;
    VcpuSeen seen[NUKSM_MAX_VCPUS];
    bool changed = false, moved = false;

    for (uint32_t i = 0; i < t->nr_vcpus; i++) {
        vcpus_observe(&agent->topology, client->pid, t->vcpus[i].tid,
                      &seen[i]);
    }
    for (uint32_t g = 0; g < t->nr_gnodes; g++) {
        PolicyHome home = evaluate(agent, client, g, seen);

        client->home.streak[g] = home.streak;
        if (first || home.node != client->home.node[g] ||
            home.source != client->home.source[g]) {
            if (!first && home.node != client->home.node[g]) {
                log_info("%s: guest node %u moves home from node %u to "
                         "node %u (%s)", client->label, g,
                         client->home.node[g], home.node,
                         source_reason(home.source));
                moved = true;
            }
            client->home.node[g] = home.node;
            client->home.source[g] = home.source;
            changed = true;
        }
    }
    if (changed) {
        send_home(agent, client);
    }
    if (moved) {
        relocate_request(agent, "a home node changed");
    }
}

static gboolean on_home_timer(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    GHashTableIter it;
    NuksmClient *client;
    uint32_t tick = agent->placement.home_ticks++;

    g_hash_table_iter_init(&it, agent->ledger.vms);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&client)) {
        NuksmMsgShare share;

        budget_told(client, &share);
        /* Resting VMs take turns, by their ids. */
        if (client->home.topology && (tick + client->id) % share.pace == 0) {
            update(agent, client, false);
        }
    }
    return G_SOURCE_CONTINUE;
}

void home_start(NuksmAgent *agent)
{
    agent->placement.home_timer = g_timeout_add(HOME_PERIOD_MS,
                                                on_home_timer, agent);
}

void home_stop(NuksmAgent *agent)
{
    g_clear_handle_id(&agent->placement.home_timer, g_source_remove);
}

/* A vCPU thread id must name a thread of the VM's own process. */
void home_handle_topology(NuksmAgent *agent, NuksmClient *client,
                          uint32_t seq, const void *payload)
{
    const NuksmMsgTopology *t = payload;

    for (uint32_t i = 0; i < t->nr_vcpus; i++) {
        if (!vcpus_own_thread(client->pid, t->vcpus[i].tid)) {
            transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                             "TOPOLOGY: vCPU thread %u is not a thread of "
                             "pid %d", t->vcpus[i].tid, client->pid);
            return;
        }
    }
    g_free(client->home.topology);
    client->home.topology = g_memdup2(t, sizeof(*t));
    log_info("%s: %u guest node%s, %u vCPU thread%s", client->label,
             t->nr_gnodes, t->nr_gnodes == 1 ? "" : "s", t->nr_vcpus,
             t->nr_vcpus == 1 ? "" : "s");
    update(agent, client, true);
}

void home_client_destroy(ClientHome *home)
{
    g_clear_pointer(&home->topology, g_free);
}
