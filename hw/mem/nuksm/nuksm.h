/*
 * nuksm: NUMA-aware memory deduplication through a shared host agent.
 *
 * This header holds the object's state, which every unit reads; each
 * unit declares its functions in a header of its own.  The units, from
 * the top down: a unit calls only units below it, never one that calls
 * it (scripts/check-layering.py); a lower unit tells a higher one
 * through the state they share (here, or the scanner's control), a
 * bottom half or a callback it is handed.  A page flows through the
 * middle, scan -> (index and policy, in the agent) -> commit:
 *
 *   nuksm-qmp.c     QMP commands and HMP "info nuksm"    main loop, BQL
 *   nuksm.c         the QOM object: properties, the units' life, machine,
 *                   RAM and migration hooks              main loop, BQL
 *   nuksm-agent.c   the connection to nuksmd: handshake, messages in,
 *                   each to the unit that acts on it     main loop, BQL
 *   nuksm-hot.c     write hotness from the dirty log     main loop, BQL
 *   nuksm-report.c  the scanner's counters to the agent (VM_STATS)
 *                                                        main loop, BQL
 *   nuksm-state.c   the object's state, the scanner run to match it,
 *                   the limits on merging and their events
 *                                                        main loop, BQL
 *   nuksm-numa.c    guest NUMA layout for the agent, home nodes,
 *                   locality                             main loop, BQL
 *   nuksm-landing.c pages of an incoming migration landed on copies
 *                   the host holds                       main loop, BQL
 *   nuksm-scan.c    walk eligible RAM, hash pages, offer stable ones
 *                   (NuksmScanner)                       scanner thread
 *   nuksm-commit.c  carry out the agent's requests: userfaultfd, stores,
 *                   request queue, UPLOAD/MERGE/MOVE, discard
 *                   (NuksmCommit)                        scanner thread
 *   nuksm-maps.c    the mapping budget against vm.max_map_count
 *                                                        under page_lock
 *   nuksm-huge.c    huge pages kept where merging does not pay
 *                   (NuksmHuge)                          under page_lock
 *   nuksm-writes.c  lift the write protection of tracked pages a guest
 *                   writes, map back merged pages read while sampled
 *                   (NuksmWrites)                        fault threads
 *   nuksm-reads.c   read hotness of merged pages: probes, windows,
 *                   READS (NuksmReads)                   scanner thread
 *   nuksm-remap.c   the system calls of a commit (write-protect, compare,
 *                   remap, wake)                         under page_lock
 *   nuksm-pages.c   the per-page table: digests, flags, inactive
 *                   counters, slot references (NuksmPages) page_lock
 *   nuksm-regions.c region distilling: which pages a pass looks at
 *                                                        under page_lock
 *   nuksm-ram.c     which RAM is eligible, with its guest nodes, resolved
 *                   into plain data for the scanner thread
 *                                                        main loop, BQL
 *   nuksm-control.c what the scanner thread shares with the others: run,
 *                   budget, wake-ups, counters (NuksmControl) any thread
 *   nuksm-outbox.c  the queue of messages to the agent (NuksmOutbox)
 *                                                        any thread
 *   nuksm-strength.c  the strength of the scanner's change test
 *                                                        scanner thread
 *   nuksm-governor.c  the presets of the scanner's budget (governors)
 *                                                        main loop, BQL
 *   nuksm-hints.c   I/O hints: guest pages disk transfers moved, for the
 *                   scanner to take first                any thread
 *
 * Four threads: the main loop (everything under the BQL), the
 * "nuksm-scan" thread, which scans and serves the commit unit's queue
 * between chunks, and, while nuksm holds userfaultfd, the "nuksm-faults"
 * thread, which reads its faults and serves reads of merged pages with
 * no lock, and the "nuksm-writes" thread, which serves write faults on
 * tracked pages: writers and readers, the main loop among them, wait for
 * them, so they take no lock but page_lock (nuksm-writes.c).  RAM
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
 *   lock            NuksmControl.lock: the scanner thread's control
 *                   (active, epoch, budget), scan counters
 *   commit lock     NuksmCommit.lock: the request queue, the
 *                   /dev/userfaultfd of the agent and the userfaultfd error
 *   reads lock      NuksmReads.lock: read sampling's settings, home
 *                   nodes and figures
 *   outbox lock     NuksmOutbox.lock: the queue of messages to the agent
 *                   and the ready connection's socket, taken by
 *                   nuksm_outbox_*(), which send under it (never waiting)
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
#include "nuksm-outbox.h"

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
typedef struct NuksmControl NuksmControl;
typedef struct NuksmPages NuksmPages;
typedef struct NuksmHuge NuksmHuge;
typedef struct NuksmCommit NuksmCommit;
typedef struct NuksmScanner NuksmScanner;
typedef struct NuksmHints NuksmHints;
typedef struct NuksmLanding NuksmLanding;
typedef struct NuksmReads NuksmReads;
typedef struct NuksmRamList NuksmRamList;

/* Connection to nuksmd (nuksm-agent.c); main loop only, under the BQL. */
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
    NuksmMsgColocation colocation;  /* the agent's last COLOCATION; */
                                    /* no twin, no move before one */
    NuksmMsgShare share;        /* the agent's last SHARE; reason OFF */
                                /* before one (nuksm-governor.c) */
    uint32_t vm_limit_sent;     /* NuksmVmLimit we last told the agent, */
                                /* NUKSM_VM_LIMIT__MAX before we did */
    uint32_t next_seq;
    uint32_t epoch;             /* counts completed handshakes */
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

/* What the agent was last told of our counters (nuksm-report.c). */
typedef struct NuksmReport {
    QEMUTimer *timer;
    uint32_t epoch;             /* of the connection told, 0: none */
    NuksmMsgVmStats sent;
} NuksmReport;

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
    bool landing_on;            /* land incoming pages (nuksm-landing.c) */
    uint32_t hash_strength;     /* hash-strength (nuksm-strength.c) */
    bool distilling;            /* region distilling (nuksm-regions.c) */
    char *memdev;
    bool enabled;
    uint32_t hot_window_ms;     /* 0: no hotness sampling */
    uint32_t read_samples;      /* pages probed per window, 0: none */
    uint32_t commit_delay_us;   /* x-commit-delay-us, tests only */
    uint32_t huge_split;        /* huge-split (nuksm-huge.h); atomic */

    /* @memdev, resolved once the machine is built */
    HostMemoryBackend *memdev_backend;

    bool completed;             /* user_creatable complete() ran */
    char *id;                   /* the object's id, once complete */
    uint64_t created;           /* order of completion among nuksm objects */
    bool migrating;             /* stepped aside for migration/snapshot */
    NuksmAgentConn conn;
    NuksmOutbox outbox;         /* messages to the agent, from any thread */
    NuksmMsgHome home;          /* from the agent; zero until it says */
    NuksmHot hot;
    NuksmReport report;
    /* The units of the scanner thread, once complete */
    NuksmControl *control;      /* what it shares with the other threads */
    NuksmPages *pages;
    NuksmHuge *huge;            /* huge pages kept (nuksm-huge.c) */
    NuksmCommit *commit;
    NuksmScanner *scanner;
    NuksmHints *hints;          /* I/O hints for the scanner */
    NuksmLanding *landing;      /* pages of an incoming migration */
    NuksmReads *reads;          /* read sampling (nuksm-reads.c) */
    NuksmRamList *ram;          /* eligible RAM, RCU (nuksm-ram.c) */
    QEMUBH *ram_bh;             /* RAM blocks changed: refresh @ram */
    QEMUBH *trim_bh;            /* a reset filled the ROMs: trim them */
    RAMBlockNotifier ram_notifier;
    QEMUBH *limit_bh;           /* a limit of the scanner changed: */
                                /* nuksm_limit_changed() */
    NuksmLimit limit_reported;  /* of the last NUKSM_MERGING_LIMITED, */
                                /* NUKSM_LIMIT__MAX since RESUMED */
    Notifier machine_done;
    NotifierWithReturn migration_notifier;
    QEMUTimer *incoming_timer;  /* looks whether an incoming migration */
                                /* let go of guest RAM */
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
    uint64_t tracked_writes;    /* writes to pages tracked as stable */
    uint64_t promotions;        /* regions moved up a level */
    uint64_t demotions;         /* and down (nuksm-regions.c) */
    /* nuksm-pages.c */
    uint64_t merged_pages;      /* pages mapping a store slot */
    uint64_t zero_pages;        /* pages dropped as zero */
    /* nuksm-huge.c */
    uint64_t huge_held_pages;   /* duplicates held back for huge pages */
    uint64_t huge_kept;         /* huge pages kept so */
    uint64_t huge_splits;       /* huge pages split, as they paid */
    uint64_t huge_rebuilt;      /* and rebuilt once they did not */
    uint64_t hints_merged;      /* merges of pages offered on a hint */
    uint64_t merged_per_node[NUKSM_MAX_NODES];
    /* nuksm-commit.c */
    uint64_t maps_in_use;       /* the process's mappings (VMAs) */
    uint64_t maps_limit;        /* vm.max_map_count */
    uint64_t maps_budget;       /* the most nuksm lets the process reach */
    bool maps_limited;          /* merges held back by the budget */
    char uffd_error[256];       /* why nothing can merge, "" if it can */
} NuksmStats;

/* nuksm.c: main loop (BQL) */
/*
 * The complete nuksm objects (children of /objects), in the order they
 * were created.
 */
GPtrArray *nuksm_objects(void);
Nuksm *nuksm_find(const char *id, Error **errp);

#endif /* HW_MEM_NUKSM_H */
