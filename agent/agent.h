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
#include "relocate.h"
#include "slots.h"
#include "store.h"
#include "topology.h"
#include "unstable.h"

/* The listening socket (server.c). */
typedef struct AgentServer {
    char *path;
    int listen_fd;
    guint listen_watch;
    guint accept_retry;      /* re-arms accepting after EMFILE */
    bool activated;          /* systemd's socket, never unlinked */
    dev_t dev;               /* the socket file we bound, so that we */
    ino_t ino;               /* never unlink somebody else's */
    void *rx_buf;            /* NUKSM_MSG_MAX bytes */
} AgentServer;

/* What holds back new merges (conditions.c). */
typedef struct AgentConditions {
    uint32_t held;                          /* NuksmCondition bits */
    char *reasons[NUKSM_COND_COUNT];        /* per bit, while held */
    gint64 store_retry_at;   /* store full: next try, monotonic us */
    uint64_t memory_max;     /* heap budget, bytes (--memory-max) */
} AgentConditions;

/* Slots no VM references that a process may still map (recovery.c). */
typedef struct AgentOrphans {
    uint64_t pages;          /* slots in SLOT_ORPHAN (the ledger counts) */
    guint timer;             /* next look at who maps them */
    uint64_t logged;         /* pages when last logged */
    bool unscannable;        /* the last look could not see them all */
} AgentOrphans;

/* Who uses which slot (ledger.c). */
typedef struct AgentLedger {
    SlotTable slots[NUKSM_MAX_NODES];
    GHashTable *vms;         /* client id -> NuksmClient, joined VMs */
    GHashTable *uploads;     /* SlotId -> sharers, slots being uploaded */
} AgentLedger;

/* What an event left to do (effects.h). */
typedef struct AgentEffects {
    GPtrArray *outbox;       /* clients with batches to send (outbox.c) */
    GArray *freeing;         /* SlotIds to punch out (ledger_free()) */
    guint settle_source;
} AgentEffects;

/* NUMA placement (policy.c decides; home.c, merge.c, relocate.c ask). */
typedef struct AgentPlacement {
    NuksmPolicyId policy;    /* in force; SET_POLICY changes it */
    uint32_t cold_windows;   /* idle windows before a page is cold */
    guint home_timer;        /* home.c's periodic look */
    PolicyLoad load;         /* the nodes for policy.c: use */
                             /* agent_policy_load() */
    GHashTable *hot_owners;  /* SlotId -> client id: fair placed the */
                             /* copy with the VM it is hot for */
} AgentPlacement;

/*
 * The agent: each part is changed by the module its comment names, and
 * read by others.
 */
typedef struct NuksmAgent {
    /* Set at start, then only read. */
    GMainLoop *loop;
    uint32_t nr_nodes;       /* 1..NUKSM_MAX_NODES */
    Topology topology;
    const char *libvirt_dir; /* libvirt hook's registrations */

    AgentServer server;
    ClientRegistry clients;  /* clients.c */
    AgentPlacement placement;
    Relocator relocator;       /* relocate.c */

    /* The merge engine (merge.c and the modules it calls). */
    Store store;             /* store.c; copies.c writes and effects.c */
                             /* punches pages */
    int userfaultfd;         /* /dev/userfaultfd, -1: given to VMs */
    Mappers mappers;         /* processes given the store */
    Memcg memcg;             /* the room left in our memory cgroup */
    StableIndex index;       /* copies.c indexes, ledger.c unindexes */
    UnstableTable unstable;
    Domains domains;
    AgentLedger ledger;
    GQueue detached;         /* parked references (detached.c) */
    AgentConditions conditions;
    AgentOrphans orphans;
    AgentEffects effects;
} NuksmAgent;

/* The nodes as the placement policy sees them now (policy.h). */
static inline PolicyLoad *agent_policy_load(NuksmAgent *agent)
{
    PolicyLoad *load = &agent->placement.load;

    load->nr_nodes = agent->nr_nodes;
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        load->copies[n] = agent->ledger.slots[n].nr_used;
    }
    return load;
}

#endif /* NUKSMD_AGENT_H */
