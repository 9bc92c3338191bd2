/*
 * nuksm: I/O hints, after XLH (its sections 4.1 to 4.3).
 *
 * A page a guest reads from its disk, or writes to it, is likely in its
 * page cache: it stays as it is for a while, and every guest that reads
 * the same file holds the same page.  Disk transfers into and out of
 * guest RAM report their buffers when they complete (virtio-blk, and
 * IDE, AHCI and SCSI disks through QEMU's DMA helpers:
 * qemu-patches/0008), and the pages are pushed on a bounded circular
 * stack of hints.  The scanner takes the newest first, between the chunks
 * of its walk and while it rests (nuksm-scan.c), and offers them at once,
 * where its walk would find them a pass or two later.  A full stack
 * overwrites its oldest hints: a burst keeps its newest part, the most
 * likely to be unchanged still, and the walk finds the rest.
 *
 * The I/O path never waits for the scanner: it takes the stack's spin lock
 * with a trylock, and a hint that finds the lock taken (the scanner holds
 * it for the few instructions of a pop) is dropped and counted.  Hints
 * are only hints: each hinted page is hashed and, like every page, merged
 * only after a full compare under write protection (nuksm-remap.c).  A
 * hint outside the object's RAM is ignored by the scanner.
 *
 * Every object has a stack of its own; the hook feeds all of them, which
 * RCU protects, so an object can go while transfers complete in other
 * threads.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "exec/cpu-common.h"
#include "qemu/rcu.h"
#include "qemu/rcu_queue.h"
#include "qemu/thread.h"
#include "nuksm-hints.h"

/*
 * Hints a stack holds: a hint is a run of pages contiguous in QEMU's
 * memory, and a guest's page cache is scattered, so mostly one page: at
 * least the last 128 MiB of disk transfers, under a second of hashing at
 * the medium governor's budget.  256 KiB per object.
 */
#define NUKSM_HINTS_DEPTH 32768

struct NuksmHints {
    struct rcu_head rcu;            /* first, for g_free_rcu() */
    QLIST_ENTRY(NuksmHints) next;   /* nuksm_hints_all, RCU */
    bool enabled;                   /* atomic */
    uint64_t busy_dropped;          /* pages that met the lock taken; */
                                    /* atomic */
    QemuSpin lock;                  /* everything below */
    uint64_t top;                   /* where the next hint goes, */
                                    /* modulo NUKSM_HINTS_DEPTH */
    uint64_t depth;                 /* hints on the stack; read */
                                    /* atomically without the lock */
    uint64_t hinted;                /* pages pushed, ever */
    uint64_t dropped;               /* pages dropped unserved: */
                                    /* overwritten, or switched off */
    /* The start of the run's first page | (pages - 1). */
    uintptr_t hint[NUKSM_HINTS_DEPTH];
};

QEMU_BUILD_BUG_ON(NUKSM_HINT_MAX_PAGES > NUKSM_PAGE_SIZE);

/* Every stack; changed under the BQL, read under RCU. */
static QLIST_HEAD(, NuksmHints) nuksm_hints_all =
    QLIST_HEAD_INITIALIZER(nuksm_hints_all);

static unsigned nuksm_hint_pages(uintptr_t hint)
{
    return (hint & (NUKSM_PAGE_SIZE - 1)) + 1;
}

/* Push a run of @pages pages from @first (page-aligned); I/O path. */
static void nuksm_hints_push(NuksmHints *h, uintptr_t first, uint64_t pages)
{
    if (qemu_spin_trylock(&h->lock)) {
        qatomic_add(&h->busy_dropped, pages);
        return;
    }
    while (pages) {
        unsigned n = MIN(pages, NUKSM_HINT_MAX_PAGES);
        uintptr_t *slot = &h->hint[h->top % NUKSM_HINTS_DEPTH];

        if (h->depth == NUKSM_HINTS_DEPTH) {
            h->dropped += nuksm_hint_pages(*slot);
        } else {
            qatomic_set(&h->depth, h->depth + 1);
        }
        *slot = first | (n - 1);
        h->top++;
        h->hinted += n;
        first += (uintptr_t)n * NUKSM_PAGE_SIZE;
        pages -= n;
    }
    qemu_spin_unlock(&h->lock);
}

/*
 * ram_block_disk_io: the @len bytes at @host took part in a disk
 * transfer.  Any thread that completes I/O; never blocks.
 */
static void nuksm_hints_disk_io(void *host, size_t len)
{
    uintptr_t first = QEMU_ALIGN_DOWN((uintptr_t)host, NUKSM_PAGE_SIZE);
    uintptr_t end = QEMU_ALIGN_UP((uintptr_t)host + len, NUKSM_PAGE_SIZE);
    NuksmHints *h;

    if (!len) {
        return;
    }
    RCU_READ_LOCK_GUARD();
    QLIST_FOREACH_RCU(h, &nuksm_hints_all, next) {
        if (qatomic_read(&h->enabled)) {
            nuksm_hints_push(h, first, (end - first) / NUKSM_PAGE_SIZE);
        }
    }
}

NuksmHints *nuksm_hints_new(void)
{
    NuksmHints *h = g_new0(NuksmHints, 1);

    qemu_spin_init(&h->lock);
    h->enabled = true;
    QLIST_INSERT_HEAD_RCU(&nuksm_hints_all, h, next);
    qatomic_set(&ram_block_disk_io, nuksm_hints_disk_io);
    return h;
}

void nuksm_hints_free(NuksmHints *h)
{
    QLIST_REMOVE_RCU(h, next);
    g_free_rcu(h, rcu);
}

void nuksm_hints_set_enabled(NuksmHints *h, bool on)
{
    qatomic_set(&h->enabled, on);
    if (!on) {
        qemu_spin_lock(&h->lock);
        while (h->depth) {
            h->dropped += nuksm_hint_pages(
                h->hint[--h->top % NUKSM_HINTS_DEPTH]);
            qatomic_set(&h->depth, h->depth - 1);
        }
        qemu_spin_unlock(&h->lock);
    }
}

bool nuksm_hints_pending(NuksmHints *h)
{
    return qatomic_read(&h->depth) != 0;
}

bool nuksm_hints_pop(NuksmHints *h, uint8_t **host, unsigned *pages)
{
    uintptr_t hint;

    qemu_spin_lock(&h->lock);
    if (!h->depth) {
        qemu_spin_unlock(&h->lock);
        return false;
    }
    h->top--;
    qatomic_set(&h->depth, h->depth - 1);
    hint = h->hint[h->top % NUKSM_HINTS_DEPTH];
    qemu_spin_unlock(&h->lock);

    *host = (uint8_t *)(hint & ~(uintptr_t)(NUKSM_PAGE_SIZE - 1));
    *pages = nuksm_hint_pages(hint);
    return true;
}

void nuksm_hints_get_stats(NuksmHints *h, NuksmHintStats *stats)
{
    qemu_spin_lock(&h->lock);
    stats->hinted = h->hinted + qatomic_read(&h->busy_dropped);
    stats->dropped = h->dropped + qatomic_read(&h->busy_dropped);
    qemu_spin_unlock(&h->lock);
}
