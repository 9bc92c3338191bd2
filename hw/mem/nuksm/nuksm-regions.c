/*
 * nuksm: region distilling (see nuksm-regions.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "nuksm-regions.h"

/*
 * UKSM's thresholds: a region moves up when at least one look in
 * NUKSM_REGION_DUP_SHARE merged (V_dup, 10%) and fewer than half the
 * sharings of its pages broke (V_cow, 50%).
 */
#define NUKSM_REGION_DUP_SHARE 10
/* Looks (or breaks) a judgement needs; fewer wait for the next pass. */
#define NUKSM_REGION_MIN_LOOKS 8
/*
 * Failed judgements in a row that move a region down: merges come a
 * round trip to the agent after the offers, often in the next pass.
 */
#define NUKSM_REGION_DEMOTE_STRIKES 2
/* Passes with nothing to judge that move a region down. */
#define NUKSM_REGION_IDLE_PASSES 4
/*
 * Visits times an odd number: over 2^k visits, every page offset modulo
 * 2^k once, spread rather than in order.
 */
#define NUKSM_REGION_PERMUTE 37u

/* The regions of a block of @nr_pages: the last may be partial. */
static uint64_t nuksm_regions_in(uint64_t nr_pages)
{
    return DIV_ROUND_UP(nr_pages, NUKSM_REGION_PAGES);
}

NuksmRegion *nuksm_regions_new(uint64_t nr_pages, unsigned level)
{
    uint64_t n = nuksm_regions_in(nr_pages);
    NuksmRegion *regions = g_new0(NuksmRegion, n);

    for (uint64_t r = 0; r < n; r++) {
        regions[r].level = level;
    }
    return regions;
}

/* A region on @level looks at one page in this many: 64, 16, 4, 1. */
static unsigned nuksm_region_interval(unsigned level)
{
    return 1u << (2 * (NUKSM_REGION_TOP - level));
}

bool nuksm_region_samples(NuksmBlockState *bs, uint64_t idx)
{
    const NuksmRegion *r = nuksm_region_of(bs, idx);
    unsigned interval = nuksm_region_interval(r->level);
    unsigned offset = (r->visits * NUKSM_REGION_PERMUTE) & (interval - 1);

    return (idx & (interval - 1)) == offset;
}

static void nuksm_region_add(uint16_t *counter)
{
    if (*counter < UINT16_MAX) {
        (*counter)++;
    }
}

void nuksm_region_looked(NuksmBlockState *bs, uint64_t idx)
{
    nuksm_region_add(&nuksm_region_of(bs, idx)->looked);
}

void nuksm_region_merged(NuksmBlockState *bs, uint64_t idx)
{
    nuksm_region_add(&nuksm_region_of(bs, idx)->merged);
}

void nuksm_region_cow(NuksmBlockState *bs, uint64_t idx)
{
    nuksm_region_add(&nuksm_region_of(bs, idx)->cows);
}

static NuksmRegionMove nuksm_region_demote(NuksmRegion *r)
{
    r->strikes = 0;
    if (r->level == 0) {
        return NUKSM_REGION_STAYED;
    }
    r->level--;
    return NUKSM_REGION_DEMOTED;
}

NuksmRegionMove nuksm_region_judge(NuksmBlockState *bs, uint64_t idx)
{
    NuksmRegion *r = nuksm_region_of(bs, idx);
    unsigned looked = r->looked, merged = r->merged, cows = r->cows;
    bool worth;

    r->visits++;
    if (looked + cows < NUKSM_REGION_MIN_LOOKS) {
        /* Too little to judge: keep counting, unless nothing happens. */
        if (looked + merged + cows) {
            r->idle = 0;
            return NUKSM_REGION_STAYED;
        }
        if (++r->idle < NUKSM_REGION_IDLE_PASSES) {
            return NUKSM_REGION_STAYED;
        }
        r->idle = 0;
        return nuksm_region_demote(r);
    }
    r->idle = 0;
    r->looked = r->merged = r->cows = 0;
    worth = merged * NUKSM_REGION_DUP_SHARE >= looked && merged > cows;
    if (worth) {
        r->strikes = 0;
        if (r->level == NUKSM_REGION_TOP) {
            return NUKSM_REGION_STAYED;
        }
        r->level++;
        return NUKSM_REGION_PROMOTED;
    }
    if (++r->strikes < NUKSM_REGION_DEMOTE_STRIKES) {
        return NUKSM_REGION_STAYED;
    }
    return nuksm_region_demote(r);
}

void nuksm_regions_to_top(NuksmBlockState *bs)
{
    for (uint64_t r = 0; r < nuksm_regions_in(bs->nr_pages); r++) {
        bs->regions[r] = (NuksmRegion) { .level = NUKSM_REGION_TOP };
    }
}

void nuksm_regions_count(NuksmBlockState *bs,
                         uint64_t counts[NUKSM_REGION_LEVELS])
{
    for (uint64_t r = 0; r < nuksm_regions_in(bs->nr_pages); r++) {
        counts[bs->regions[r].level]++;
    }
}

char *nuksm_regions_levels(NuksmBlockState *bs)
{
    uint64_t n = nuksm_regions_in(bs->nr_pages);
    char *levels = g_malloc(n + 1);

    for (uint64_t r = 0; r < n; r++) {
        levels[r] = '0' + bs->regions[r].level;
    }
    levels[n] = '\0';
    return levels;
}
