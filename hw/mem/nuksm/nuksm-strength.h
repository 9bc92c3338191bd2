/*
 * nuksm: the strength of the scanner's change test, after UKSM's
 * adaptive partial hashing (§6 of its paper).
 *
 * Whether a page changed since the scanner last looked at it is told by
 * a sampled digest of a few of its 64-byte lines (libnuksm/nuksm-digest.h):
 * a different digest proves a change without reading the rest; an equal
 * one may miss a change outside the lines read.  The page's full digest,
 * the agent's key, is computed only for a page to offer, and to confirm
 * a page write tracking saw written (nuksm-scan.c); a page whose sample
 * is the zero page's is nominated to be dropped as zero.  Nothing here
 * proves a page equal to another or zero: the commit's full compare
 * under write protection does (nuksm-commit.c, nuksm-remap.c).
 *
 * The strength, the lines read, adapts: every full digest or compare
 * that finds a change, or a page not zero, the sampled digest missed is
 * a miss, and its cost (the full digest it took) is the penalty; every
 * look the sampled digest settled alone saved a full digest, the
 * profit.  Both are priced with the costs
 * of both digests measured when the scanner starts.  Many misses raise
 * the strength; a window without any lowers it, but not below a
 * strength that missed recently.  Scanner thread only.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_STRENGTH_H
#define HW_MEM_NUKSM_STRENGTH_H

#include "nuksm.h"

/* Strengths, in lines read: 1 << level, level 0 to 6 (a whole page). */
#define NUKSM_STRENGTH_LEVELS 7

typedef struct NuksmStrength {
    unsigned level;             /* lines read: 1 << level */
    bool adaptive;              /* else fixed by hash-strength */
    unsigned floor;             /* the weakest level adaptation may try */
    unsigned calm_windows;      /* windows in a row without a miss */
    double full_ns;             /* measured: a full digest of a page */
    double line_ns;             /* measured: a line of a sampled digest */
    /* Since the last adaptation */
    uint64_t settled;           /* looks the sampled digest settled alone */
    uint64_t confirmed;         /* sampled digest equal, full one checked */
    uint64_t misses;            /* ... and it had changed */
    /* Totals, for query-nuksm */
    NuksmHashStats stats;
} NuksmStrength;

/* Adaptive, from the default strength. */
void nuksm_strength_init(NuksmStrength *st);

/*
 * Measure what a full digest and a sampled line cost, the prices of
 * profit and penalty: in the scanner thread, before its first pass.
 */
void nuksm_strength_calibrate(NuksmStrength *st);

/*
 * Fix the strength at @bytes (a power of 2 from 64 to 4096), or, with 0,
 * let it adapt from where it is.
 */
void nuksm_strength_set(NuksmStrength *st, unsigned bytes);

static inline unsigned nuksm_strength_lines(const NuksmStrength *st)
{
    return 1u << st->level;
}

/* A look that the sampled digest settled without a full digest. */
static inline void nuksm_strength_settled(NuksmStrength *st)
{
    st->settled++;
    st->stats.pages_sampled++;
}

/* A full digest computed, for a key only (nothing to confirm). */
static inline void nuksm_strength_hashed(NuksmStrength *st)
{
    st->stats.pages_hashed++;
}

/*
 * A full digest checked what an equal sampled digest said: @changed if
 * the page had changed all the same (a miss).
 */
void nuksm_strength_confirmed(NuksmStrength *st, bool changed);

/*
 * The commit checked in full a page whose sample was the zero page's:
 * unless @zero, a miss.
 */
void nuksm_strength_zero_checked(NuksmStrength *st, bool zero);

/* Adapt the strength when a window is over; at most once per call. */
void nuksm_strength_adapt(NuksmStrength *st);

#endif /* HW_MEM_NUKSM_STRENGTH_H */
