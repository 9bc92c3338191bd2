/*
 * nuksm: the scanner unit, the "nuksm-scan" thread.
 *
 * Walks the eligible guest RAM in chunks.  For each chunk it reads the
 * pages' entries in /proc/self/pagemap, which tells which pages are
 * resident (a page never touched is never populated by us) and which
 * merged pages a write has copied (copy-on-write made them anonymous).
 * A resident page that did not change since the previous pass is stable
 * and becomes a candidate for the agent, keyed by its full digest, or, if
 * all zero, is dropped locally.  Candidates go to the agent through the
 * outbox (nuksm-outbox.c).  Between chunks the thread serves the agent's
 * requests (nuksm-commit.c).  What it shares with the other threads
 * (whether it runs, its budget, its counters) is its control,
 * nuksm-control.c.
 *
 * With write tracking (nuksm-writes.c), a page's protection is its
 * stability test and spares hashing pages nothing wrote: at the start
 * of each stretch a pass write-protects the pages it sees for the first
 * time and the stable ones.  A page seen for the first time is not
 * hashed then; if the next pass finds it still protected, it hashes it
 * once, in full, and offers it (nuksm_scan_quiet()).  A page found
 * protected already and on offer is not hashed at all
 * (nuksm_scan_spared()).  Once every page rests protected, a pass is
 * mostly a walk of the pagemap, one read per stretch, and the rest after
 * it grows longer, until a write or the agent ends it.
 *
 * A write lifts the protection of its whole stretch, so the pages of a
 * written stretch (and all pages, without write tracking) are looked at
 * by a sampled digest of a few of their lines, at the strength
 * nuksm-strength.c adapts: stable when it did not change since the
 * previous pass; the full digest is computed for pages to offer, and for
 * pages on offer whose stretch was written, to confirm an equal sampled
 * one.
 *
 * The thread keeps to a CPU budget (max-cpu, measured on its own CPU
 * clock, hashing and serving the agent alike, plus what the agent
 * charges for handling our messages) and an optional page-rate cap
 * (scan-rate).  The RCU read lock is held for one chunk at a time, never
 * across a sleep (the main loop may be waiting for a grace period;
 * x-commit-delay-us, for tests, is the one exception), and RAM blocks
 * are looked up by name for every chunk, so hot-unplug and resizing are
 * safe.  Which blocks to walk, and their guest NUMA nodes, the main loop
 * resolved (nuksm-ram.c): the thread never touches QOM.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#ifdef CONFIG_MALLOC_TRIM
#include <malloc.h>
#endif
#include "exec/ramblock.h"
#include "qemu/bitmap.h"
#include "qemu/error-report.h"
#include "qemu/rcu.h"
#include "qemu/timer.h"
#include "libnuksm/nuksm-digest.h"
#include "libnuksm/nuksm-pagemap.h"
#include "nuksm-commit.h"
#include "nuksm-control.h"
#include "nuksm-hints.h"
#include "nuksm-huge.h"
#include "nuksm-outbox.h"
#include "nuksm-pages.h"
#include "nuksm-prune.h"
#include "nuksm-ram.h"
#include "nuksm-reads.h"
#include "nuksm-regions.h"
#include "nuksm-scan.h"
#include "nuksm-strength.h"
#include "trace.h"

#define NUKSM_SCAN_CHUNK_PAGES  64
/*
 * Hinted pages served between two chunks of the walk (nuksm-hints.c): as
 * many, XLH's 1:1 interleaving, so that a flood of hints never starves
 * the walk, which finds what no disk transfer brought.
 */
#define NUKSM_SCAN_HINT_PAGES   NUKSM_SCAN_CHUNK_PAGES
/*
 * Rest between full passes, so an idle VM costs next to nothing: the
 * governor's rest (1 s for medium, nuksm-governor.c), doubling after each
 * pass that found nothing new, up to 4 rests.  With write tracking, an
 * idle pass costs a walk of the pagemap of the pages resident or merged,
 * one read per stretch: the rest grows up to 16 rests per 2 GiB of them
 * (at most 128 rests), so that idle costs the same share of a core
 * whatever the VM's size, and a write to a tracked page cuts it short to
 * one rest.
 */
#define NUKSM_SCAN_PAUSE_MAX_RESTS 4
#define NUKSM_SCAN_TRACKED_PAUSE_MAX_RESTS 16
#define NUKSM_SCAN_TRACKED_PAUSE_PAGES (2ull << 30 >> 12)
#define NUKSM_SCAN_TRACKED_PAUSE_CAP_RESTS 128
/*
 * The CPU budget holds over windows between throttles; idle time counts
 * towards a window for at most this long, so that a rest does not buy a
 * long burst.
 */
#define NUKSM_SCAN_BUDGET_WINDOW_NS NANOSECONDS_PER_SECOND
/*
 * Chunks walked with nothing hashed (well under a millisecond's work)
 * between two looks at the CPU budget.
 */
#define NUKSM_SCAN_IDLE_CHUNKS_PER_CLOCK 64
/* How often the page-rate cap is enforced, in hashed pages. */
#define NUKSM_SCAN_RATE_SLICE_PAGES 256
/* Messages waiting for the socket before the scanner holds back. */
#define NUKSM_SCAN_MAX_BACKLOG 64

struct NuksmScanner {
    Nuksm *s;
    NuksmControl *ctl;          /* s->control, shared with other threads */
    QemuThread thread;
    int pagemap_fd;             /* /proc/self/pagemap, or -1 */

    /* Scanner thread only */
    uint32_t started_epoch;     /* epoch the commit unit last started on */
    int64_t cpu_mark;           /* CPU budget window: its thread CPU time */
    int64_t wall_mark;          /* and its wall clock start */
    uint64_t passes;            /* passes started */
    uint64_t news;              /* changes the current pass found */
    uint64_t resident;          /* resident or merged pages walked */
    GArray *candidates;         /* NuksmCandidate, to send */
    uint8_t *hint_host;         /* the hint being served: its next page */
    unsigned hint_pages;        /* and the pages of it left */
    NuksmStrength strength;     /* of the change test */
    uint32_t strength_bytes;    /* the hash-strength it was last set to */
    /* The zero page's sampled digest at each strength, and full digest */
    uint64_t zero_sample[NUKSM_STRENGTH_LEVELS];
    uint32_t zero_full16;
    /*
     * The stretch the pass is in, which of its pages were write-protected
     * already when the pass protected it, which it protected, and their
     * pagemap entries then.
     */
    NuksmBlockState *stretch_bs;
    uint64_t stretch_first;
    DECLARE_BITMAP(was_tracked, NUKSM_TRACK_STRETCH);
    DECLARE_BITMAP(tracked_now, NUKSM_TRACK_STRETCH);
    uint64_t stretch_pm[NUKSM_TRACK_STRETCH];
};

static void nuksm_scan_flush_candidates(NuksmScanner *sc, uint32_t epoch)
{
    if (sc->candidates->len) {
        nuksm_outbox_post_batches(&sc->s->outbox, epoch,
                                  NUKSM_MSG_CANDIDATES, sc->candidates->data,
                                  sizeof(NuksmCandidate), sc->candidates->len,
                                  NUKSM_CANDIDATES_MAX);
        g_array_set_size(sc->candidates, 0);
    }
}

/* Queue page @idx of @bs as a candidate.  Called with page_lock held. */
static void nuksm_scan_add_candidate(NuksmScanner *sc, uint32_t epoch,
                                     NuksmBlockState *bs, uint64_t idx,
                                     uint64_t digest)
{
    NuksmCandidate c = {
        .page = bs->first_page + idx,
        .digest = digest,
        .gnode = bs->gnode,
        .idle = nuksm_page_idle(bs, idx),
    };

    g_array_append_val(sc->candidates, c);
    if (sc->candidates->len == NUKSM_CANDIDATES_MAX) {
        /*
         * The copy-on-write breaks this chunk found go first: nuksmd
         * skips a candidate it still knows as merged.
         */
        nuksm_commit_flush_unmerged(sc->s->commit, epoch);
        nuksm_scan_flush_candidates(sc, epoch);
    }
}

/* Read the pagemap entries of the @count pages at @host into @pm. */
static bool nuksm_scan_read_pagemap(NuksmScanner *sc, uint8_t *host,
                                    unsigned count, uint64_t *pm)
{
    off_t off = (uintptr_t)host / NUKSM_PAGE_SIZE * sizeof(uint64_t);

    return pread(sc->pagemap_fd, pm, count * sizeof(pm[0]), off) ==
           count * sizeof(pm[0]);
}

/*
 * Page @idx of @bs is merged: look whether a write ended its sharing and
 * report it if so.  Returns true if it still maps its slot.
 */
static bool nuksm_scan_still_merged(NuksmScanner *sc, NuksmBlockState *bs,
                                    uint64_t idx, uint64_t pm,
                                    NuksmScanCounters *delta)
{
    if (nuksm_pagemap_reads_file(pm)) {
        return true;
    }
    /*
     * Copy-on-write made the page anonymous: sharing is over.  Its digest
     * is still the slot's, so if the write left the content as it was
     * (the page is hashed next), it is offered again at once rather than
     * a pass later.
     */
    nuksm_commit_forget(sc->s->commit, bs, idx, NUKSM_STATUS_COW);
    nuksm_region_cow(bs, idx);
    delta->cow_breaks++;
    sc->news++;
    return false;
}

/*
 * A page's 32-bit digest (NuksmBlockState.digest): the strength of its
 * sampled digest (3 bits, a level of nuksm-strength.h), 13 bits of the
 * sampled digest (never 0, so that a page looked at has a digest), and 16
 * bits of its full digest (NUKSM_D32_FULL(), nuksm-pages.h).
 */
#define NUKSM_D32_LEVEL(d)      ((d) >> 29)
#define NUKSM_D32_SAMPLE(d)     (((d) >> 16) & 0x1fff)

static uint32_t nuksm_d32_sample(uint64_t sample_digest)
{
    return sample_digest % 0x1fff + 1;
}

static uint32_t nuksm_d32(unsigned level, uint32_t sample13, uint32_t full16)
{
    return level << 29 | sample13 << 16 | full16;
}

/*
 * Page @idx of @bs changed since it was last looked at: it is no longer
 * stable, nor on offer, and counts as volatile if it had been seen before
 * (@seen).
 */
static void nuksm_scan_changed(NuksmScanner *sc, NuksmBlockState *bs,
                               uint64_t idx, bool seen,
                               NuksmScanCounters *delta)
{
    if (seen) {
        delta->pages_volatile++;
        nuksm_region_looked(bs, idx);
    }
    /* Held back, it was a duplicate: changed, it is to be seen again. */
    nuksm_page_update(bs, idx, NUKSM_PAGE_STABLE | NUKSM_PAGE_OFFERED |
                      NUKSM_PAGE_HINTED | NUKSM_PAGE_HELD, 0);
    sc->news++;
}

/*
 * Look at resident page @idx of @bs, at @p: its sampled digest at the
 * current strength, compared with the last one, which was taken at that
 * strength or another (the lines both read are read once: progressive).
 * Returns true if the page is stable (its sampled digest did not change
 * since the previous pass) and still to be looked at: not while it is
 * the zero page dropped before.  *zero_like: its sampled digest is the
 * zero page's (only a full check can tell that it is zero).
 */
static bool nuksm_scan_hash(NuksmScanner *sc, NuksmBlockState *bs,
                            uint64_t idx, const uint8_t *p, bool *zero_like,
                            NuksmScanCounters *delta)
{
    uint32_t last = nuksm_page_digest32(bs, idx);
    unsigned level = sc->strength.level;
    unsigned last_level = last ? NUKSM_D32_LEVEL(last) : level;
    unsigned lo = MIN(level, last_level), hi = MAX(level, last_level);
    uint64_t state_lo, state_hi, now, before;

    state_lo = nuksm_sample_continue(p, nuksm_sample_start(), 0, 1u << lo);
    state_hi = hi == lo ? state_lo :
               nuksm_sample_continue(p, state_lo, 1u << lo, 1u << hi);
    now = nuksm_sample_digest(level == lo ? state_lo : state_hi);
    before = nuksm_sample_digest(last_level == lo ? state_lo : state_hi);
    *zero_like = now == sc->zero_sample[level];

    if (nuksm_page_flags(bs, idx) & NUKSM_PAGE_ZERO) {
        if (*zero_like && nuksm_page_is_zero(p, NUKSM_PAGE_SIZE)) {
            nuksm_strength_settled(&sc->strength);
            return false;       /* read since, still the zero page */
        }
        nuksm_pages_unzeroed(sc->s->pages, bs, idx);
        nuksm_region_cow(bs, idx);
        delta->cow_breaks++;
        sc->news++;
    }
    if (last && NUKSM_D32_SAMPLE(last) == nuksm_d32_sample(before)) {
        nuksm_page_set_digest32(bs, idx, nuksm_d32(level,
                                                   nuksm_d32_sample(now),
                                                   NUKSM_D32_FULL(last)));
        nuksm_page_update(bs, idx, 0, NUKSM_PAGE_STABLE);
        return true;
    }
    /* New, or changed for sure: no full digest needed to tell. */
    nuksm_strength_settled(&sc->strength);
    nuksm_scan_changed(sc, bs, idx, last, delta);
    nuksm_page_set_digest32(bs, idx, nuksm_d32(level, nuksm_d32_sample(now),
                                               0));
    return false;
}

/*
 * The one hash of page @idx of @bs, at @p, that write tracking found
 * quiet since the previous pass first saw it (nuksm_scan_quiet()): its
 * full digest, the key it is offered with, in *digest, then its sampled
 * digest at the current strength, whose lines the full one has just
 * brought into the cache, for the change test should a write release
 * its stretch later.  It is stable.  *zero_like: its sample is the zero
 * page's.
 */
static void nuksm_scan_hash_once(NuksmScanner *sc, NuksmBlockState *bs,
                                 uint64_t idx, const uint8_t *p,
                                 uint64_t *digest, bool *zero_like)
{
    unsigned level = sc->strength.level;
    uint64_t sample;

    *digest = nuksm_page_digest(p, NUKSM_PAGE_SIZE);
    sample = nuksm_sample_digest(nuksm_sample_continue(
        p, nuksm_sample_start(), 0, 1u << level));
    *zero_like = sample == sc->zero_sample[level];
    nuksm_page_set_digest32(bs, idx, nuksm_d32(level, nuksm_d32_sample(sample),
                                               nuksm_digest_fragment(*digest)));
    nuksm_page_update(bs, idx, 0, NUKSM_PAGE_STABLE);
    nuksm_strength_hashed(&sc->strength);
}

/*
 * The full digest of page @idx of @bs, at @p, which its sampled digest
 * says is unchanged: the key it is offered with.  When an earlier full
 * digest is known, a different one is a change the sampled digest
 * missed: the page is then volatile after all, and false is returned.
 */
static bool nuksm_scan_full_digest(NuksmScanner *sc, NuksmBlockState *bs,
                                   uint64_t idx, const uint8_t *p,
                                   uint64_t *digest,
                                   NuksmScanCounters *delta)
{
    uint32_t last = nuksm_page_digest32(bs, idx);
    uint32_t full16;

    *digest = nuksm_page_digest(p, NUKSM_PAGE_SIZE);
    full16 = nuksm_digest_fragment(*digest);
    nuksm_page_set_digest32(bs, idx, (last & ~0xffffu) | full16);
    if (!NUKSM_D32_FULL(last)) {
        nuksm_strength_hashed(&sc->strength);
        return true;
    }
    nuksm_strength_confirmed(&sc->strength, full16 != NUKSM_D32_FULL(last));
    if (full16 == NUKSM_D32_FULL(last)) {
        return true;
    }
    nuksm_scan_changed(sc, bs, idx, true, delta);
    return false;
}

/*
 * May page @idx of @bs, whose sampled digest is the zero page's, be all
 * zero?  Unless a full digest taken since it last changed says not.
 */
static bool nuksm_scan_may_be_zero(NuksmScanner *sc, NuksmBlockState *bs,
                                   uint64_t idx)
{
    uint32_t full16 = NUKSM_D32_FULL(nuksm_page_digest32(bs, idx));

    return !full16 || full16 == sc->zero_full16;
}

/* What becomes of a stable page. */
typedef enum NuksmScanVerdict {
    NUKSM_SCAN_KEEP,            /* nothing this pass */
    NUKSM_SCAN_DROP_ZERO,       /* all zero: drop it locally */
    NUKSM_SCAN_OFFER,           /* a candidate for the agent */
} NuksmScanVerdict;

static NuksmScanVerdict nuksm_scan_verdict(NuksmScanner *sc,
                                           NuksmBlockState *bs, uint64_t idx,
                                           const uint8_t *p, bool zero_like,
                                           bool zero_pages)
{
    uint8_t flags = nuksm_page_flags(bs, idx);

    /*
     * Without userfaultfd nothing can be merged safely.  A page the agent
     * is merging already may be nominated again: the agent ignores it.
     */
    if (!nuksm_commit_has_uffd(sc->s->commit)) {
        return NUKSM_SCAN_KEEP;
    }
    /*
     * Held back, for lack of mappings or for its huge page, zero pages
     * too: offered or dropped when released.
     */
    if (flags & NUKSM_PAGE_HELD) {
        return NUKSM_SCAN_KEEP;
    }
    /*
     * Its sample is the zero page's, and no full digest since it last
     * changed says otherwise: nominated, for the commit to check in full
     * under write protection (nuksm_remap_zero_run()), the only proof.
     * MADV_DONTNEED on a store mapping would expose the store: a zero page
     * there, or with zero-pages off, is kept, and nothing else is.
     */
    if (zero_like && nuksm_scan_may_be_zero(sc, bs, idx)) {
        if (zero_pages && !(flags & NUKSM_PAGE_REMAPPED)) {
            return NUKSM_SCAN_DROP_ZERO;
        }
        if (nuksm_page_is_zero(p, NUKSM_PAGE_SIZE)) {
            return NUKSM_SCAN_KEEP;
        }
    }
    /*
     * A candidate the agent did not merge stays in its unstable table,
     * where a later duplicate finds it: it is offered again only when
     * the agent asks (RETRY) or forgot everything (nuksm_commit_reoffer()).
     */
    if (flags & NUKSM_PAGE_OFFERED) {
        return NUKSM_SCAN_KEEP;
    }
    return NUKSM_SCAN_OFFER;
}

static void nuksm_scan_offer(NuksmScanner *sc, uint32_t epoch,
                             NuksmBlockState *bs, uint64_t idx,
                             uint64_t digest)
{
    if (!(nuksm_page_flags(bs, idx) & NUKSM_PAGE_OFFERED)) {
        nuksm_page_update(bs, idx, 0, NUKSM_PAGE_OFFERED);
        sc->news++;
    }
    nuksm_region_looked(bs, idx);
    nuksm_huge_offered(bs, idx);
    nuksm_scan_add_candidate(sc, epoch, bs, idx, digest);
}

/* Never looked at: neither hashed nor write-protected at first sight. */
static bool nuksm_scan_unseen(NuksmBlockState *bs, uint64_t idx)
{
    return !nuksm_page_digest32(bs, idx) &&
           !(nuksm_page_flags(bs, idx) & NUKSM_PAGE_WAITING);
}

/*
 * May write tracking protect page @idx of @bs, of pagemap entry @pm?
 * Resident, a page of its own (anonymous, or a private copy in a window:
 * not merged, whose writes are copy-on-write breaks the pagemap shows),
 * not dropped as zero, and either stable since the previous pass or
 * never looked at (its protection is then its stability test,
 * nuksm_scan_quiet()).  The copies in windows are as many as the merged
 * pages they lie between; hashed every pass, they would cost an idle VM
 * as much as its merges.
 */
static bool nuksm_scan_trackable(NuksmBlockState *bs, uint64_t idx,
                                 uint64_t pm)
{
    uint8_t flags = nuksm_page_flags(bs, idx);

    if (!(pm & NUKSM_PM_PRESENT) ||
        (flags & (NUKSM_PAGE_MERGED | NUKSM_PAGE_ZERO))) {
        return false;
    }
    return (flags & NUKSM_PAGE_STABLE) || nuksm_scan_unseen(bs, idx);
}

/*
 * At the start of the stretch of @count pages from page @first of @rb:
 * note which pages are write-protected already (sc->was_tracked), then
 * protect those that may be.  A stretch that may be a transparent huge
 * page (every page resident, none remapped or dropped) is protected
 * whole or not at all: protecting a part would split the huge page.
 */
static void nuksm_scan_track_stretch(NuksmScanner *sc, RAMBlock *rb,
                                     NuksmBlockState *bs, uint64_t first,
                                     unsigned count)
{
    uint8_t *host = rb->host + first * NUKSM_PAGE_SIZE;
    uint64_t *pm = sc->stretch_pm;
    unsigned trackable = 0, tracked = 0, run = 0;
    bool whole = true;

    sc->stretch_bs = bs;
    sc->stretch_first = first;
    bitmap_zero(sc->was_tracked, NUKSM_TRACK_STRETCH);
    bitmap_zero(sc->tracked_now, NUKSM_TRACK_STRETCH);
    if (!nuksm_scan_read_pagemap(sc, host, count, pm)) {
        sc->stretch_bs = NULL;
        return;
    }
    for (unsigned i = 0; i < count; i++) {
        if (pm[i] & NUKSM_PM_UFFD_WP) {
            set_bit(i, sc->was_tracked);
            tracked++;
        }
        whole &= (pm[i] & NUKSM_PM_PRESENT) &&
                 !(nuksm_page_flags(bs, first + i) &
                   (NUKSM_PAGE_REMAPPED | NUKSM_PAGE_ZERO));
        trackable += nuksm_scan_trackable(bs, first + i, pm[i]);
    }
    if (whole) {
        if (trackable == count && tracked < count &&
            nuksm_commit_track(sc->s->commit, host,
                               count * NUKSM_PAGE_SIZE)) {
            bitmap_set(sc->tracked_now, 0, count);
        }
        return;
    }
    for (unsigned i = 0; i <= count; i++) {
        if (i < count && !test_bit(i, sc->was_tracked) &&
            nuksm_scan_trackable(bs, first + i, pm[i])) {
            run++;
        } else if (run) {
            if (nuksm_commit_track(sc->s->commit,
                                   host + (i - run) * NUKSM_PAGE_SIZE,
                                   run * NUKSM_PAGE_SIZE)) {
                bitmap_set(sc->tracked_now, i - run, run);
            }
            run = 0;
        }
    }
}

/* Is page @idx of @bs in the stretch the pass protected last? */
static bool nuksm_scan_in_stretch(NuksmScanner *sc, NuksmBlockState *bs,
                                  uint64_t idx)
{
    return sc->stretch_bs == bs &&
           QEMU_ALIGN_DOWN(idx, NUKSM_TRACK_STRETCH) == sc->stretch_first;
}

/*
 * Was page @idx of @bs, of pagemap entry @pm, write-protected both when
 * the pass came to its stretch and now: nothing wrote it since a pass
 * before protected it?
 */
static bool nuksm_scan_still_protected(NuksmScanner *sc, NuksmBlockState *bs,
                                       uint64_t idx, uint64_t pm)
{
    return (pm & NUKSM_PM_UFFD_WP) && nuksm_scan_in_stretch(sc, bs, idx) &&
           test_bit(idx % NUKSM_TRACK_STRETCH, sc->was_tracked);
}

/*
 * Is page @idx of @bs, of pagemap entry @pm, waiting and quiet: a pass
 * write-protected it when it first saw it, and it was still protected
 * both when this pass came to its stretch and now?  Then nothing wrote
 * it for a pass: one hash, now, is all it needs to be offered.  A
 * waiting page whose stretch a write released is looked at by sampled
 * digests instead (nuksm_scan_hash()): the release lifts the protection
 * of the whole stretch (nuksm-writes.c), which then does not tell which
 * of its pages was written.
 */
static bool nuksm_scan_quiet(NuksmScanner *sc, NuksmBlockState *bs,
                             uint64_t idx, uint64_t pm)
{
    return (nuksm_page_flags(bs, idx) & NUKSM_PAGE_WAITING) &&
           nuksm_scan_still_protected(sc, bs, idx, pm);
}

/*
 * Did this pass just write-protect page @idx of @bs, which it sees for
 * the first time?  Then it is not hashed now: it waits, and the next
 * pass hashes it once if nothing wrote it (nuksm_scan_quiet()).
 */
static bool nuksm_scan_just_tracked(NuksmScanner *sc, NuksmBlockState *bs,
                                    uint64_t idx)
{
    return nuksm_scan_unseen(bs, idx) && nuksm_scan_in_stretch(sc, bs, idx) &&
           test_bit(idx % NUKSM_TRACK_STRETCH, sc->tracked_now);
}

/*
 * Is page @idx of @bs, of pagemap entry @pm, spared hashing?  Stable and
 * offered, and write-protected both when the pass protected its stretch
 * and now, so nothing wrote it since it was last hashed.
 */
static bool nuksm_scan_spared(NuksmScanner *sc, NuksmBlockState *bs,
                              uint64_t idx, uint64_t pm)
{
    return nuksm_scan_still_protected(sc, bs, idx, pm) &&
           (nuksm_page_flags(bs, idx) & NUKSM_PAGE_OFFERED);
}

/*
 * Has the chunk of @count pages from page @first of @bs nothing to hash
 * or report, judged from the pagemap entries of its stretch when the
 * pass protected it?  Every page is then not resident, merged and still
 * reading its slot, spared, or not one its region samples this pass, and
 * the chunk needs no pagemap read of its own: an idle pass reads the
 * pagemap once per stretch.  What changed
 * since the stretch was read (a write, a copy-on-write break, a page
 * faulted in) the next pass sees.  A page merged since, whose old entry
 * looks like a copy-on-write break, is not judged here.  Counts the
 * resident and merged pages in sc->resident.
 */
static bool nuksm_scan_chunk_idle(NuksmScanner *sc, NuksmBlockState *bs,
                                  uint64_t first, unsigned count)
{
    const uint64_t *pm;
    uint64_t n = 0;

    if (!nuksm_scan_in_stretch(sc, bs, first)) {
        return false;
    }
    pm = &sc->stretch_pm[first - sc->stretch_first];
    for (unsigned i = 0; i < count; i++) {
        uint64_t idx = first + i;

        if (nuksm_page_flags(bs, idx) & NUKSM_PAGE_MERGED) {
            if (!nuksm_pagemap_reads_file(pm[i])) {
                return false;
            }
            n++;
        } else if (pm[i] & NUKSM_PM_PRESENT) {
            if (nuksm_region_samples(bs, idx) &&
                !nuksm_scan_spared(sc, bs, idx, pm[i])) {
                return false;
            }
            n++;
        }
    }
    sc->resident += n;
    return true;
}

/*
 * Look at the @count pages from page @first of @rb (@bs): read their
 * pagemap entries, report the copy-on-write breaks, hash the pages that
 * may have changed, and offer or drop as zero those worth it.  Pages the
 * walk comes to (@hinted false) count in sc->resident; only those their
 * region samples are looked at (nuksm-regions.c), and with write
 * tracking (@tracking) those nothing wrote are spared.  Pages an I/O hint
 * named (@hinted, nuksm-hints.c) are taken as stable without waiting for
 * a second pass (XLH): they are likely page cache, and a merge compares
 * every page in full under write protection anyway.  So are the pages a
 * region below the top level samples: a sample tells whether the region
 * holds duplicates only if it is offered.  Returns how many were hashed.
 * Called with page_lock and the RCU read lock held.
 */
static unsigned nuksm_scan_pages(NuksmScanner *sc, RAMBlock *rb,
                                 NuksmBlockState *bs, uint64_t first,
                                 unsigned count, uint32_t epoch,
                                 bool tracking, bool hinted,
                                 NuksmScanCounters *delta)
{
    uint8_t *host = rb->host + first * NUKSM_PAGE_SIZE;
    uint64_t pm[NUKSM_SCAN_CHUNK_PAGES];
    unsigned zero[NUKSM_SCAN_CHUNK_PAGES], nr_zero = 0;
    unsigned hashed = 0;
    bool zero_pages;

    assert(count <= NUKSM_SCAN_CHUNK_PAGES);
    if (!nuksm_scan_read_pagemap(sc, host, count, pm)) {
        return 0;
    }
    qemu_mutex_lock(&sc->ctl->lock);
    zero_pages = sc->ctl->zero_pages;
    qemu_mutex_unlock(&sc->ctl->lock);

    for (unsigned i = 0; i < count; i++) {
        uint64_t idx = first + i;
        uint8_t *p = host + i * NUKSM_PAGE_SIZE;
        uint64_t digest;
        bool zero_like;
        bool eager = hinted;    /* offered at first sight */
        bool quiet = false;     /* hashed once: digest is its key */

        if ((nuksm_page_flags(bs, idx) & NUKSM_PAGE_MERGED) &&
            nuksm_scan_still_merged(sc, bs, idx, pm[i], delta)) {
            sc->resident += !hinted;
            continue;
        }
        if (!(pm[i] & NUKSM_PM_PRESENT)) {
            continue;
        }
        if (!hinted) {
            sc->resident++;
            if (!nuksm_region_samples(bs, idx) ||
                (tracking && nuksm_scan_spared(sc, bs, idx, pm[i]))) {
                continue;
            }
            eager = nuksm_region_eager(bs, idx);
            if (tracking && !eager) {
                if (nuksm_scan_just_tracked(sc, bs, idx)) {
                    nuksm_page_update(bs, idx, 0, NUKSM_PAGE_WAITING);
                    sc->news++;
                    continue;
                }
                quiet = nuksm_scan_quiet(sc, bs, idx, pm[i]);
            }
        }
        hashed++;
        nuksm_page_update(bs, idx, NUKSM_PAGE_WAITING, 0);
        if (quiet) {
            nuksm_scan_hash_once(sc, bs, idx, p, &digest, &zero_like);
        } else if (!nuksm_scan_hash(sc, bs, idx, p, &zero_like, delta)) {
            /* Not stable, or still the zero page dropped. */
            if (!eager || (nuksm_page_flags(bs, idx) & NUKSM_PAGE_ZERO)) {
                continue;
            }
            nuksm_page_update(bs, idx, 0, NUKSM_PAGE_STABLE);
        }
        switch (nuksm_scan_verdict(sc, bs, idx, p, zero_like, zero_pages)) {
        case NUKSM_SCAN_KEEP:
            /*
             * Offered already: write tracking saw it written (it was not
             * spared), so check what the sampled digest says in full.
             */
            if (quiet) {
                break;          /* hashed in full just now */
            }
            if (tracking && !hinted &&
                (nuksm_page_flags(bs, idx) & NUKSM_PAGE_OFFERED)) {
                nuksm_scan_full_digest(sc, bs, idx, p, &digest, delta);
            } else {
                nuksm_strength_settled(&sc->strength);
            }
            break;
        case NUKSM_SCAN_DROP_ZERO:
            nuksm_region_looked(bs, idx);
            zero[nr_zero++] = i;
            break;
        case NUKSM_SCAN_OFFER:
            if (!quiet &&
                !nuksm_scan_full_digest(sc, bs, idx, p, &digest, delta)) {
                if (!eager) {
                    break;
                }
                /*
                 * Changed, but a disk transfer just wrote it, or a
                 * region samples it: offer it.
                 */
                nuksm_page_update(bs, idx, 0, NUKSM_PAGE_STABLE);
            }
            nuksm_scan_offer(sc, epoch, bs, idx, digest);
            if (hinted) {
                nuksm_page_update(bs, idx, 0, NUKSM_PAGE_HINTED);
            }
            break;
        }
    }
    /* Dropping them would split a huge page that they do not pay for. */
    if (nr_zero &&
        !nuksm_huge_may_split(sc->s->huge, qatomic_read(&sc->s->huge_split),
                              rb, bs, first, nr_zero, NULL)) {
        for (unsigned i = 0; i < nr_zero; i++) {
            nuksm_page_update(bs, first + zero[i], NUKSM_PAGE_OFFERED,
                              NUKSM_PAGE_HELD);
        }
        nr_zero = 0;
    }
    if (nr_zero && nuksm_commit_has_uffd(sc->s->commit)) {
        sc->news += nr_zero;
        for (unsigned i = 0; i < nr_zero; i++) {
            uint8_t *p = host + zero[i] * NUKSM_PAGE_SIZE;
            bool dropped = nuksm_commit_drop_zero(sc->s->commit, bs,
                                                  first + zero[i], p);
            uint64_t digest;

            nuksm_strength_zero_checked(&sc->strength, dropped);
            if (!dropped) {
                /*
                 * Not zero, where its sample did not look: its full
                 * digest says so from now on, and it is offered.
                 */
                nuksm_scan_full_digest(sc, bs, first + zero[i], p, &digest,
                                       delta);
            }
        }
    }
    return hashed;
}

/*
 * Scan one chunk of @count pages starting at page index @first of @rb;
 * returns how many were hashed.  Called with page_lock and the RCU read
 * lock held.
 */
static unsigned nuksm_scan_chunk(NuksmScanner *sc, RAMBlock *rb,
                                 NuksmBlockState *bs, uint64_t first,
                                 unsigned count, uint32_t epoch,
                                 NuksmScanCounters *delta)
{
    bool tracking = nuksm_commit_tracks_writes(sc->s->commit);

    if (first % NUKSM_TRACK_STRETCH == 0) {
        sc->stretch_bs = NULL;
        if (tracking) {
            nuksm_scan_track_stretch(sc, rb, bs, first,
                                     MIN(NUKSM_TRACK_STRETCH,
                                         bs->nr_pages - first));
        }
    }
    if (tracking && nuksm_scan_chunk_idle(sc, bs, first, count)) {
        return 0;
    }
    return nuksm_scan_pages(sc, rb, bs, first, count, epoch, tracking, false,
                            delta);
}

/*
 * Serve the next @count pages of hints from @host, if they lie in eligible
 * RAM of this object; returns how many were hashed.
 */
static unsigned nuksm_scan_hint_run(NuksmScanner *sc, uint8_t *host,
                                    unsigned count, uint32_t epoch,
                                    NuksmScanCounters *delta)
{
    NuksmPages *pages = sc->s->pages;
    unsigned hashed = 0;

    WITH_RCU_READ_LOCK_GUARD() {
        ram_addr_t offset;
        RAMBlock *rb = qemu_ram_block_from_host(host, false, &offset);
        NuksmBlockState *bs;
        uint64_t first;
        uint8_t gnode;

        if (!rb || !nuksm_ram_resolved_gnode(sc->s, rb, &gnode)) {
            break;
        }
        first = offset / NUKSM_PAGE_SIZE;
        qemu_mutex_lock(&pages->lock);
        bs = nuksm_pages_block(pages, rb, gnode);
        if (first < bs->nr_pages) {
            hashed = nuksm_scan_pages(sc, rb, bs, first,
                                      MIN(count, bs->nr_pages - first),
                                      epoch, false, true, delta);
            nuksm_commit_flush_unmerged(sc->s->commit, epoch);
        }
        qemu_mutex_unlock(&pages->lock);
    }
    return hashed;
}

/*
 * Serve hints, newest first, up to NUKSM_SCAN_HINT_PAGES pages of them.
 * Returns how many pages were served; adds the pages hashed to *hashed.
 */
static unsigned nuksm_scan_hints(NuksmScanner *sc, uint32_t epoch,
                                 unsigned *hashed, NuksmScanCounters *delta)
{
    unsigned served = 0;

    while (served < NUKSM_SCAN_HINT_PAGES) {
        unsigned n;

        if (!sc->hint_pages &&
            !nuksm_hints_pop(sc->s->hints, &sc->hint_host,
                             &sc->hint_pages)) {
            break;
        }
        n = MIN(sc->hint_pages, NUKSM_SCAN_HINT_PAGES - served);
        *hashed += nuksm_scan_hint_run(sc, sc->hint_host, n, epoch, delta);
        sc->hint_host += (size_t)n * NUKSM_PAGE_SIZE;
        sc->hint_pages -= n;
        served += n;
    }
    delta->hints_served += served;
    return served;
}

static int64_t nuksm_thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * NANOSECONDS_PER_SECOND + ts.tv_nsec;
}

/*
 * Serve queued agent requests.  Called with the control's lock held;
 * drops it while serving.
 */
static void nuksm_scan_serve(NuksmScanner *sc)
{
    NuksmWork *w;

    while ((w = nuksm_commit_next(sc->s->commit))) {
        uint32_t epoch = sc->ctl->epoch;

        qemu_mutex_unlock(&sc->ctl->lock);
        nuksm_commit_serve(sc->s->commit, w, epoch);
        qemu_mutex_lock(&sc->ctl->lock);
    }
}

/*
 * CPU spent since the budget window opened: by the thread, hashing and
 * serving the agent's requests (uploads, merges, moves) for the pages it
 * offered, and by the agent, handling our messages (CHARGE).
 */
static int64_t nuksm_scan_budget_used_ns(NuksmScanner *sc)
{
    return nuksm_thread_cpu_ns() - sc->cpu_mark +
           qatomic_read(&sc->ctl->charged_ns);
}

/*
 * Sleep long enough that the CPU time of the window that ends keeps
 * within the CPU budget, and the pages hashed since the last sleep within
 * the page-rate cap, serving the agent meanwhile; the next window starts
 * when the sleep ends, and counts what serving cost during it.  Returns
 * false when the pass must stop (deactivated, quitting, or a fresh pass
 * was requested).
 */
static bool nuksm_scan_throttle(NuksmScanner *sc, int64_t wall_ns,
                                unsigned pages)
{
    NuksmControl *ctl = sc->ctl;
    int64_t cpu_start = nuksm_thread_cpu_ns();
    int64_t used_ns = cpu_start - sc->cpu_mark +
                      qatomic_xchg(&ctl->charged_ns, 0);
    int64_t window_ns = MIN(get_clock() - sc->wall_mark,
                            NUKSM_SCAN_BUDGET_WINDOW_NS);
    int64_t start = get_clock();
    bool go_on;

    /* A long pass keeps the mapping budget and read sampling going. */
    nuksm_commit_tick(sc->s->commit);
    qemu_mutex_lock(&ctl->lock);
    for (;;) {
        /* Each time: a new budget (SHARE, max-cpu) applies at once. */
        int64_t sleep_ns = (int64_t)(used_ns * 100.0 / ctl->max_cpu) -
                           window_ns;
        int64_t left;

        if (ctl->scan_rate) {
            int64_t min_ns = (int64_t)pages * NANOSECONDS_PER_SECOND /
                             ctl->scan_rate;
            sleep_ns = MAX(sleep_ns, min_ns - wall_ns);
        }
        left = start + sleep_ns - get_clock();

        nuksm_scan_serve(sc);
        go_on = ctl->active && !ctl->quit && !ctl->restart;
        /* Hold back while the socket cannot take what we produce. */
        if (go_on &&
            nuksm_outbox_backlog(&sc->s->outbox) > NUKSM_SCAN_MAX_BACKLOG) {
            left = MAX(left, SCALE_MS);
        }
        if (!go_on || left < SCALE_MS) {
            break;
        }
        qemu_cond_timedwait(&ctl->cond, &ctl->lock, left / SCALE_MS);
    }
    qemu_mutex_unlock(&ctl->lock);
    sc->cpu_mark = cpu_start;
    sc->wall_mark = get_clock();
    return go_on;
}

/* A RAM block a pass walks. */
/*
 * The walk is through the region of page @idx of @bs: judge it, if
 * distilling (nuksm-regions.c).
 */
static void nuksm_scan_judge_region(NuksmScanner *sc, NuksmBlockState *bs,
                                    uint64_t idx, NuksmScanCounters *delta)
{
    if (!sc->s->pages->distilling) {
        return;
    }
    switch (nuksm_region_judge(bs, idx)) {
    case NUKSM_REGION_PROMOTED:
        delta->promotions++;
        break;
    case NUKSM_REGION_DEMOTED:
        delta->demotions++;
        break;
    case NUKSM_REGION_STAYED:
        break;
    }
}

/*
 * Scan the chunk of block @pb from page @first on, if the block still
 * has such a page; returns false at the block's end.  Adds to *hashed
 * and @delta.
 */
static bool nuksm_scan_next_chunk(NuksmScanner *sc,
                                  const NuksmRamBlockName *pb,
                                  uint64_t first, uint32_t epoch,
                                  unsigned *hashed, NuksmScanCounters *delta)
{
    NuksmPages *pages = sc->s->pages;
    bool more = false;

    WITH_RCU_READ_LOCK_GUARD() {
        RAMBlock *rb = qemu_ram_block_by_name(pb->name);
        NuksmBlockState *bs;

        qemu_mutex_lock(&pages->lock);
        bs = rb ? nuksm_pages_block(pages, rb, pb->gnode) : NULL;
        if (bs && first < bs->nr_pages) {
            unsigned count = MIN(NUKSM_SCAN_CHUNK_PAGES,
                                 bs->nr_pages - first);

            *hashed = nuksm_scan_chunk(sc, rb, bs, first, count, epoch,
                                       delta);
            if ((first + count) % NUKSM_REGION_PAGES == 0 ||
                first + count == bs->nr_pages) {
                nuksm_scan_judge_region(sc, bs, first, delta);
                if (nuksm_huge_walked(sc->s->huge,
                                      qatomic_read(&sc->s->huge_split),
                                      rb, bs, first)) {
                    nuksm_huge_rebuilt(sc->s->huge, bs, first,
                                       nuksm_commit_rebuild_huge(
                                           sc->s->commit, rb, bs, first));
                }
            }
            nuksm_commit_flush_unmerged(sc->s->commit, epoch);
            more = true;
        }
        qemu_mutex_unlock(&pages->lock);
    }
    return more;
}

/* Where a pass stands against its budget since it last slept. */
typedef struct NuksmPassClock {
    int64_t wall_start;         /* 0: nothing done since the last sleep */
    unsigned pages_since_sleep;
    unsigned idle_chunks;
} NuksmPassClock;

/* Take a new hash-strength, if any.  Called with the control's lock. */
static void nuksm_scan_apply_strength(NuksmScanner *sc)
{
    if (sc->ctl->hash_strength != sc->strength_bytes) {
        sc->strength_bytes = sc->ctl->hash_strength;
        nuksm_strength_set(&sc->strength, sc->strength_bytes);
        sc->ctl->hashing = sc->strength.stats;
    }
}

/*
 * A step of the pass (a chunk of the walk, hints) hashed @hashed pages
 * and counted @delta: add them up, and sleep when the budget says so.
 * Returns false when the pass must stop.
 */
static bool nuksm_scan_step_done(NuksmScanner *sc, NuksmPassClock *pc,
                                 unsigned hashed,
                                 const NuksmScanCounters *delta)
{
    NuksmControl *ctl = sc->ctl;

    pc->pages_since_sleep += hashed;
    if (hashed || delta->pages_volatile || delta->cow_breaks ||
        delta->hints_served || delta->promotions || delta->demotions) {
        nuksm_strength_adapt(&sc->strength);
        qemu_mutex_lock(&ctl->lock);
        ctl->stats.pages_scanned += hashed;
        ctl->stats.pages_volatile += delta->pages_volatile;
        ctl->stats.cow_breaks += delta->cow_breaks;
        ctl->stats.hints_served += delta->hints_served;
        ctl->stats.promotions += delta->promotions;
        ctl->stats.demotions += delta->demotions;
        nuksm_scan_apply_strength(sc);
        ctl->hashing = sc->strength.stats;
        qemu_mutex_unlock(&ctl->lock);
    }
    /*
     * Sleep in slices of at least 1 ms, not after every chunk.  Reading
     * the thread's CPU clock is a system call: after a chunk with nothing
     * hashed, look at it only now and then.
     */
    if (!hashed && ++pc->idle_chunks < NUKSM_SCAN_IDLE_CHUNKS_PER_CLOCK) {
        return true;
    }
    pc->idle_chunks = 0;
    if (nuksm_scan_budget_used_ns(sc) >= SCALE_MS ||
        pc->pages_since_sleep >= NUKSM_SCAN_RATE_SLICE_PAGES) {
        if (!nuksm_scan_throttle(sc, get_clock() - pc->wall_start,
                                 pc->pages_since_sleep)) {
            return false;
        }
        pc->wall_start = 0;
        pc->pages_since_sleep = 0;
    }
    return true;
}

/*
 * Serve the hints waiting until none is left, within the budget.  Returns
 * false when the scanner must stop.
 */
static bool nuksm_scan_drain_hints(NuksmScanner *sc, uint32_t epoch)
{
    NuksmPassClock pc = {};
    NuksmScanCounters delta;
    unsigned hashed, served;

    do {
        if (!pc.wall_start) {
            pc.wall_start = get_clock();
        }
        hashed = 0;
        memset(&delta, 0, sizeof(delta));
        served = nuksm_scan_hints(sc, epoch, &hashed, &delta);
        if (!nuksm_scan_step_done(sc, &pc, hashed, &delta)) {
            return false;
        }
    } while (served);
    return true;
}

/*
 * One full pass: the walk, with hints served between its chunks, then the
 * hints left.  Returns true if it ran to the end.
 */
static bool nuksm_scan_pass(NuksmScanner *sc, uint32_t epoch)
{
    g_autoptr(GPtrArray) pass = nuksm_ram_resolved_names(sc->s);
    NuksmPassClock pc = {};
    NuksmScanCounters delta;
    unsigned hashed;


    for (guint b = 0; b < pass->len; b++) {
        const NuksmRamBlockName *pb = g_ptr_array_index(pass, b);

        for (uint64_t first = 0;; first += NUKSM_SCAN_CHUNK_PAGES) {
            if (!pc.wall_start) {
                pc.wall_start = get_clock();
            }
            hashed = 0;
            memset(&delta, 0, sizeof(delta));
            if (!nuksm_scan_next_chunk(sc, pb, first, epoch, &hashed,
                                       &delta)) {
                break;
            }
            nuksm_scan_hints(sc, epoch, &hashed, &delta);
            if (!nuksm_scan_step_done(sc, &pc, hashed, &delta)) {
                return false;
            }
        }
    }
    return nuksm_scan_drain_hints(sc, epoch);
}

/*
 * The longest rest after the pass that just ended.  Called with the
 * control's lock.
 */
static int64_t nuksm_scan_pause_max_ms(NuksmScanner *sc)
{
    int64_t rest = sc->ctl->rest_ms;

    if (!nuksm_commit_tracks_writes(sc->s->commit)) {
        return NUKSM_SCAN_PAUSE_MAX_RESTS * rest;
    }
    return MIN(MAX(NUKSM_SCAN_TRACKED_PAUSE_MAX_RESTS * rest,
                   sc->resident * NUKSM_SCAN_TRACKED_PAUSE_MAX_RESTS * rest /
                   NUKSM_SCAN_TRACKED_PAUSE_PAGES),
               NUKSM_SCAN_TRACKED_PAUSE_CAP_RESTS * rest);
}

/*
 * How long the rest that started at @start and ends at @end waits next:
 * until it ends, a nudge ends it (its shortest rest is over), or a read
 * sampling window ends; and at most a second times the pace, to see
 * hints and nudges whose wake-up was lost (nuksm_control_nudge()).
 * Called with the control's lock.
 */
static int64_t nuksm_scan_rest_wait_ms(NuksmScanner *sc, int64_t start,
                                       int64_t end)
{
    NuksmControl *ctl = sc->ctl;
    int64_t now = get_clock();
    int64_t wake = MIN(end, now + (int64_t)ctl->pace *
                                  NANOSECONDS_PER_SECOND);
    int64_t due = nuksm_commit_tick_due_ns(sc->s->commit);

    if (due < wake - now) {
        wake = now + due;
    }
    if (qatomic_read(&ctl->nudged)) {
        wake = MIN(wake, start + ctl->rest_ms * SCALE_MS);
    }
    return MAX(1, (wake - now) / SCALE_MS);
}

/*
 * Rest after a full pass, serving the agent, until the pause is over, a
 * write to a tracked page cuts it short, or the pass is to restart.
 * Called with the control's lock held.
 */
static void nuksm_scan_rest(NuksmScanner *sc)
{
    NuksmControl *ctl = sc->ctl;
    int64_t start = get_clock();

    for (;;) {
        /*
         * Read each time: a new governor or pace changes the pause.  A
         * pass that found nothing new rests its pace times longer: a
         * host of resting VMs passes as often as one resting VM.
         */
        int64_t end = ctl->held ? INT64_MAX :
                      start + ctl->pause_ms * SCALE_MS *
                      (qatomic_read(&ctl->settled) ? ctl->pace : 1);

        nuksm_scan_apply_strength(sc);
        if (!ctl->active || ctl->restart || ctl->quit || get_clock() >= end) {
            break;
        }
        /* Hints do not wait for the next pass: a walk costs more. */
        if (!ctl->held && nuksm_hints_pending(sc->s->hints)) {
            qemu_mutex_unlock(&ctl->lock);
            qatomic_set(&ctl->settled, false);
            nuksm_scan_drain_hints(sc, sc->started_epoch);
            nuksm_scan_flush_candidates(sc, sc->started_epoch);
            qemu_mutex_lock(&ctl->lock);
            continue;
        }
        if (qatomic_read(&ctl->nudged) && !ctl->held &&
            get_clock() >= start + ctl->rest_ms * SCALE_MS) {
            qatomic_set(&ctl->settled, false);
            break;
        }
        nuksm_scan_serve(sc);
        qemu_mutex_unlock(&ctl->lock);
        nuksm_commit_tick(sc->s->commit);
        qemu_mutex_lock(&ctl->lock);
        qemu_cond_timedwait(&ctl->cond, &ctl->lock,
                            nuksm_scan_rest_wait_ms(sc, start, end));
    }
}

/*
 * Wait, serving the agent, while nothing can merge for lack of a
 * userfaultfd: until a new connection brings another chance or the
 * object changes.  Called with the control's lock held.
 */
static void nuksm_scan_wait_for_uffd(NuksmScanner *sc)
{
    NuksmControl *ctl = sc->ctl;
    NuksmCommit *c = sc->s->commit;

    if (ctl->active && !ctl->quit && !nuksm_commit_wants_uffd(c) &&
        !nuksm_commit_has_work(c)) {
        qemu_cond_wait(&ctl->cond, &ctl->lock);
    }
}

/*
 * A merge leaves the heaps holed: the messages of its burst, built here
 * and queued by the main loop, are freed between blocks that live on, and
 * the allocator keeps their pages.  Once a pass finds nothing new, give
 * those back, as QEMU's RCU thread does after its callbacks.
 */
static void nuksm_scan_release_heap(void)
{
#ifdef CONFIG_MALLOC_TRIM
    malloc_trim(0);
#endif
}

/*
 * Run the PRUNE asked for, if any (nuksm-prune.h).  Returns whether one
 * was asked for: the caller looks at the control again.
 */
static bool nuksm_scan_prune(NuksmScanner *sc, uint32_t epoch)
{
    NuksmControl *ctl = sc->ctl;
    uint32_t rate = qatomic_read(&ctl->prune_rate);

    if (!rate) {
        return false;
    }
    if (nuksm_prune_run(sc->s, rate, epoch, sc->pagemap_fd)) {
        /* Unless another came meanwhile (it restarted this one). */
        qatomic_cmpxchg(&ctl->prune_rate, rate, 0);
    }
    return true;
}

static void *nuksm_scan_thread(void *opaque)
{
    NuksmScanner *sc = opaque;
    NuksmControl *ctl = sc->ctl;
    NuksmCommit *c = sc->s->commit;

    rcu_register_thread();
    nuksm_reads_set_own_thread(sc->s->reads, qemu_get_thread_id());
    nuksm_strength_calibrate(&sc->strength);
    sc->cpu_mark = nuksm_thread_cpu_ns();
    sc->wall_mark = get_clock();
    qemu_mutex_lock(&ctl->lock);
    while (!ctl->quit) {
        uint32_t epoch;
        bool settled;

        nuksm_scan_apply_strength(sc);
        nuksm_scan_serve(sc);
        if (!ctl->active) {
            if (nuksm_commit_has_uffd(c)) {
                qemu_mutex_unlock(&ctl->lock);
                nuksm_commit_release_uffd(c);
                qemu_mutex_lock(&ctl->lock);
                continue;
            }
            qemu_cond_wait(&ctl->cond, &ctl->lock);
            continue;
        }
        epoch = ctl->epoch;
        ctl->restart = false;
        qemu_mutex_unlock(&ctl->lock);

        if (!nuksm_commit_has_uffd(c)) {
            nuksm_commit_take_uffd(c);
        }
        if (!nuksm_commit_has_uffd(c)) {
            qemu_mutex_lock(&ctl->lock);
            nuksm_scan_wait_for_uffd(sc);
            continue;
        }
        if (sc->started_epoch != epoch) {
            /* What the old connection did not get to send is moot. */
            g_array_set_size(sc->candidates, 0);
            nuksm_commit_start(c, epoch);
            sc->started_epoch = epoch;
        }
        nuksm_commit_tick(c);
        if (nuksm_scan_prune(sc, epoch)) {
            qemu_mutex_lock(&ctl->lock);
            continue;
        }
        if (qatomic_read(&ctl->held)) {
            qemu_mutex_lock(&ctl->lock);
            nuksm_scan_rest(sc);
            continue;
        }
        trace_nuksm_scan_pass_start();
        sc->passes++;
        sc->news = 0;
        sc->resident = 0;
        qatomic_set(&ctl->nudged, false);
        if (nuksm_scan_pass(sc, epoch)) {
            nuksm_scan_flush_candidates(sc, epoch);
            settled = !sc->news && !qatomic_read(&ctl->nudged);
            if (settled && !qatomic_read(&ctl->settled)) {
                nuksm_scan_release_heap();
            }
            qatomic_set(&ctl->settled, settled);
            qemu_mutex_lock(&ctl->lock);
            ctl->pause_ms = sc->news ? ctl->rest_ms :
                            MIN(ctl->pause_ms * 2,
                                nuksm_scan_pause_max_ms(sc));
            ctl->stats.full_scans++;
            trace_nuksm_scan_pass_done(ctl->stats.full_scans,
                                       ctl->stats.pages_scanned);
            nuksm_scan_rest(sc);
        } else {
            qemu_mutex_lock(&ctl->lock);
        }
    }
    qemu_mutex_unlock(&ctl->lock);
    nuksm_commit_release_uffd(c);
    rcu_unregister_thread();
    return NULL;
}

NuksmScanner *nuksm_scanner_new(Nuksm *s)
{
    NuksmScanner *sc = g_new0(NuksmScanner, 1);
    static uint8_t zero_page[NUKSM_PAGE_SIZE];

    sc->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (sc->pagemap_fd < 0) {
        error_report("nuksm: cannot open /proc/self/pagemap: %s",
                     strerror(errno));
    }
    sc->s = s;
    sc->ctl = s->control;
    /* Before the thread runs: the thread owns it from then on. */
    nuksm_strength_init(&sc->strength);
    sc->ctl->hashing = sc->strength.stats;
    for (unsigned level = 0; level < NUKSM_STRENGTH_LEVELS; level++) {
        sc->zero_sample[level] = nuksm_sample_digest(
            nuksm_sample_continue(zero_page, nuksm_sample_start(), 0,
                                  1u << level));
    }
    sc->zero_full16 = nuksm_digest_fragment(nuksm_page_digest(zero_page,
                                                       NUKSM_PAGE_SIZE));
    sc->candidates = g_array_new(false, false, sizeof(NuksmCandidate));
    qemu_thread_create(&sc->thread, "nuksm-scan", nuksm_scan_thread, sc,
                       QEMU_THREAD_JOINABLE);
    return sc;
}

uint64_t nuksm_scanner_cpu_ns(NuksmScanner *sc)
{
    clockid_t clock;
    struct timespec ts;

    if (pthread_getcpuclockid(sc->thread.thread, &clock) ||
        clock_gettime(clock, &ts)) {
        return 0;
    }
    return ts.tv_sec * NANOSECONDS_PER_SECOND + ts.tv_nsec;
}

void nuksm_scanner_free(NuksmScanner *sc)
{
    nuksm_control_quit(sc->ctl);
    qemu_thread_join(&sc->thread);

    if (sc->pagemap_fd >= 0) {
        close(sc->pagemap_fd);
    }
    g_array_free(sc->candidates, true);
    g_free(sc);
}

void nuksm_scanner_set_active(NuksmScanner *sc, bool active, uint32_t epoch)
{
    nuksm_control_set_active(sc->ctl, active, epoch);
    /*
     * Give userfaultfd back now, not when the thread gets to it: a
     * migration starting next registers its own on the same RAM.  The
     * thread never waits for the main loop while holding page_lock.
     */
    if (!active) {
        nuksm_commit_release_uffd(sc->s->commit);
    }
}
