/*
 * nuksm: NUMA-aware memory deduplication through a shared host agent.
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
#include "qapi/qapi-types-nuksm.h"
#include "system/runstate.h"
#include "libnuksm/nuksm-proto.h"

#define TYPE_NUKSM "nuksm"
OBJECT_DECLARE_SIMPLE_TYPE(Nuksm, NUKSM)

#define NUKSM_DEFAULT_AGENT    "/run/nuksm/nuksmd.sock"
#define NUKSM_DEFAULT_DOMAIN   "default"
#define NUKSM_DEFAULT_PRIORITY 100
#define NUKSM_DEFAULT_MAX_CPU  10
#define NUKSM_DEFAULT_HOT_WINDOW_MS 1000
#define NUKSM_HOT_WINDOW_MIN_MS 10
#define NUKSM_HOT_WINDOW_MAX_MS 600000
/* Inactive counters saturate here, and start here: never seen written. */
#define NUKSM_HOT_IDLE_MAX     255
/* How often a disabled hotness sampler looks whether it is wanted. */
#define NUKSM_HOT_OFF_POLL_MS  1000

typedef struct NuksmRequest NuksmRequest;
typedef struct NuksmScanner NuksmScanner;

/*
 * Connection to nuksmd; main loop only, under the BQL, except @tx, which
 * the scanner thread posts to as well (nuksm_agent_post(), @tx_lock).
 */
typedef struct NuksmAgentConn {
    int fd;                     /* -1 while not connected */
    bool ready;                 /* handshake completed */
    uint32_t nr_nodes;          /* from HELLO_ACK */
    int policy;                 /* NuksmPolicyId, -1 until known */
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
    uint32_t max_cpu;
    uint64_t scan_rate;
    bool zero_pages;
    char *memdev;
    bool enabled;
    uint32_t hot_window_ms;     /* 0: no hotness sampling */
    uint32_t commit_delay_us;   /* x-commit-delay-us, tests only */

    /* @memdev, resolved once the machine is built */
    HostMemoryBackend *memdev_backend;

    bool completed;             /* user_creatable complete() ran */
    bool migrating;             /* stepped aside for migration/snapshot */
    NuksmAgentConn conn;
    NuksmMsgHome home;          /* from the agent; zero until it says */
    NuksmHot hot;
    NuksmScanner *scanner;
    QEMUBH *limit_bh;           /* a limit of the scanner changed */
    NuksmLimit limit_reported;  /* of the last NUKSM_MERGING_LIMITED, */
                                /* NUKSM_LIMIT__MAX since RESUMED */
    Notifier machine_done;
    NotifierWithReturn migration_notifier;
    VMChangeStateEntry *vm_state;
    QTAILQ_ENTRY(Nuksm) next;
};

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
void nuksm_kick_all(void);
void nuksm_update_activity(Nuksm *s);

/* nuksm-agent.c */
void nuksm_agent_init(Nuksm *s);
void nuksm_agent_start(Nuksm *s);
void nuksm_agent_cleanup(Nuksm *s);
void nuksm_agent_send_priority(Nuksm *s);
void nuksm_agent_post(Nuksm *s, uint32_t epoch, NuksmMsgType type,
                      const void *payload, uint32_t len);
size_t nuksm_agent_backlog(Nuksm *s);
int coroutine_fn nuksm_agent_request(Nuksm *s, NuksmMsgType type,
                                     const void *payload, uint32_t len,
                                     NuksmMsgType reply_type,
                                     void *reply, uint32_t reply_len,
                                     Error **errp);

/* nuksm-ram.c */
typedef bool (*NuksmRamFn)(Nuksm *s, RAMBlock *rb, void *opaque);
uint64_t nuksm_ram_eligible_pages(Nuksm *s);
NuksmExclusionList *nuksm_ram_exclusions(Nuksm *s);
void nuksm_ram_foreach_eligible(Nuksm *s, NuksmRamFn fn, void *opaque);
bool nuksm_ram_resolve_memdev(Nuksm *s, Error **errp);

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

/* nuksm-scan.c */
typedef struct NuksmScanStats {
    uint64_t pages_scanned;
    uint64_t full_scans;
    uint64_t pages_volatile;
    uint64_t merged_pages;      /* pages mapping a store slot */
    uint64_t zero_pages;        /* pages dropped as zero */
    uint64_t cow_breaks;
    uint64_t merged_per_node[NUKSM_MAX_NODES];
    uint64_t maps_in_use;       /* the process's mappings (VMAs) */
    uint64_t maps_limit;        /* vm.max_map_count */
    uint64_t maps_budget;       /* the most nuksm lets the process reach */
    bool maps_limited;          /* merges held back by the budget */
    char uffd_error[256];       /* why nothing can merge, "" if it can */
} NuksmScanStats;


NuksmScanner *nuksm_scanner_new(Nuksm *s);
void nuksm_scanner_free(NuksmScanner *sc);
void nuksm_scanner_set_active(NuksmScanner *sc, bool active,
                              uint32_t epoch);
void nuksm_scanner_set_budget(NuksmScanner *sc, uint32_t max_cpu,
                              uint64_t scan_rate, bool zero_pages);
void nuksm_scanner_kick(NuksmScanner *sc);
void nuksm_scanner_get_stats(NuksmScanner *sc, NuksmScanStats *stats);
void nuksm_scanner_set_uffd_device(NuksmScanner *sc, int dev_fd);
bool nuksm_scanner_has_remapped(NuksmScanner *sc);
bool nuksm_scanner_limited(NuksmScanner *sc);
void nuksm_scanner_queue(NuksmScanner *sc, NuksmMsgType type,
                         uint32_t epoch, const void *payload, uint32_t len,
                         int fd);

/* nuksm-merge.c */
bool nuksm_scanner_discard(NuksmScanner *sc, RAMBlock *rb, void *host,
                           size_t len);

#endif /* HW_MEM_NUKSM_H */
