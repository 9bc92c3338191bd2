/*
 * nuksm: which guest RAM may be deduplicated, resolved with the guest
 * NUMA node of each block (nuksm-ram.c).
 *
 * Main loop (BQL), but for nuksm_ram_foreach_resolved() and
 * nuksm_ram_resolved_gnode(), which the scanner thread and RAM discard
 * call: they read what the main loop last resolved, and never QOM.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_RAM_H
#define HW_MEM_NUKSM_RAM_H

#include "nuksm.h"

typedef bool (*NuksmRamFn)(Nuksm *s, RAMBlock *rb, void *opaque);
typedef bool (*NuksmRamResolvedFn)(RAMBlock *rb, uint8_t gnode,
                                   void *opaque);

/* Call @fn for each eligible RAM block until it returns false. */
void nuksm_ram_foreach_eligible(Nuksm *s, NuksmRamFn fn, void *opaque);
uint64_t nuksm_ram_eligible_pages(Nuksm *s);
/* The RAM that is not eligible, and why, for query-nuksm. */
NuksmExclusionList *nuksm_ram_exclusions(Nuksm *s);
/* The guest NUMA node of @rb.  Asks QOM. */
uint8_t nuksm_ram_gnode(RAMBlock *rb);
bool nuksm_ram_resolve_memdev(Nuksm *s, Error **errp);
/* Resolve the eligible RAM again, for nuksm_ram_foreach_resolved(). */
void nuksm_ram_refresh(Nuksm *s);
void nuksm_ram_free(Nuksm *s);

/*
 * Any thread: call @fn for each eligible RAM block as last resolved,
 * with its guest node, until it returns false; none while discard is
 * disabled.  Takes the RCU read lock; @rb is valid while it is held.
 */
void nuksm_ram_foreach_resolved(Nuksm *s, NuksmRamResolvedFn fn,
                                void *opaque);
/*
 * A resolved eligible block, by name: a walk over guest RAM that drops
 * the RCU read lock between steps looks it up again each time
 * (qemu_ram_block_by_name()), so that hot-unplug is safe.
 */
typedef struct NuksmRamBlockName {
    char *name;
    uint8_t gnode;
} NuksmRamBlockName;

/* The resolved eligible blocks now, NuksmRamBlockName each; any thread. */
GPtrArray *nuksm_ram_resolved_names(Nuksm *s);

/*
 * Is @rb among the resolved eligible blocks (as for
 * nuksm_ram_foreach_resolved()), and of which guest NUMA node?  Any
 * thread, with the RCU read lock held.
 */
bool nuksm_ram_resolved_gnode(Nuksm *s, RAMBlock *rb, uint8_t *gnode);

/*
 * Resizeable RAM blocks (firmware tables) take small pages, and give
 * back what lies beyond their size: the block at @host was added; or,
 * once a reset filled them (main loop, after the reset handlers), all.
 */
void nuksm_ram_added(void *host);
void nuksm_ram_trim_all(void);

#endif /* HW_MEM_NUKSM_RAM_H */
