/*
 * nuksm: state shared by the scanner thread's modules (nuksm-scan.c, the
 * passes over RAM; nuksm-merge.c, the agent's requests).  Everything here
 * belongs to the scanner thread unless a comment says otherwise.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_SCAN_H
#define HW_MEM_NUKSM_SCAN_H

#include "qemu/thread.h"
#include "nuksm.h"

/* Per-page flags (one byte per guest page). */
enum {
    NUKSM_PAGE_STABLE   = 1 << 0,  /* digest unchanged since last pass */
    NUKSM_PAGE_MERGED   = 1 << 1,  /* maps a store slot (see ->refs) */
    NUKSM_PAGE_ZERO     = 1 << 2,  /* dropped as a zero page */
    NUKSM_PAGE_REMAPPED = 1 << 3,  /* mapped from a store file, maybe COWed */
    NUKSM_PAGE_OFFERED  = 1 << 4,  /* sent to the agent as a candidate */
    NUKSM_PAGE_HELD     = 1 << 5,  /* refused for lack of mappings */
};

/* Pages per region of NuksmBlockState.refs. */
#define NUKSM_REF_REGION 512
/* Slots a packed reference can name (its 24 bits). */
#define NUKSM_REF_MAX_SLOT (1u << 24)

/*
 * Scan state of one RAM block: 6 bytes per guest page, plus 8 bytes per
 * page of the 2 MiB regions where some page is merged.
 */
typedef struct NuksmBlockState {
    uint64_t first_page;        /* ram_addr / NUKSM_PAGE_SIZE */
    uint64_t nr_pages;
    uint8_t gnode;              /* guest NUMA node of the block */
    uint32_t *digest;           /* low 32 bits; 0 = not hashed yet */
    uint8_t *flags;
    uint8_t *idle;              /* inactive counters (nuksm-hot.c) */
    uint64_t merged_per_node[NUKSM_MAX_NODES];  /* its merged pages */
    /*
     * The slot each merged page maps (gen << 32 | slot << 8 | node), by
     * region of NUKSM_REF_REGION pages; a region is allocated when one of
     * its pages first merges.
     */
    uint64_t **refs;
} NuksmBlockState;

/* A node's store, as the agent handed it over (read-only). */
typedef struct NuksmStore {
    int fd;                     /* -1 if not received */
    uint64_t size;
} NuksmStore;

/*
 * The mapping budget (nuksm-maps.c): how many mappings (VMAs) the process
 * uses against vm.max_map_count.  Protected by @page_lock, like every
 * change of what backs guest pages; @limited is also read atomically.
 */
typedef struct NuksmMaps {
    uint64_t limit;             /* vm.max_map_count, as last read */
    uint64_t counted;           /* lines of /proc/self/maps, last count */
    int64_t delta;              /* what our changes added since (model) */
    int64_t counted_at;         /* get_clock() of the last count */
    int64_t limit_read_at;      /* get_clock() of the last limit read */
    bool limited;               /* costly merges are being refused */
    uint64_t held;              /* pages refused while limited */
} NuksmMaps;

/* A request from the agent, queued by the main loop for the thread. */
typedef struct NuksmWork {
    NuksmMsgType type;
    uint32_t epoch;
    int fd;                     /* STORE only */
    uint32_t len;
    uint8_t payload[];
} NuksmWork;

/*
 * Locks, in the order they nest (take a later one while holding an
 * earlier one, never the reverse):
 *
 *   BQL           main loop only: the scanner thread never takes it
 *   RCU read lock keeps RAM blocks alive for one chunk or one commit;
 *                 never held across a sleep (see nuksm-merge.c's upload)
 *   @page_lock    page states, references, mappings, merge counters
 *   @lock         thread control, work queue, scan counters
 *   conn.tx_lock  the queue of messages to the agent (nuksm.h), taken
 *                 by nuksm_agent_post() and nuksm_agent_backlog()
 */
struct NuksmScanner {
    Nuksm *s;
    QemuThread thread;

    /* Protected by @lock, shared with the main loop */
    QemuMutex lock;
    QemuCond cond;
    bool active;
    bool quit;
    bool restart;               /* nuksm-scan asked for a fresh pass */
    bool zero_pages;
    uint32_t epoch;             /* connection the thread works for */
    uint32_t max_cpu;
    uint64_t scan_rate;
    GQueue work;                /* NuksmWork *, from the agent */
    int uffd_dev;               /* /dev/userfaultfd from the agent, or -1 */
    bool uffd_retry;            /* a new connection: try userfaultfd again */
    char *uffd_error;           /* why we have no userfaultfd, or NULL */
    /*
     * Scan counters are protected by @lock; merge counters (merged_pages,
     * zero_pages, merged_per_node) by @page_lock.
     */
    NuksmScanStats stats;

    /*
     * Protected by @page_lock: page states, references and mappings.
     * Taken by the thread for each chunk and each commit, and by RAM
     * discard (any thread).
     */
    QemuMutex page_lock;
    GHashTable *blocks;         /* RAM block name -> NuksmBlockState */
    int uffd;                   /* -1 while stepped aside */
    uint64_t remapped_pages;    /* pages with NUKSM_PAGE_REMAPPED */
    NuksmStore stores[NUKSM_MAX_NODES];
    GArray *unmerged;           /* NuksmSlotRef, to send */
    NuksmMaps maps;

    /* Scanner thread only */
    uint32_t work_epoch;        /* epoch of the last reset */
    uint64_t passes;            /* passes started */
    uint64_t news;              /* changes the current pass found */
    int64_t pause_ms;           /* rest after the current pass */
    GArray *candidates;         /* NuksmCandidate, to send */
    uint64_t zero_digest;
};

/* nuksm-scan.c */
NuksmBlockState *nuksm_scan_block_state(NuksmScanner *sc, RAMBlock *rb);
void nuksm_scan_block_refs_free(NuksmBlockState *bs);
void nuksm_scan_flush_unmerged(NuksmScanner *sc, uint32_t epoch);

/* nuksm-merge.c */
void nuksm_merge_handle(NuksmScanner *sc, NuksmWork *w);
void nuksm_merge_reset(NuksmScanner *sc, uint32_t epoch);
void nuksm_merge_forget(NuksmScanner *sc, NuksmBlockState *bs, uint64_t idx,
                        NuksmSlotStatus why);
void nuksm_merge_stores_free(NuksmScanner *sc);
bool nuksm_merge_find_page(NuksmScanner *sc, uint64_t page, RAMBlock **rb,
                           NuksmBlockState **bs, uint64_t *index);

/* nuksm-maps.c (page_lock held unless said otherwise) */
void nuksm_maps_init(NuksmScanner *sc);
void nuksm_maps_tick(NuksmScanner *sc, bool force);
int64_t nuksm_maps_cost(NuksmBlockState *bs, uint64_t idx, uint64_t n,
                        bool anon, uint8_t node, uint64_t slot);
int64_t nuksm_maps_window(NuksmBlockState *bs, uint64_t idx, uint64_t n);
bool nuksm_maps_afford(NuksmScanner *sc, int64_t cost, uint64_t pages);
void nuksm_maps_account(NuksmScanner *sc, int64_t delta);
void nuksm_maps_exhausted(NuksmScanner *sc);
uint64_t nuksm_maps_in_use(NuksmScanner *sc);
uint64_t nuksm_maps_budget(uint64_t limit);

#endif /* HW_MEM_NUKSM_SCAN_H */
