/*
 * nuksm: write hotness of guest pages, from QEMU's dirty log, and what
 * query-nuksm shows of hotness, reads of merged pages included
 * (nuksm-reads.c).
 *
 * nuksm has a dirty-memory client of its own (DIRTY_MEMORY_NUKSM, see
 * qemu-patches/0005): turning its GLOBAL_DIRTY_NUKSM flag on makes the
 * accelerator log writes (KVM dirty log or ring, TCG's notdirty path,
 * QEMU's own writes) into nuksm's bitmap only.  Migration, calc-dirty-rate
 * and dirty-limit keep their own flags and bitmaps: nuksm never clears
 * theirs, and logging stays on while any of them needs it.
 *
 * The flag is one for the whole VM: it is on while any nuksm object's
 * window is open.  Objects whose RAM overlaps share the bitmap of the
 * overlap too, and each clears what it harvests there, so that their
 * samples may miss each other's writes (a page then looks colder than it
 * is; nothing else depends on it).
 *
 * To bound the cost, writes are sampled: logging runs for one window of
 * hot-window ms, is harvested, then stays off for a window.  Each page
 * has an inactive counter (AdaptMD §III-B): samples since the page was
 * last seen written, saturating at NUKSM_HOT_IDLE_MAX, which is also
 * where it starts.  Candidates carry it to the agent, which calls a page
 * hot below its --cold-windows threshold.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "exec/memory.h"
#include "exec/ramblock.h"
#include "nuksm-commit.h"
#include "nuksm-control.h"
#include "nuksm-governor.h"
#include "nuksm-hot.h"
#include "nuksm-pages.h"
#include "nuksm-ram.h"
#include "nuksm-reads.h"
#include "nuksm-remap.h"
#include "nuksm-state.h"
#include "trace.h"

/* nuksm objects whose window is open, each counted once. */
static unsigned nuksm_hot_logging;

static bool nuksm_hot_log_start(Error **errp)
{
    if (!nuksm_hot_logging &&
        !memory_global_dirty_log_start(GLOBAL_DIRTY_NUKSM, errp)) {
        return false;
    }
    nuksm_hot_logging++;
    return true;
}

static void nuksm_hot_log_stop(void)
{
    if (!--nuksm_hot_logging) {
        memory_global_dirty_log_stop(GLOBAL_DIRTY_NUKSM);
    }
}

/*
 * Pages whose sample bits are looked at together: most groups of an idle
 * VM hold no write, and their counters are then aged in one tight loop.
 */
#define NUKSM_HOT_GROUP_PAGES 64
/* Windows without sampling after a harvest while the scanner has settled */
#define NUKSM_HOT_SETTLED_REST 15

/* Fold the sample's writes of @rb into its pages' inactive counters. */
static bool nuksm_hot_harvest(Nuksm *s, RAMBlock *rb, void *opaque)
{
    NuksmPages *pages = s->pages;
    uint64_t *hot = opaque;
    g_autofree DirtyBitmapSnapshot *snap =
        memory_region_snapshot_and_clear_dirty(rb->mr, 0, rb->used_length,
                                               DIRTY_MEMORY_NUKSM);
    NuksmBlockState *bs;

    qemu_mutex_lock(&pages->lock);
    bs = nuksm_pages_find(pages, rb);
    for (uint64_t first = 0; bs && first < bs->nr_pages;
         first += NUKSM_HOT_GROUP_PAGES) {
        uint64_t n = MIN(NUKSM_HOT_GROUP_PAGES, bs->nr_pages - first);
        bool any = memory_region_snapshot_get_dirty(rb->mr, snap,
                                                    first * NUKSM_PAGE_SIZE,
                                                    n * NUKSM_PAGE_SIZE);

        for (uint64_t i = first; i < first + n; i++) {
            bool written = any &&
                memory_region_snapshot_get_dirty(rb->mr, snap,
                                                 i * NUKSM_PAGE_SIZE,
                                                 NUKSM_PAGE_SIZE);

            nuksm_page_sample(bs, i, written);
            *hot += written;
        }
    }
    qemu_mutex_unlock(&pages->lock);
    return true;
}

/* Writes logged before the window opened are not the window's. */
static bool nuksm_hot_clear(Nuksm *s, RAMBlock *rb, void *opaque)
{
    g_free(memory_region_snapshot_and_clear_dirty(rb->mr, 0, rb->used_length,
                                                  DIRTY_MEMORY_NUKSM));
    return true;
}

/*
 * Is a window to be opened now?  Hotness travels with candidates only:
 * while the scanner has settled (its last pass found nothing new, so
 * nothing is offered), the sampler rests NUKSM_HOT_SETTLED_REST windows
 * after a harvest instead of one, sampling one window in 16 instead of
 * one in 2: the counters keep ageing at an eighth of the cost of
 * harvesting the dirty log of all guest RAM.  A write to a tracked page,
 * or new pages a pass finds, unsettle the scanner.
 */
static bool nuksm_hot_window_due(Nuksm *s)
{
    NuksmHot *h = &s->hot;
    unsigned rest = s->control && nuksm_control_settled(s->control) ?
                    NUKSM_HOT_SETTLED_REST : 1;

    if (++h->resting < rest) {
        return false;
    }
    h->resting = 0;
    return true;
}

static void nuksm_hot_tick(void *opaque)
{
    Nuksm *s = opaque;
    NuksmHot *h = &s->hot;

    if (h->logging) {
        uint64_t hot = 0;

        nuksm_ram_foreach_eligible(s, nuksm_hot_harvest, &hot);
        nuksm_hot_log_stop();
        h->logging = false;
        h->samples++;
        h->hot_pages = hot;
        trace_nuksm_hot_sample(s->id, h->samples, hot);
    } else if (s->hot_window_ms && nuksm_is_running(s) &&
               nuksm_hot_window_due(s)) {
        Error *err = NULL;

        if (nuksm_hot_log_start(&err)) {
            nuksm_ram_foreach_eligible(s, nuksm_hot_clear, NULL);
            h->logging = true;
            g_clear_pointer(&h->error, g_free);
        } else {
            g_free(h->error);
            h->error = g_strdup(error_get_pretty(err));
            error_free(err);
        }
    }
    /* A VM the host's scan budget has resting rests its pace times longer. */
    timer_mod(h->timer, qemu_clock_get_ms(QEMU_CLOCK_REALTIME) +
              (!s->hot_window_ms ? NUKSM_HOT_OFF_POLL_MS :
               h->logging ? s->hot_window_ms :
               s->hot_window_ms * nuksm_governor_pace(s)));
}

void nuksm_hot_start(Nuksm *s)
{
    s->hot.timer = timer_new_ms(QEMU_CLOCK_REALTIME, nuksm_hot_tick, s);
    timer_mod(s->hot.timer, qemu_clock_get_ms(QEMU_CLOCK_REALTIME));
}

void nuksm_hot_stop(Nuksm *s)
{
    NuksmHot *h = &s->hot;

    if (h->logging) {
        nuksm_hot_log_stop();
        h->logging = false;
    }
    g_clear_pointer(&h->timer, timer_free);
    g_clear_pointer(&h->error, g_free);
}

/* Why reads are not sampled, or NULL if they are (nuksm-reads.c). */
static const char *nuksm_hot_reads_off(Nuksm *s)
{
    if (!s->read_samples) {
        return "property read-samples is 0";
    }
    if (!s->hot_window_ms) {
        return "property hot-window is 0";
    }
    if (!s->commit || !nuksm_commit_has_uffd(s->commit)) {
        return "nuksm holds no userfaultfd now (see state and limit)";
    }
    if (!nuksm_remap_reads_supported()) {
        return "the host kernel reports no minor faults on shmem "
               "(UFFD_FEATURE_MINOR_SHMEM, Linux 5.14)";
    }
    return NULL;
}

NuksmHotness *nuksm_hot_info(Nuksm *s)
{
    NuksmHotness *info = g_new0(NuksmHotness, 1);
    NuksmReadHotness *reads = g_new0(NuksmReadHotness, 1);
    const char *reads_off = nuksm_hot_reads_off(s);
    NuksmReadStats rs = {};

    info->source = s->hot_window_ms ? NUKSM_HOTNESS_SOURCE_DIRTY_LOG :
                                      NUKSM_HOTNESS_SOURCE_OFF;
    info->window_ms = s->hot_window_ms;
    info->samples = s->hot.samples;
    info->hot_pages = s->hot.hot_pages;
    info->error = g_strdup(s->hot.error);
    if (s->reads) {
        nuksm_reads_get_stats(s->reads, &rs);
    }
    reads->source = reads_off ? NUKSM_READ_SOURCE_OFF :
                                NUKSM_READ_SOURCE_MINOR_FAULTS;
    reads->note = g_strdup(reads_off);
    reads->samples = s->read_samples;
    reads->windows = rs.windows;
    reads->probes = rs.probes;
    reads->reads = rs.reads;
    reads->read_regions = rs.read_regions;
    reads->lost = rs.lost;
    info->reads = reads;
    return info;
}
