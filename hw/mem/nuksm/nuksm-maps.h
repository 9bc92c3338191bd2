/*
 * nuksm: the commit unit's mapping budget against vm.max_map_count
 * (nuksm-maps.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_MAPS_H
#define HW_MEM_NUKSM_MAPS_H

#include "nuksm-pages.h"

/*
 * How many mappings (VMAs) the process uses against vm.max_map_count.
 * Protected by page_lock, like every change of what backs guest pages;
 * @limited is also read atomically.
 */
typedef struct NuksmMaps {
    uint64_t limit;             /* vm.max_map_count, as last read */
    uint64_t counted;           /* lines of /proc/self/maps, last count */
    int64_t delta;              /* what our changes added since (model) */
    bool changed;               /* we changed mappings since the count */
    int64_t counted_at;         /* get_clock() of the last count */
    int64_t limit_read_at;      /* get_clock() of the last limit read */
    bool limited;               /* costly merges are being refused */
    uint64_t held;              /* pages refused while limited */
} NuksmMaps;

/*
 * What a guest page is mapped from, as far as the kernel's merging of
 * mappings goes: anonymous memory, or a store at a fixed distance between
 * guest page and slot (pages mapped from consecutive slots of one store
 * make one mapping).  A page that was mapped from a store stays in that
 * mapping after a copy-on-write break.
 */
typedef struct NuksmMapId {
    bool anon;
    uint8_t node;
    int64_t base;               /* slot - page index */
} NuksmMapId;

/* What page @i of @bs is mapped from; page_lock held. */
NuksmMapId nuksm_maps_id(NuksmBlockState *bs, uint64_t i);
bool nuksm_maps_id_equal(NuksmMapId a, NuksmMapId b);

/* The budget of @c->maps, page_lock held unless said otherwise */
void nuksm_maps_init(NuksmCommit *c);
void nuksm_maps_tick(NuksmCommit *c, bool force);
int64_t nuksm_maps_cost(NuksmBlockState *bs, uint64_t idx, uint64_t n,
                        bool anon, uint8_t node, uint64_t slot);
int64_t nuksm_maps_window(NuksmBlockState *bs, uint64_t idx, uint64_t n);
bool nuksm_maps_afford(NuksmCommit *c, int64_t cost, uint64_t pages);
void nuksm_maps_account(NuksmCommit *c, int64_t delta);
void nuksm_maps_exhausted(NuksmCommit *c);
uint64_t nuksm_maps_in_use(NuksmCommit *c);
/* No lock: the budget under a vm.max_map_count of @limit. */
uint64_t nuksm_maps_budget(uint64_t limit);

#endif /* HW_MEM_NUKSM_MAPS_H */
