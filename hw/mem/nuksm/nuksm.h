/*
 * nuksm: NUMA-aware memory deduplication through a shared host agent.
 *
 * The units of the QEMU side, in the order a page flows through them
 * (scan -> index and policy, in the agent -> commit):
 *
 *   nuksm.c         the QOM object: properties, state, events, machine
 *                   and migration hooks                  main loop, BQL
 *   nuksm-ram.c     which RAM is eligible, resolved into plain data for
 *                   the scanner thread                   main loop, BQL
 *   nuksm-scan.c    walk eligible RAM, hash pages, offer stable ones
 *                   (NuksmScanner)                       scanner thread
 *   nuksm-governor.c  the presets of the scanner's budget (governors)
 *                                                        main loop, BQL
 *   nuksm-hints.c   I/O hints: guest pages disk transfers moved, for the
 *                   scanner to take first                any thread
 *   nuksm-pages.c   the per-page table: digests, flags, inactive
 *                   counters, slot references (NuksmPages) page_lock
 *   nuksm-agent.c   the connection to nuksmd: handshake, messages in,
 *                   the queue of messages out            main loop, BQL;
 *                                                        posting: tx_lock
 *   nuksm-commit.c  carry out the agent's requests: userfaultfd, stores,
 *                   request queue, UPLOAD/MERGE/MOVE, discard
 *                   (NuksmCommit)                        scanner thread
 *   nuksm-remap.c   the system calls of a commit (write-protect, compare,
 *                   remap, wake)                         under page_lock
 *   nuksm-maps.c    the mapping budget against vm.max_map_count
 *                                                        under page_lock
 *   nuksm-writes.c  lift the write protection of tracked pages a guest
 *                   writes (NuksmWrites)                 write-fault thread
 *   nuksm-numa.c    guest NUMA layout for the agent, home nodes,
 *                   locality                             main loop, BQL
 *   nuksm-hot.c     write hotness from the dirty log     main loop, BQL
 *   nuksm-qmp.c     QMP commands and HMP "info nuksm"    main loop, BQL
 *
 * Three threads: the main loop (everything under the BQL), the
 * "nuksm-scan" thread, which scans and serves the commit unit's queue
 * between chunks, and, while nuksm holds userfaultfd, the "nuksm-writes"
 * thread, which serves write faults on tracked pages: writers, the main
 * loop among them, wait for it, so it takes no lock but page_lock.  RAM
 * discard enters the commit unit from whichever thread discards.  Locks,
 * in the order they nest (take a later one while holding an earlier one,
 * never the reverse):
 *
 *   BQL             main loop only: the scanner thread never takes it
 *   uffd lock       NuksmCommit.uffd_lock: taking and releasing
 *                   userfaultfd (and starting and stopping the
 *                   write-fault thread)
 *   RCU read lock   keeps RAM blocks (and the eligible list) alive for one
 *                   chunk or one commit; never held across a sleep (see
 *                   nuksm-commit.c's upload)
 *   page_lock       NuksmPages.lock: page states, references, counters,
 *                   and the commit unit's userfaultfd, stores, pending
 *                   UNMERGED and mapping budget
 *   lock            NuksmScanner.lock: thread control (active, epoch,
 *                   budget), scan counters
 *   commit lock     NuksmCommit.lock: the request queue, the
 *                   /dev/userfaultfd of the agent and the userfaultfd error
 *   conn.tx_lock    the queue of messages to the agent, taken by
 *                   nuksm_agent_post() and nuksm_agent_backlog()
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_H
#define HW_MEM_NUKSM_H

#include "qom/object.h"
#include "qemu/notify.h"
#include "qemu/queue.h"
#include "qemu/thread.h"
#include "qemu/timer.h"
#include "exec/ramlist.h"
#include "qapi/qapi-types-nuksm.h"
#include "system/runstate.h"
#include "libnuksm/nuksm-proto.h"

#define TYPE_NUKSM "nuksm"
OBJECT_DECLARE_SIMPLE_TYPE(Nuksm, NUKSM)

#define NUKSM_DEFAULT_AGENT    "/run/nuksm/nuksmd.sock"
#define NUKSM_DEFAULT_PRIORITY 100
/* max-cpu's range, in percent of one core: fractions too. */
#define NUKSM_MAX_CPU_MIN      0.01
#define NUKSM_MAX_CPU_MAX      100.0
#define NUKSM_DEFAULT_HOT_WINDOW_MS 1000
#define NUKSM_HOT_WINDOW_MIN_MS 10
#define NUKSM_HOT_WINDOW_MAX_MS 600000
/* Inactive counters saturate here, and start here: never seen written. */
#define NUKSM_HOT_IDLE_MAX     NUKSM_IDLE_NEVER
/* How often a disabled hotness sampler looks whether it is wanted. */
#define NUKSM_HOT_OFF_POLL_MS  1000

typedef struct NuksmRequest NuksmRequest;
typedef struct NuksmPages NuksmPages;
typedef struct NuksmCommit NuksmCommit;
typedef struct NuksmScanner NuksmScanner;
typedef struct NuksmHints NuksmHints;
typedef struct NuksmRamList NuksmRamList;

/*
 * Connection to nuksmd; main loop only, under the BQL, except @tx, which
 * the scanner thread and RAM discard post to as well (nuksm_agent_post(),
 * @tx_lock).
 */
typedef struct NuksmAgentConn {
    int fd;                     /* -1 while not connected */
    bool ready;                 /* handshake completed */
    uint32_t nr_nodes;          /* from HELLO_ACK */
    int policy;                 /* NuksmPolicy, -1 until known */
    /*
     * What the agent decided for this VM (HELLO_ACK), while @ready: the
     * merge domain it put us in (the domain property is only a request),
     * where that came from, and the operator's ceiling on our priority
     * (the agent uses the smaller of the two).  NULL, and zero, while not
     * connected.
     */
    char *merge_domain;
    NuksmDomainSource domain_source;
    uint32_t priority_limit;
    uint32_t conditions;        /* NuksmCondition bits the agent reports */
    char *condition_reason;     /* why, while conditions is not 0 */
    uint32_t vm_limit_sent;     /* NuksmVmLimit we last told the agent, */
                                /* NUKSM_VM_LIMIT__MAX before we did */
    uint32_t next_seq;
    uint32_t epoch;             /* counts completed handshakes */
    QemuMutex tx_lock;          /* the scanner thread posts messages too */
    GQueue tx;                  /* NuksmTx *, waiting for the socket */
    QEMUBH *tx_bh;
    char *last_error;           /* why we are not connected */
    int64_t backoff_ms;         /* delay before the next connect attempt */
    QEMUTimer *retry_timer;
    QLIST_HEAD(, NuksmRequest) requests;  /* waiting for a reply */
} NuksmAgentConn;

/* Write-hotness sampling (nuksm-hot.c); main loop only. */
typedef struct NuksmHot {
    QEMUTimer *timer;
    bool logging;               /* a sample window is open */
    unsigned resting;           /* windows without sampling since the */
                                /* last harvest */
    uint64_t samples;           /* windows harvested */
    uint64_t hot_pages;         /* pages written in the last window */
    char *error;                /* why dirty logging could not start */
} NuksmHot;

struct Nuksm {
    Object parent_obj;

    /* Properties */
    char *agent_path;
    char *domain;
    uint32_t priority;
    NuksmGovernor governor;     /* presets what is not set below */
    double max_cpu;             /* percent of one core, if max_cpu_set */
    bool max_cpu_set;
    uint64_t scan_rate;         /* if scan_rate_set */
    bool scan_rate_set;
    bool zero_pages;
    bool io_hints;              /* take I/O hints (nuksm-hints.c) */
    uint32_t hash_strength;     /* hash-strength (nuksm-strength.c) */
    bool distilling;            /* region distilling (nuksm-regions.c) */
    char *memdev;
    bool enabled;
    uint32_t hot_window_ms;     /* 0: no hotness sampling */
    uint32_t commit_delay_us;   /* x-commit-delay-us, tests only */

    /* @memdev, resolved once the machine is built */
    HostMemoryBackend *memdev_backend;

    bool completed;             /* user_creatable complete() ran */
    uint64_t created;           /* order of completion among nuksm objects */
    bool migrating;             /* stepped aside for migration/snapshot */
    NuksmAgentConn conn;
    NuksmMsgHome home;          /* from the agent; zero until it says */
    NuksmHot hot;
    /* The units of the scanner thread, once complete */
    NuksmPages *pages;
    NuksmCommit *commit;
    NuksmScanner *scanner;
    NuksmHints *hints;          /* I/O hints for the scanner */
    NuksmRamList *ram;          /* eligible RAM, RCU (nuksm-ram.c) */
    QEMUBH *ram_bh;             /* RAM blocks changed: refresh @ram */
    RAMBlockNotifier ram_notifier;
    QEMUBH *limit_bh;           /* a limit of the scanner changed */
    NuksmLimit limit_reported;  /* of the last NUKSM_MERGING_LIMITED, */
                                /* NUKSM_LIMIT__MAX since RESUMED */
    Notifier machine_done;
    NotifierWithReturn migration_notifier;
    VMChangeStateEntry *vm_state;
};

/* Figures of all units, for query-nuksm and the limit events. */
/* The scanner's change test (nuksm-strength.c). */
typedef struct NuksmHashStats {
    uint32_t strength;          /* bytes the sampled digest reads */
    bool adaptive;              /* else fixed (hash-strength) */
    uint64_t pages_sampled;     /* looks the sampled digest settled alone */
    uint64_t pages_hashed;      /* full digests computed */
    uint64_t misses;            /* changes the sampled digest missed */
    double profit_ns;           /* full digests saved, priced */
    double penalty_ns;          /* full digests that found a miss */
} NuksmHashStats;

typedef struct NuksmStats {
    /* nuksm-scan.c */
    NuksmHashStats hashing;
    uint64_t pages_scanned;
    uint64_t full_scans;
    uint64_t pages_volatile;
    uint64_t cow_breaks;
    uint64_t hints_served;      /* hinted pages hashed */
    uint64_t promotions;        /* regions moved up a level */
    uint64_t demotions;         /* and down (nuksm-regions.c) */
    /* nuksm-pages.c */
    uint64_t merged_pages;      /* pages mapping a store slot */
    uint64_t zero_pages;        /* pages dropped as zero */
    uint64_t hints_merged;      /* merges of pages offered on a hint */
    uint64_t merged_per_node[NUKSM_MAX_NODES];
    /* nuksm-commit.c */
    uint64_t maps_in_use;       /* the process's mappings (VMAs) */
    uint64_t maps_limit;        /* vm.max_map_count */
    uint64_t maps_budget;       /* the most nuksm lets the process reach */
    bool maps_limited;          /* merges held back by the budget */
    char uffd_error[256];       /* why nothing can merge, "" if it can */
} NuksmStats;

/* nuksm.c */
NuksmState nuksm_state(Nuksm *s);

/*
 * The limit holding back merging may have changed (the map budget, the
 * agent's conditions, the connection): emit NUKSM_MERGING_RESUMED and
 * NUKSM_MERGING_LIMITED for the change, once.  Main loop only.
 */
void nuksm_limit_changed(Nuksm *s);
bool nuksm_is_running(Nuksm *s);
const char *nuksm_id(Nuksm *s);
Nuksm *nuksm_find(const char *id, Error **errp);
Nuksm *nuksm_first_connected(Error **errp);
NuksmInfo *nuksm_get_info(Nuksm *s);
NuksmInfoList *nuksm_list_info(void);
NuksmRegionMapList *nuksm_list_regions(void);
void nuksm_kick_all(void);
void nuksm_update_activity(Nuksm *s);

/* nuksm-agent.c */
void nuksm_agent_init(Nuksm *s);
void nuksm_agent_start(Nuksm *s);
void nuksm_agent_cleanup(Nuksm *s);
void nuksm_agent_send_priority(Nuksm *s);
void nuksm_agent_post(Nuksm *s, uint32_t epoch, NuksmMsgType type,
                      const void *payload, uint32_t len);
void nuksm_agent_post_batches(Nuksm *s, uint32_t epoch, NuksmMsgType type,
                              const void *entries, size_t size, size_t n,
                              size_t max);
size_t nuksm_agent_backlog(Nuksm *s);
int coroutine_fn nuksm_agent_request(Nuksm *s, NuksmMsgType type,
                                     const void *payload, uint32_t len,
                                     NuksmMsgType reply_type,
                                     void *reply, uint32_t reply_len,
                                     Error **errp);

/* nuksm-ram.c: main loop (BQL), but for nuksm_ram_foreach_resolved() */
typedef bool (*NuksmRamFn)(Nuksm *s, RAMBlock *rb, void *opaque);
typedef bool (*NuksmRamResolvedFn)(RAMBlock *rb, uint8_t gnode,
                                   void *opaque);
uint64_t nuksm_ram_eligible_pages(Nuksm *s);
NuksmExclusionList *nuksm_ram_exclusions(Nuksm *s);
void nuksm_ram_foreach_eligible(Nuksm *s, NuksmRamFn fn, void *opaque);
bool nuksm_ram_resolve_memdev(Nuksm *s, Error **errp);
/* Resolve the eligible RAM again, for nuksm_ram_foreach_resolved(). */
void nuksm_ram_refresh(Nuksm *s);
void nuksm_ram_free(Nuksm *s);
/*
 * Any thread: call @fn for each eligible RAM block as last resolved,
 * with its guest node, until it returns false; none while discard is
 * disabled.  Takes the RCU read lock; @rb is valid while it is held.
 */
void nuksm_ram_foreach_resolved(Nuksm *s, NuksmRamResolvedFn fn,
                                void *opaque);
/*
 * Is @rb among the resolved eligible blocks (as for
 * nuksm_ram_foreach_resolved()), and of which guest NUMA node?  Any
 * thread, with the RCU read lock held.
 */
bool nuksm_ram_resolved_gnode(Nuksm *s, RAMBlock *rb, uint8_t *gnode);

/* nuksm-numa.c */
uint8_t nuksm_numa_block_gnode(RAMBlock *rb);
void nuksm_numa_send_topology(Nuksm *s);
void nuksm_numa_handle_home(Nuksm *s, const NuksmMsgHome *h);
void nuksm_numa_locality(Nuksm *s, uint64_t *local, uint64_t *remote);
NuksmHomeNodeList *nuksm_numa_home_list(Nuksm *s);

/* nuksm-hot.c */
void nuksm_hot_start(Nuksm *s);
void nuksm_hot_stop(Nuksm *s);
NuksmHotness *nuksm_hot_info(Nuksm *s);

#endif /* HW_MEM_NUKSM_H */
