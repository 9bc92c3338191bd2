/*
 * nuksmd client registry: one NuksmClient per accepted connection.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_CLIENTS_H
#define NUKSMD_CLIENTS_H

#include <stdbool.h>
#include <sys/types.h>

#include <glib.h>

#include "assign.h"
#include "keymap.h"
#include "lines.h"
#include "nuksm-proto.h"
#include "pagerefs.h"
#include "sketch.h"

/* Connections beyond this are refused; keeps fds and LIST_VMS bounded. */
#define CLIENTS_MAX 1024u

/*
 * Beyond CLIENTS_MAX, room kept for root's connections, so that an
 * administrator's nuksmctl still gets in when others fill the agent.
 */
#define CLIENTS_ROOT_RESERVE 16u

/*
 * What one client cannot exceed to the others' cost: connections of one
 * uid that have not sent HELLO yet (each has HANDSHAKE_SECONDS to send
 * it; one more closes one of them, clients_handshake_to_drop()), control
 * connections of one uid, VM connections of one process (one per nuksm
 * object).
 */
#define HANDSHAKE_SECONDS 5
#define CLIENT_HANDSHAKES_PER_UID 16u
#define CLIENT_CONTROLS_PER_UID 16u
#define CLIENT_VMS_PER_PID 16u

struct NuksmAgent;

/* What co-location's last look said of a VM (colocation.h). */
typedef struct ClientColocation {
    uint32_t twin_id;        /* its most similar VM of its domain, or 0 */
    uint32_t twin_pm;        /* their similarity, per mille */
    uint32_t plan_to;        /* the node the plan moves it to, */
    uint32_t plan_verdict;   /* and whether; NUKSM_PLAN__MAX: no move */
    NuksmSchemeId scheme;    /* the adaptive scheme's, for its domain */
} ClientColocation;

/*
 * The parts of a client each module keeps, each created and freed by its
 * owner: clients_remove() frees only the registry's own and the
 * transport's queue, merge_client_free() the others.
 */

/* Messages the socket could not take yet (transport.c). */
typedef struct ClientTxq {
    struct TxqEntry *head;   /* oldest first, NULL if none */
    struct TxqEntry *tail;   /* newest */
    size_t bytes;            /* what they cost, counted as transport.c says */
    guint out_watch;         /* G_IO_OUT source while the queue is not empty */
} ClientTxq;

/* Entries of its next messages, gathered while one is handled (outbox.h). */
typedef struct ClientOutbox {
    GArray *to_merge;        /* NuksmSlotRef of the next MERGE */
    GArray *to_upload;       /* NuksmSlotRef of the next UPLOAD_REQ */
    GArray *to_read;         /* NuksmSlotRef of uploads the agent reads */
                             /* from its memory (uploads.c, peek.h) */
    GArray *to_move;         /* NuksmMove of the next MOVE */
    GArray *to_retry;        /* NuksmSlotRef of the next RETRY (page only) */
    bool queued;             /* in the agent's outbox */
} ClientOutbox;

/* What the VM is to be asked for (wanted.h). */
typedef struct ClientWanted {
    uint64_t *fragments;     /* NuksmMsgWanted's bitmap of its next */
                             /* WANTED; NULL while none is to be sent */
    uint32_t caused;         /* contents its candidates made wanted */
                             /* since the last WANTEDs were sent */
} ClientWanted;

/* The content of new slots the VM gives (uploads.h). */
typedef struct ClientUploads {
    uint32_t missed;         /* uploads it let pass their time */
    gint64 distrusted_until; /* monotonic us: others upload in its place */
                             /* till then */
    GHashTable *revoked;     /* uploads no longer awaited: page, slot and */
                             /* generation */
    uint64_t read;           /* new slots' content read from its memory */
    uint64_t sent;           /* new slots' content it sent (UPLOAD) */
    int read_errno;          /* why its memory cannot be read, or 0 */
} ClientUploads;

/*
 * The CPU its messages cost the agent, and its domain's CPU quota
 * (dispatch.c, server.c, throttle.h).
 */
typedef struct ClientCpu {
    uint64_t charge_ns;      /* CPU its messages cost, not yet CHARGEd */
    uint64_t used_ns;        /* CPU its messages cost, all told */
    uint64_t throttled_ns;   /* time its domain's CPU quota left it unread */
    gint64 served_at;        /* monotonic us it was last read */
    gint64 paused_at;        /* monotonic us it was left unread at, */
    gint64 paused_until;     /* and until when; 0 while it is read */
} ClientCpu;

/* NUMA placement (home.h): NULL topology until the VM sends it. */
typedef struct ClientHome {
    NuksmMsgTopology *topology;
    uint8_t node[NUKSM_MAX_GNODES];    /* each guest node's home node */
    uint8_t source[NUKSM_MAX_GNODES];  /* NuksmHomeSourceId */
    uint8_t streak[NUKSM_MAX_GNODES];  /* evaluations elsewhere */
} ClientHome;

/* Read hotness of its merged pages, from its READS (reads.h). */
typedef struct ClientReads {
    KeyMap regions;          /* read region -> samples since one of its */
                             /* merged pages was read (tag), for those */
                             /* below NUKSM_IDLE_NEVER */
    uint32_t hot_regions;    /* of them, read in the last */
                             /* --cold-windows samples */
    uint32_t window_ms;      /* its read window; 0: no READS yet */
    uint64_t local;          /* reads its sampling caught (READS) */
    uint64_t remote;
    bool capped;             /* some regions were not kept (logged once) */
} ClientReads;

/* Its part of the host's scan budget (budget.h). */
typedef struct ClientShare {
    NuksmMsgShare told;      /* the last SHARE sent; pace 0: none yet */
    uint64_t offered;        /* candidates its scanner found, not */
                             /* those WANTED asked for, ever (merge.c) */
    uint64_t resident;       /* its process's pages in RAM, lately */
    /* At the last periodic look: */
    uint64_t merges_seen;    /* its merges */
    uint64_t cpu_seen;       /* its scanner's and our CPU for it, ns */
    uint64_t hints_seen;     /* I/O hints it had taken */
    uint64_t breaks_seen;    /* merged pages writes had broken */
    uint64_t writes_seen;    /* writes to its tracked pages */
    uint64_t offered_seen;   /* candidates it had offered */
    uint64_t resident_seen;  /* its process's pages in RAM */
    double merges_avg;       /* merges per look, smoothed */
    double cpu_avg_ns;       /* CPU per look, smoothed */
    uint32_t quiet_looks;    /* looks in a row without a merge */
    uint32_t doubt;          /* looks signalled but without a merge, */
                             /* less those without signs */
} ClientShare;

typedef struct NuksmClient {
    struct NuksmAgent *agent;
    int fd;
    guint watch;             /* g_unix_fd_add() source for fd */
    guint hello_timer;       /* closes it if no HELLO comes in time */
    pid_t pid;               /* SO_PEERCRED at connect time */
    int pidfd;               /* of the peer process, or -1 */
    guint exit_watch;        /* @pidfd readable: the process exited */
    uid_t uid;
    gid_t gid;
    char *label;             /* "client 3 (pid 1234)", for logs */

    /*
     * The connections of its process (the same pid), in a ring: itself
     * alone.  What a process may hold is bounded over all of them
     * (ledger_process_pages()).
     */
    struct NuksmClient *pid_next;
    struct NuksmClient *pid_prev;

    /* Set once the client is disconnected; it is freed by the reaper. */
    bool dead;

    /* From HELLO, and what the agent decided of it (dispatch.c) */
    bool hello_done;
    uint32_t id;
    NuksmClientRole role;
    bool admin;              /* may change host-wide settings */
    uint32_t priority;       /* in force: at most priority_limit */
    uint32_t priority_limit; /* the operator's ceiling */
    char domain[NUKSM_NAME_LEN];            /* the agent's choice; a */
                                            /* control client's: what */
                                            /* it would be as a VM */
    char requested_domain[NUKSM_NAME_LEN];  /* what its HELLO asked */
    NuksmDomainSourceId domain_source;
    char vm_name[NUKSM_NAME_LEN];
    char object_id[NUKSM_NAME_LEN];

    uint64_t merged_pages;   /* guest pages mapped onto store pages */
    uint64_t merges;         /* pages it merged (MERGED), all told */
    uint64_t parked_pages;   /* entries taken back, not yet restored */
    uint64_t refused_pages;  /* RESTORE entries refused */
    NuksmMsgVmLimit limit;   /* what holds back its merging in QEMU */
    ClientTxq txq;

    /* Merge engine (VM clients) */
    bool joined;             /* merge_client_join() done */
    uint64_t queue_max;      /* bytes its domain's VMs may leave unread */
                             /* (quotas_queue_max(), set as it joins) */
    uint16_t contents_slot;  /* names it in the content table; 0: none */
    bool landing;            /* its last candidate landed a migration: */
                             /* its memory may lack what it offered */
    uint16_t domain_id;
    PageRefs pages;          /* page -> slot it maps or is about to (ledger) */
    ClientOutbox outbox;
    ClientUploads uploads;
    ClientWanted wanted;
    ClientCpu cpu;
    SlotLines lines;         /* where its new slots go (lines.h) */
    ClientHome home;
    ClientReads reads;

    /* What its memory holds, sampled by content (sketch.h) */
    ContentSketch sketch;
    ClientColocation colocation;    /* co-location's last look */
    NuksmMsgVmStats scanner; /* its scanner's counters (VM_STATS) */
    ClientShare share;       /* its part of the scan budget (budget.h) */
    uint32_t colocated_to;   /* the node a planned move (APPLY_MOVE) took */
                             /* it to, NUKSM_MAX_NODES if none: its pins */
                             /* there are nuksm's, not its operator's */
} NuksmClient;

typedef struct ClientRegistry {
    GQueue list;             /* NuksmClient *, in connection order */
    uint32_t next_id;        /* handed out on HELLO, from 1 */
} ClientRegistry;

/*
 * Does the process @pidfd names still run?  False once it exited (its
 * pid may then name another process), and for -1: nuksmd cannot tell.
 */
bool pidfd_process_alive(int pidfd);

/* Register a connection, taking @pidfd (or -1); the caller sets ->watch. */
NuksmClient *clients_add(ClientRegistry *reg, struct NuksmAgent *agent,
                         int fd, pid_t pid, int pidfd, uid_t uid, gid_t gid);

/*
 * Unregister @client, remove its watches, close its fds and free it with
 * what it holds; the merge engine must be done with it.
 */
void clients_remove(ClientRegistry *reg, NuksmClient *client);

/*
 * Record an accepted HELLO (already validated), the assigned @id, the
 * domain the agent chose (@assigned) and, for a VM, its priority limit.
 */
void clients_set_hello(NuksmClient *client, uint32_t id,
                       const NuksmMsgHello *hello,
                       const Assignment *assigned);

unsigned clients_count(const ClientRegistry *reg);

/* Live connections of @uid that have not sent HELLO yet. */
unsigned clients_count_handshakes(const ClientRegistry *reg, uid_t uid);

/*
 * The connection to close to make room for a new one, among the live
 * connections that have not sent HELLO yet, of @uid or, if @any_uid, of
 * anybody: the oldest of the process that holds the most of them.  A
 * QEMU sends HELLO as it connects, so a process that holds connections
 * it says nothing on loses its own, one per newcomer, and never keeps a
 * QEMU out.  NULL if there is none.
 */
NuksmClient *clients_handshake_to_drop(const ClientRegistry *reg,
                                       bool any_uid, uid_t uid);

/* Live clients that completed HELLO in @role from @uid, or from @pid. */
unsigned clients_count_role_of_uid(const ClientRegistry *reg,
                                   NuksmClientRole role, uid_t uid);
unsigned clients_count_role_of_pid(const ClientRegistry *reg,
                                   NuksmClientRole role, pid_t pid);

/* Live clients that completed HELLO as NUKSM_ROLE_VM. */
bool clients_is_vm(const NuksmClient *client);
unsigned clients_count_vms(const ClientRegistry *reg);
/* VM clients that sent READS, in merge domain @domain_id or (-1) any. */
unsigned clients_count_vms_reading(const ClientRegistry *reg, int domain_id);

/* The clients_is_vm() clients sorted by id; free with g_ptr_array_unref. */
GPtrArray *clients_list_vms(const ClientRegistry *reg);

/* The client, VM or control, that HELLO gave @id; NULL if none now. */
NuksmClient *clients_find(const ClientRegistry *reg, uint32_t id);

/*
 * The home node of @client's guest node @gnode (home.h; 0 before
 * TOPOLOGY).
 */
static inline uint32_t client_home(const NuksmClient *client,
                                   uint32_t gnode)
{
    return client->home.topology && gnode < client->home.topology->nr_gnodes ?
           client->home.node[gnode] : 0;
}

/*
 * Where @client's RAM page @page lies in its process (TOPOLOGY's ranges,
 * since protocol 12): false if it did not say.
 */
bool client_page_address(const NuksmClient *client, uint64_t page,
                         uint64_t *addr);

/* The home node of @client's RAM page @page (TOPOLOGY's ranges). */
uint32_t client_home_of_page(const NuksmClient *client, uint64_t page);

/*
 * Read samples since a merged page of the read region of @client's RAM
 * page @page was seen read (READS), NUKSM_IDLE_NEVER if it never was.
 */
uint8_t client_read_idle(const NuksmClient *client, uint64_t page);

#endif /* NUKSMD_CLIENTS_H */
