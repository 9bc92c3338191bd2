/*
 * nuksm: region distilling (after UKSM, §5), which pages a pass looks at.
 *
 * Guest RAM is split into regions of 2 MiB, each on a sampling level.
 * A pass looks at every page of a region on the top level, and at one
 * page in 4, 16 or 64 of a region on the levels below, other pages each
 * pass, so that over as many passes it sees them all.  Where it samples,
 * it offers a page at first sight, without waiting a pass for it to prove
 * stable: the sample is there to tell whether the region holds
 * duplicates, at a cost its level bounds.  Regions start at the bottom.
 * At the end of each pass over a region, what its looks found decides:
 * it moves up when at least one look in ten merged and fewer than half
 * its sharings broke, and down otherwise, or when it gave nothing to
 * judge for a few passes (all merged, or idle).  Merged pages are looked
 * at on every level: their copy-on-write breaks cost a pagemap read.
 *
 * With distilling off, the default, every region is on the top level:
 * every page is looked at each pass, and offered once stable.  (It is
 * off because a sample merges alone, out of the slot line its
 * neighbours would follow, and costs a mapping: docs/qmp.rst.)
 *
 * Lock rules: the regions belong to their NuksmBlockState and are
 * protected by page_lock, as it is (nuksm-pages.h).  The table creates
 * them with each block, credits them with its merges and sets
 * distilling on or off for all of them (nuksm-pages.c); the scanner
 * counts its looks and judges them (nuksm-scan.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_REGIONS_H
#define HW_MEM_NUKSM_REGIONS_H

#include "nuksm-pages.h"

/* Pages of a region: 2 MiB, as a stretch of write tracking. */
#define NUKSM_REGION_PAGES NUKSM_TRACK_STRETCH
#define NUKSM_REGION_LEVELS 4
#define NUKSM_REGION_TOP (NUKSM_REGION_LEVELS - 1)

typedef struct NuksmRegion {
    uint8_t level;              /* 0 (bottom) .. NUKSM_REGION_TOP */
    uint8_t visits;             /* passes over it: which pages it samples */
    uint8_t idle;               /* passes in a row with nothing to judge */
    uint8_t strikes;            /* failed judgements in a row */
    /* Since the last judgement (saturating): */
    uint16_t looked;            /* offered, or found changed */
    uint16_t merged;            /* merged, or dropped as zero */
    uint16_t cows;              /* sharings a write ended */
    /* Duplicates held back for its huge page (nuksm-huge.c) */
    uint16_t huge_held;
    /* Its huge page split as it paid: rebuilt when that ends */
    bool huge_split;
    /*
     * Merging went on since the scanner last walked it: a merge, a zero
     * page dropped, or a page offered, whose merge may still come
     */
    bool huge_busy;
} NuksmRegion;

/* What a judgement did to a region. */
typedef enum NuksmRegionMove {
    NUKSM_REGION_STAYED,
    NUKSM_REGION_PROMOTED,
    NUKSM_REGION_DEMOTED,
} NuksmRegionMove;

/* The regions of a block of @nr_pages, all on @level. */
NuksmRegion *nuksm_regions_new(uint64_t nr_pages, unsigned level);

static inline NuksmRegion *nuksm_region_of(NuksmBlockState *bs,
                                           uint64_t idx)
{
    return &bs->regions[idx / NUKSM_REGION_PAGES];
}

/* Does this pass look at page @idx of @bs (unless it is merged)? */
bool nuksm_region_samples(NuksmBlockState *bs, uint64_t idx);

/*
 * Is page @idx of @bs, if looked at, offered at first sight (its region
 * is sampled, not on the top level)?
 */
static inline bool nuksm_region_eager(NuksmBlockState *bs, uint64_t idx)
{
    return nuksm_region_of(bs, idx)->level < NUKSM_REGION_TOP;
}

/* What became of page @idx of @bs, for its region's judgement. */
void nuksm_region_looked(NuksmBlockState *bs, uint64_t idx);
void nuksm_region_merged(NuksmBlockState *bs, uint64_t idx);
void nuksm_region_cow(NuksmBlockState *bs, uint64_t idx);

/*
 * A pass walked the whole region of page @idx of @bs: judge it on what
 * its looks found since the last judgement.
 */
NuksmRegionMove nuksm_region_judge(NuksmBlockState *bs, uint64_t idx);

/*
 * Put every region of @bs on the top level, as with distilling off
 * (nuksm_pages_set_distilling()), its counters cleared.
 */
void nuksm_regions_to_top(NuksmBlockState *bs);

/* Add the regions of @bs on each level, bottom first, to @counts. */
void nuksm_regions_count(NuksmBlockState *bs,
                         uint64_t counts[NUKSM_REGION_LEVELS]);

/*
 * The regions of @bs as a string of their levels ('0' bottom), for the
 * debug view (x-query-nuksm-regions); g_free() it.
 */
char *nuksm_regions_levels(NuksmBlockState *bs);

#endif /* HW_MEM_NUKSM_REGIONS_H */
