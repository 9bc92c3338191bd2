/*
 * nuksm: the object's state, the scanner run to match it, and the limits
 * that hold back merging (nuksm-state.c).  Main loop (BQL) only.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_STATE_H
#define HW_MEM_NUKSM_STATE_H

#include "nuksm.h"

NuksmState nuksm_state(Nuksm *s);
/*
 * Does an incoming migration hold guest RAM?  Until it completes; for
 * postcopy, whose userfaultfd places pages while the VM runs, until its
 * last page came.
 */
bool nuksm_incoming(void);
/* Scanning and merging, maybe held back by a limit. */
bool nuksm_is_running(Nuksm *s);
/*
 * Why the pages of an incoming migration may not land on copies the
 * host holds (nuksm-landing.c), if they may not: landing=off, no agent,
 * or a migration that loads them its own way (postcopy, whose
 * userfaultfd places pages; multifd, whose threads load them; COLO,
 * whose cache takes them).  NULL if they may.
 */
const char *nuksm_landing_blocker(Nuksm *s);
/* ... and may they, now: is the enabled object's VM waiting for them? */
bool nuksm_may_land(Nuksm *s);
/*
 * Start or stop the scanner to match the object's state: call it after
 * anything nuksm_is_running() looks at changed.
 */
void nuksm_update_activity(Nuksm *s);

/* The figures of all units, zero before the object is complete. */
void nuksm_get_stats(Nuksm *s, NuksmStats *stats);
/*
 * The limit that holds back merging now, the object's own first, or
 * NUKSM_LIMIT__MAX if none does.
 */
NuksmLimit nuksm_limit(Nuksm *s, const NuksmStats *stats);
/* Human text for @limit-reason and NUKSM_MERGING_LIMITED. */
char *nuksm_limit_reason(Nuksm *s, NuksmLimit limit,
                         const NuksmStats *stats);
/*
 * The limit holding back merging may have changed (the map budget, the
 * agent's conditions, the connection): emit NUKSM_MERGING_RESUMED and
 * NUKSM_MERGING_LIMITED for the change, once.
 */
void nuksm_limit_changed(Nuksm *s);

#endif /* HW_MEM_NUKSM_STATE_H */
