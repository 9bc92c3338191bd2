/*
 * nuksmd state shared by its modules.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_AGENT_H
#define NUKSMD_AGENT_H

#include <sys/types.h>

#include <glib.h>

#include "clients.h"
#include "domains.h"
#include "mappers.h"
#include "memcg.h"
#include "index.h"
#include "nuksm-proto.h"
#include "policy.h"
#include "slots.h"
#include "store.h"
#include "replace.h"
#include "topology.h"
#include "unstable.h"

typedef struct NuksmAgent {
    GMainLoop *loop;

    NuksmPolicyId policy;        /* placement policy in force */
    uint32_t nr_nodes;           /* 1..NUKSM_MAX_NODES */
    Topology topology;

    /* NUMA placement (home.c, policy.c) */
    uint32_t cold_windows;       /* idle windows before a page is cold */
    guint home_timer;
    PolicyLoad placement;        /* the nodes for policy.c: use */
                                 /* agent_policy_load() */
    GHashTable *hot_owners;      /* SlotId -> client id: fair placed the */
                                 /* copy with the VM it is hot for */
    Replacer replacer;           /* replace.c */

    ClientRegistry clients;
    uint32_t next_client_id;     /* handed out on HELLO, from 1 */
    const char *libvirt_dir;     /* libvirt hook's registrations */

    /* Merge engine, owned by merge.c and its helpers. */
    Store store;
    int userfaultfd;             /* /dev/userfaultfd, -1: given to VMs */
    Mappers mappers;             /* processes given the store */
    Memcg memcg;                 /* the room left in our memory cgroup */
    SlotTable slots[NUKSM_MAX_NODES];
    StableIndex index;
    UnstableTable unstable;
    Domains domains;
    GHashTable *vms;             /* client id -> NuksmClient, joined VMs */
    GHashTable *uploads;         /* SlotId -> Upload, slots being uploaded */
    GArray *freeing;             /* SlotIds to punch out, then release */
    guint settle_source;         /* effects.c */
    GPtrArray *outbox;           /* clients with batches to send */
    GQueue detached;             /* parked references (detached.c) */
    /* What holds back new merges (conditions.c) */
    uint32_t conditions;         /* NuksmCondition bits */
    char *condition_reasons[NUKSM_COND_COUNT];  /* per bit, while set */
    gint64 store_retry_at;       /* store full: next try, monotonic us */
    uint64_t memory_max;         /* heap budget, bytes (--memory-max) */

    /* Orphans (recovery.c) */
    uint64_t orphan_pages;       /* slots in SLOT_ORPHAN */
    guint orphan_timer;          /* next look at who maps them */
    uint64_t orphans_logged;     /* orphan_pages when last logged */
    bool orphans_unscannable;    /* the last look could not see them all */

    /* Listening socket, owned by server.c. */
    char *socket_path;
    int listen_fd;
    guint listen_watch;
    guint accept_retry;          /* re-arms accepting after EMFILE */
    bool socket_activated;       /* systemd's socket, never unlinked */
    dev_t socket_dev;            /* the socket file we bound, so that we */
    ino_t socket_ino;            /* never unlink somebody else's */
    void *rx_buf;                /* NUKSM_MSG_MAX bytes each */
    void *tx_buf;
} NuksmAgent;

/* The nodes as the placement policy sees them now (policy.h). */
static inline PolicyLoad *agent_policy_load(NuksmAgent *agent)
{
    PolicyLoad *load = &agent->placement;

    load->nr_nodes = agent->nr_nodes;
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        load->copies[n] = agent->slots[n].nr_used;
    }
    return load;
}

#endif /* NUKSMD_AGENT_H */
