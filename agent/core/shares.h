/*
 * nuksmd shares: the host's scan budget divided among its VMs.
 *
 * One budget, in millionths of a core, pays every VM's scanner, as one
 * ksmd scans for every VM of a host.  Each VM asks for a part by what it
 * has been doing (NuksmShareReasonId):
 *
 * - a VM that scans nothing now (IDLE) and one whose scanner found
 *   nothing to merge lately (RESTING) share what the others leave of
 *   the budget (1 / SHARES_RESTING_PART of it at least), evenly, and
 *   pass and run their periodic samplers as many times less often as
 *   there are of them (their pace): a host of resting VMs costs what
 *   one resting VM costs, however many there are, and a resting VM
 *   that finds something new finds it at the speed the budget leaves;
 *   but one whose merged pages are read lately keeps its samplers' own
 *   periods, which place its copies by who reads them;
 * - the others share what is left by weight: a VM that merged lately
 *   (YIELDING) by its yield, the pages it merged per CPU-second; a VM
 *   whose first pass is not over (NEW) or that I/O hints or writes to
 *   its merged pages tell of new duplicates (SIGNALLED) as much as the
 *   mean yielding VM, so that a boot storm, a migration burst or new
 *   files get the budget at once;
 * - no VM gets more than its own cap (its governor's or max-cpu): what
 *   a cap leaves goes to the others; none gets less than
 *   NUKSM_SHARE_MIN_PPM.
 *
 * Pure: tested by tests/unit/test-shares.c.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_SHARES_H
#define NUKSMD_SHARES_H

#include <stdint.h>

#include "nuksm-proto.h"

/* The resting VMs' least part of the budget, all together: 1 / this. */
#define SHARES_RESTING_PART 100u

/* What one VM asks for. */
typedef struct ShareAsk {
    NuksmShareReasonId reason;  /* any but OFF */
    uint32_t cap_ppm;           /* its own budget: it takes no more */
    double yield;               /* YIELDING: pages merged per CPU-second */
    bool reading;               /* its merged pages were read lately */
} ShareAsk;

/* What it gets. */
typedef struct ShareGiven {
    uint32_t max_cpu_ppm;       /* NUKSM_SHARE_MIN_PPM..budget */
    uint32_t pace;              /* 1..NUKSM_SHARE_PACE_MAX */
} ShareGiven;

/*
 * Divide @budget_ppm (at least NUKSM_SHARE_MIN_PPM) among the @n VMs of
 * @asks: @given[i] is the part of @asks[i].
 */
void shares_divide(uint32_t budget_ppm, const ShareAsk *asks, uint32_t n,
                   ShareGiven *given);

#endif /* NUKSMD_SHARES_H */
