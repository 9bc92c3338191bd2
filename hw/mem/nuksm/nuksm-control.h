/*
 * nuksm: the scanner thread's control, what the other threads and units
 * share with the "nuksm-scan" thread (nuksm-control.c).
 *
 * The main loop runs the thread for a connection or stops it, sets its
 * budget and hash strength and asks for fresh passes; the agent's
 * connection charges it the agent's CPU; the commit unit wakes it when
 * it queued work, asks for a fresh pass or a second look, and reads for
 * which connection it works; the write-fault thread nudges it; the
 * hotness sampler asks whether it settled.  The thread itself
 * (nuksm-scan.c) reads and changes the same fields, and waits on @cond.
 *
 * Everything is protected by @lock, "lock" in the lock order (nuksm.h),
 * unless said otherwise.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_CONTROL_H
#define HW_MEM_NUKSM_CONTROL_H

#include "qemu/thread.h"
#include "nuksm.h"

/* The scanner's own counters, for query-nuksm. */
typedef struct NuksmScanCounters {
    uint64_t pages_scanned;
    uint64_t full_scans;
    uint64_t pages_volatile;
    uint64_t cow_breaks;
    uint64_t hints_served;      /* hinted pages looked at */
    uint64_t promotions;        /* regions moved up a level */
    uint64_t demotions;         /* and down */
} NuksmScanCounters;

struct NuksmControl {
    QemuMutex lock;
    QemuCond cond;              /* wakes the thread (nuksm_control_wake()) */
    bool active;
    bool quit;                  /* also read atomically */
    bool restart;               /* nuksm-scan asked for a fresh pass */
    bool zero_pages;
    uint32_t epoch;             /* connection the thread works for; */
                                /* also read atomically */
    double max_cpu;             /* percent of one core */
    uint64_t scan_rate;
    uint32_t rest_ms;           /* the shortest rest between passes */
    int64_t pause_ms;           /* rest after the current pass */
    uint32_t pace;              /* the host's share's (SHARE), 1: none */
    bool held;                  /* merging rests host-wide (SHARE HELD): */
                                /* no pass starts */
    uint32_t prune_rate;        /* PRUNE asked for, pages per second; */
                                /* 0: none; also read atomically */
    uint32_t hash_strength;     /* hash-strength: bytes, 0 = adaptive */
    NuksmScanCounters stats;
    NuksmHashStats hashing;     /* the thread's strength figures */

    bool nudged;                /* something to look at again; atomic */
    uint64_t tracked_writes;    /* writes to tracked pages; atomic */
    QEMUBH *written;            /* scheduled by the first of them since */
                                /* the pass began, if set */
    bool settled;               /* the last pass found nothing; atomic */
    uint64_t charged_ns;        /* agent CPU to count (CHARGE); atomic */
};

/* Main loop (BQL) */
NuksmControl *nuksm_control_new(void);
/* After the thread is gone. */
void nuksm_control_free(NuksmControl *ctl);
/* Run (scan, merge, hold userfaultfd) for connection @epoch, or stop. */
void nuksm_control_set_active(NuksmControl *ctl, bool active,
                              uint32_t epoch);
/*
 * The budget to keep to (nuksm-governor.h), how many times longer than
 * a second the thread may rest without looking whether it is nudged
 * (@pace), and whether to drop zeros.
 */
void nuksm_control_set_budget(NuksmControl *ctl, const NuksmBudget *budget,
                              uint32_t pace, bool held, bool zero_pages);
/* PRUNE: unmerge every merged page, at most @rate pages per second. */
void nuksm_control_prune(NuksmControl *ctl, uint32_t rate);
/*
 * The strength of the change test (nuksm-strength.h): @bytes, a power of
 * 2 from 64 to 4096, or 0 to let it adapt.  Applied by the thread.
 */
void nuksm_control_set_hash_strength(NuksmControl *ctl, uint32_t bytes);
/* The object is going: the thread is to end. */
void nuksm_control_quit(NuksmControl *ctl);
/* Fill the scan counters of @stats. */
void nuksm_control_get_stats(NuksmControl *ctl, NuksmStats *stats);

/* Any thread; they take the lock, unless said otherwise */
/* Start a fresh pass now. */
void nuksm_control_kick(NuksmControl *ctl);
/* Let the thread look again at what it waits for (work, userfaultfd). */
void nuksm_control_wake(NuksmControl *ctl);
bool nuksm_control_is_active(NuksmControl *ctl);
/*
 * A tracked page was written (nuksm-writes.c), or the agent asked for
 * pages again (RETRY): the rest after a pass ends once its shortest
 * rest is over.  Lock-free.
 */
void nuksm_control_nudge(NuksmControl *ctl);
/*
 * The guest wrote a page tracked as stable: count it, nudge, and, the
 * first time since the pass began, schedule ctl->written.
 */
void nuksm_control_written(NuksmControl *ctl);
/*
 * The last pass found nothing new and nothing has nudged the thread
 * since: nothing is offered to the agent until something changes.
 * Lock-free.
 */
bool nuksm_control_settled(NuksmControl *ctl);
/*
 * The agent spent @cpu_ns handling our messages (CHARGE): counted against
 * the CPU budget as if the thread had spent it.  Lock-free.
 */
void nuksm_control_charge(NuksmControl *ctl, uint64_t cpu_ns);
/*
 * The object is going: the thread is to end, and the main loop may be
 * joining it rather than serving it.  Lock-free.
 */
bool nuksm_control_quitting(NuksmControl *ctl);
/* The connection the thread works for; lock-free. */
uint32_t nuksm_control_epoch(NuksmControl *ctl);

#endif /* HW_MEM_NUKSM_CONTROL_H */
