/*
 * nuksm: I/O hints, the guest pages disk transfers moved (nuksm-hints.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_HINTS_H
#define HW_MEM_NUKSM_HINTS_H

#include "nuksm.h"

/* Counters of a hint stack, in pages. */
typedef struct NuksmHintStats {
    uint64_t hinted;            /* pages disk transfers reported */
    uint64_t dropped;           /* ... dropped unserved: overwritten by */
                                /* newer ones, met the stack busy, or */
                                /* waited when hints were switched off */
} NuksmHintStats;

/* Main loop (BQL): a stack of hints, fed by every disk transfer. */
NuksmHints *nuksm_hints_new(void);
/* Main loop (BQL): stop feeding it; it is freed once no transfer uses it. */
void nuksm_hints_free(NuksmHints *h);
/* Any thread: take hints (@on), or drop them as they come and empty it. */
void nuksm_hints_set_enabled(NuksmHints *h, bool on);

/* The scanner thread */
/* Are hints waiting?  Lock-free. */
bool nuksm_hints_pending(NuksmHints *h);
/*
 * Take the newest hint: @pages guest pages from @host (at most
 * NUKSM_HINT_MAX_PAGES).  False when the stack is empty.
 */
bool nuksm_hints_pop(NuksmHints *h, uint8_t **host, unsigned *pages);
void nuksm_hints_get_stats(NuksmHints *h, NuksmHintStats *stats);

#define NUKSM_HINT_MAX_PAGES 4096

#endif /* HW_MEM_NUKSM_HINTS_H */
