/*
 * nuksmd state shared by its modules.
 *
 * DOC: Overview
 *
 * nuksm merges identical guest pages of the VMs of one host into one
 * read-only copy, on the NUMA node a placement policy picks, with no help
 * from the kernel beyond ordinary system calls.  Each QEMU finds and
 * commits merges (hw/mem/nuksm/); this agent, one per host, matches pages
 * across VMs, decides where copies live and keeps the copies in its
 * store.  The wire protocol between them, and its rules, is
 * libnuksm/nuksm-proto.h.  A page's way, each step as an invariant and
 * the function that keeps it:
 *
 * Scan (hw/mem/nuksm/nuksm-scan.c).  A page is offered only once its
 * content held over two looks: a sampled digest of a few of its lines
 * tells whether it changed, at a strength that adapts, and the full
 * digest (XXH3), the agent's key, is computed only for a page to offer
 * (nuksm_scan_full_digest()).  A page write tracking holds protected
 * was not written since and is not hashed again (nuksm-writes.c); an
 * all-zero page is dropped in QEMU and never offered.
 *
 * Candidate (merge_handle_candidates()).  A candidate carries its guest
 * page, digest, guest node and how many hotness windows ago the guest
 * last wrote it; the agent makes it hot or warm by that and by the reads
 * of its read region (policy_page_hot(), numa/reads.h).
 *
 * Stable index and unstable table, one content table (core/contents.h):
 * one probe per node finds both.  A content has at most one copy per
 * merge domain and node.  A candidate joins a copy its policy lets it
 * map, its home node's first (join_copy()); else it pairs with a page
 * seen it may share one with (pair_unstable()); else it waits there
 * (contents_remember()).  A digest only
 * finds partners: equality is proven by QEMU's memcmp at the commit.
 *
 * Placement (core/policy.h).  Pure functions decide everything NUMA:
 * which pages may share a copy, the node of a new copy
 * (policy_new_copy()), where an existing copy should move, and each guest
 * node's home (numa/home.h).
 *
 * New slot (start_upload()).  A pair allocates a slot on the node the
 * policy picks, in line with one sharer's guest pages where it can
 * (core/lines.h), so that QEMU maps whole windows of them at once.  Its
 * content is read by the agent from the VM's memory straight into the
 * slot where the VM's TOPOLOGY says where the page lies (host/peek.h,
 * store_window_slot(), uploads_read_queued()), else uploaded by the VM
 * (UPLOAD) and written; an uploader that has not delivered within
 * LEDGER_UPLOAD_SECONDS hands the upload to another sharer
 * (merge/uploads.h).  The agent checks the digest, records the slot
 * (generation, domain: host/store.h), and sends every page that waits a
 * MERGE (send_merges()).  The ledger (merge/ledger.h) counts who uses
 * each slot; the content table's entry alone holds its content's key
 * (ledger_slot_digest() finds the digest again).
 *
 * Merge (the commit, in QEMU).  A guest page is mapped onto a slot only
 * after a full comparison under userfaultfd write protection; runs and
 * windows of pages are mapped with one mmap each
 * (nuksm_remap_merge_window()).  A blocked writer completes on a private
 * copy.  QEMU answers MERGED (or why not); a MERGED page holds a
 * reference on its slot.
 *
 * Copy-on-write break.  A guest write gives the page a private copy, as
 * KSM's pages get.  The scan sees it in /proc/self/pagemap and reports
 * UNMERGED; the agent drops the reference.  A slot no page uses is
 * punched out of the store and its generation bumped, so that no stale
 * reference can name it again (ledger_free()).
 *
 * Re-placement (merge/relocate.h).  When the policy, a home node or who
 * accesses which merged pages changes, merged pages move to the copy the
 * policy now wants (MOVE, committed like a merge), at a bounded rate.
 *
 * Recovery (merge/recovery.h, merge/detached.h).  The store files and the
 * VMs' mappings of them outlive the agent.  A restarted agent takes every
 * written slot as an orphan; each VM reconnects and sends RESTORE with
 * the pages it maps, which take their slots back if generation and domain
 * match the slot's record.  Orphans no process maps any more are freed.
 * A VM whose connection ends while its process lives keeps its references
 * parked until it reconnects; one whose process exits is disconnected.
 *
 * After each event, what the handling decided is carried out in one place
 * (merge/effects.h): send the queued replies, free the clients that went,
 * punch out the slots that became unused.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_AGENT_H
#define NUKSMD_AGENT_H

#include <sys/types.h>

#include <glib.h>

#include "assign.h"
#include "clients.h"
#include "colocate.h"
#include "contents.h"
#include "domains.h"
#include "mappers.h"
#include "memcg.h"
#include "nuksm-proto.h"
#include "policy.h"
#include "pressure.h"
#include "relocate.h"
#include "slots.h"
#include "store.h"
#include "topology.h"
#include "uploads.h"
#include "wanted.h"

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
    uint64_t cpu_mark;       /* thread CPU when messages were last handled */
    guint resume_timer;      /* reads the clients left unread again */
    gint64 resume_at;        /* monotonic us it fires at */
} AgentServer;

/* What holds back new merges (conditions.c). */
typedef struct AgentConditions {
    uint32_t held;                          /* NuksmCondition bits */
    char *reasons[NUKSM_COND_COUNT];        /* per bit, while held */
    guint probe_timer;       /* looks whether they still hold */
    guint quota_timer;       /* looks at domains at a quota (quotas.c) */
    uint64_t memory_max;     /* heap budget, bytes (--memory-max) */
} AgentConditions;

/* CPU a share of a core allows: its balance (throttle.c). */
typedef struct CpuBucket {
    int64_t balance_ns;      /* CPU it may take yet; below 0: its debt */
    gint64 filled_at;        /* monotonic us the balance was last filled */
} CpuBucket;

/* Each domain's share of nuksmd's CPU, and the agent's (throttle.c). */
typedef struct AgentThrottle {
    GArray *domains;         /* its DomainCpu, by domain id */
    guint look_timer;        /* looks at which domains are limited */
    uint32_t max_cpu;        /* --max-cpu, percent of a core */
    CpuBucket host;          /* the agent's, at max_cpu */
} AgentThrottle;

/* The budget and when merging works (nuksmd's options, budget.h). */
typedef struct BudgetConfig {
    uint32_t budget_ppm;     /* millionths of a core; 0: no budget */
    NuksmRunId run;
    uint32_t short_below_pm; /* run=pressure: short below this much */
                             /* available, per mille of the total */
    uint32_t short_stall_pm; /* ... or above this much stall (PSI), */
                             /* per mille; 0: stalls are not looked at */
    const char *cgroup;      /* whose memory; NULL: the host's */
} BudgetConfig;

/* The VMs' scanners' one CPU budget, and when they merge (budget.c). */
typedef struct AgentBudget {
    BudgetConfig cfg;
    bool memory_short;       /* run=pressure: the last look found it so */
    PressureSample memory;   /* what that look read */
    char *memory_error;      /* why it could read nothing, or NULL */
    guint timer;             /* the periodic look */
    guint soon;              /* a look soon, after a VM joined */
    uint32_t looks;          /* periodic looks so far */
    GHashTable *pruned;      /* merge domain id + 1 -> itself: merging */
                             /* rests there since a PRUNE */
} AgentBudget;

/* Slots no VM references that a process may still map (recovery.c). */
typedef struct AgentOrphans {
    uint64_t pages;          /* slots in SLOT_ORPHAN (the ledger counts) */
    guint timer;             /* next look at who maps them */
    guint stray_timer;       /* looks for pages in free slots */
    uint32_t stray_from[NUKSM_MAX_NODES];   /* where its next look starts */
    uint64_t logged;         /* pages when last logged */
    bool unscannable;        /* the last look could not see them all */
} AgentOrphans;

/* Who uses which slot (ledger.c). */
typedef struct AgentLedger {
    SlotTable slots[NUKSM_MAX_NODES];
    GHashTable *vms;         /* client id -> NuksmClient, joined VMs */
    GHashTable *uploads;     /* SlotId -> Upload, slots being uploaded */
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
    uint32_t cold_windows;   /* idle windows or samples before a page */
                             /* is cold */
    guint home_timer;        /* home.c's periodic look */
    uint32_t home_ticks;     /* its looks so far */
    PolicyLoad load;         /* the nodes for policy.c: use */
                             /* agent_policy_load() */
    guint reads_pass_timer;  /* the re-placement pass read hotness */
                             /* asked for, held back (reads.c) */
    ColocateParams colocate; /* the co-location plan's (colocation.c) */
    bool colocate_move_pinned;   /* it may move VMs their operator */
                                 /* pinned (--colocate-pins=move) */
    ColocateApply colocate_apply;    /* which moves it carries out */
    guint colocate_timer;    /* colocation.c's periodic look */
    guint colocate_periods;  /* periods since it last looked */
    GArray *colocate_pairs;  /* its last look's ColocatePairs, and what */
    uint64_t colocate_key;   /* they were compared from (colocation.c) */
} AgentPlacement;

/* Counts nothing else keeps, for the metrics (metrics.h). */
typedef struct AgentCounters {
    gint64 started_at;       /* wall-clock us (lifecycle.c) */
    uint64_t protocol_errors;    /* clients disconnected for a bad */
                                 /* message (transport.c) */
    uint64_t refused_connections;    /* before a handshake (server.c) */
    uint64_t restored_pages;     /* RESTORE entries taken (recovery.c) */
    uint64_t refused_restores;   /* and refused */
} AgentCounters;

/* Where and how often the metrics are written (metrics.c). */
typedef struct AgentMetrics {
    const char *dir;         /* NULL: not written */
    uint32_t interval_s;
    gid_t gid;               /* may read the file; -1: only its owner */
    guint timer;
    bool failing;            /* the last write failed (logged once) */
} AgentMetrics;

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
    const AssignConfig *assign;  /* who goes into which merge domain */
    gid_t admin_gid;         /* its members administer, or -1 */
    bool vm_set_policy;      /* VMs may SET_POLICY */

    AgentServer server;
    ClientRegistry clients;  /* clients.c */
    AgentPlacement placement;
    Relocator relocator;       /* relocate.c */
    Uploads uploads;           /* uploads.c */
    Wanted wanted;             /* wanted.c */

    /* The merge engine (merge.c and the modules it calls). */
    Store store;             /* store.c; copies.c writes and effects.c */
                             /* punches pages */
    int userfaultfd;         /* /dev/userfaultfd, -1: given to VMs */
    Mappers mappers;         /* processes given the store */
    Memcg memcg;             /* the room left in our memory cgroup */
    ContentTable contents;   /* copies.c indexes, ledger.c unindexes; */
                             /* merge.c remembers pages seen */
    Domains domains;
    AgentLedger ledger;
    GQueue detached;         /* parked references (detached.c) */
    AgentConditions conditions;
    AgentThrottle throttle;
    AgentBudget budget;
    AgentOrphans orphans;
    AgentEffects effects;
    AgentCounters counters;
    AgentMetrics metrics;
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
