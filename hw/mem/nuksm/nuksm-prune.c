/*
 * nuksm: PRUNE (see nuksm-prune.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "exec/ramblock.h"
#include "qemu/atomic.h"
#include "qemu/rcu.h"
#include "qemu/timer.h"
#include "libnuksm/nuksm-pagemap.h"
#include "nuksm-commit.h"
#include "nuksm-control.h"
#include "nuksm-pages.h"
#include "nuksm-prune.h"
#include "nuksm-ram.h"
#include "trace.h"

/* Pages looked at in one go, page_lock held. */
#define NUKSM_PRUNE_BATCH 64
/*
 * Walks over the RAM, at most: one is enough unless merges the agent
 * had sent before it held the VM land behind the first.
 */
#define NUKSM_PRUNE_WALKS 4

typedef struct NuksmPrune {
    Nuksm *s;
    uint32_t rate;              /* pages per second */
    uint32_t epoch;
    int pagemap_fd;
    int64_t start;              /* get_clock() at the start */
    uint64_t unmerged;          /* pages so far */
    uint64_t found;             /* merged pages the current walk found */
} NuksmPrune;

/* Is the object still to prune, for this connection? */
static bool nuksm_prune_goes_on(NuksmPrune *p)
{
    NuksmControl *ctl = p->s->control;
    bool on;

    qemu_mutex_lock(&ctl->lock);
    on = ctl->active && !ctl->quit && !ctl->restart &&
         ctl->epoch == p->epoch;
    qemu_mutex_unlock(&ctl->lock);
    return on;
}

/*
 * Keep to the rate: wait until @p's pages so far are due.  Returns false
 * if the object is not to prune any more meanwhile.
 */
static bool nuksm_prune_pace(NuksmPrune *p)
{
    NuksmControl *ctl = p->s->control;
    int64_t due = p->start + p->unmerged * NANOSECONDS_PER_SECOND / p->rate;
    int64_t now;

    while (nuksm_prune_goes_on(p)) {
        now = get_clock();
        if (now >= due) {
            return true;
        }
        /* Woken early by any change of the control: look again. */
        qemu_mutex_lock(&ctl->lock);
        qemu_cond_timedwait(&ctl->cond, &ctl->lock,
                            MAX(1, (due - now) / SCALE_MS));
        qemu_mutex_unlock(&ctl->lock);
    }
    return false;
}

/*
 * The merged pages among the @count from page @first of @bs, into
 * @pages (their indexes) and @hosts (their addresses).  page_lock held.
 */
static unsigned nuksm_prune_find(RAMBlock *rb, NuksmBlockState *bs,
                                 uint64_t first, unsigned count,
                                 uint64_t *pages, uint64_t **hosts)
{
    unsigned n = 0;

    for (unsigned i = 0; i < count; i++) {
        if (nuksm_page_flags(bs, first + i) & NUKSM_PAGE_MERGED) {
            pages[n] = first + i;
            hosts[n++] = (uint64_t *)(rb->host +
                                      (first + i) * NUKSM_PAGE_SIZE);
        }
    }
    return n;
}

/*
 * Tell the agent which of the @n pages of @bs no longer map their slot.
 * page_lock held.
 */
static void nuksm_prune_forget(NuksmPrune *p, NuksmBlockState *bs,
                               const uint64_t *pages, uint64_t **hosts,
                               unsigned n)
{
    NuksmCommit *c = p->s->commit;

    for (unsigned i = 0; i < n; i++) {
        uint64_t pm;
        off_t off = (uintptr_t)hosts[i] / NUKSM_PAGE_SIZE * sizeof(pm);

        if (!(nuksm_page_flags(bs, pages[i]) & NUKSM_PAGE_MERGED) ||
            pread(p->pagemap_fd, &pm, sizeof(pm), off) != sizeof(pm) ||
            nuksm_pagemap_reads_file(pm)) {
            continue;
        }
        nuksm_commit_forget(c, bs, pages[i], NUKSM_STATUS_PRUNED);
        p->unmerged++;
    }
    nuksm_commit_flush_unmerged(c, p->epoch);
}

/*
 * Unmerge the merged pages among the NUKSM_PRUNE_BATCH from page @first
 * of block @pb.  Returns false past the block's end.
 */
static bool nuksm_prune_batch(NuksmPrune *p, const NuksmRamBlockName *pb,
                              uint64_t first)
{
    NuksmPages *pages = p->s->pages;
    uint64_t idx[NUKSM_PRUNE_BATCH];
    uint64_t *hosts[NUKSM_PRUNE_BATCH];
    unsigned n = 0;
    bool more = false;

    WITH_RCU_READ_LOCK_GUARD() {
        RAMBlock *rb = qemu_ram_block_by_name(pb->name);
        NuksmBlockState *bs;

        qemu_mutex_lock(&pages->lock);
        bs = rb ? nuksm_pages_block(pages, rb, pb->gnode) : NULL;
        if (bs && first < bs->nr_pages) {
            n = nuksm_prune_find(rb, bs, first,
                                 MIN(NUKSM_PRUNE_BATCH,
                                     bs->nr_pages - first), idx, hosts);
            more = true;
        }
        qemu_mutex_unlock(&pages->lock);
        if (!n) {
            break;
        }
        /*
         * Without page_lock: a tracked page's write fault waits for the
         * fault threads, which take it.  The RCU read lock keeps the
         * block mapped.
         */
        for (unsigned i = 0; i < n; i++) {
            qatomic_fetch_add(hosts[i], 0);
        }
        qemu_mutex_lock(&pages->lock);
        bs = nuksm_pages_block(pages, rb, pb->gnode);
        nuksm_prune_forget(p, bs, idx, hosts, n);
        qemu_mutex_unlock(&pages->lock);
    }
    p->found += n;
    return more;
}

bool nuksm_prune_run(Nuksm *s, uint32_t rate, uint32_t epoch, int pagemap_fd)
{
    g_autoptr(GPtrArray) blocks = nuksm_ram_resolved_names(s);
    NuksmPrune p = {
        .s = s,
        .rate = MAX(rate, 1),
        .epoch = epoch,
        .pagemap_fd = pagemap_fd,
        .start = get_clock(),
    };

    trace_nuksm_prune_start(rate);
    for (unsigned walk = 0; walk < NUKSM_PRUNE_WALKS; walk++) {
        p.found = 0;
        for (guint b = 0; b < blocks->len; b++) {
            const NuksmRamBlockName *pb = g_ptr_array_index(blocks, b);

            for (uint64_t first = 0;
                 nuksm_prune_batch(&p, pb, first);
                 first += NUKSM_PRUNE_BATCH) {
                if (!nuksm_prune_pace(&p)) {
                    trace_nuksm_prune_done(p.unmerged, false);
                    return false;
                }
            }
        }
        if (!p.found) {
            break;
        }
    }
    trace_nuksm_prune_done(p.unmerged, true);
    return true;
}
