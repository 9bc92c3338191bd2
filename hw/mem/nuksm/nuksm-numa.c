/*
 * nuksm: the VM's NUMA layout for the agent, and where its merged pages
 * live relative to it.
 *
 * The agent knows the host (or its --fake-numa logical nodes); QEMU knows
 * the guest.  After each handshake QEMU sends TOPOLOGY: every guest node
 * with its memory backend's host-nodes and policy, every vCPU thread and
 * every range of eligible RAM with its guest node.  The agent answers
 * HOME, the home node of each guest node, and sends it again whenever one
 * changes (vcpupin, taskset).
 * Candidates carry their page's guest node; merged-local counts the pages
 * whose copy is on their guest node's home.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "exec/ramblock.h"
#include "hw/boards.h"
#include "hw/core/cpu.h"
#include "qapi/error.h"
#include "system/hostmem.h"
#include "system/numa.h"
#include "nuksm-commit.h"
#include "nuksm-numa.h"
#include "nuksm-outbox.h"
#include "nuksm-pages.h"
#include "nuksm-reads.h"
#include "nuksm-ram.h"
#include "trace.h"

/* HOME carries the protocol's NuksmHomeSource; QMP shows QAPI's. */
QEMU_BUILD_BUG_ON((int)NUKSM_HOME_SOURCE_DEFAULT != NUKSM_HOME_DEFAULT ||
                  (int)NUKSM_HOME_SOURCE_PINNED != NUKSM_HOME_PINNED ||
                  (int)NUKSM_HOME_SOURCE_BACKEND != NUKSM_HOME_BACKEND ||
                  (int)NUKSM_HOME_SOURCE_RUNNING != NUKSM_HOME_RUNNING ||
                  (int)NUKSM_HOME_SOURCE_MEMORY != NUKSM_HOME_MEMORY ||
                  (int)NUKSM_HOME_SOURCE__MAX != NUKSM_HOME__MAX);

static uint32_t nuksm_numa_nr_gnodes(void)
{
    MachineState *ms = MACHINE(qdev_get_machine());

    return ms->numa_state && ms->numa_state->num_nodes > 0 ?
           MIN(ms->numa_state->num_nodes, NUKSM_MAX_GNODES) : 1;
}

static bool nuksm_numa_add_range(Nuksm *s, RAMBlock *rb, void *opaque)
{
    NuksmMsgTopology *t = opaque;

    if (t->nr_ranges == NUKSM_MAX_RANGES) {
        return false;   /* the rest counts as guest node 0 */
    }
    t->ranges[t->nr_ranges++] = (NuksmPageRange) {
        .first = rb->offset / NUKSM_PAGE_SIZE,
        .count = rb->used_length / NUKSM_PAGE_SIZE,
        .host = (uintptr_t)rb->host,
        .gnode = nuksm_ram_gnode(rb),
    };
    return true;
}

void nuksm_numa_send_topology(Nuksm *s)
{
    MachineState *ms = MACHINE(qdev_get_machine());
    MachineClass *mc = MACHINE_GET_CLASS(ms);
    g_autofree NuksmMsgTopology *t = g_new0(NuksmMsgTopology, 1);

    t->nr_gnodes = nuksm_numa_nr_gnodes();
    for (uint32_t g = 0; ms->numa_state && g < t->nr_gnodes; g++) {
        HostMemoryBackend *be = ms->numa_state->nodes[g].node_memdev;

        if (be) {
            t->gnodes[g].host_nodes = be->host_nodes[0];
            t->gnodes[g].policy = be->policy;
        }
    }
    if (mc->possible_cpu_arch_ids) {
        const CPUArchIdList *cpus = mc->possible_cpu_arch_ids(ms);

        for (int i = 0; i < cpus->len && t->nr_vcpus < NUKSM_MAX_VCPUS; i++) {
            const CPUArchId *id = &cpus->cpus[i];
            uint32_t gnode = id->props.has_node_id ? id->props.node_id : 0;

            if (!id->cpu || id->cpu->thread_id <= 0) {
                continue;       /* not plugged, or its thread not started */
            }
            t->vcpus[t->nr_vcpus].tid = id->cpu->thread_id;
            t->vcpus[t->nr_vcpus].gnode = gnode < t->nr_gnodes ? gnode : 0;
            t->nr_vcpus++;
        }
    }
    nuksm_ram_foreach_eligible(s, nuksm_numa_add_range, t);
    trace_nuksm_numa_topology(s->id, t->nr_gnodes, t->nr_vcpus);
    nuksm_outbox_post(&s->outbox, s->conn.epoch, NUKSM_MSG_TOPOLOGY, t,
                      sizeof(*t));
}

void nuksm_numa_handle_home(Nuksm *s, const NuksmMsgHome *h)
{
    for (uint32_t g = 0; g < h->nr_gnodes; g++) {
        trace_nuksm_numa_home(s->id, g, h->home[g], h->source[g]);
    }
    if (s->home.nr_gnodes != h->nr_gnodes ||
        memcmp(s->home.home, h->home, sizeof(h->home))) {
        nuksm_commit_reoffer(s->commit);
    }
    s->home = *h;
    nuksm_reads_set_home(s->reads, h);
}

/* The home node of guest node @g: node 0 until the agent says. */
static uint32_t nuksm_numa_home(Nuksm *s, uint32_t g)
{
    return g < s->home.nr_gnodes ? s->home.home[g] : 0;
}

typedef struct NuksmLocality {
    Nuksm *s;
    uint64_t local, remote;
} NuksmLocality;

static void nuksm_numa_block_locality(NuksmBlockState *bs, void *opaque)
{
    NuksmLocality *l = opaque;
    uint32_t home = nuksm_numa_home(l->s, bs->gnode);

    for (uint32_t n = 0; n < NUKSM_MAX_NODES; n++) {
        *(n == home ? &l->local : &l->remote) += bs->merged_per_node[n];
    }
}

void nuksm_numa_locality(Nuksm *s, uint64_t *local, uint64_t *remote)
{
    NuksmLocality l = { .s = s };

    qemu_mutex_lock(&s->pages->lock);
    nuksm_pages_foreach(s->pages, nuksm_numa_block_locality, &l);
    qemu_mutex_unlock(&s->pages->lock);
    *local = l.local;
    *remote = l.remote;
}

NuksmHomeNodeList *nuksm_numa_home_list(Nuksm *s)
{
    NuksmHomeNodeList *head = NULL, **tail = &head;
    uint32_t gnodes = nuksm_numa_nr_gnodes();

    for (uint32_t g = 0; g < gnodes; g++) {
        NuksmHomeNode *hn = g_new0(NuksmHomeNode, 1);

        hn->guest_node = g;
        hn->host_node = nuksm_numa_home(s, g);
        hn->source = g < s->home.nr_gnodes ? s->home.source[g] :
                     NUKSM_HOME_SOURCE_DEFAULT;
        QAPI_LIST_APPEND(tail, hn);
    }
    return head;
}
