/*
 * nuksm: governors, the presets of the scanner's budget
 * (nuksm-governor.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_GOVERNOR_H
#define HW_MEM_NUKSM_GOVERNOR_H

#include "nuksm.h"

#define NUKSM_DEFAULT_GOVERNOR NUKSM_GOVERNOR_MEDIUM

/*
 * The budget object @s gives its scanner: its governor's preset, less
 * what its max-cpu and scan-rate properties override.  Main loop.
 */
void nuksm_governor_budget(Nuksm *s, NuksmBudget *budget);

/*
 * The CPU budget the scanner works within, in percent of one core: the
 * VM's own (@budget), or the host's share (SHARE) where it is smaller.
 * Main loop.
 */
double nuksm_governor_scan_max_cpu(Nuksm *s, const NuksmBudget *budget);

/*
 * How many times less often than their own periods the periodic
 * samplers run: the host's share's pace, 1 without one.  Main loop.
 */
uint32_t nuksm_governor_pace(Nuksm *s);

/* The host's share for query-nuksm, or NULL without one.  Main loop. */
NuksmHostShare *nuksm_governor_host_share(Nuksm *s);

/*
 * Give the scanner the budget of the governor and the properties, within
 * the host's share, and the read sampler its window at the share's pace:
 * after any of them changed.  Main loop.
 */
void nuksm_governor_apply(Nuksm *s);

#endif /* HW_MEM_NUKSM_GOVERNOR_H */
