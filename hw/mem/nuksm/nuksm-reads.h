/*
 * nuksm: read hotness of merged pages, sampled by hinting faults
 * (nuksm-reads.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_READS_H
#define HW_MEM_NUKSM_READS_H

#include "nuksm.h"
#include "nuksm-pages.h"

#define NUKSM_DEFAULT_READ_SAMPLES 256
#define NUKSM_READ_SAMPLES_MAX     65536

typedef struct NuksmReads NuksmReads;

/* What read sampling did, for query-nuksm. */
typedef struct NuksmReadStats {
    uint32_t window_ms;         /* hot-window: one window per sample */
    uint32_t samples;           /* read-samples: pages probed per window */
    uint64_t windows;           /* windows opened */
    uint64_t probes;            /* pages whose entry was dropped */
    uint64_t reads;             /* reads of merged pages caught */
    uint64_t reads_local;       /* of those, with the copy on the home */
    uint64_t reads_remote;      /* node of the page's guest node, or not */
    uint64_t read_regions;      /* regions whose last sample was read */
    uint64_t lost;              /* reads caught but not counted: the */
                                /* queue was full */
} NuksmReadStats;

NuksmReads *nuksm_reads_new(Nuksm *s);
/* Once no fault thread runs (userfaultfd released) and no scanner. */
void nuksm_reads_free(NuksmReads *r);

/*
 * Main loop: sample windows of @window_ms, probing at most @samples
 * pages each; 0 for either turns sampling off.
 */
void nuksm_reads_configure(NuksmReads *r, uint32_t window_ms,
                           uint32_t samples);
/* Main loop: the home node of each guest node, from the agent's HOME. */
void nuksm_reads_set_home(NuksmReads *r, const NuksmMsgHome *home);

/*
 * Scanner thread, as it starts: its reads are nuksm's own (comparing a
 * page with its slot, hashing), never the VM's.
 */
void nuksm_reads_set_own_thread(NuksmReads *r, int tid);

/*
 * Fault thread: the merged page at @addr was read while not mapped (a
 * minor fault) by thread @tid (0 if the kernel does not say).  Takes no
 * lock: the thread that holds page_lock may be the reader.
 */
void nuksm_reads_note(NuksmReads *r, uint64_t addr, int tid);

/*
 * Scanner thread, with page_lock held and userfaultfd @uffd: count the
 * reads noted, and once a window is over, update the read regions it
 * probed, tell the agent on connection @epoch what changed (READS) and
 * probe the pages of the next window.
 */
void nuksm_reads_tick(NuksmReads *r, int uffd, uint32_t epoch);

/*
 * Scanner thread, with page_lock held: page @idx of @bs merged.  The
 * write that made it (its inactive counter, nuksm-hot.c) counts as an
 * access of its read region: the region is as warm as the page was
 * written lately, and the agent hears of it (READS) with the next
 * window, so that placement weighs the writer as warm until its warmth
 * ends like a read's.  Where reads cannot be sampled, the regions it
 * warms age by one each window of hot-window ms.
 */
void nuksm_reads_merged(NuksmReads *r, NuksmBlockState *bs, uint64_t idx);

/*
 * Scanner thread: how long until the open window is over, or regions
 * merges warmed are to age or be told (ns); INT64_MAX if neither.
 */
int64_t nuksm_reads_due_ns(NuksmReads *r);

/* Any thread: the figures so far. */
void nuksm_reads_get_stats(NuksmReads *r, NuksmReadStats *stats);

#endif /* HW_MEM_NUKSM_READS_H */
